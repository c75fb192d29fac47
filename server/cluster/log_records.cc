// Copyright 2026 The xform Authors.

#include "server/cluster/log_records.h"

#include <openssl/sha.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/storage/journal.h"
#include "server/storage/snapshot_file.h"
#include "xform/v1/xform.pb.h"

namespace xform::server {

std::string StreamKey(absl::string_view world) {
  // Recovery reads the name from the snapshot, never from the key.
  if (world.size() <= 96) return absl::BytesToHexString(world);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(world.data()), world.size(),
         digest);
  return absl::StrCat(
      "h", absl::BytesToHexString(absl::string_view(
               reinterpret_cast<const char*>(digest), sizeof digest)));
}

std::string LogStream(absl::string_view key) {
  return absl::StrCat("XFORM_LOG_", key);
}
std::string SnapStream(absl::string_view key) {
  return absl::StrCat("XFORM_SNAP_", key);
}
std::string LogSubject(absl::string_view key) {
  return absl::StrCat("xform.log.", key);
}
std::string SnapSubject(absl::string_view key) {
  return absl::StrCat("xform.snap.", key);
}

namespace {

std::optional<uint64_t> HexHeader(natsMsg* msg, const char* key) {
  uint64_t value = 0;
  const absl::string_view text = Header(msg, key);
  if (text.empty() || !absl::SimpleHexAtoi(text, &value)) return std::nullopt;
  return value;
}

// A message in a world's stream that is not this cluster's (another
// deployment's, or anything published there by a holder of the NATS
// credentials): never one of its records, so passed over, and said so.
void SkipForeign(absl::string_view stream, uint64_t seq,
                 absl::string_view cluster) {
  static LogThrottle throttle;
  throttle.Log('W', "message ", seq, " of ", stream, " is not this cluster's (",
               cluster.empty()
                   ? std::string("no Xform-Cluster header")
                   : absl::StrCat("cluster ", EscapeForLog(cluster)),
               "): passed over, as no record of its worlds");
}

// Whether `msg` marks record `seq` as skipped by an operator (deleted:
// SkipRecord).
bool SkipMarks(natsMsg* msg, uint64_t seq) {
  return HeaderNumber(msg, "Xform-Skipped", 0) == seq;
}

// A record its headers alone make (all but a batch): a world's creation,
// a skipped record's marker, an epoch or a frame's end.
std::optional<LogRecord> MarkerRecord(natsMsg* msg, uint64_t seq) {
  LogRecord record;
  record.seq = seq;
  record.node = std::string(Header(msg, "Xform-Node"));
  if (!Header(msg, "Xform-World").empty()) {
    record.kind = LogRecord::Kind::kCreated;
  } else if (!Header(msg, "Xform-Skipped").empty()) {
    record.kind = LogRecord::Kind::kSkipped;
  } else if (const uint64_t epoch = HeaderNumber(msg, "Xform-Epoch", 0);
             epoch != 0) {
    record.kind = LogRecord::Kind::kEpoch;
    record.epoch = epoch;
  } else if (const uint64_t end = HeaderNumber(msg, "Xform-End", 0); end != 0) {
    record.kind = LogRecord::Kind::kFrameEnd;
    record.frame = end;
    record.digest = HexHeader(msg, "Xform-Digest");
    record.closed = absl::FromUnixNanos(
        static_cast<int64_t>(HeaderNumber(msg, "Xform-Time", 0)));
    record.counts = std::string(Header(msg, "Xform-Counts"));
  } else {
    return std::nullopt;
  }
  return record;
}

}  // namespace

absl::StatusOr<std::optional<LogRecord>> RecordAssembler::Take(natsMsg* msg,
                                                               uint64_t seq) {
  if (const absl::string_view cluster = Header(msg, kClusterHeader);
      cluster != cluster_) {
    SkipForeign(stream_, seq, cluster);
    ++skipped_;
    return std::nullopt;
  }
  LogRecord record;
  record.seq = seq;
  const bool batch_part = !Header(msg, "Xform-Frame").empty();
  const uint64_t part = HeaderNumber(msg, "Xform-Part", 0);
  if (next_part_ != 0 && (!batch_part || part == 0)) {
    // A batch whose writer was lost partway through its parts: never
    // acknowledged, and dropped, as the next writer's record follows it.
    next_part_ = 0;
    parts_.clear();
  }
  if (std::optional<LogRecord> marked = MarkerRecord(msg, seq)) {
    return marked;
  }
  if (!batch_part) {
    return absl::DataLossError(absl::StrCat("record ", seq, " is no record"));
  }
  const uint64_t parts = HeaderNumber(msg, "Xform-Parts", 1);
  if (part != next_part_) {
    // A record's first part lost to a purge (a snapshot took it in), or
    // parts out of order: the caller starts again from a snapshot.
    const uint64_t due = next_part_;
    next_part_ = 0;
    parts_.clear();
    return absl::DataLossError(absl::StrCat("record ", seq, " is part ", part,
                                            " where part ", due, " was due"));
  }
  const absl::string_view data = Data(msg);
  parts_.append(data.data(), data.size());
  if (part + 1 < parts) {
    ++next_part_;
    return std::nullopt;
  }
  next_part_ = 0;
  record.kind = LogRecord::Kind::kBatch;
  record.frame = HeaderNumber(msg, "Xform-Frame", 0);
  record.batch = std::exchange(parts_, std::string());
  return record;
}

