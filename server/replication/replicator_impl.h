// Copyright 2026 The xform Authors.
//
// Replicator::Impl: a Replicator's state and the steps of its work, behind
// one lock. Not an API (replicator.h is): the replicator's .cc files share
// it. Every private step expects the lock held.
//
//   replicator.cc           subscribing, listing, the API's entry points
//   replicator_publish.cc   Publish, in six named steps
//   replicator_take.cc      a subscriber's next message (Take), by its state
//   replicator_snapshot.cc  streamed snapshots

#ifndef XFORM_SERVER_REPLICATION_REPLICATOR_IMPL_H_
#define XFORM_SERVER_REPLICATION_REPLICATOR_IMPL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "server/replication/echo_filter.h"
#include "server/replication/published_state.h"
#include "server/replication/replicator.h"
#include "server/replication/slot_bits.h"
#include "server/replication/spatial_index.h"
#include "server/replication/subscription.h"
#include "server/replication/view_filter.h"

namespace xform::server {

class Replicator::Impl {
 public:
  using Slot = PublishedState::Slot;

  Impl(size_t max_pending, std::shared_ptr<BurstBudget> burst_budget,
       std::shared_ptr<Fanout> fanout, uint64_t resume_frames)
      : max_pending_(max_pending),
        resume_frames_(resume_frames),
        burst_budget_(std::move(burst_budget)),
        fanout_(std::move(fanout)) {}

  // The API (replicator.h), each taking the lock.
  void Publish(const FrameChanges& changes, absl::Time time,
               const FrameWriters& writers);
  void PublishWhole(const World& world, uint64_t frame, absl::Time time,
                    uint64_t resumable_from);
  void Reset(const World& world, uint64_t frame, absl::Time time,
             uint64_t resumable_from);
  // PublishWhole's and Reset's part: `world` whole at `frame`, taken in
  // under mu_ (held by the caller).
  void TakeInWholeLocked(const World& world, uint64_t frame, absl::Time time,
                         uint64_t resumable_from);
  SubscriptionId Subscribe(SubscriptionOptions options,
                           std::shared_ptr<UpdateSink> sink);
  void Unsubscribe(SubscriptionId id);
  absl::Status MoveRegion(SubscriptionId id, absl::string_view owner,
                          const Region& region, double max_per_second,
                          absl::Time now, AffordRegionMove afford);
  // One part of the region move under way in subscription `id`'s view
  // (`*s`), noting what entered and left and keeping the sinks to wake in
  // `wake`; if more is left, releases the lock (waking them), takes it
  // again and finds the subscription anew. Whether the same move is still
  // under way in it then (`*s` null if it is gone).
  bool MoveRegionPart(std::unique_lock<std::mutex>& lock, SubscriptionId id,
                      Subscription*& s,
                      std::vector<std::shared_ptr<UpdateSink>>& wake);
  // Next() (`make`) and NextIfMade().
  std::shared_ptr<const Outgoing> Take(SubscriptionId id, absl::Time now,
                                       bool make, bool* must_make);
  void Flush(absl::Time now);
  void EndAll(const absl::Status& status);
  uint64_t frame() const;
  uint64_t resumable_from() const;
  bool keeps_spatial_index() const;
  size_t subscribers() const;
  std::vector<SubscriberInfo> Subscribers(uint64_t after_id,
                                          size_t limit) const;
  StreamStats stream_stats() const;

  // Without the lock.
  std::atomic<size_t> echo_filtered{0};  // Subscriptions filtering echoes.
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> cut_off{0};
  // Set before the first Subscribe (see replicator.h).
  size_t membership_walk_chunk = 32'768;
  float region_cell_size = 32;  // See Replicator::set_region_cell_size.
  // See Replicator::set_region_views_to_sort_moves.
  size_t region_views_to_sort_moves = 8;
  uint64_t history = 0;  // See Replicator::set_history.
  std::function<void()> unlocked_for_testing;

