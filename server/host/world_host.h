// Copyright 2026 The xform Authors.
//
// WorldHost owns the server's worlds by name. A HostedWorld is one core World
// behind a writer lock, plus the Replicator that serves its subscribers. Writes
// apply at once (a read after a write sees it); frames are published on the
// world's tick, by a thread of the world's own (so what holds one world never
// delays another's frames), or when a write batch says end_frame (driven
// mode). A publication holds the writer lock only to close its frame, so the
// world's batches and reads never wait for its subscribers. Protobuf is
// converted to core types here, at the edge; the gRPC service on top only
// moves messages and statuses.

#ifndef XFORM_SERVER_HOST_WORLD_HOST_H_
#define XFORM_SERVER_HOST_WORLD_HOST_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/base/periodic_thread.h"
#include "server/cluster/view/cluster_view.h"
#include "server/host/recent_writes.h"
#include "server/host/world_history.h"
#include "server/host/world_log.h"
#include "server/replication/burst_budget.h"
#include "server/replication/fanout_pool.h"
#include "server/replication/replicator.h"
#include "xform/message_size.h"
#include "xform/v1/wire.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::server {

// The tick rates a world may have: below the floor a tick world would hold
// writes unpublished for minutes; above the ceiling a world's ticker cannot
// keep up.
inline constexpr double kMinTickHz = 0.01;
inline constexpr double kMaxTickHz = 1000;

// What one client may ask of the server. Each is an xformd flag; see
// docs/limits.md for the defaults and what a client sees at each.
struct Limits {
  size_t max_worlds = 64;
  size_t max_entities_per_world = 4'000'000;
  size_t max_batch = 1'000'000;  // Entities named by one Apply request.
  size_t max_commands = 65'536;  // Commands in one Apply request.
  // Ancestors one request's walks to the root (exact-world lookups, cycle
  // checks) may pass in all (see World::set_max_ancestor_walk).
  uint64_t max_ancestor_walk = 30'000'000;
  size_t max_subscribers = 256;    // Per world.
  size_t max_filter_ids = 65'536;  // Entities + subtrees in one Subscribe.
  // Changed entities a subscriber may have unsent before it is resent its
  // view whole instead (see Replicator).
  size_t max_pending = 65'536;
  // What streamed snapshots may hold in parts made ahead of their streams,
  // server-wide, to end while their world changes faster than they stream
  // (see BurstBudget).
  size_t snapshot_burst_bytes = 128 << 20;
  size_t max_message_bytes = kDefaultMaxMessageBytes;
  // Frames a subscriber whose stream broke may resume from (see
  // SubscribeRequest.resume_from_frame): 10 s at 60 Hz.
  uint64_t resume_frames = 600;
  // Time (docs/time.md): each world's history, and lookups in it.
  HistoryLimits history;
  // The longest a LookupTransform waits for data not yet known
  // (--max_lookup_wait_ms), the lookups that may wait on one world at once
  // (--max_waiting_lookups), and the sources of one lookup
  // (--max_lookup_sources).
  uint32_t max_lookup_wait_ms = 10'000;
  // The longest entity name (--max_name_bytes; server/host/world_names.h).
  size_t max_name_bytes = 256;
  size_t max_waiting_lookups = 1024;
  size_t max_lookup_sources = 4096;
  // Region views (SubscribeRequest.region): the edge of the cells they are
  // found by, in world units; the most cells one region, grown by its
  // margin, may cover; how often a subscription's region may move.
  float region_cell_size = 32;
  uint64_t max_region_cells = uint64_t{1} << 40;
  double max_region_moves_hz = 240;
  // The entities a caller's region moves may judge a second, all its
  // subscriptions together (caller_budget.h); 0: no limit. At about 80 ns
  // an entity, 8M is about two thirds of a core: 64 cameras of radius 50
  // in the city moving every frame at 60 Hz judge some 7.7M.
  double max_region_move_entities_per_second = 8e6;
  // Region views a world has before each frame's moves are sorted by cell
  // for them (Replicator::set_region_views_to_sort_moves): a tuning, which
  // tests set to 1.
  size_t region_views_to_sort_moves = 8;
};

