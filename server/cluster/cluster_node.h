// Copyright 2026 The xform Authors.
//
// ClusterNode: one xformd as a node of a cluster on NATS JetStream
// (--cluster; docs/cluster.md). It keeps the worlds' logs there (the
// log seam's store: log_records.h, jetstream_log.h), and runs the node's
// part in the cluster:
//
// - Every node serves every world: the worlds it does not write it follows
//   (world_follower.h), publishing the writer's frames to its own
//   subscribers, serving Read and Subscribe; it learns worlds created and
//   deleted at other nodes from the bucket XFORM_WORLDS.
// - One node writes a world: the one holding its lease, a key of the bucket
//   XFORM_OWNERS whose values expire --cluster_lease_ms after they were
//   last renewed (four times a lease). A CreateWorld makes the node that
//   received it the writer. Writes sent to another node are refused with
//   the writer's address (redirect.h).
// - When the writer is lost (its lease expires) a node that follows the
//   world creates the key, reads the log to its end, appends an epoch
//   record expecting that end (so a writer still appending, paused or cut
//   off, is fenced: one of the two fails) and writes the world from there.
//   A writer whose renewal is refused, or whose log broke, steps down: it
//   follows the world again, reloading it if it held records its log does
//   not.
// - A node that drains (xformctl nodes drain) hands each world it writes
//   to another: it stops taking batches, waits for its log to acknowledge
//   those it took, and gives the lease up for another node to take.
// - Its entry in XFORM_NODES (renewed twice a lease) says where clients
//   reach it (ListNodes).
//
// Thread-safe. Its own thread runs the leases (every eighth of a lease),
// another learns of worlds.

#ifndef XFORM_SERVER_CLUSTER_CLUSTER_NODE_H_
#define XFORM_SERVER_CLUSTER_CLUSTER_NODE_H_

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/clock.h"
#include "server/base/periodic_thread.h"
#include "server/cluster/jetstream_log.h"
#include "server/cluster/nats_link.h"
#include "server/cluster/view/cluster_view.h"
#include "server/cluster/view/redirect.h"
#include "server/cluster/world_follower.h"
#include "server/host/world_host.h"
#include "server/host/world_log.h"
#include "xform/config/cluster.pb.h"

namespace xform::server {

class ClusterNode final : public WorldLogStore, public ClusterView {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterNode>> Connect(
      ClusterOptions options, const Clock& clock = Clock::Real());
  ~ClusterNode() override;

  // The log seam (world_log.h). Recover hands every world of the cluster
  // over as a replica (no log): who writes it is settled once the node
  // serves. CreateWorld makes this node its writer.
  absl::Status Recover(
      absl::FunctionRef<absl::Status(RecoveredWorld)> take) override;
  absl::StatusOr<std::shared_ptr<WorldLog>> CreateWorld(
      const config::StoredWorld& stored) override;
  absl::Status DeleteWorld(absl::string_view name) override;
  void StartKeeping(WorldOf world_of) override;
  void SnapshotAll() override;

  // Where clients reach this node (--advertise_address): set before the
  // worlds are recovered.
  void set_address(std::string address) {
    options_.address = std::move(address);
  }
  // Runs the node's part in `host`, whose store this is, once recovered:
  // from here on it follows, takes and renews worlds, and keeps its entry.
  // FAILED_PRECONDITION if another running node has its name.
  absl::Status Serve(WorldHost& host);
  // A clean shutdown: hands every world it writes to another node (as a
  // drain does) and removes its entry, so that writers move at once
  // rather than after a lease.
  void Leave();

  // ClusterView.
  const std::string& node_name() const override { return options_.node; }
  absl::StatusOr<std::vector<NodeView>> Nodes() const override;
  PlacementView Placement(absl::string_view world) const override;
  absl::StatusOr<uint32_t> Drain(absl::string_view node, bool drain) override;
  absl::Status SkipRecord(absl::string_view world, uint64_t record) override;

  // Called with the worlds this node cannot load from their logs (wedged:
  // a record no node can read or apply) whenever they change: for the
  // node's health (xformd sets "xform.v1.Xform.worlds" NOT_SERVING while
  // any is). Set before Serve.
  void set_on_wedged(std::function<void(std::vector<std::string>)> f) {
    on_wedged_ = std::move(f);
  }

