// Copyright 2026 The xform Authors.
//
// WorldLog: what makes a world outlive its process, the one seam between a
// world and its durability. A world's log takes every batch the world
// applies, in apply order, each with its frame, and says when that batch is
// durable; takes snapshots, after which the records before them may go; and
// gives the world back at start. A WorldLogStore holds every world's log:
// it creates and deletes them, recovers them all, and keeps them (syncs,
// snapshots due).
//
// Two implement it: the local files under --data_dir (storage/storage.h:
// FileWorldLog, Storage) and a cluster's JetStream streams
// (cluster/jetstream_log.h). An append is acknowledged asynchronously, as a
// replicated log needs: Append() hands the
// record over under the world's writer lock without waiting for it to be
// durable, and the Acknowledgement it returns is waited for afterwards,
// without the lock, so that one world's writers do not each wait for a
// sync or a round trip in turn. Acknowledgements come in append order.
//
// Thread safety: Append under the world's writer lock (so records are in
// apply order); the rest from any thread.

#ifndef XFORM_SERVER_HOST_WORLD_LOG_H_
#define XFORM_SERVER_HOST_WORLD_LOG_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/host/world_names.h"
#include "xform/config/storage.pb.h"
#include "xform/world.h"

namespace xform::server {

// What a snapshot needs of its world: the world, under its writer lock, for
// as long as `with_world` runs (a copy of its columns, and whatever must
// happen at the same point of the world's history).
class SnapshotSource {
 public:
  virtual ~SnapshotSource() = default;
  virtual void WithWorldLocked(
      absl::FunctionRef<void(const World& world)> with_world) = 0;
  virtual const std::string& name() const = 0;
  // The write ids of its last batches, oldest first, each with its frame
  // (recent_writes.h): called from within WithWorldLocked's `with_world`,
  // so that a snapshot holds those of the batches it holds.
  virtual void ForEachRecentWriteLocked(
      absl::FunctionRef<void(absl::string_view id, uint64_t frame)>) const {}
  // Its named entities (world_names.h), likewise from within
  // WithWorldLocked's `with_world`.
  virtual void ForEachNameLocked(
      absl::FunctionRef<void(EntityId entity, const std::string& name)>) const {
  }
};

class WorldLog {
 public:
  virtual ~WorldLog() = default;

  // Waits until an appended record is durable by the log's rule (the file
  // journal's --fsync policy; a quorum's acknowledgement), or returns why it
  // never will be (UNAVAILABLE). Called once, without the world's lock.
  using Acknowledgement = absl::AnyInvocable<absl::Status() &&>;

  // Takes one applied batch, as its client encoded it, applied at the
  // world's open `frame`. Under the world's writer lock: it does not wait
  // for durability. An error (UNAVAILABLE, saying why: a full disk, the log
  // lost) refuses the batch, which the world then takes back.
  virtual absl::StatusOr<Acknowledgement> Append(uint64_t frame,
                                                 absl::string_view batch) = 0;

  // Takes a snapshot of `world` now: the world as of its last record (what
  // was recovered, with every record since replayed). Holds the world's
  // lock only to copy it. Errors are the caller's to log; the log stays as
  // it was.
  virtual absl::Status Snapshot(SnapshotSource& world) = 0;

