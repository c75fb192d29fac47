// Copyright 2026 The xform Authors.
//
// How a cluster keeps a world in JetStream: its two streams, the records of
// its log, and loading it back. Each world has
//
//   XFORM_LOG_<key>    subject xform.log.<key>: the world's records, in the
//                      order its writer made them;
//   XFORM_SNAP_<key>   subject xform.snap.<key>: snapshots (EncodeSnapshot's
//                      bytes, the world's StoredWorld as their info) in
//                      chunks under the payload limit (headers
//                      Xform-Snapshot, -Chunk, -Chunks, and Xform-After: the
//                      last log sequence the snapshot holds);
//
// <key> being the world's name in hex, or, for a name over 96 bytes, "h"
// and its SHA-256 in hex (a stream is a directory named after it). A
// log's records, each told by its headers, every one carrying the
// cluster's identity (Xform-Cluster, nats_link.h):
//
//   created      Xform-World: created. The first: every record after it
//                has one before it to expect.
//   batch        Xform-Frame: the writer's open frame; the ApplyRequest as
//                its client sent it (its write id in it), in Xform-Parts
//                messages (Xform-Part numbering them) if over the payload
//                limit.
//   frame end    Xform-End: the frame the batches before it closed,
//                Xform-Time: when (Unix nanoseconds; every node publishes
//                the frame with it), and Xform-Digest: its digest
//                (frame_digest.h; absent where the writer held the frame in
//                part).
//   epoch        Xform-Epoch: a new writer took the world (Xform-Node).
//   skipped      Xform-Skipped: an operator skipped (deleted) the record
//                it names, which no node could read or apply (SkipRecord);
//                nothing else, so that the log never ends in a hole.
//
// A world is its newest whole snapshot with the log after its Xform-After
// replayed (LoadWorld).

#ifndef XFORM_SERVER_CLUSTER_LOG_RECORDS_H_
#define XFORM_SERVER_CLUSTER_LOG_RECORDS_H_

#include <nats/nats.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/clock.h"
#include "server/cluster/nats_link.h"
#include "server/host/world_log.h"

namespace xform::server {

// The key a world's streams, subjects and lease are named by.
std::string StreamKey(absl::string_view world);
std::string LogStream(absl::string_view key);
std::string SnapStream(absl::string_view key);
std::string LogSubject(absl::string_view key);
std::string SnapSubject(absl::string_view key);

inline constexpr char kClusterHeader[] = "Xform-Cluster";

// One record of a world's log, put together from its messages.
struct LogRecord {
  enum class Kind { kCreated, kBatch, kFrameEnd, kEpoch, kSkipped };
  Kind kind = Kind::kBatch;
  uint64_t seq = 0;    // Its last message's stream sequence.
  uint64_t frame = 0;  // A batch's open frame; the frame an end closes.
  std::optional<uint64_t> digest;  // A frame end's.
  absl::Time closed;               // A frame end's: when it closed.
  std::string counts;              // A frame end's: FrameCounts.
  uint64_t epoch = 0;              // An epoch's.
  std::string node;                // The node that wrote it.
  std::string batch;               // A batch's bytes.
};

// Puts a log's messages together into records, in order.
class RecordAssembler {
 public:
  RecordAssembler(std::string cluster, std::string stream)
      : cluster_(std::move(cluster)), stream_(std::move(stream)) {}
  // Takes the next message (sequence `seq`): a record once it is whole,
  // nullopt while a batch's parts come in, or for a message not this
  // cluster's (no record of it: passed over, and logged). DATA_LOSS for a
  // part out of order, or a message of this cluster's that is no record.
  absl::StatusOr<std::optional<LogRecord>> Take(natsMsg* msg, uint64_t seq);
  // Messages passed over as not this cluster's.
  uint64_t skipped() const { return skipped_; }

 private:
  std::string cluster_;
  std::string stream_;  // Its log's, for the log line.
  uint64_t skipped_ = 0;
  std::string parts_;
  uint64_t next_part_ = 0;
};

// Applies records to a World as a load does, and says where it stands:
// the frames closed, the frame open and whether it holds part of it.
class RecordReplay {
 public:
  RecordReplay(RecoveredWorld& world, uint64_t snapshot_frame);
  absl::Status Apply(const LogRecord& record);
  // Finishes the world: its open frame, last frame, write ids.
  void Finish();
  uint64_t epoch() const { return epoch_; }

 private:
  RecoveredWorld& world_;
  uint64_t last_closed_;
  bool open_logged_ = true;  // The snapshot may hold part of its frame.
  uint64_t epoch_ = 1;       // The snapshot's writer's, or its creator's.
};

// A log record no node can read or apply (one of this cluster's that is no
// record, or a batch that does not parse or apply): DATA_LOSS naming it,
// with its sequence as a payload (BadRecordOf), so that the world can be
// shown wedged and an operator can skip it.
inline constexpr absl::string_view kBadRecordPayload =
    "type.xform.dev/xform.BadRecord";
absl::Status BadRecord(uint64_t seq, absl::string_view stream,
                       const absl::Status& why);
std::optional<uint64_t> BadRecordOf(const absl::Status& status);

// A world as its streams hold it, and where its log stands.
struct LoadedWorld {
  RecoveredWorld recovered;
  uint64_t last_seq = 0;  // The log's last record read.
  uint64_t epoch = 0;     // The last epoch record read.
};

// Loads the world keyed `key`: its newest whole snapshot and the log after
// it. NOT_FOUND where it has no whole snapshot (a create never finished);
// DATA_LOSS for corruption or another cluster's records; UNAVAILABLE where
// JetStream did not answer.
absl::StatusOr<LoadedWorld> LoadWorld(NatsLink& link, const std::string& key,
                                      const Clock& clock);

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_LOG_RECORDS_H_
