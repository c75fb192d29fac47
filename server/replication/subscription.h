// Copyright 2026 The xform Authors.
//
// Subscription: one subscriber of a Replicator, and what it is owed. The
// Replicator's own; not an API (replicator.h is).
//
// What a subscriber is owed is one of five states (DeliveryState), changed
// only by Subscription's transitions (docs/design.md draws them):
//
//   CaughtUp       owed nothing but the shared parts of frames it has not
//                  taken yet (kept: O(1) a frame, until it reads again);
//   Noting         owed the net changes of frames it could not share,
//                  folded into `pending` frame by frame (a filtered view,
//                  one partway through a message, one filtering echoes, one
//                  whose kept frames were folded);
//   OwedFromState  owed what changed after a frame, to be found from the
//                  published state's stamps when its message is due
//                  (O(1) a frame meanwhile); with a scan under way, for a
//                  snapshot that keeps its view;
//   Snapshotting   being sent its view whole (or, keeping its view, what
//                  changed), a part at a time; frames meanwhile mark its
//                  bits;
//   Resyncing      fell too far behind: its next message starts its view
//                  afresh, as a snapshot.
//
//                   +----- made its message ------+
//                   v                             |
//   Subscribe -> Snapshotting -> CaughtUp -> Noting --> OwedFromState
//                   ^   ^            |           |  too far   |  ^ scan
//                   |   |            +-----------+---+        |  | done
//                   |   |           too many kept    |        |  |
//                   |   +-- kept-view scan done -----|--------+--+
//                   |                                v        |
//                   +--------- next message --- Resyncing <---+ log gone
//
// Beside its state: the messages committed to (`parts`, sent before
// anything else: the rest of a frame in parts, a snapshot's parts), its
// view (null: the whole world), its echo filter, its rate limit and counts.
//
// Not thread-safe: the Replicator's lock guards it.

#ifndef XFORM_SERVER_REPLICATION_SUBSCRIPTION_H_
#define XFORM_SERVER_REPLICATION_SUBSCRIPTION_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "server/base/token_bucket.h"
#include "server/replication/echo_filter.h"
#include "server/replication/outgoing.h"
#include "server/replication/published_state.h"
#include "server/replication/replicator.h"
#include "server/replication/slot_bits.h"
#include "server/replication/view_filter.h"
#include "xform/net_changes.h"
#include "xform/transform.h"

namespace xform::server {

struct BurstCopy;  // replicator_snapshot.cc

// How a snapshot sends an entity: created, to a subscriber that lacks it,
// else re-parented (unless the snapshot keeps a view whose entity's parent
// is unchanged) and moved.
enum class SnapshotEntry : uint8_t { kCreated, kReparentedAndMoved, kMoved };

// A snapshot being streamed: what the subscriber has (`known`) and what it
// must be sent, again if it changed since (`stale`), a bit per slot.
struct StreamedSnapshot {
  using Slot = PublishedState::Slot;
  SlotBits known;         // The subscriber has the slot's entity.
  CountedSlotBits stale;  // The slot's entity must be sent (again).
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
  // What is left goes at once (see Replicator::Impl::NextSnapshotPart),
  // under the burst budget's claim if it needed one, into a copy made ready
  // beforehand.
  bool burst_due = false;
  std::shared_ptr<const void> burst_claim;
  std::shared_ptr<BurstCopy> burst_copy;
};

// What changed after frame `after`, for a snapshot that keeps the view,
// found a chunk of blocks at a time with the lock released between chunks,
// so that no hold is O(world); the subscriber stays owed from `after`
// meanwhile. What changed after `began`, when the scan began, is found
// again at its end.
struct KeptViewScan {
  uint64_t after = 0;
  uint64_t began = 0;
  size_t next_block = 0;
  size_t end_block = 0;
  SlotBits changed;
  SlotBits created;  // Of those, the ones created since.
};

struct CaughtUp {
  // The shared parts of the frames since its last message, kept (shared
  // with the other subscribers: O(1) each a frame), not folded frame by
  // frame, until it reads again, or they would hold more than max_pending
  // entities or the world.
  std::vector<std::shared_ptr<const Outgoing>> kept;
  size_t frames = 0;
  size_t entities = 0;
};

struct Noting {
  // What changed in its view since its last message (entering the view is
  // being created to it, leaving it being destroyed).
  NetChanges pending;
  // For one of the whole world: pending holds everything that changed
  // after this frame, so past max_pending it may drop it and be owed that
  // from the state instead (StopNoting). The destroyed log reaches back to
  // it meanwhile.
  std::optional<uint64_t> after;
  // A compact subscriber's, unless it filters echoes: of each entity
  // noted, the matrix the subscriber holds, found at its first note since
  // its last message; none where that is not known (an entity new to it,
  // or noted first as anything but moved). So its folded messages are
  // deltas, as the frames it shares are. At most one entry an entity.
  absl::flat_hash_map<EntityId, std::optional<Matrix3x4>> held;
};

struct OwedFromState {
  uint64_t after = 0;
  // Entities the frames since listed, repeats counted: what
  // ListSubscribers reports it owes.
  size_t entities = 0;
  // Set while what a snapshot that keeps its view sends is found.
  std::unique_ptr<KeptViewScan> scan;
};

struct Snapshotting {
  std::unique_ptr<StreamedSnapshot> snapshot;
  // A filtered view's search for its members, while its parts wait for it.
  std::unique_ptr<ViewFilter::Finding> finding;
};

struct Resyncing {};

using DeliveryState =
    std::variant<CaughtUp, Noting, OwedFromState, Snapshotting, Resyncing>;

struct Subscription {
  SubscriptionOptions options;
  std::unique_ptr<ViewFilter> view;  // Null: the whole world.
  std::optional<EchoFilter> echo;    // With options.no_echo_client_id.
  std::shared_ptr<UpdateSink> sink;
  // Messages committed to, sent before anything else: snapshot parts, and
  // the rest of a frame whose first part went out.
  std::deque<std::shared_ptr<const Outgoing>> parts;
  DeliveryState state;