class HostedWorld : public SnapshotSource {
 public:
  HostedWorld(std::string name, v1::FrameMode mode, double tick_hz,
              size_t max_pending = 65'536,
              std::shared_ptr<BurstBudget> burst_budget = nullptr,
              std::string owner = "", std::shared_ptr<Fanout> fanout = nullptr,
              uint64_t resume_frames = 0);

  const std::string& name() const override { return name_; }
  // The principal that created it (for its max_worlds_owned quota); "" for
  // the server's own (--demo).
  const std::string& owner() const { return owner_; }
  v1::FrameMode mode() const { return mode_; }
  absl::Duration tick() const { return tick_; }

  // Validates and applies a batch; returns the frame it will be published in.
  // A driven world's batch with end_frame publishes that frame before it
  // returns (after the publication before it, if one is under way). A
  // batch whose write_id the world applied lately is not applied again: it
  // is answered as the first was (recent_writes.h). Refused as the world's
  // writes are, when they are (StopWriting).
  absl::StatusOr<uint64_t> Apply(const v1::ApplyRequest& request,
                                 const Limits& limits);
  absl::Status Read(const v1::ReadRequest& request, const Limits& limits,
                    v1::ReadResponse* response) const;

  // Time (world_lookup.cc). Before the world is served: what history it
  // keeps, and its time model (CreateWorldRequest.time_model).
  void SetHistoryLimits(HistoryLimits limits, v1::TimeModel model);
  // A LookupTransform, answered through `done`: at once (on the calling
  // thread), or, when a link is not known yet at the stamp and the request
  // may wait, by the batch that brings the data (on its thread, after the
  // world's lock is released) or at `deadline` (on the poller's: DEADLINE
  // EXCEEDED naming how far the data reaches). No thread waits meanwhile.
  using LookupDone =
      absl::AnyInvocable<void(absl::Status, v1::LookupTransformResponse)>;
  // Frames may be named (target_name, source_name, fixed_frame_name): an
  // entity's name, "e<id>" or "world", resolved as the lookup begins.
  void LookupTransform(const v1::LookupTransformRequest& request,
                       const Limits& limits, absl::Time deadline,
                       LookupDone done);
  // A lookup's named frames as ids (world_lookup.cc).
  absl::StatusOr<v1::LookupTransformRequest> WithFramesResolved(
      const v1::LookupTransformRequest& named, const Limits& limits) const;
  // Answers the waiting lookups whose deadline passed (the poller's), or
  // all of them with `status` (shutdown, deletion).
  void ExpireLookups(absl::Time now);
  void EndLookups(const absl::Status& status);
  // Closes the current frame and hands its changes to the replicator. The
  // world is locked only to close it (World::EndFrame): batches and reads
  // do not wait for the frame's encoding or its subscribers. Nothing where
  // its writes are refused (a replica's frames close where its log says),
  // nor, where its log records frames (a cluster's), for a frame that
  // holds nothing: every node numbers the same frames.
  void Publish();
  // A tick: Publish(), where the world is written (a cluster's replica
  // closes frames where its log says).
  void Tick();
  v1::WorldInfo Info() const;

  Replicator& replicator() { return replicator_; }

  // Durability, set up before the world is served. Persist: every batch is
  // appended to `log` under the world's lock, and acknowledged to its
  // client once the log says it is durable (world_log.h); a batch the log
  // refuses is taken back, and its error returned.
  void Persist(std::shared_ptr<WorldLog> log);
  // Takes `recovered`'s world as its state, with its recent write ids, and
  // publishes it whole as frame `recovered.last_frame`, so that
  // subscribers' snapshots hold it; its frames are a new history unless
  // it names the one it continues (a cluster's world). Before the world is
  // served.
  void Restore(RecoveredWorld& recovered);
  bool durable() const;
  // A snapshot into its log now (the store takes them when due): see
  // WorldLog::Snapshot.
  absl::Status SaveSnapshot();

