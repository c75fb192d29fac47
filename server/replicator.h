// Copyright 2026 The xform Authors.
//
// Replicator holds one world's published state (PublishedState: every
// entity's parent and world matrix as of the last published frame) and its
// subscribers. Publishing
// a frame folds the frame's changes into each subscriber's pending set; a
// subscriber that is ready takes one message built from the latest published
// values of its pending entities. So a slow subscriber skips frames but
// converges to the latest state, its pending set is bounded by the world's
// size (never by how far behind it is), and it never slows publishing or
// other subscribers. Every message carries values from exactly one frame.
//
// Caught-up subscribers instead keep each frame's shared message, O(1) a
// frame. One of the whole world owed more frames than that holds stops
// following frames: a rate-limited one (a status page at 1 Hz), or one that
// stopped reading. When its message is due, what changed since the frame it
// was last sent is found from the published state's stamps and a log of the
// destroyed (CatchUpFromState), O(slots / 8 + entities changed) once a
// message rather than O(moved) every frame.
//
// A subscriber's snapshot (on joining, or on a resync) is streamed a bounded
// chunk per message, made when the stream asks for it, from the published
// state as it is then; frames published meanwhile mark what they
// change, and the snapshot ends only when everything the subscriber was sent
// is current. So a joining subscriber holds a few bits per entity and one
// chunk, never a copy of the world, and no call holds the lock for more than
// one chunk's work, but for a burst: when the world changes faster than the
// stream carries it, what changed behind a pass is copied at once (about 65
// bytes an entity, into memory made ready outside the lock: 4-7 ms for 500k
// entities on a 2-core VM, bench/replicator_bench.cc), so the snapshot ends
// at one frame. See StreamedSnapshot and NextSnapshotPart.
//
// A *delivery* is the round trip that moves one message: the replicator wakes
// a subscriber's UpdateSink (Publish, Flush), the sink (on the server, the
// stream's reactor) pulls the message with Next() when its previous write is
// done, and writes it; the write's completion starts the next delivery. So
// messages are made when a stream can take them, never queued for it, and a
// stream with a write in flight is not woken into doing anything.
//
// Thread-safe. Knows nothing of gRPC.

#ifndef XFORM_SERVER_REPLICATOR_H_
#define XFORM_SERVER_REPLICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/burst_budget.h"
#include "server/outgoing.h"
#include "server/published_state.h"
#include "server/slot_bits.h"
#include "xform/net_changes.h"
#include "xform/stream_stats.h"
#include "xform/subscriber_info.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::v1 {
class FrameUpdateWriter;
}  // namespace xform::v1

namespace xform::server {

// The subscriber's side: told when a message may be ready to take, polled
// regularly (for rate limits: a message held back may now be due), and told
// when its stream must end (world deleted, server shutting down).
class UpdateSink {
 public:
  virtual ~UpdateSink() = default;
  virtual void Wake() = 0;
  virtual void Poll(absl::Time now) = 0;
  virtual void End(const absl::Status& status) = 0;
  // Fills in what only the sink's owner knows of its stream (who is at the
  // other end, bytes written, a write outstanding), for ListSubscribers.
  // Called without the replicator's lock.
  virtual void Describe(absl::Time /*now*/, SubscriberInfo& /*info*/) const {}
};

// Wakes the sinks a published frame concerns, perhaps spread over threads
// (FanoutPool); without one, the replicator wakes them in turn itself.
class Fanout {
 public:
  virtual ~Fanout() = default;
  virtual void WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks) = 0;
};

// Who set which entities directly in a frame, for echo suppression: the
// writer's client id, or "" when several (or anonymous) writers set it.
using FrameWriters = absl::flat_hash_map<EntityId, std::string>;

// A subscriber's messages hold at most this many bytes of entries by
// default: a few MB whatever the message limit, since one huge write would
// hold the stream (and its write deadline) for seconds.
inline constexpr size_t kDefaultPartBudgetBytes = 4 << 20;