 private:
  // The parts every caught-up whole-world subscriber gets for a frame, and
  // their compact encodings, one per precision asked for, with what each
  // moved entity's deltas are coded against (what was published before).
  struct SharedFrame {
    std::vector<std::shared_ptr<const Outgoing>> raw;
    absl::flat_hash_map<float, std::vector<std::shared_ptr<const Outgoing>>>
        compact;
    std::vector<std::vector<std::optional<Matrix3x4>>> previous;
  };
  // Filtered views, and whether each entity the frame touches (its lists,
  // and everything below the re-parented) was in each view before it.
  struct ViewsBefore {
    std::vector<Subscription*> filtered;
    // The frame creates, destroys and re-parents nothing, so no view
    // changes: nothing else is recorded.
    bool moves_only = false;
    std::vector<EntityId> touched;           // Sorted.
    std::vector<std::vector<bool>> in_view;  // [filtered][touched]
  };
  // What a frame's subscribers see of it, found once for them all.
  struct FrameContext {
    const FrameChanges& changes;
    absl::Time time;
    EchoFilter::WritingClients writing;
    EchoFilter::Echoes echoes;
    // Each moved entity's matrix before the frame (by its index in
    // changes.moved; none for one created), when a subscriber that tracks
    // what it holds will note the frame; else empty.
    std::vector<std::optional<Matrix3x4>> moved_before;
    absl::flat_hash_set<SubscriptionId> served;  // Shared parts taken.
  };

  // --- Publish's steps (replicator_publish.cc), in order. The first runs
  // under a hold of its own, and the sinks it wakes are woken before the
  // rest.
  // 1. Caught-up whole-world subscribers take the frame's shared parts,
  //    made from the changes alone.
  void ServeCaughtUp(FrameContext& frame,
                     std::vector<std::shared_ptr<UpdateSink>>& wake);
  // Whether `s` keeps the frame's shared parts (and takes them, or drops
  // its kept ones to catch up from the state, or resyncs instead).
  bool KeepsSharedParts(Subscription& s, size_t entities, uint64_t frame);
  // 2. What the filtered views held before the frame.
  ViewsBefore RecordViewsBefore(const FrameChanges& changes) const;
  std::vector<std::optional<Matrix3x4>> MovedBefore(
      const FrameContext& frame) const;
  // 3. state_.TakeIn(changes), then whose own writes moved what
  //    (FindEchoes).
  EchoFilter::Echoes FindEchoes(
      const FrameWriters& writers,
      const EchoFilter::WritingClients& writing) const;
  // 4. The other whole-world subscribers fold the frame into what they are
  //    owed.
  void FoldIntoWholeWorld(const FrameContext& frame);
  void NoteFrame(Subscription& s, const FrameContext& frame,
                 absl::Span<const Slot> destroyed,
                 absl::Span<const Slot> created,
                 absl::Span<const Slot> reparented,
                 absl::Span<const Slot> moved);
  // 5. Filtered views follow the frame, noting what entered, left, or
  //    changed in them.
  void UpdateFilteredViews(const FrameContext& frame, ViewsBefore& before);
  // 5, for a frame of moves alone: each view notes what moved in it.
  void NoteMovesInViews(const FrameContext& frame,
                        const std::vector<Subscription*>& filtered);
  // 6. Counts the frame for those it changed, and finds whom to wake.
  void CloseFrame(const absl::flat_hash_set<SubscriptionId>& served,
                  std::vector<std::shared_ptr<UpdateSink>>& wake);
  // Logs the frame's destroyed entities, and trims the log to what the
  // subscribers that catch up from the state may still need.
  void LogDestroyed(const FrameChanges& changes);
  void WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks);

  // Folds an event into what the subscriber is owed: its pending events, or,
  // while its snapshot streams, its snapshot's bits: at e's slot this frame
  // (see PublishedState::FindThisFrame), looked up unless given. `before`:
  // for a move, e's matrix before the frame, if it existed (Noting::held).
  void Note(Subscription& s, EntityId e, NetChange change,
            Slot slot = PublishedState::kNoSlot,
            const std::optional<Matrix3x4>& before = std::nullopt) const;
  void NoteInSnapshot(StreamedSnapshot& snap, EntityId e, NetChange change,
                      Slot slot) const;
  // Turns a caught-up subscriber's kept shared parts into pending events:
  // it notes from now on, owed what changed after `after` (if known).
  Noting& Fold(Subscription& s, std::optional<uint64_t> after) const;

  // The shared parts of a frame, made once for all (FrameParts), and their
  // compact encodings at `precision`, made once a frame for each.
  const std::vector<std::shared_ptr<const Outgoing>>& SharedParts(
      SharedFrame& shared, const FrameChanges& changes, absl::Time time,
      const Subscription& s) const;
  static std::vector<std::shared_ptr<const Outgoing>> FrameParts(
      const FrameChanges& changes, absl::Time time, size_t max_bytes);
  const std::vector<std::shared_ptr<const Outgoing>>& CompactParts(
      SharedFrame& shared, float precision) const;
  // A writer's parts, each to be shared by the streams that send it.
  static std::vector<std::shared_ptr<const Outgoing>> Share(
      std::vector<v1::FrameUpdate> parts,
      const std::shared_ptr<const void>& hold = nullptr);

