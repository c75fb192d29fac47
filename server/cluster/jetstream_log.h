// Copyright 2026 The xform Authors.
//
// JetStreamLogStore: the worlds' logs in NATS JetStream (--cluster), the
// second implementation of the log seam (world_log.h) after the files of
// --data_dir: what makes a world outlive its machine. Each world has two
// streams of file storage, each replicated on --cluster_replicas NATS
// servers (a write acknowledged by JetStream survives the loss of any one of
// three, but see docs/cluster.md on power loss):
//
//   XFORM_LOG_<key>           subject xform.log.<key>: the world's batches
//                             in apply order, one message each as its
//                             client encoded it (headers Xform-Frame, and
//                             Xform-Part/Xform-Parts for one split at the
//                             payload limit); its first message marks the
//                             world's creation.
//   XFORM_SNAP_<key>          subject xform.snap.<key>: snapshots
//                             (EncodeSnapshot's bytes, the world's
//                             StoredWorld as their info) in chunks under the
//                             payload limit (headers Xform-Snapshot, -Chunk,
//                             -Chunks, and Xform-After: the last log
//                             sequence the snapshot holds).
//
// <key> is the world's name in hex, or, for a name over 96 bytes, "h" and
// its SHA-256 in hex (a stream is a directory named after it).
//
// A world is its newest whole snapshot with the log after its Xform-After
// replayed. After a snapshot is stored, the log up to it and the snapshots
// before it are purged: storage is one snapshot plus the log since.
//
// Appends are pipelined: Append() queues the record under the world's
// writer lock and a sender thread of the world's publishes it
// asynchronously, up to --cluster_window messages in flight; each batch's
// client is acknowledged once JetStream has acknowledged its message, in
// order. Every message carries ExpectLastSeq (the sequence of the one before
// it) and a MsgId: a message JetStream did not acknowledge (a leader lost,
// no quorum) is sent again with both, so a retry is stored once and never
// out of order, for up to --cluster_write_timeout; a message refused because
// another writer appended first (JetStream error 10071) is never retried.
// Either failure breaks the world's log: its writes are UNAVAILABLE from
// then on, saying why, until xformd recovers the world again (a restart),
// since the world in memory holds a batch that its log does not.
//
// Thread safety: as WorldLog and WorldLogStore say.

#ifndef XFORM_SERVER_CLUSTER_JETSTREAM_LOG_H_
#define XFORM_SERVER_CLUSTER_JETSTREAM_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/clock.h"
#include "server/periodic_thread.h"
#include "server/world_log.h"

namespace xform::server {

struct ClusterOptions {
  // --cluster: the NATS servers, "nats://host:port", any of the cluster's.
  std::vector<std::string> servers;
  // --node_name: this xformd among the cluster's, as NATS shows it.
  std::string node = "xformd";
  // --cluster_ca_file: TLS to the NATS servers, trusting this CA (PEM);
  // empty: as the URLs say (tls:// asks for TLS with the system's CAs).
  std::string ca_file;
  // --cluster_token_file: the NATS servers' authorization token, read from
  // this file (never the command line); empty: none.
  std::string token;
  // --cluster_replicas: the NATS servers each stream is kept on (3: any one
  // may be lost; 1 for a single NATS server).
  int replicas = 3;
  // --cluster_write_timeout: how long a record may go unacknowledged
  // (retried meanwhile) before the world's log breaks. A leader's failover
  // took 4-5 s when measured.
  absl::Duration write_timeout = absl::Seconds(30);
  // --cluster_window: messages a world has in flight at most.
  size_t window = 256;
  // --cluster_connect_timeout_ms: how long recovery waits for JetStream to
  // answer at all, the first connection included (servers starting, a
  // cluster electing its leaders).
  absl::Duration connect_timeout = absl::Seconds(60);
  // A world is snapshotted once its log holds this many bytes since the
  // last snapshot (0: never).
  uint64_t snapshot_every_bytes = uint64_t{64} << 20;
};

class JetStreamLink;  // jetstream_log.cc: the NATS connection.

// One world's log in JetStream (see above).
class JetStreamWorldLog final : public WorldLog {
 public:
  // `last_seq`: the log stream's last sequence, which the next append
  // expects.
  JetStreamWorldLog(std::shared_ptr<JetStreamLink> link, std::string name,
                    std::string stored_world, uint64_t last_seq,
                    const ClusterOptions& options, const Clock& clock);
  ~JetStreamWorldLog() override;