  // Whether this node writes `world` now (for tests and the log).
  bool Writes(absl::string_view world) const;

 private:
  // A lease's revision as this node last read it, and when it changed.
  struct LeaseSeen {
    uint64_t revision = 0;
    absl::Time changed;
  };
  // A world's role at this node. Each held world has one, changed only
  // by Become(), which holds each change to this diagram:
  //
  //            Follow() started            no lease: this node creates it
  //  kLoading ------------------> kFollowing ------------------> kTaking
  //   |  ^  ^                      |  ^   ^                         |
  //   |  |  +-- follower failed ---+  |   +-- not read to its end, -+
  //   |  |      (purged, lost)        |       epoch fenced          |
  //   |  |  Reload(): a bad record    |                             |
  //   |  |                            | its log had all it took     | its log
  //   read |  +- skipped / tried again -+  |                             | to
  //   its end, v                            |  |                             |
  //   epoch appended
  //  kWedged ----------------------+  +---- StepDown() ---- kWriting <-+
  //   (writes refused, DATA_LOSS)     otherwise reloads (kLoading)
  //                                   log broken, lease lost, drain,
  //                                   hand-off
  //
  // A world created at this node starts in kWriting. kTaking lasts only
  // within a step (Promote), under ops_mu_.
  enum class Role { kLoading, kWedged, kFollowing, kTaking, kWriting };
  static absl::string_view RoleName(Role role);

  // A world as this node holds it.
  struct Held {
    Role role = Role::kLoading;
    std::string name;
    std::string key;
    std::string stored;  // Its StoredWorld's bytes, for snapshots.
    std::shared_ptr<HostedWorld> world;
    std::unique_ptr<WorldFollower> follower;  // While another writes it.
    std::shared_ptr<JetStreamWorldLog> log;   // While this node writes it.
    uint64_t lease_revision = 0;
    absl::Time renewed;
    uint64_t epoch = 0;
    Redirect writer;       // Who writes it, as last read.
    absl::Time confirmed;  // When its log or lease was last heard from.
    absl::Time checked;    // When its follower last looked for a gap.
    LeaseSeen lease_seen;  // Its writer's renewals, as this node saw them.
    // Why its log cannot be loaded (a bad record, BadRecordOf), or OK; and
    // when to try again.
    absl::Status wedged;
    absl::Time reload_after;
  };

  ClusterNode(ClusterOptions options, const Clock& clock,
              std::shared_ptr<NatsLink> link);