  // --- A subscriber's next message (replicator_take.cc).
  // Commits a caught-up subscriber to a message of its kept frames: the
  // frame's shared parts (one), each in turn (compact), or one fold of
  // them. False while it is rate-limited or must wait, or the fold must be
  // made (`make` false: then *must_make).
  bool TakeKept(Subscription& s, absl::Time now, bool make, bool* must_make);
  // What a subscriber that noted, is owed from the state, or is sent its
  // view (again) is sent next; the lock may be released meanwhile (a scan,
  // a search, a burst's copy), so the subscription is found again by `id`.
  std::shared_ptr<const Outgoing> TakeOwed(std::unique_lock<std::mutex>& lock,
                                           SubscriptionId id, absl::Time now);
  // Runs `step` (true once done) on the subscription `id` a chunk at a
  // time, the lock released between chunks: a waiter (a publication,
  // another stream) may take it meanwhile. The subscription found again, or
  // null if it went or `still` (that the work is the one begun) fails.
  Subscription* InChunks(std::unique_lock<std::mutex>& lock, SubscriptionId id,
                         absl::FunctionRef<bool(Subscription&)> step,
                         absl::FunctionRef<bool(Subscription&)> still);
  std::shared_ptr<const Outgoing> TakeSnapshotPart(
      std::unique_lock<std::mutex>& lock, SubscriptionId id);
  // Takes the next of the parts committed to, noting the frame sent (in the
  // subscriber's encoding), and counting it (StreamStats).
  std::shared_ptr<const Outgoing> TakePart(Subscription& s);
  // Commits the first of the kept frames' shared parts (a compact
  // subscriber's, sent in turn).
  static void CommitFirstKeptFrame(Subscription& s, CaughtUp& caught_up);
  // Everything pending, from the published state, as the parts committed
  // to; the subscriber is caught up then.
  void MakePendingParts(Subscription& s, absl::Time now);
  // What a subscriber's message sends, from the published state: the
  // entities destroyed to it, then by slot those created to it and those
  // re-parented (each parents first), and those moved.
  struct OwedSlots {
    std::vector<EntityId> destroyed;
    std::vector<Slot> entered;
    std::vector<Slot> reparented;
    std::vector<Slot> moved;
  };
  // Commits the subscriber to the parts that send `owed`, coded against
  // `held` (compact: what it holds of each).
  void MakeParts(Subscription& s, absl::Time now, const OwedSlots& owed,
                 const absl::flat_hash_map<EntityId, std::optional<Matrix3x4>>*
                     held = nullptr);
  // A rate-limited subscriber's next message is due 1/max_rate_hz from now.
  static void HoldBack(Subscription& s, absl::Time now);

  // The view `options` ask for (null: the whole world), on the state as it
  // is; a region view makes the index first, when it is the first.
  std::unique_ptr<ViewFilter> MakeView(const SubscriptionOptions& options);
  // Places every live slot in a new index: O(world) under the lock (as
  // the state is replaced, with region views).
  void BuildIndex();
  // A new index for a region view that subscribes, when there is none:
  // placed kIndexPart slots at a time, each part under the lock, frames
  // between, so that the first region view holds up the world's frames
  // for a part at a time, not O(world). Returns once every slot is placed.
  void BuildIndexInParts();
  static constexpr uint64_t kIndexPart = 32'768;
  // Places the slots from index_built_to_ up to `end`.
  void PlaceUnbuilt(Slot end);
  // Keeps the index with a frame: what it destroys out, before the state
  // takes it in (UnplaceDestroyed); what it moves or creates placed, after
  // (PlaceMoved). O(entities the frame lists); nothing without an index.
  void UnplaceDestroyed(const FrameChanges& changes);
  void PlaceMoved(const FrameChanges& changes);
  // After the state is replaced: the index built again for the region
  // views, or dropped when there are none.
  void RebuildIndex();
  // The index, once no region view has been for kIndexIdleFrames frames
  // (this one counted), for the caller to free outside the lock; else null.
  std::unique_ptr<SpatialIndex> DropIdleIndex();