  // Frames that changed this subscriber's view since its last message (the
  // FrameUpdate.frames_skipped definition), and whether the frame being
  // published has, so far.
  uint64_t frames_with_changes = 0;
  bool noted = false;
  // Entities the frames noted while its message was due listed, repeats
  // counted, since it last took a message. Past max_pending it stops
  // noting (StopNoting) or resyncs: so one that stopped reading notes
  // O(max_pending) in all, then nothing, not O(moved) every frame.
  size_t overdue_entities = 0;
  absl::Time next_allowed = absl::InfinitePast();  // Its rate limit.
  TokenBucket region_moves;  // Replicator::MoveRegion's rate limit.
  uint64_t last_frame_sent = 0;
  absl::Time subscribed;
  // What it was sent (SubscriberInfo's counts but bytes, which its sink
  // counts).
  uint64_t messages = 0;
  uint64_t frames_folded = 0;
  uint64_t views_resent_whole = 0;
  uint64_t kept_view_snapshots = 0;

  bool whole_world() const { return view == nullptr; }
  // The state it is in, if `State`.
  template <typename State>
  State* as() {
    return std::get_if<State>(&state);
  }
  template <typename State>
  const State* as() const {
    return std::get_if<State>(&state);
  }
  // The state it is in, which must be `State`.
  template <typename State>
  State& in() {
    return std::get<State>(state);
  }
  template <typename State>
  const State& in() const {
    return std::get<State>(state);
  }
  // Keeps what it holds of each entity it is owed (Noting::held): compact,
  // and filtering no echoes.
  bool TracksHeld() const {
    return options.compact_precision > 0 && options.no_echo_client_id.empty();
  }

  // The transitions: the one place `state` changes. Each gives back what
  // the state it leaves held.
  CaughtUp& ToCaughtUp() { return state.emplace<CaughtUp>(); }
  Noting& ToNoting(std::optional<uint64_t> after) {
    Noting& noting = state.emplace<Noting>();
    noting.after = after;
    return noting;
  }
  OwedFromState& ToOwedFromState(uint64_t after, size_t entities) {
    OwedFromState& owed = state.emplace<OwedFromState>();
    owed.after = after;
    owed.entities = entities;
    return owed;
  }
  // Its view is sent from the published state: what it held of the frames
  // goes, and what lagged on its echoes.
  Snapshotting& ToSnapshotting(
      std::unique_ptr<StreamedSnapshot> snapshot,
      std::unique_ptr<ViewFilter::Finding> finding = nullptr) {
    if (echo) echo->Forget();
    Snapshotting& snapshotting = state.emplace<Snapshotting>();
    snapshotting.snapshot = std::move(snapshot);
    snapshotting.finding = std::move(finding);
    return snapshotting;
  }
  // Drops everything it is owed, giving back its memory, so that its view
  // goes whole.
  void ToResyncing() {
    if (echo) echo->Forget();
    state.emplace<Resyncing>();
    overdue_entities = 0;
  }
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_SUBSCRIPTION_H_