  absl::StatusOr<Acknowledgement> Append(uint64_t frame,
                                         absl::string_view batch) override;
  // Copies the world under its lock, waits for every record it holds to be
  // acknowledged, stores the snapshot's chunks, then purges what it
  // replaces.
  absl::Status Snapshot(SnapshotSource& world) override;

  // Whether --snapshot_every's bytes were logged since the last snapshot;
  // whether anything was.
  bool SnapshotDue() const;
  bool Logged() const;

 private:
  struct Record;
  struct Part;
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

  const std::shared_ptr<JetStreamLink> link_;
  const std::string name_;
  const std::string hex_;
  const std::string stored_world_;
  const ClusterOptions options_;
  const Clock& clock_;
  const std::string incarnation_;  // Makes this process's MsgIds its own.
  void* js_ = nullptr;             // The jsCtx, whose handler calls TakeAck.

  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);    // The next part's sequence.
  uint64_t stored_seq_ ABSL_GUARDED_BY(mu_);  // Acknowledged up to here.
  std::deque<std::shared_ptr<Record>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;

  // What JetStream answered, by sequence, for the window being sent.
  absl::Mutex ack_mu_;
  absl::flat_hash_map<uint64_t, absl::Status> acks_ ABSL_GUARDED_BY(ack_mu_);

  std::thread sender_;  // Last: it runs as soon as it is made.
};

// Every world's JetStreamWorldLog (see above).
class JetStreamLogStore final : public WorldLogStore {
 public:
  // Connects (and goes on reconnecting) to the cluster's NATS servers.
  static absl::StatusOr<std::unique_ptr<JetStreamLogStore>> Connect(
      ClusterOptions options, const Clock& clock = Clock::Real());
  ~JetStreamLogStore() override;

  absl::Status Recover(
      absl::FunctionRef<absl::Status(RecoveredWorld)> take) override;
  absl::StatusOr<std::shared_ptr<WorldLog>> CreateWorld(
      const config::StoredWorld& stored) override;
  absl::Status DeleteWorld(absl::string_view name) override;
  void StartKeeping(WorldOf world_of) override;
  void SnapshotAll() override;

 private:
  JetStreamLogStore(ClusterOptions options, const Clock& clock,
                    std::shared_ptr<JetStreamLink> link);
  absl::StatusOr<RecoveredWorld> RecoverWorld(const std::string& hex);
  std::shared_ptr<JetStreamWorldLog> MakeLog(const std::string& name,
                                             std::string stored_world,
                                             uint64_t last_seq);
  absl::Time Keep();
  // Snapshots `log` of the world named `name`, if it is still served;
  // logs a failure.
  void SnapshotOf(const std::string& name, JetStreamWorldLog& log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keep_mu_);
  std::vector<std::pair<std::string, std::shared_ptr<JetStreamWorldLog>>> Logs()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keep_mu_);

  const ClusterOptions options_;
  const Clock& clock_;
  const std::shared_ptr<JetStreamLink> link_;
  absl::Mutex keep_mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<JetStreamWorldLog>> logs_
      ABSL_GUARDED_BY(keep_mu_);
  WorldOf world_of_ ABSL_GUARDED_BY(keep_mu_);
  std::unique_ptr<PeriodicThread> keeper_;
};

// "3 NATS replicas via nats://a:4222,nats://b:4222 as node n1": the store
// as xformd's log states it.
std::string DescribeCluster(const ClusterOptions& options);

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_JETSTREAM_LOG_H_