RecordReplay::RecordReplay(RecoveredWorld& world, uint64_t snapshot_frame)
    : world_(world),
      last_closed_(snapshot_frame == 0 ? 0 : snapshot_frame - 1),
      epoch_(std::max<uint64_t>(1, world.stored.epoch())) {}

absl::Status RecordReplay::Apply(const LogRecord& record) {
  World& world = world_.world;
  switch (record.kind) {
    case LogRecord::Kind::kCreated:
    case LogRecord::Kind::kSkipped:
      return absl::OkStatus();
    case LogRecord::Kind::kEpoch:
      epoch_ = record.epoch;
      return absl::OkStatus();
    case LogRecord::Kind::kFrameEnd:
      if (record.frame < world.frame()) return absl::OkStatus();
      if (record.frame > world.frame()) world.RestartFrames(record.frame);
      world.RestartFrames(record.frame + 1);
      last_closed_ = record.frame;
      open_logged_ = false;
      return absl::OkStatus();
    case LogRecord::Kind::kBatch:
      break;
  }
  if (record.frame > world.frame()) {
    // The open frame, if it held batches, ended without a record (its
    // writer lost): the next frame's first batch closes it.
    if (open_logged_) last_closed_ = world.frame();
    world.RestartFrames(record.frame);
  }
  std::string write_id;
  if (absl::Status s = ReplayBatch(record.batch, world, world_.names, &write_id,
                                   &world_.newest_stamp);
      !s.ok()) {
    return s;
  }
  if (!write_id.empty()) {
    world_.write_ids.emplace_back(std::move(write_id), record.frame);
  }
  open_logged_ = true;
  ++world_.replayed;
  return absl::OkStatus();
}

void RecordReplay::Finish() {
  // The open frame's changes since the last end stay: published whole now,
  // they are published again with the end still to come, which the
  // subscribers then hold.
  world_.last_frame = last_closed_;
  world_.partial_frame = open_logged_;
  if (world_.write_ids.size() > kRecentWrites) {
    world_.write_ids.erase(
        world_.write_ids.begin(),
        world_.write_ids.end() - static_cast<ptrdiff_t>(kRecentWrites));
  }
}