  // --- In a cluster (cluster/), where one node writes a world and the
  // others follow its log.
  // Whether its writes are taken here.
  bool writable() const;
  // Refuses its writes from now on with `why` (a redirect to the node that
  // writes it: redirect.h; or UNAVAILABLE), after the batch under way;
  // returns the log it wrote to, if any.
  std::shared_ptr<WorldLog> StopWriting(absl::Status why);
  // Takes its writes from now on, into `log`, which follows the records
  // the world holds. A frame its last writer left open with batches in it
  // is closed first (its end logged, and published).
  void StartWriting(std::shared_ptr<WorldLog> log);
  // A replica's steps, in the log's order. ApplyLogged: a batch the writer
  // applied in open frame `frame` (a later frame than the open one closes
  // it first, published with what it holds). EndLoggedFrame: the end of
  // `frame`, which the writer's `digest` describes (none: it held it in
  // part); published unless the world's own digest differs, which is
  // DATA_LOSS: the replica is out of step and must reload (Reset).
  absl::Status ApplyLogged(absl::string_view batch, uint64_t frame);
  absl::Status EndLoggedFrame(uint64_t frame, std::optional<uint64_t> digest,
                              absl::Time closed = absl::Now(),
                              absl::string_view writers_counts = "");
  // Takes `reloaded` as its state in place of what it held, resending every
  // subscriber its view (Replicator::Reset). O(world + subscribers).
  void Reset(RecoveredWorld& reloaded);
  // For the log's snapshots (SnapshotSource).
  void WithWorldLocked(
      absl::FunctionRef<void(const World& world)> with_world) override {
    absl::MutexLock lock(&mu_);
    with_world(world_);
  }
  void ForEachRecentWriteLocked(
      absl::FunctionRef<void(absl::string_view id, uint64_t frame)> visit)
      const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    recent_writes_.ForEach(visit);
  }
  void ForEachNameLocked(
      absl::FunctionRef<void(EntityId entity, const std::string& name)> visit)
      const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    names_.ForEach(visit);
  }

 private:
  // Destroyed last, once the world's other members are gone: gives their
  // memory back to the operating system. Big columns are mappings of their
  // own and go back at once, but the hash maps and the replicator's state
  // come from malloc's heap, which keeps what is freed until told.
  struct MemoryReturn {
    ~MemoryReturn();
  } memory_return_;
  const std::string name_;
  const std::string owner_;
  const v1::FrameMode mode_;
  const double tick_hz_;
  const absl::Duration tick_;

  // One publication at a time, so that frames reach the replicator whole
  // and in order. Apart from mu_, which is held only to close the frame: a
  // frame's encoding, its caught-up subscribers' wakes (each starting a
  // write, so O(subscribers)) and the published state's update are done
  // under this lock alone, and the world's batches and reads go on
  // meanwhile. Taken before mu_.
  absl::Mutex publish_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;  // The writer lock: one batch, read or close.
  World world_ ABSL_GUARDED_BY(mu_);
  // Its stamps and where its entities were (world_history.h).
  WorldHistory history_ ABSL_GUARDED_BY(mu_);
  // Who set which entities directly in the open frame (echo suppression).
  FrameWriters writers_ ABSL_GUARDED_BY(mu_);
  // The frame being published, and its writers: reused by every
  // publication.
  FrameChanges changes_ ABSL_GUARDED_BY(publish_mu_);
  // When it closed: its time on every node that publishes it.
  absl::Time closed_at_ ABSL_GUARDED_BY(publish_mu_);
  FrameWriters closed_writers_ ABSL_GUARDED_BY(publish_mu_);
  // What Apply() did while it held the world.
  struct Applied {
    absl::StatusOr<uint64_t> frame;
    // The log's, for the batch's record: the batch is acknowledged after.
    std::optional<WorldLog::Acknowledgement> acknowledgement;
    std::optional<RecentWrites::Write> repeated;  // Its write id was seen.
    std::shared_ptr<WriteOutcome> outcome;  // For repeats of its write id.
  };
  // Apply() with the world held: a repeat found, or the batch applied
  // (encoding it for the log if one came since).
  void ApplyHeld(const v1::ApplyRequest& request,
                 std::vector<Command>& commands, size_t creates,
                 std::string& journaled, const Limits& limits, Applied& applied)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Apply()'s work on the world: the batch applied (and journaled) and
  // recorded in history at `stamp`, or refused whole; the frame it is in.
  absl::StatusOr<uint64_t> ApplyLocked(
      std::vector<Command>& commands, Stamp stamp, const std::string& client_id,
      size_t creates, std::string& journaled, const Limits& limits,
      std::optional<WorldLog::Acknowledgement>& acknowledgement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the open frame into changes_ (and closed_writers_); if its
  // log records frame ends and the frame holds logged batches (or a
  // client's end_frame closes it), hands the log its end, whose
  // acknowledgement the frame's publication waits for (an error: the log
  // refused it, and the frame is not published).
  absl::Status CloseFrameLocked(
      std::optional<WorldLog::Acknowledgement>& acknowledgement,
      bool ended_by_client = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_, mu_);
  // Waits for the acknowledgement a frame's close took, if any, then
  // hands the frame to the replicator. A frame whose end the log lost is
  // not published, and the world's writes stop.
  void PublishClosed(
      std::optional<WorldLog::Acknowledgement> acknowledgement = std::nullopt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // A replica's open frame becomes `frame`, closing and publishing the one
  // open if it holds batches. Takes mu_ itself.
  void OpenLoggedFrame(uint64_t frame)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // A batch with a write id seen lately: its frame, once its first
  // application was acknowledged.
  static absl::StatusOr<uint64_t> Repeated(const RecentWrites::Write& write);
  // Apply()'s checks of a request before the world is held: its ids, and
  // its commands decoded.
  static absl::StatusOr<std::vector<Command>> Validated(
      const v1::ApplyRequest& request, const Limits& limits);
  // Waits for a batch's log record to be acknowledged (the batch is then
  // acknowledged to its client), settling `outcome` (if any) for its
  // repeats; a record lost stops the world's writes.
  absl::Status AwaitLogged(WorldLog::Acknowledgement acknowledgement,
                           WriteOutcome* outcome) ABSL_LOCKS_EXCLUDED(mu_);
  // Lookups waiting for data (world_lookup.cc), by the stamp they need:
  // retried when a batch brings the world's newest stamp up to it.
  struct WaitingLookup {
    v1::LookupTransformRequest request;
    absl::Time deadline;
    LookupDone done;
  };
  // The lookups `request` asks for, into `response`, with the world held.
  absl::Status LookupLocked(const v1::LookupTransformRequest& request,
                            v1::LookupTransformResponse* response) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // After a batch: answers the waiting lookups it may have brought the data
  // for. Takes the locks itself.
  void AnswerWaitingLookups() ABSL_LOCKS_EXCLUDED(mu_, waiting_mu_);
  absl::Mutex waiting_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::multimap<Stamp, WaitingLookup> waiting_ ABSL_GUARDED_BY(waiting_mu_);
  // waiting_.size(), read without the lock after every batch.
  std::atomic<size_t> waiting_count_{0};
  Replicator replicator_;
  std::shared_ptr<WorldLog> log_ ABSL_GUARDED_BY(mu_);
  // Whether it has a log, read without the lock: a batch is encoded for it
  // before the lock is taken.
  std::atomic<bool> logged_{false};
  // OK while its writes are taken here; else why not.
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  RecentWrites recent_writes_ ABSL_GUARDED_BY(mu_);
  WorldNames names_ ABSL_GUARDED_BY(mu_);
  // The open frame holds logged batches (its end must be logged, or, on a
  // replica, published), some of them applied before the world was loaded
  // (its changes known in part: no digest).
  bool open_frame_logged_ ABSL_GUARDED_BY(mu_) = false;
  bool open_frame_partial_ ABSL_GUARDED_BY(mu_) = false;
};

class WorldHost {
 public:
  // With `logs`, worlds are durable (world_log.h): Recover() first.
  // Each frame's subscribers are woken by `fanout_threads` threads, the
  // publishing one included (FanoutPool).
  WorldHost(Limits limits, double default_tick_hz,
            std::unique_ptr<WorldLogStore> logs = nullptr,
            int fanout_threads = 1);
  ~WorldHost();
  WorldHost(const WorldHost&) = delete;
  WorldHost& operator=(const WorldHost&) = delete;

  const Limits& limits() const { return limits_; }

  absl::StatusOr<std::shared_ptr<HostedWorld>> Create(
      const v1::CreateWorldRequest& request, std::string owner = "");
  absl::StatusOr<std::shared_ptr<HostedWorld>> Get(
      absl::string_view name) const;
  std::vector<std::shared_ptr<HostedWorld>> List() const;
  // Removes the world; its subscribers' streams end with NOT_FOUND.
  absl::Status Delete(absl::string_view name);

  // Ends every subscriber stream with `status` (shutdown).
  void EndAllStreams(const absl::Status& status);

  // Durability. Recover: rebuilds the worlds the log store holds, before
  // any call is served; then the store keeps their logs (syncs, snapshots).
  absl::Status Recover();
  // Serves a world as recovery (or a cluster, for a world created at
  // another node) rebuilt it; ALREADY_EXISTS if one has its name. A
  // cluster's replica (no log) refuses writes with `replica_refusal` (a
  // redirect to its writer) from its first call, or else is told to try
  // again.
  absl::StatusOr<std::shared_ptr<HostedWorld>> Add(
      RecoveredWorld recovered,
      absl::Status replica_refusal = absl::OkStatus());
  // Removes a world its log is gone for (a cluster's world deleted at
  // another node): its streams end with `status`. False if none.
  bool Remove(absl::string_view name, const absl::Status& status);
  // The cluster this node is part of (none: a single xformd). Set before
  // calls are served.
  void set_cluster(ClusterView* cluster) { cluster_ = cluster; }
  ClusterView* cluster() const { return cluster_; }
  // Snapshots every durable world with something logged (clean shutdown).
  void SnapshotAll();
  bool durable() const { return logs_ != nullptr; }
  // Whether calls may be served: recovery is over (at once without storage).
  bool ready() const { return ready_.load(std::memory_order_acquire); }

 private:
  // Polls every world's subscribers (rate-limited messages now due), and
  // trims the heap after a delete; returns when to poll again (5 ms).
  absl::Time PollOnce();

  void StartTicking(const std::shared_ptr<HostedWorld>& world)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  const std::shared_ptr<BurstBudget> burst_budget_;
  const std::shared_ptr<Fanout> fanout_;  // Shared by the worlds; or none.
  const double default_tick_hz_;
  std::unique_ptr<WorldLogStore> logs_;
  // Creates and deletes, one at a time: their logs are made and removed
  // outside mu_, which every call takes to find its world.
  absl::Mutex create_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<HostedWorld>> worlds_
      ABSL_GUARDED_BY(mu_);
  // When the poller gives freed memory back to the OS once more after a
  // delete: what the deleting connections' buffers held is freed only after
  // the world itself (see HostedWorld::MemoryReturn).
  absl::Time trim_due_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Each tick world's publishing thread (StartTicker in the .cc), by name.
  absl::flat_hash_map<std::string, std::unique_ptr<PeriodicThread>> tickers_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PeriodicThread> poller_;
  std::atomic<bool> ready_;
  ClusterView* cluster_ = nullptr;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_HOST_WORLD_HOST_H_
