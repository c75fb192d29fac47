// Copyright 2026 The xform Authors.
//
// Storage: xformd's --data_dir, what makes acknowledged writes survive a
// crash. Each world has a directory of its own,
//
//   <data_dir>/worlds/w_<name>/journal-<seq>    (server/journal.h)
//   <data_dir>/worlds/w_<name>/snapshot-<seq>   (server/snapshot_file.h)
//
// seq in 16 hex digits. snapshot-N is the world as it was when journal-N
// began; the world now is the newest snapshot (or, before the first one, an
// empty world) with every journal from its seq on replayed in order. After
// snapshot-N is on disk, every file before N is removed: disk use is one
// snapshot plus the journal since it.
//
// A journal per world, not one per server: a world's snapshot rotates its
// own journal without touching another's, a deleted world's files go at
// once, recovery reads each world alone, and one world's writers never wait
// for another's fsync.
//
// Creating a world is durable once its directory and its journal's first
// record (the world's name, mode, rate, owner) are synced; deleting one
// renames its directory into <data_dir>/trash (atomic, then synced) and
// removes it. A directory without one good record is a create that was
// never acknowledged, and recovery removes it. <data_dir>/LOCK is held
// (flock) while xformd runs: a second xformd on the same directory is
// refused.

#ifndef XFORM_SERVER_STORAGE_H_
#define XFORM_SERVER_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/journal.h"
#include "xform/config/storage.pb.h"
#include "xform/world.h"
#include "xform/world_image.h"

namespace xform::server {

struct StorageOptions {
  std::string data_dir;
  FsyncPolicy fsync = FsyncPolicy::kEverySecond;
  // A world is snapshotted once its journal holds this many bytes (0: never
  // for size), or once this long has passed since its last snapshot with
  // something journaled (infinite: never for time).
  uint64_t snapshot_every_bytes = uint64_t{64} << 20;
  absl::Duration snapshot_every_time = absl::InfiniteDuration();
  // --recover=truncate: a corrupt record drops the rest of its world's
  // journal (with an error logged) instead of refusing to start.
  bool truncate_corrupt = false;
};

// One world's journal and snapshots. Append under the world's writer lock;
// the rest from any thread.
class WorldLog {
 public:
  WorldLog(std::string dir, std::string stored_world,
           const StorageOptions& options, uint64_t seq,
           std::shared_ptr<JournalWriter> journal);

  const std::string& dir() const { return dir_; }

  // Where a record went, to wait on.
  struct Written {
    std::shared_ptr<JournalWriter> journal;
    uint64_t end = 0;
  };
  // Journals one applied batch (see JournalWriter::Append).
  absl::StatusOr<Written> Append(uint64_t frame, absl::string_view batch);
  // --fsync=always: returns once the record is on disk.
  static absl::Status WaitDurable(const Written& written);
  // The each-second sync (--fsync=everysec).
  absl::Status Sync();
  // Bytes in the current journal: unchanged means no batch was journaled.
  uint64_t JournalEnd() const;
  // Whether the journal has grown past --snapshot_every since the last
  // snapshot, or is broken (a snapshot starts a new one); never within
  // kSnapshotRetryDelay of a snapshot that failed (a full disk).
  bool SnapshotDue(absl::Time now) const;
  void SnapshotFailed(absl::Time now);
  static constexpr absl::Duration kSnapshotRetryDelay = absl::Seconds(5);

  // A snapshot is three steps, so that the world's lock is held only to
  // copy it:
  //   Prepare   outside the lock: the next journal, created and synced.
  //   Switch    under the lock, with the image copied: appends go to the
  //             next journal from here on.
  //   Finish    outside the lock: the previous journal synced, the snapshot
  //             written, the files before it removed.
  struct Snapshot {
    uint64_t seq = 0;
    std::shared_ptr<JournalWriter> next;
    std::shared_ptr<JournalWriter> previous;
  };
  absl::StatusOr<Snapshot> Prepare();
  void Switch(Snapshot* snapshot);
  absl::Status Finish(const Snapshot& snapshot, const WorldImage& image);

 private:
  const std::string dir_;
  const std::string stored_world_;  // A StoredWorld, serialized.
  const StorageOptions options_;

  mutable absl::Mutex mu_;
  uint64_t seq_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<JournalWriter> journal_ ABSL_GUARDED_BY(mu_);
  // The journal's size after its first record.
  uint64_t journal_start_ ABSL_GUARDED_BY(mu_);
  absl::Time last_snapshot_ ABSL_GUARDED_BY(mu_) = absl::Now();
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// A world as recovery rebuilt it.
struct RecoveredWorld {
  config::StoredWorld stored;
  World world;              // Its frame open after the last one journaled.
  uint64_t last_frame = 0;  // The last frame journaled (or snapshotted).
  std::unique_ptr<WorldLog> log;
  // For the log: where recovery spent its time.
  absl::Duration snapshot_time;  // Reading and rebuilding the snapshot.
  uint64_t replayed = 0;         // Journaled batches.
  absl::Duration replay_time;
};

class Storage {
 public:
  // Makes the directories as needed, takes the lock, empties the trash.
  static absl::StatusOr<std::unique_ptr<Storage>> Open(StorageOptions options);
  ~Storage();

  const StorageOptions& options() const { return options_; }

  // Rebuilds every world in the directory and hands each to `take`. The
  // first error stops it: DataLoss naming the file and offset for
  // corruption (unless truncate_corrupt), or what `take` returned.
  absl::Status Recover(absl::FunctionRef<absl::Status(RecoveredWorld)> take);

  // A new world's directory and first journal, durable when this returns.
  absl::StatusOr<std::unique_ptr<WorldLog>> CreateWorld(
      const config::StoredWorld& stored);
  // Removes a world's directory durably (see above).
  absl::Status DeleteWorld(absl::string_view name);

 private:
  Storage(StorageOptions options, int lock_fd);
  // <data_dir>/worlds, and one world's directory in it (see above).
  std::string WorldsDir() const;
  std::string WorldDir(absl::string_view name) const;
  absl::StatusOr<RecoveredWorld> RecoverWorld(const std::string& dir);

  const StorageOptions options_;
  const int lock_fd_;
};

// The options as xformd's log states them: "--fsync=everysec,
// --snapshot_every=64MiB".
std::string DescribeDurability(const StorageOptions& options);

// "64MiB", "300s", "10m": --snapshot_every's value into `options`.
absl::Status ParseSnapshotEvery(absl::string_view value,
                                StorageOptions* options);

}  // namespace xform::server

#endif  // XFORM_SERVER_STORAGE_H_