namespace {

// A snapshot as its chunks come in.
struct SnapshotChunks {
  std::string id;
  uint64_t after = 0;
  uint64_t chunks = 0;
  uint64_t got = 0;
  std::string bytes;
};

// The two newest whole snapshots of a world, newest first: chunks in order
// under one id, read from the stream's leader (a consumer may be placed on
// a replica still catching up, whose snapshots are older than the log's
// purges). Two: should the newest be lost, the one before it and the log
// since still make the world (JetStreamWorldLog::PublishSnapshot).
absl::StatusOr<std::vector<SnapshotChunks>> ReadNewestSnapshots(
    NatsLink& link, const std::string& key) {
  SnapshotChunks partial;
  std::vector<SnapshotChunks> whole;
  absl::Status read = link.ReadFromLeader(SnapStream(key), [&](natsMsg* msg) {
    if (const absl::string_view cluster = Header(msg, kClusterHeader);
        cluster != link.cluster()) {
      SkipForeign(SnapStream(key), natsMsg_GetSequence(msg), cluster);
      return absl::OkStatus();
    }
    // A writer's mark (JetStreamWorldLog::FenceSnapshots): no chunk.
    if (!Header(msg, "Xform-Marker").empty()) return absl::OkStatus();
    const uint64_t chunk = HeaderNumber(msg, "Xform-Chunk", ~uint64_t{0});
    const std::string id(Header(msg, "Xform-Snapshot"));
    if (chunk == 0) {
      partial = {.id = id,
                 .after = HeaderNumber(msg, "Xform-After", 0),
                 .chunks = HeaderNumber(msg, "Xform-Chunks", 1)};
    } else if (id != partial.id || chunk != partial.got) {
      partial = {};  // Torn: a snapshot whose store was cut short.
      return absl::OkStatus();
    }
    const absl::string_view data = Data(msg);
    partial.bytes.append(data.data(), data.size());
    if (++partial.got == partial.chunks) {
      // The newest two, newest last.
      if (whole.size() == 2) whole.erase(whole.begin());
      whole.push_back(std::exchange(partial, SnapshotChunks()));
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read;
  if (whole.empty()) {
    return absl::NotFoundError(
        "no whole snapshot: a create never acknowledged");
  }
  std::reverse(whole.begin(), whole.end());
  return whole;
}

// `snapshot` made the world of `recovered`: its frame open, its record.
absl::Status FromSnapshot(const std::string& key,
                          const SnapshotChunks& snapshot,
                          RecoveredWorld& recovered) {
  std::string stored_bytes;
  WorldImage image;
  if (absl::Status s = DecodeSnapshot(snapshot.bytes, SnapStream(key),
                                      &stored_bytes, &image);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<World> world = World::FromImage(std::move(image));
  if (!world.ok()) {
    return absl::DataLossError(
        absl::StrCat(SnapStream(key), ": ", world.status().message()));
  }
  recovered.world = *std::move(world);
  if (!recovered.stored.ParseFromString(stored_bytes)) {
    return absl::DataLossError(
        absl::StrCat(SnapStream(key), ": its world record does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BadRecord(uint64_t seq, absl::string_view stream,
                       const absl::Status& why) {
  absl::Status status = absl::DataLossError(absl::StrCat(
      stream, ": record ", seq, " cannot be read or applied: ", why.message()));
  status.SetPayload(kBadRecordPayload, absl::Cord(absl::StrCat(seq)));
  return status;
}

std::optional<uint64_t> BadRecordOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kBadRecordPayload);
  uint64_t seq = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &seq)) {
    return std::nullopt;
  }
  return seq;
}

namespace {

// The world as `snapshot` and the log after it make it; ABORTED where the
// log no longer holds what follows the snapshot.
absl::StatusOr<LoadedWorld> LoadFrom(NatsLink& link, const std::string& key,
                                     const Clock& clock,
                                     const SnapshotChunks* snapshot,
                                     absl::Time phase) {
  // (phase: when reading the snapshots began.)
  LoadedWorld loaded;
  RecoveredWorld& recovered = loaded.recovered;
  if (absl::Status s = FromSnapshot(key, *snapshot, recovered); !s.ok()) {
    return s;
  }
  for (const config::RecentWrite& write : recovered.stored.recent_writes()) {
    recovered.write_ids.emplace_back(write.id(), write.frame());
  }
  recovered.stored.clear_recent_writes();
  TakeNames(recovered);
  RecordAssembler assembler(link.cluster(), LogStream(key));
  RecordReplay replay(recovered, recovered.world.frame());
  recovered.snapshot_time = clock.Now() - phase;
  phase = clock.Now();
  uint64_t whole = snapshot->after;  // The last record read whole.
  uint64_t next = snapshot->after + 1;
  absl::StatusOr<uint64_t> last = link.Read(
      LogStream(key), LogSubject(key), snapshot->after + 1,
      [&](natsMsg* msg) -> absl::Status {
        const uint64_t seq = StreamSequence(msg);
        if (seq != next) {
          // Purged behind a snapshot newer than the one read (a purge under
          // way deletes from the front, leaving holes meanwhile), or a record
          // an operator skipped: that hole, one record long, is followed by
          // the marker naming it, and passed over only then.
          if (seq != next + 1 || !SkipMarks(msg, next)) {
            return absl::AbortedError(absl::StrCat(
                LogStream(key), " was read from ", seq, ", past ", next));
          }
          next = seq;
        }
        ++next;
        absl::StatusOr<std::optional<LogRecord>> record =
            assembler.Take(msg, seq);
        if (!record.ok()) {
          return BadRecord(seq, LogStream(key), record.status());
        }
        if (!record->has_value()) return absl::OkStatus();
        if (absl::Status s = replay.Apply(**record); !s.ok()) {
          return BadRecord(seq, LogStream(key), s);
        }
        whole = seq;
        return absl::OkStatus();
      });
  if (!last.ok()) return last.status();
  if (*last >= next) {  // Purged past the snapshot read: nothing visited.
    return absl::AbortedError(absl::StrCat(LogStream(key), " ends at ", *last,
                                           ", records from ", next, " gone"));
  }
  replay.Finish();
  recovered.replay_time = clock.Now() - phase;
  recovered.history = recovered.stored.history();
  // A record whose parts were still being written is read by whoever
  // follows the log from here.
  loaded.last_seq = whole;
  loaded.epoch = replay.epoch();
  return loaded;
}

absl::StatusOr<LoadedWorld> LoadOnce(NatsLink& link, const std::string& key,
                                     const Clock& clock) {
  const absl::Time phase = clock.Now();
  absl::StatusOr<std::vector<SnapshotChunks>> snapshots =
      ReadNewestSnapshots(link, key);
  if (!snapshots.ok()) return snapshots.status();
  absl::StatusOr<LoadedWorld> loaded;
  for (const SnapshotChunks& snapshot : *snapshots) {
    loaded = LoadFrom(link, key, clock, &snapshot, phase);
    if (!absl::IsAborted(loaded.status())) break;
  }
  return loaded;
}

}  // namespace

absl::StatusOr<LoadedWorld> LoadWorld(NatsLink& link, const std::string& key,
                                      const Clock& clock) {
  // A snapshot stored while the log was read purged what came after the
  // one read: read again, from the newer one.
  absl::StatusOr<LoadedWorld> loaded = LoadOnce(link, key, clock);
  for (int tries = 0; absl::IsAborted(loaded.status()) && tries < 10; ++tries) {
    loaded = LoadOnce(link, key, clock);
  }
  if (absl::IsAborted(loaded.status())) {
    return absl::UnavailableError(loaded.status().message());
  }
  return loaded;
}

}  // namespace xform::server