  // Catching up from the state (OwedFromState).
  // Whether the subscriber may be owed what changed from the published
  // state rather than kept or noted frames: one of the whole world, unless
  // it filters echoes (which the state does not record). The destroyed log
  // is kept for these.
  static bool MayCatchUpFromState(const Subscription& s) {
    return s.whole_world() && !s.echo;
  }
  // Whether it does so at any frame it is not served: a rate-limited one.
  static bool CatchesUpFromState(const Subscription& s) {
    return s.options.max_rate_hz > 0 && MayCatchUpFromState(s);
  }
  // Whether a new subscriber resumes from the frame it asked to (see
  // SubscriptionOptions::resume_from_frame): one that may catch up from the
  // state and accepts kept-view snapshots, from a frame the resume window
  // holds.
  bool Resumes(const Subscription& s) const;
  uint64_t ResumableFrom() const {
    return std::max(whole_frame_, state_.destroyed_log_after());
  }
  // The frame after which a caught-up subscriber is owed what changed, at
  // `frame`: the one before its first kept frame, or before this one.
  static uint64_t OwedAfter(const CaughtUp& caught_up, uint64_t frame);
  static uint64_t OwedAfter(const Subscription& s, uint64_t frame);
  // The caught-up subscriber stops keeping frames, and is owed what changed
  // after the frame it was last sent, if the destroyed log reaches back to
  // it (else false, and nothing changes). O(its kept parts).
  bool StartCatchingUpFromState(Subscription& s, uint64_t frame);
  // One of the whole world noting frames past max_pending drops them (and
  // what it held), and is owed what changed after Noting::after from the
  // state, if the destroyed log reaches back to it (else false, and nothing
  // changes).
  bool StopNoting(Subscription& s);
  // Commits the subscriber to the parts of what changed after it is owed
  // from: the destroyed log's entities it had, and the state's stamps,
  // O(slots / 8 + entities changed). Or, when that is more than
  // max_pending, starts the scan for a snapshot that keeps its view, if it
  // accepts one (else, or when the log no longer reaches back to it,
  // resyncs it). Returns whether it caught up.
  bool CatchUpFromState(Subscription& s, absl::Time now);
  // What it is owed after `after`, and how many entities that is
  // (`entities`), found up to max_pending + 1 of them.
  OwedSlots OwedSince(uint64_t after, size_t listed, size_t* entities) const;

  // What a fold of a subscriber's kept frames depends on, beyond the
  // published frame: subscribers with the same kept frames (the same first,
  // and as many) and options get the same message.
  struct FoldKey {
    uint64_t first_frame;
    size_t frames;
    bool from_state;  // Caught up from the state, frames since counted.
    uint64_t frames_with_changes;
    float precision;
    size_t part_budget_bytes;
    friend bool operator==(const FoldKey&, const FoldKey&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const FoldKey& k) {
      return H::combine(std::move(h), k.first_frame, k.frames, k.from_state,
                        k.frames_with_changes, k.precision,
                        k.part_budget_bytes);
    }
  };
  FoldKey KeyOf(const Subscription& s) const;
  // Commits the subscriber to the parts a fold of the same kept frames made
  // this frame, if one did: O(parts), not O(entities).
  bool TakeSharedFold(Subscription& s, absl::Time now);

