// Copyright 2026 The xform Authors.
//
// JetStreamWorldLog: a world's log in JetStream as the node that writes the
// world appends to it (--cluster; log_records.h has the records), the
// second implementation of the log seam (world_log.h) after the files of
// --data_dir. The world's batches and frame ends become records of its log
// stream, replicated on --cluster_replicas NATS servers (a write
// acknowledged by JetStream survives the loss of any one of three, but see
// docs/cluster.md on power loss); its snapshots, chunks of its snapshot
// stream, after which the log before the snapshot before them is purged
// (storage: two snapshots and the log since the older).
//
// Appends are pipelined: Append() and EndFrame() queue the record under the
// world's writer lock, and a sender thread of the log's publishes it
// asynchronously, up to --cluster_window messages in flight; each record's
// caller is acknowledged once JetStream has acknowledged its message, in
// order. Every message carries ExpectLastSeq (the sequence of the one
// before it: so no other writer appended between, which fences a writer
// deposed while paused or cut off) and a MsgId: a message JetStream did not
// acknowledge (a leader lost, no quorum) is sent again with both, so a retry
// is stored once and never out of order, for up to --cluster_write_timeout;
// a message refused because another writer appended first (JetStream error
// 10071) is never retried. Either failure breaks the log: its appends are
// refused UNAVAILABLE from then on, saying why, and the node that wrote it
// steps down (cluster_node.h), since the world in memory holds a record its
// log does not.
//
// Thread safety: as WorldLog says; the rest from any thread.

#ifndef XFORM_SERVER_CLUSTER_JETSTREAM_LOG_H_
#define XFORM_SERVER_CLUSTER_JETSTREAM_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/clock.h"
#include "server/cluster/nats_link.h"
#include "server/host/world_log.h"

namespace xform::server {

class JetStreamWorldLog final : public WorldLog {
 public:
  // The log of the world `name` (its StoredWorld's bytes, for snapshots),
  // whose stream's last sequence is `last_seq`: the next append expects it.
  // A log whose stream ends at `last_seq`, the record with MsgId
  // `last_msg_id` ("" if unknown): each record it appends expects the one
  // before it by both.
  JetStreamWorldLog(std::shared_ptr<NatsLink> link, std::string name,
                    std::string stored_world, uint64_t last_seq,
                    std::string last_msg_id, const ClusterOptions& options,
                    const Clock& clock);
  ~JetStreamWorldLog() override;

  absl::StatusOr<Acknowledgement> Append(uint64_t frame,
                                         absl::string_view batch) override;
  // Copies the world under its lock, waits for every record it holds to be
  // acknowledged, stores the snapshot's chunks, then purges what it
  // replaces.
  absl::Status Snapshot(SnapshotSource& world) override;
  bool RecordsFrames() const override { return true; }
  absl::StatusOr<Acknowledgement> EndFrame(uint64_t frame,
                                           std::optional<uint64_t> digest,
                                           absl::Time closed,
                                           absl::string_view counts) override;

  // Whether --snapshot_every's bytes were logged since the last snapshot;
  // whether anything was.
  bool SnapshotDue() const;
  bool Logged() const;
  // Marks the snapshot stream as this log's writer's, expecting its last
  // message: a writer deposed stores no snapshot after the mark (each of
  // its chunks expects the message before it to be its own). Once, before
  // the first append.
  absl::Status FenceSnapshots();
  // Why the log broke (OK while it has not).
  absl::Status broken() const;
  // Waits up to `timeout` for every record taken to be acknowledged: the
  // log's last sequence then; or why they will not all be (it broke), or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<uint64_t> WaitStored(absl::Duration timeout);

 private:
  struct Record;
  struct Part;
  absl::StatusOr<Acknowledgement> Queue(std::shared_ptr<Record> record);
  void SendLoop();
  // Publishes `parts` until each is acknowledged (retrying what was not)
  // or the log breaks: the status it broke with.
  absl::Status SendWindow(const std::vector<Part>& parts);
  // One try: publishes `parts` from `start` and waits for their answers;
  // `start` moves past what was acknowledged. What stopped it, if anything.
  absl::Status SendOnce(const std::vector<Part>& parts, size_t& start);
  absl::Status PublishPart(const Part& part);
  void Break(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // JetStream's answer for the part at `seq` (from NATS's thread).
  friend struct JetStreamAck;
  void TakeAck(uint64_t seq, absl::Status status);
  absl::Status PublishSnapshot(uint64_t after, const std::string& bytes);
  // The snapshot stream's last sequence, if its last message is this
  // writer's; FAILED_PRECONDITION if another's.
  absl::StatusOr<uint64_t> OwnSnapshotsEnd();

  const std::shared_ptr<NatsLink> link_;
  const std::string name_;
  const std::string key_;
  const std::string stored_world_;
  const ClusterOptions options_;
  const Clock& clock_;
  const std::string incarnation_;  // Makes this log's MsgIds its own.
  const uint64_t first_seq_;       // Its first part's sequence.
  const std::string last_msg_id_;  // The id of the record before it.
  void* js_ = nullptr;             // The jsCtx, whose handler calls TakeAck.

  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);    // The next part's sequence.
  uint64_t stored_seq_ ABSL_GUARDED_BY(mu_);  // Acknowledged up to here.
  // Parts sent again expecting the sequence alone (the sender's thread):
  // their predecessor's id unknown to the server.
  absl::flat_hash_set<uint64_t> unchecked_;
  std::deque<std::shared_ptr<Record>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;

  // The last snapshot this log stored: its first chunk's sequence and the
  // last log record it holds. The next snapshot purges what came before it.
  struct StoredSnapshot {
    uint64_t first = 0;
    uint64_t after = 0;
  };
  std::optional<StoredSnapshot> previous_snapshot_;  // The keeper's thread.

  // What JetStream answered, by sequence, for the window being sent.
  absl::Mutex ack_mu_;
  absl::flat_hash_map<uint64_t, absl::Status> acks_ ABSL_GUARDED_BY(ack_mu_);

  std::thread sender_;  // Last: it runs as soon as it is made.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_JETSTREAM_LOG_H_