struct SubscriptionOptions {
  // Both empty: the whole world.
  std::vector<EntityId> entities;
  std::vector<EntityId> subtrees;
  double max_rate_hz = 0;  // 0: a message per published frame.
  // Moves this writer caused by setting entities directly are not sent.
  std::string no_echo_client_id;
  // Messages are split to stay under this many bytes of entity data: a
  // budget well under the message size limit (xform/message_size.h), not
  // that limit.
  size_t part_budget_bytes = kDefaultPartBudgetBytes;
  // ENCODING_COMPACT at this position precision (see xform/v1/
  // compact_moves.h); 0: raw. Caught-up subscribers with the same
  // precision share each frame's compact messages, coded as deltas against
  // the frame before. A subscriber's own folded messages are deltas too,
  // against what it holds; its snapshots, and all of an echo-filtering
  // subscriber's own messages, are whole.
  float compact_precision = 0;
  // The subscriber applies a snapshot to the view it holds (FrameUpdate.
  // keeps_view): one of the whole world that filters no echoes is then
  // sent, when it is owed more than max_pending entities, what changed
  // since its last message as such a snapshot, not its view whole.
  bool accepts_kept_view_snapshots = false;
};

class Replicator {
 public:
  using SubscriptionId = uint64_t;

  // A subscriber with more than `max_pending` entities' changes folded and
  // unsent (it stopped reading, or reads far slower than the world changes)
  // drops them and is resent its view whole, as a snapshot, when it reads
  // again: a laggard costs O(max_pending), never O(world). (One of the whole
  // world is first owed what changed from the published state, and resent
  // its view only if that is more than max_pending entities; or, if it
  // accepts one, sent what changed as a snapshot that keeps its view.)
  // A streamed snapshot makes at most max_pending entities' parts ahead of
  // its stream,
  // or, to end while the world changes faster than it streams, what changed
  // behind its scan, within `burst_budget` (none: never more).
  // A frame's sinks are woken through `fanout`, when given.
  explicit Replicator(size_t max_pending = 65'536,
                      std::shared_ptr<BurstBudget> burst_budget = nullptr,
                      std::shared_ptr<Fanout> fanout = nullptr)
      : max_pending_(max_pending),
        burst_budget_(std::move(burst_budget)),
        fanout_(std::move(fanout)) {}
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Publishes the frame `changes` closes (see xform::FrameChanges) and wakes
  // the subscribers it concerns (through the Fanout, if any: their writes
  // may then still be starting when it returns).
  void Publish(const FrameChanges& changes, absl::Time time,
               const FrameWriters& writers = {});
  // Publishes all of `world` as frame `frame`, before it has subscribers (a
  // world recovered from disk): O(n), without a FrameChanges of it all.
  void PublishWhole(const World& world, uint64_t frame, absl::Time time);

  // Adds a subscription, starting with a snapshot of its view at the last
  // published frame; its deltas begin with the next frame.
  SubscriptionId Subscribe(SubscriptionOptions options,
                           std::shared_ptr<UpdateSink> sink);
  void Unsubscribe(SubscriptionId id);

  // The subscription's next message, or null when it has nothing due (caught
  // up, or rate limited until a later Flush()). Subscribers that are caught up
  // with the whole world share one message per frame, built once.
  std::shared_ptr<const Outgoing> Next(SubscriptionId id, absl::Time now);
  // Next(), if the message is made already (a frame's shared part, the rest
  // of a split message): O(1). When one is due that must be made (a snapshot
  // part, pending changes: O(part) work), or one is due that is made later
  // (Outgoing::made_later(): a snapshot burst's), returns null and sets
  // *must_make, so the caller can make it with Next(), and encode it, on a
  // thread of its choosing.
  std::shared_ptr<const Outgoing> NextIfMade(SubscriptionId id, absl::Time now,
                                             bool* must_make);

  // Polls every subscription's sink, for rate-limited messages now due.
  // Returns at once, polling nothing, when the replicator is busy
  // (publishing): the caller polls again soon.
  void Flush(absl::Time now);
  // Ends every subscription's stream with `status`.
  void EndAll(const absl::Status& status);

  uint64_t frame() const;
  size_t subscribers() const;
  // Subscriptions that filter echoes; without the lock, so that a world's
  // batches (which track their writers only while there are such) never
  // wait for a publication. O(1).
  size_t echo_filtered_subscribers() const {
    return echo_filtered_.load(std::memory_order_relaxed);
  }