  // Frame ends, for a log that other nodes follow (a cluster's), so that
  // they close the same frames: whether this log records them. A world
  // whose log does publishes a frame only once its end is acknowledged, so
  // that every frame published anywhere is in the log.
  virtual bool RecordsFrames() const { return false; }
  // Takes the end of the world's open `frame`, whose batches it took, with
  // the frame's digest (frame_digest.h; none where this node holds the
  // frame only in part, having loaded the world partway through it) and
  // when it closed (every node publishes the frame with that time), and
  // what it changed, counted (FrameCounts: told by a replica whose frame
  // differs). Under the world's writer lock, as Append.
  virtual absl::StatusOr<Acknowledgement> EndFrame(
      uint64_t /*frame*/, std::optional<uint64_t> /*digest*/,
      absl::Time /*closed*/, absl::string_view /*counts*/) {
    return absl::UnimplementedError("this log records no frame ends");
  }
};

// How many write ids (ApplyRequest.write_id) a world remembers, so that a
// batch sent again applies once (recent_writes.h): minutes of batches at
// 60 Hz for a few writers, and well past any client's retries.
inline constexpr size_t kRecentWrites = 16'384;

// A world as recovery rebuilt it.
struct RecoveredWorld {
  config::StoredWorld stored;
  World world;              // Its frame open after the last one journaled.
  uint64_t last_frame = 0;  // The last frame journaled (or snapshotted).
  // The open frame holds batches of a frame begun before the log's end (a
  // cluster's log, loaded while its writer wrote): it is closed by a
  // record still to come, and was published in part.
  bool partial_frame = false;
  // The write ids of the last batches replayed, oldest first, each with
  // its frame (recent_writes.h).
  std::vector<std::pair<std::string, uint64_t>> write_ids;
  // Its named entities: the snapshot's (StoredWorld.names, cleared there
  // once read), and the batches replayed after it.
  WorldNames names;
  // The history its frames continue (StoredWorld.history); 0: a new one.
  uint64_t history = 0;
  // The newest stamp of the batches replayed (0: none): its entities enter
  // the world's history there (world_history.h).
  int64_t newest_stamp = 0;
  // Where its writes go: `log` (null: nowhere, a cluster's replica, which
  // follows the log another node writes).
  std::shared_ptr<WorldLog> log;
  // For the log: where recovery spent its time.
  absl::Duration snapshot_time;  // Reading and rebuilding the snapshot.
  uint64_t replayed = 0;         // Journaled batches.
  absl::Duration replay_time;
};

// Moves the names a snapshot's StoredWorld holds into `recovered.names`,
// clearing them there: the stored record is kept and written again, and a
// snapshot writes the names as they are then.
inline void TakeNames(RecoveredWorld& recovered) {
  std::vector<std::pair<EntityId, std::string>> names;
  names.reserve(static_cast<size_t>(recovered.stored.names_size()));
  for (config::NamedEntity& named : *recovered.stored.mutable_names()) {
    names.emplace_back(named.entity(), std::move(*named.mutable_name()));
  }
  recovered.stored.clear_names();
  recovered.names.Restore(names);
}

// The names of `world`, into a snapshot's StoredWorld: from within
// SnapshotSource::WithWorldLocked.
inline void PutNames(const SnapshotSource& world, config::StoredWorld& stored) {
  stored.clear_names();
  world.ForEachNameLocked([&](EntityId entity, const std::string& name) {
    config::NamedEntity& named = *stored.add_names();
    named.set_entity(entity);
    named.set_name(name);
  });
}

// The logs a store made that their worlds still hold, by name, sorted;
// those whose worlds are gone are forgotten. For stores that keep their
// logs by weak pointer (a world owns its log).
template <typename Log>
std::vector<std::pair<std::string, std::shared_ptr<Log>>> LiveLogs(
    absl::flat_hash_map<std::string, std::weak_ptr<Log>>& logs) {
  std::vector<std::pair<std::string, std::shared_ptr<Log>>> live;
  for (auto it = logs.begin(); it != logs.end();) {
    if (std::shared_ptr<Log> log = it->second.lock()) {
      live.emplace_back(it->first, std::move(log));
      ++it;
    } else {
      logs.erase(it++);
    }
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return live;
}

class WorldLogStore {
 public:
  virtual ~WorldLogStore() = default;

  // Rebuilds every world the store holds and hands each to `take`, before
  // any call is served. The first error stops it: DATA_LOSS naming where
  // for corruption, or what `take` returned.
  virtual absl::Status Recover(
      absl::FunctionRef<absl::Status(RecoveredWorld)> take) = 0;
  // A new world's log, durable when this returns: created means durable.
  virtual absl::StatusOr<std::shared_ptr<WorldLog>> CreateWorld(
      const config::StoredWorld& stored) = 0;
  // Removes a world's log durably, after a snapshot of it under way.
  virtual absl::Status DeleteWorld(absl::string_view name) = 0;

  // Keeps the logs it made, from now on until destroyed: whatever the
  // store does besides appends (the file journal's each-second sync), and
  // snapshots when due, of the worlds `world_of` gives (null: that world
  // is gone).
  using WorldOf = absl::AnyInvocable<std::shared_ptr<SnapshotSource>(
      absl::string_view name) const>;
  virtual void StartKeeping(WorldOf world_of) = 0;
  // A snapshot of every world with something logged since its last (at a
  // clean shutdown), after which the store stops keeping.
  virtual void SnapshotAll() = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_HOST_WORLD_LOG_H_
