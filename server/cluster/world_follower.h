// Copyright 2026 The xform Authors.
//
// WorldFollower: a node's copy of a world that another node writes: it
// follows the world's log stream (log_records.h) with an ordered consumer
// from where the copy stands, and applies each record to the HostedWorld
// in order, on the subscription's NATS thread: batches to the world, frame
// ends as frames published to this node's subscribers (the writer's frames,
// with the writer's numbers: HostedWorld::ApplyLogged, EndLoggedFrame). So
// NATS carries a world's writes once to each node, whatever its number of
// subscribers.
//
// A record that does not apply, a frame whose digest differs, a gap in the
// log (what the follower had not read was purged behind a snapshot) or
// another cluster's record stop it: failed() says why, and whoever runs it
// reloads the world from its snapshot and follows again
// (cluster_node.h). Costs: a record's, as the writer paid for it.
//
// Thread-safe.

#ifndef XFORM_SERVER_CLUSTER_WORLD_FOLLOWER_H_
#define XFORM_SERVER_CLUSTER_WORLD_FOLLOWER_H_

#include <nats/nats.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/cluster/log_records.h"
#include "server/cluster/nats_link.h"
#include "server/host/world_host.h"

namespace xform::server {

class WorldFollower {
 public:
  WorldFollower(std::shared_ptr<NatsLink> link,
                std::shared_ptr<HostedWorld> world, std::string key);
  ~WorldFollower();  // Stops.
  WorldFollower(const WorldFollower&) = delete;
  WorldFollower& operator=(const WorldFollower&) = delete;

  // Follows the log from the record at `next_seq` on, in `epoch` (the
  // last epoch record before it).
  absl::Status Start(uint64_t next_seq, uint64_t epoch);
  // Stops following, once a record being applied is: the sequence of the
  // last record applied whole (the next follower starts after it).
  uint64_t Stop();

  // A follower that heard nothing for `quiet` asks whether its log was
  // purged past what it read (a snapshot taken while no record came to
  // show the gap), or went on without it (its consumer lost with a NATS
  // server): failed() if so. O(1), a round trip to JetStream.
  absl::Status CheckFallenBehind(absl::Duration quiet);
  // Why it stopped applying records (the world must be reloaded); OK while
  // it follows.
  absl::Status failed() const;
  uint64_t applied_seq() const;
  // The last message taken, whole record or not.
  uint64_t consumed_seq() const;
  // Waits, up to `timeout`, until it has taken every message up to `seq` or
  // has failed; whether it took them. Woken by the message that brings it
  // there, not by polling.
  bool WaitConsumed(uint64_t seq, absl::Duration timeout) const;
  // When a record last came (the world's log last confirmed this copy).
  absl::Time last_record() const;
  uint64_t epoch() const;

 private:
  static void OnMessage(natsConnection*, natsSubscription*, natsMsg* msg,
                        void* closure);
  static void OnComplete(void* closure);
  void Take(natsMsg* msg);
  // DATA_LOSS if the log now starts past `consumed` + 1; with `quiet`
  // (nothing came for a while), UNAVAILABLE if it ends past `consumed`.
  absl::Status CheckNotBehind(uint64_t consumed, bool quiet);
  absl::Status Apply(const LogRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<NatsLink> link_;
  const std::shared_ptr<HostedWorld> world_;
  const std::string key_;

  mutable absl::Mutex mu_;
  natsSubscription* sub_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<absl::Notification> completed_ ABSL_GUARDED_BY(mu_);
  bool following_ ABSL_GUARDED_BY(mu_) = false;
  RecordAssembler assembler_ ABSL_GUARDED_BY(mu_);
  uint64_t expected_seq_ ABSL_GUARDED_BY(mu_) = 0;  // The next message's.
  uint64_t applied_seq_ ABSL_GUARDED_BY(mu_) = 0;   // The last whole record.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  absl::Time last_record_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_WORLD_FOLLOWER_H_