  // Of the subscriptions with ids after `after_id`, the first `limit` by
  // id: what the replicator knows of each, copied under the lock
  // (O(subscribers) there), then what its sink knows (UpdateSink::
  // Describe), without it.
  std::vector<SubscriberInfo> Subscribers(uint64_t after_id = 0,
                                          size_t limit = SIZE_MAX) const;
  // What the streams were sent since this was made, and the subscribers
  // now: O(subscribers), under the lock.
  StreamStats stream_stats() const;
  // A message's bytes handed to the transport, and a stream cut off for a
  // stuck write: told by the sink's owner, which alone sees them. Without
  // the lock: O(1).
  void CountWritten(size_t bytes) {
    bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void CountCutOff() { cut_off_.fetch_add(1, std::memory_order_relaxed); }

  // Slots a subtree view's membership walk visits under one hold at first
  // (32,768, about 0.5 ms): tests make it small, so that frames come
  // between the chunks. Before the first Subscribe.
  void set_membership_walk_chunk_for_testing(size_t slots) {
    membership_walk_chunk_ = slots;
  }
  // Called where Next() releases the lock partway (between the chunks of
  // a kept view's scan or a membership walk, and while a burst's copy is
  // made): tests change the subscription there. Set while no other thread
  // uses the replicator.
  void set_unlocked_for_testing(std::function<void()> call) {
    unlocked_for_testing_ = std::move(call);
  }

 private:
  using Slot = PublishedState::Slot;
  struct BurstCopy;  // replicator_snapshot.cc
  struct StreamedSnapshot {
    SlotBits known;  // The subscriber has the slot's entity.
    SlotBits stale;  // The slot's entity must be sent (again).
    size_t stale_count = 0;
    size_t cursor = 0;
    std::vector<EntityId> gone;  // Destroyed, and the subscriber had them.
    // A parent chain not yet sent (slots, the root-most last), valid while
    // no entity is destroyed or re-parented: a chain deeper than one message
    // is walked once, not once per message.
    std::vector<Slot> chain;
    uint64_t chain_epoch = 0;
    uint32_t part = 0;
    uint64_t skipped_before = 0;  // Frames missed before it began.
    // Set where it starts from the view the subscriber held as of this
    // frame (FrameUpdate.keeps_view): `known` starts with what that view
    // holds, and `stale` with what changed since; an entity it holds is
    // sent re-parented only if its parent changed since.
    std::optional<uint64_t> kept_view_after;
    // What is left goes at once (see NextSnapshotPart), under the burst
    // budget's claim if it needed one, into a copy made ready beforehand.
    bool burst_due = false;
    std::shared_ptr<const void> burst_claim;
    std::shared_ptr<BurstCopy> burst_copy;
  };
  // What changed after frame `after`, for a snapshot that keeps the view,
  // found a chunk of blocks at a time with the lock released between
  // chunks (see Take), so that no hold is O(world); the subscriber stays
  // owed from `after` (O(1) a frame) meanwhile. What changed after
  // `began`, when the scan began, is found again at its end.
  struct KeptViewScan {
    uint64_t after = 0;
    uint64_t began = 0;
    size_t next_block = 0;
    size_t end_block = 0;
    SlotBits changed;
    SlotBits created;  // Of those, the ones created since.
  };
  // A subtree view's membership (Subscription::in_subtree) as its snapshot
  // starts, found by walking its roots' subtrees `chunk` slots at a time
  // with the lock released between (see Take), so that no hold is O(view).
  // Frames published meanwhile keep the bits of what they touch, as for
  // any subtree view: right for everything the walk has passed, and left
  // for the walk to find in what it has not. A frame that destroys or
  // re-parents an entity on the walk's path (from the root being walked
  // down to `at`) breaks its way on: that root's walk starts again, with
  // twice the chunk, so restarts are few (log2(view / first chunk)) and the
  // last is at worst the whole walk under one hold, as it was before.
  struct MembershipWalk {
    std::vector<EntityId> roots;  // Shallowest first, as they were.
    size_t next_root = 0;         // The one walked, or the next.
    Slot root = PublishedState::kNoSlot;
    Slot at = PublishedState::kNoSlot;  // Last visited; none between roots.
    SlotBits path;                      // From `root` down to `at`.
    // Roots found inside a subtree walked whole: its walk covered theirs.
    absl::flat_hash_set<EntityId> covered;
    std::vector<EntityId> roots_seen;  // Inside the root being walked.
    size_t chunk = 0;
  };
  struct Subscription {
    SubscriptionOptions options;
    bool whole_world = true;
    absl::flat_hash_set<EntityId> listed;
    absl::flat_hash_set<EntityId> roots;
    // The slots in the subtrees of `roots`, kept as frames come in, so
    // membership is a bit test and not a walk to the root. Bits up to the
    // highest member's slot: at most the world's slots / 8 bytes.
    SlotBits in_subtree;
    std::shared_ptr<UpdateSink> sink;
    // Messages committed to, sent before anything else: snapshot chunks, and
    // the rest of a frame whose first part went out.
    std::deque<std::shared_ptr<const Outgoing>> parts;
    // The shared parts of the frames since its last message, while this
    // subscriber is caught up but for them. Frames it has not started on are
    // kept (shared with the other subscribers: O(1) each a frame), not
    // folded into `pending` frame by frame, until it reads again, or they
    // would hold more than max_pending entities or the world. Then, where
    // MayCatchUpFromState, they are dropped for `changed_after`, but for a
    // compact one at full rate past the world alone: its fold into
    // `pending` (which the world bounds) is coded as deltas. Else past
    // max_pending it resyncs, and past the world they fold.
    std::vector<std::shared_ptr<const Outgoing>> ready;
    size_t ready_frames = 0;
    size_t ready_entities = 0;
    // What changed in its view since its last message (entering the view is
    // being created to it, leaving it being destroyed).
    NetChanges pending;
    // For one of the whole world, set as it starts noting into an empty
    // `pending` outside a snapshot: pending then holds everything that
    // changed after this frame, so past max_pending it may drop it and be
    // owed that from the state instead (StopNoting). The destroyed log
    // reaches back to it meanwhile. Reset as pending empties.
    std::optional<uint64_t> pending_after;
    // A compact subscriber's, unless it filters echoes (its view then lags
    // the published state where its own writes were not sent): of each
    // entity noted in `pending`, the matrix the subscriber holds, found at
    // its first note since the last message; none where that is not known
    // (an entity new to it, or noted first as anything but moved). So its
    // folded messages are deltas, as the frames it shares are, not whole.
    // At most one entry an entity noted: bounded as `pending` is.
    using HeldPoses = absl::flat_hash_map<EntityId, std::optional<Matrix3x4>>;
    HeldPoses held;
    // Forgets `held` and `lagging`, giving their memory back, for a
    // subscriber that is sent its view whole (clear() would keep the
    // tables' size).
    void ReleaseHeld() {
      HeldPoses().swap(held);
      absl::flat_hash_set<EntityId>().swap(lagging);
      lag_untracked = false;
    }
    // A compact one's that filters echoes (LagsOnEchoes): the entities whose
    // echo it was not sent, and has not been sent since, so what it holds
    // of them is not what was published. The frames it shares are coded
    // against what was published; so it shares only those whose writer it
    // is not and that move none of these (else its own message, whole,
    // which brings the moved up to date). Past max_pending entries it is
    // dropped and `lag_untracked` set: the subscriber then shares no frame
    // until its view goes whole (as before it was tracked). Both forgotten
    // with `held`.
    absl::flat_hash_set<EntityId> lagging;
    bool lag_untracked = false;
    uint64_t last_frame_sent = 0;
    absl::Time subscribed;
    // What it was sent (SubscriberInfo's counts but bytes, which its sink
    // counts), counted with the world's (counted_) by Count().
    uint64_t messages = 0;
    uint64_t frames_folded = 0;
    uint64_t views_resent_whole = 0;
    uint64_t kept_view_snapshots = 0;
    // Frames that changed this subscriber's view since its last message
    // (the FrameUpdate.frames_skipped definition), and whether the frame
    // being published has, so far.
    uint64_t frames_with_changes = 0;
    bool noted = false;
    // Entities the frames noted into `pending` while its message was due
    // listed, repeats counted, since it last took a message. Past
    // max_pending it stops noting (StopNoting) or resyncs: so one of the
    // whole world that stopped reading and notes frames (a compact one past
    // the world's size, one partway through a message, one that filters
    // echoes) notes O(max_pending) in all, then nothing, not O(moved) every
    // frame while it stalls.
    size_t overdue_entities = 0;
    // Fell too far behind: `pending` was dropped, and the next message is a
    // fresh snapshot of the view (which the Mirror diffs, as on a resync).
    bool resync = false;
    // Drops everything it is owed (kept frames, pending changes, held
    // poses), giving back their memory, so that its view goes whole.
    void Resync() {
      std::vector<std::shared_ptr<const Outgoing>>().swap(ready);
      ready_frames = 0;
      ready_entities = 0;
      pending.Release();
      pending_after.reset();
      ReleaseHeld();
      changed_after.reset();
      changed_entities = 0;
      overdue_entities = 0;
      kept_view_scan.reset();
      membership_walk.reset();
      resync = true;
    }
    absl::Time next_allowed = absl::InfinitePast();
    // Set for a subscriber that stopped keeping frames (see `ready`): it is
    // owed whatever frames after this one changed, found from the published
    // state when its next message is due (CatchUpFromState), so until then
    // a frame costs it O(1). Set only while `pending` is empty, which stays
    // so. Cleared by Resync() and by the catch-up.
    std::optional<uint64_t> changed_after;
    // Entities the frames after changed_after listed, repeats counted: what
    // Stats() reports it owes, as it does for kept frames.
    size_t changed_entities = 0;
    // Set while its snapshot streams; pending stays empty then.
    std::unique_ptr<StreamedSnapshot> snapshot;
    // Set while what a snapshot that keeps its view sends is found.
    std::unique_ptr<KeptViewScan> kept_view_scan;
    // Set while a subtree view's snapshot finds its membership; its parts
    // wait for it.
    std::unique_ptr<MembershipWalk> membership_walk;
  };

  // Echo suppression: by client id, the entities whose move in a frame was
  // only that client's own direct write.
  using Echoes =
      absl::flat_hash_map<std::string, absl::flat_hash_set<EntityId>>;
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

  // The clients that wrote in a frame (views of FrameWriters' strings): an
  // echo-filtering subscriber whose client is not among them has no echoes
  // in the frame.
  using WritingClients = absl::flat_hash_set<absl::string_view>;
  static WritingClients WritingClientsOf(const FrameWriters& writers);

  // Publish's steps, in order. The first runs under its own lock, and the
  // sinks it wakes are woken before the rest.
  // 1. Caught-up whole-world subscribers take the frame's shared parts, made
  //    from the changes alone. Returns whom it served.
  absl::flat_hash_set<SubscriptionId> ServeCaughtUp(
      const FrameChanges& changes, absl::Time time,
      const WritingClients& writing,
      std::vector<std::shared_ptr<UpdateSink>>& wake);
  static bool IsEcho(const Echoes& echoes, const std::string& client,
                     EntityId e);
  // 2. What the filtered views held before the frame.
  ViewsBefore RecordViewsBefore(const FrameChanges& changes) const;
  // 3. state_.TakeIn(changes), then whose own writes moved what.
  Echoes FindEchoes(const FrameWriters& writers,
                    const WritingClients& writing) const;
  // 4. The other whole-world subscribers fold the frame into their pending
  //    changes.
  void FoldIntoWholeWorld(
      const FrameChanges& changes,
      const absl::flat_hash_set<SubscriptionId>& served, const Echoes& echoes,
      const std::vector<std::optional<Matrix3x4>>& moved_before);
  // 5. Filtered views follow the frame, noting what entered, left, or
  //    changed in them.
  void UpdateFilteredViews(
      const FrameChanges& changes, ViewsBefore& before, const Echoes& echoes,
      const std::vector<std::optional<Matrix3x4>>& moved_before);
  // 5, for a frame of moves alone: each view notes what moved in it. O(moved)
  // lookups once, then for each filtered view with subtrees the fewer of a
  // bit test per moved entity and a pass over its bits a word at a time
  // (against the frame's moved slots, marked once), and O(min(listed,
  // moved)) for its list.
  void NoteMovesInViews(
      const FrameChanges& changes, const std::vector<Subscription*>& filtered,
      const Echoes& echoes,
      const std::vector<std::optional<Matrix3x4>>& moved_before);
  // 6. Counts the frame for those it changed, and finds whom to wake.
  // (Then the woken are woken: WakeAll, without the lock.)
  void CloseFrame(const absl::flat_hash_set<SubscriptionId>& served,
                  std::vector<std::shared_ptr<UpdateSink>>& wake);

  void WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks);
  // A writer's parts, each to be shared by the streams that send it.
  static std::vector<std::shared_ptr<const Outgoing>> Share(
      std::vector<v1::FrameUpdate> parts,
      const std::shared_ptr<const void>& hold = nullptr);
  // The parts every caught-up whole-world subscriber gets for a frame.
  static std::vector<std::shared_ptr<const Outgoing>> FrameParts(
      const FrameChanges& changes, absl::Time time, size_t max_bytes);
  // The compact encodings of a frame's shared parts at `precision`, made
  // once a frame for each precision; `previous` (found once, from the state
  // before it takes the frame in) is what each moved entity's deltas are
  // coded against.
  using CompactShared =
      absl::flat_hash_map<float, std::vector<std::shared_ptr<const Outgoing>>>;
  const std::vector<std::shared_ptr<const Outgoing>>& CompactParts(
      const std::vector<std::shared_ptr<const Outgoing>>& raw, float precision,
      CompactShared& compact,
      std::vector<std::vector<std::optional<Matrix3x4>>>& previous) const;
  // Commits the first of the kept frames' shared parts (a compact
  // subscriber's, sent in turn).
  static void CommitFirstReadyFrame(Subscription& s);
  // Counts `n` for the subscriber, in its field `mine`, and for the world,
  // in counted_'s `world`.
  void Count(Subscription& s, uint64_t Subscription::*mine,
             uint64_t StreamStats::*world, uint64_t n = 1) {
    s.*mine += n;
    counted_.*world += n;
  }
  // Takes the next of the parts committed to, noting the frame sent (in the
  // subscriber's encoding), and counting it (StreamStats).
  std::shared_ptr<const Outgoing> TakePart(Subscription& s);
  // Whether the live slot's entity is in a filtered subscription's view (as
  // of its last update); InView(s, e) is false for an entity not alive.
  bool InView(const Subscription& s, Slot slot) const;
  bool InView(const Subscription& s, EntityId e) const;
  // The entities whose move in this frame was only `client`'s own direct
  // write: set by it, and by no other writer, nor below one that another
  // writer set. O(entities moved), whatever the depth.
  absl::flat_hash_set<EntityId> EchoesOf(const std::string& client,
                                         const FrameWriters& writers) const;
  // Folds an event into the subscriber's pending events, or, while its
  // snapshot streams, into the snapshot's bits: at e's slot this frame (see
  // PublishedState::FindThisFrame), looked up unless given. `before`: for a
  // move, e's matrix before the frame, if it existed (see Subscription::
  // held).
  void Note(Subscription& s, EntityId e, NetChange change,
            Slot slot = PublishedState::kNoSlot,
            const std::optional<Matrix3x4>& before = std::nullopt) const;
  // Whether the subscriber keeps Subscription::lagging.
  static bool LagsOnEchoes(const Subscription& s) {
    return s.options.compact_precision > 0 &&
           !s.options.no_echo_client_id.empty();
  }
  // Whether the subscriber keeps Subscription::held.
  static bool TracksHeld(const Subscription& s) {
    return s.options.compact_precision > 0 &&
           s.options.no_echo_client_id.empty();
  }
  // Each moved entity's matrix before the frame (by its index in
  // changes.moved; none for one created), found before the state takes the
  // frame in: only when a subscriber that tracks what it holds will note
  // the frame, else empty.
  std::vector<std::optional<Matrix3x4>> MovedBefore(
      const FrameChanges& changes,
      const absl::flat_hash_set<SubscriptionId>& served) const;
  void NoteInSnapshot(StreamedSnapshot& snap, EntityId e, NetChange change,
                      Slot slot) const;
  // Turns untaken shared parts back into pending events.
  void Fold(Subscription& s) const;
  // Whether the subscriber may be owed what changed from the published
  // state (Subscription::changed_after) rather than kept or noted frames:
  // one of the whole world, unless it filters echoes (which the state does
  // not record). The destroyed log is kept for these.
  static bool MayCatchUpFromState(const Subscription& s) {
    return s.whole_world && s.options.no_echo_client_id.empty();
  }
  // Whether it does so at any frame it is not served: a rate-limited one.
  // (One at full rate does once its kept frames would hold more than
  // max_pending: ServeCaughtUp.)
  static bool CatchesUpFromState(const Subscription& s) {
    return s.options.max_rate_hz > 0 && MayCatchUpFromState(s);
  }
  // The subscriber, with nothing pending, stops keeping frames or noting
  // them, and is owed what changed after the frame it was last sent, if the
  // destroyed log reaches back to it (else false, and nothing changes).
  // O(its kept parts).
  bool StartCatchingUpFromState(Subscription& s, uint64_t frame);
  // The frame after which a subscriber with nothing pending is owed what
  // changed, at `frame`: the one before its first kept frame, or before
  // this one.
  static uint64_t OwedAfter(const Subscription& s, uint64_t frame);
  // One of the whole world noting frames into `pending` past max_pending
  // drops them (and what it held), and is owed what changed after
  // pending_after from the state, if the destroyed log reaches back to it
  // (else false, and nothing changes). O(1) but for the memory given back.
  bool StopNoting(Subscription& s);
  // Commits the subscriber to the parts of what changed after
  // s.changed_after: the destroyed log's entities it had, and the state's
  // stamps (PublishedState::ForEachChangedSince),
  // O(slots / 8 + entities changed), under the lock when its message is
  // due. Or, when that is more than max_pending, starts the scan for a
  // snapshot that keeps its view, if it accepts one (else, or when the log
  // no longer reaches back to it, resyncs it). Returns whether it caught
  // up.
  bool CatchUpFromState(Subscription& s, absl::Time now);
  // The next chunk of the subscriber's KeptViewScan: O(chunk's slots +
  // changed in them). Returns whether the scan is done.
  bool ScanForKeptView(KeptViewScan& scan) const;
  // Notes a slot that changed after scan.after; true (for the walk).
  bool NoteChanged(KeptViewScan& scan, Slot slot) const;
  // Logs the frame's destroyed entities, and trims the log to what the
  // subscribers that catch up from the state may still need.
  void LogDestroyed(const FrameChanges& changes);
  // Next() and NextIfMade().
  std::shared_ptr<const Outgoing> Take(SubscriptionId id, absl::Time now,
                                       bool make, bool* must_make);
  // Starts streaming the subscriber's view: O(slots / 64) for the whole
  // world, O(listed + roots log roots) for a filtered view, whose subtrees'
  // membership a MembershipWalk then finds.
  void BuildSnapshot(Subscription& s);
  // The next chunk of the subscriber's MembershipWalk: O(chunk). Returns
  // whether the walk is done.
  bool WalkMembership(Subscription& s);
  // Starts again the walk of a root whose path the frame destroyed or
  // re-parented, for each filtered view walking one: O(entities the frame
  // destroys and re-parents) each.
  void BreakMembershipWalks(const FrameChanges& changes,
                            absl::Span<Subscription* const> filtered);
  // Once its scan is done, starts streaming what changed after the scan's
  // frame to the subscriber, which holds its view as of then (a snapshot
  // that keeps its view): the entities it had that are destroyed first,
  // ids it had that were destroyed and created again re-parented, and
  // what else changed. O(slots / 64 + entities changed, and what changed
  // since the scan began), the rows of what changed long since being read
  // by the scan, a chunk at a time. Or, when the destroyed log no longer
  // reaches back to it, resyncs it.
  void FinishKeptViewSnapshot(Subscription& s);
  // A snapshot for `s`, as it starts: what it held of frames is dropped.
  static std::unique_ptr<StreamedSnapshot> StartSnapshot(Subscription& s);
  // The streamed snapshot's next part. Or, when its burst is due and
  // `copy_wanted` is given but the burst copy lacks room, null, with the
  // room it wants there: the caller makes one with MakeBurstCopy, outside
  // the lock, puts it in the snapshot, and asks again.
  std::shared_ptr<const Outgoing> NextSnapshotPart(
      Subscription& s, size_t* copy_wanted = nullptr);
  static std::shared_ptr<BurstCopy> MakeBurstCopy(size_t room);
  // The snapshot's next slot to send, after the ancestors its subscriber
  // lacks, taken off its stale bits; kNoSlot at the end of a pass.
  Slot NextStale(const Subscription& s, StreamedSnapshot& snap) const;
  // How the snapshot sends the slot's entity, which it now does: created,
  // to a subscriber that lacks it, else re-parented (unless the snapshot
  // keeps a view whose entity's parent is unchanged) and moved.
  enum class SnapshotEntry : uint8_t { kCreated, kReparentedAndMoved, kMoved };
  SnapshotEntry EntryFor(StreamedSnapshot& snap, Slot slot) const;
  static void WriteEntry(SnapshotEntry kind, EntityId e, EntityId parent,
                         const Matrix3x4& world, v1::FrameUpdateWriter& writer);
  // Everything the snapshot has left, at once: its entries copied under the
  // lock (O(entries), a copy), its parts made from the copy outside it, as
  // they are sent. The burst's claim goes with the copy.
  std::shared_ptr<const Outgoing> Burst(Subscription& s, size_t part_bytes);
  // The snapshot's last part is committed to.
  static void EndSnapshot(Subscription& s);
  // Everything pending, from the published state, as the parts committed
  // to.
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
  // Commits the subscriber to the parts that send `owed`.
  void MakeParts(Subscription& s, absl::Time now, const OwedSlots& owed);
  // A rate-limited subscriber's next message is due 1/max_rate_hz from now.
  static void HoldBack(Subscription& s, absl::Time now);
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
  // The live entities' slots, parents first: by depth in the published state.
  std::vector<Slot> SlotsByDepth(absl::Span<const EntityId> entities) const;
  // The same, of slots, in place.
  void SortByDepth(std::vector<Slot>& slots) const;