  // --- Snapshots (replicator_snapshot.cc).
  // A snapshot for `s`, as it starts: what it held of frames is dropped.
  static std::unique_ptr<StreamedSnapshot> StartSnapshot(Subscription& s);
  // Starts streaming the subscriber's view: O(slots / 64) for the whole
  // world, O(listed + roots log roots) for a filtered view, whose search
  // for members (ViewFilter::FindMore) then runs.
  void BuildSnapshot(Subscription& s);
  // The next chunk of the subscriber's KeptViewScan: O(chunk's slots +
  // changed in them). Returns whether the scan is done.
  bool ScanForKeptView(KeptViewScan& scan) const;
  // Notes a slot that changed after scan.after; true (for the walk).
  bool NoteChanged(KeptViewScan& scan, Slot slot) const;
  // Once its scan is done, starts streaming what changed after the scan's
  // frame to the subscriber, which holds its view as of then (a snapshot
  // that keeps its view). Or, when the destroyed log no longer reaches back
  // to it, resyncs it.
  void FinishKeptViewSnapshot(Subscription& s);
  // The streamed snapshot's next part. Or, when its burst is due and
  // `copy_wanted` is given but the burst copy lacks room, null, with the
  // room it wants there: the caller makes one with MakeBurstCopy, outside
  // the lock, puts it in the snapshot, and asks again.
  std::shared_ptr<const Outgoing> NextSnapshotPart(
      Subscription& s, size_t* copy_wanted = nullptr);
  // Whether the snapshot's pass is over and what changed behind it goes at
  // once (a burst), under the budget's claim if it needs one.
  bool BurstDue(StreamedSnapshot& snap) const;
  static std::shared_ptr<BurstCopy> MakeBurstCopy(size_t room);
  // The snapshot's next slot to send, after the ancestors its subscriber
  // lacks, taken off its stale bits; kNoSlot at the end of a pass.
  Slot NextStale(const Subscription& s, StreamedSnapshot& snap) const;
  // How the snapshot sends the slot's entity, which it now does.
  SnapshotEntry EntryFor(StreamedSnapshot& snap, Slot slot) const;
  // Everything the snapshot has left, at once: its entries copied under the
  // lock (O(entries), a copy), its parts made from the copy outside it, as
  // they are sent. The burst's claim goes with the copy.
  std::shared_ptr<const Outgoing> Burst(Subscription& s, size_t part_bytes);
  // The snapshot's last part is committed to: it is caught up.
  static void EndSnapshot(Subscription& s);

  Subscription* Find(SubscriptionId id) const;
  // Counts `n` for the subscriber, in its field `mine`, and for the world,
  // in counted_'s `world`.
  void Count(Subscription& s, uint64_t Subscription::*mine,
             uint64_t StreamStats::*world, uint64_t n = 1) {
    s.*mine += n;
    counted_.*world += n;
  }

  // Guards everything below. A std::mutex rather than absl::Mutex: Debian's
  // Abseil is built without ThreadSanitizer annotations, so TSan cannot see
  // absl::Mutex's ordering, and this class is what the TSan build checks.
  const size_t max_pending_;
  const uint64_t resume_frames_;
  const std::shared_ptr<BurstBudget> burst_budget_;
  const std::shared_ptr<Fanout> fanout_;
  mutable std::mutex mu_;
  PublishedState state_;
  // Where the state's live slots are, kept while there are region views
  // (region_views_), for them: null otherwise, costing nothing.
  std::unique_ptr<SpatialIndex> index_;
  size_t region_views_ = 0;
  // Frames published since the last region view left: the index is kept
  // for 600 (10 s at 60 Hz), so that region subscribers that come and go
  // (a hostile client, say) do not each cost a build, O(world) under the
  // lock (BM_RegionSubscribers' first_subscribe_ms).
  static constexpr uint64_t kIndexIdleFrames = 600;
  uint64_t index_idle_frames_ = 0;
  // Slots below this are placed by the build; every frame places what it
  // moves or creates, wherever.
  Slot index_built_to_ = 0;
  // A frame's moved positions and slots, side by side, for region views
  // (PlaceMoved): kept only while there are.
  std::vector<glm::vec3> moved_positions_;
  std::vector<Slot> frame_slots_;
  // Whether the index holds the frame's moves by cell (PlaceMoves): with
  // region_views_to_sort_moves region views or more.
  bool moves_by_cell_ = false;
  uint64_t frame_ = 0;
  // The frame published whole last (PublishWhole, Reset): the stamps tell
  // nothing of the frames before it.
  uint64_t whole_frame_ = 0;
  absl::Time frame_time_;
  int64_t frame_stamp_ = 0;  // FrameChanges::stamp of the frame published last.
  std::mt19937_64 ids_{std::random_device()()};  // Subscriptions' ids.
  absl::flat_hash_map<SubscriptionId, std::unique_ptr<Subscription>> subs_;
  // The folds of kept frames made since the last frame was published, for
  // the subscribers that keep the same frames (rate-limited ones, mostly:
  // those due in the same frame fold the same frames).
  absl::flat_hash_map<FoldKey, std::vector<std::shared_ptr<const Outgoing>>>
      shared_folds_;
  // The slots a moves-only frame moved, and each one's index in the frame's
  // moved entities, while NoteMovesInViews runs: marked for the views that
  // want them, unmarked after (O(moved) each). Kept between frames, so
  // marking is not O(slots).
  SlotBits moved_slots_;
  std::vector<uint32_t> moved_index_by_slot_;
  StreamStats counted_;  // StreamStats' counters that the lock guards.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_REPLICATOR_IMPL_H_