  // The lease loop's step; when to run it again.
  absl::Time Step();
  // Worlds created here (pending_) that the host now serves, into held_.
  void TakeInCreated() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // The one way a held world's role changes; logs a change the diagram
  // does not have (a bug) and makes it all the same.
  void Become(Held& held, Role role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // A world's step, by its role: the writer renews its lease or steps
  // down; a follower checks it has not fallen behind and takes a world
  // whose writer is gone; a world that failed to load is tried again.
  void StepWorld(Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  void StepWriter(Held& held, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // A world with no writer: this node takes it if it creates its lease.
  void TryToTake(Held& held, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // The writer renews its lease; one expired that no other node took it
  // takes again; one another took, it steps down.
  void RenewLease(Held& held, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  void KeepEntry();
  // Waits (up to a lease) until `held`'s follower has read the log to its
  // end: that end's sequence, or nullopt (logged) if it did not.
  std::optional<uint64_t> ReadToEnd(Held& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // This node takes `held`'s world: reads its log to the end, appends an
  // epoch, writes it. False (following it again) if another appended.
  bool Promote(Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // This node stops writing `held`'s world and follows it, reloading it
  // unless its log acknowledged every record it took; gives the lease up
  // if `release`.
  void StepDown(Held& held, absl::string_view why, bool release)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // Gives up `held`'s lease, if still this node's (its revision unchanged).
  void ReleaseLease(const Held& held);
  // Loads `held`'s world from its streams again (Reset) and follows it;
  // one whose log holds a bad record is wedged, tried again every few
  // seconds.
  void Reload(Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // Tells on_wedged_ the wedged worlds, if they changed.
  void TellWedged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  void Follow(Held& held, uint64_t next_seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // The world's writer as its lease names it (nullopt: none); notes its
  // revision in `seen`.
  absl::StatusOr<std::optional<config::OwnerLease>> ReadLease(
      const std::string& key, LeaseSeen* seen);
  // Whether the lease went unrenewed for half a lease (its writer likely
  // lost): writes are told to try again, not sent there.
  bool Unrenewed(const LeaseSeen& seen) const;
  // Refuses writes to `held`'s world as written elsewhere (or, with no
  // lease, nowhere).
  void RefuseWrites(Held& held, const std::optional<config::OwnerLease>& lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // A world created or deleted elsewhere, as XFORM_WORLDS says.
  void WatchWorlds();
  void Learn(const std::string& key, const std::string& stored_bytes);
  void Forget(const std::string& key);
  // Hands each world this node writes to another; how many.
  uint32_t HandOffAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // A new world's two streams, its log's first record and its empty
  // snapshot (all undone if any fails): the first record's sequence.
  absl::StatusOr<uint64_t> StartStreams(const std::string& key,
                                        const std::string& stored_bytes);
  void DropStreams(const std::string& key);
  // The writer's log of a world whose stream ends at `last_seq`, the
  // record with MsgId `last_msg_id`.
  std::shared_ptr<JetStreamWorldLog> MakeLog(const std::string& name,
                                             std::string stored_world,
                                             uint64_t last_seq,
                                             std::string last_msg_id);
  Held* Find(absl::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);
  // Keeps `held`'s placement for Placement(), which reads it without
  // waiting for a step.
  void Publish(const Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_);

  ClusterOptions options_;  // Its address set once, before it serves.
  const Clock& clock_;
  const std::shared_ptr<NatsLink> link_;
  const absl::Time started_;

  // Taken by whatever changes who writes a world or what a node holds: the
  // lease loop, the watcher, a drain, a create or delete.
  absl::Mutex ops_mu_;
  WorldHost* host_ ABSL_GUARDED_BY(ops_mu_) = nullptr;
  absl::flat_hash_map<std::string, std::unique_ptr<Held>> held_
      ABSL_GUARDED_BY(ops_mu_);
  // Worlds loaded by Recover, or created here, until Serve or the loop
  // takes them in.
  struct Pending {
    std::string key;
    std::string stored;
    uint64_t last_seq = 0;  // Recovered: where its follower starts.
    uint64_t epoch = 0;
    std::shared_ptr<JetStreamWorldLog> log;  // Created: its writer's log.
    uint64_t lease_revision = 0;
  };
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(ops_mu_);
  bool draining_ ABSL_GUARDED_BY(ops_mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(ops_mu_) = false;

  // What Placement() and Nodes() answer from, kept by the loop.
  mutable absl::Mutex view_mu_;
  struct Placed {
    std::string writer_node;
    std::string writer_address;
    absl::Time confirmed;
    std::string wedged;
    uint64_t wedged_record = 0;
  };
  absl::flat_hash_map<std::string, Placed> placements_
      ABSL_GUARDED_BY(view_mu_);
  std::vector<NodeView> nodes_ ABSL_GUARDED_BY(view_mu_);
  absl::Time entry_kept_ ABSL_GUARDED_BY(view_mu_) = absl::InfinitePast();

  // The writers' logs, for snapshots (the keeper's thread).
  absl::Mutex keep_mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<JetStreamWorldLog>> logs_
      ABSL_GUARDED_BY(keep_mu_);
  WorldOf world_of_ ABSL_GUARDED_BY(keep_mu_);
  std::unique_ptr<PeriodicThread> keeper_;

  std::function<void(std::vector<std::string>)> on_wedged_;
  std::vector<std::string> told_wedged_ ABSL_GUARDED_BY(ops_mu_);

  std::atomic<bool> stopping_{false};
  std::unique_ptr<PeriodicThread> loop_;
  std::thread watcher_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_CLUSTER_NODE_H_