  // Guards everything below. A std::mutex rather than absl::Mutex: Debian's
  // Abseil is built without ThreadSanitizer annotations, so TSan cannot see
  // absl::Mutex's ordering, and this class is what the TSan build checks.
  // The private helpers above expect it held.
  const size_t max_pending_;
  size_t membership_walk_chunk_ = 32'768;
  std::function<void()> unlocked_for_testing_;
  const std::shared_ptr<BurstBudget> burst_budget_;
  const std::shared_ptr<Fanout> fanout_;
  mutable std::mutex mu_;
  PublishedState state_;
  uint64_t frame_ = 0;
  absl::Time frame_time_;
  SubscriptionId next_id_ = 1;
  absl::flat_hash_map<SubscriptionId, std::unique_ptr<Subscription>> subs_;
  // The folds of kept frames made since the last frame was published, for
  // the subscribers that keep the same frames (rate-limited ones, mostly:
  // those due in the same frame fold the same frames).
  absl::flat_hash_map<FoldKey, std::vector<std::shared_ptr<const Outgoing>>>
      shared_folds_;
  // The slots a moves-only frame moved, and each one's index in the frame's
  // moved entities, while NoteMovesInViews runs: marked for the views whose
  // bits are fewer words than the frame has moves, unmarked after (O(moved)
  // each). Kept between frames, so marking is not O(slots).
  SlotBits moved_slots_;
  std::vector<uint32_t> moved_index_by_slot_;
  // How many of subs_ filter echoes, changed with it.
  std::atomic<size_t> echo_filtered_{0};
  // StreamStats' counters: the lock's, and the sink owner's (atomic).
  StreamStats counted_;
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> cut_off_{0};
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATOR_H_
