// Copyright 2026 The xform Authors.
//
// Replicator holds one world's published state (every entity's parent and
// world matrix as of the last published frame) and its subscribers. Publishing
// a frame folds the frame's changes into each subscriber's pending set; a
// subscriber that is ready takes one message built from the latest published
// values of its pending entities. So a slow subscriber skips frames but
// converges to the latest state, its pending set is bounded by the world's
// size (never by how far behind it is), and it never slows publishing or
// other subscribers. Every message carries values from exactly one frame.
//
// A subscriber's snapshot (on joining, or on a resync) is streamed a bounded
// chunk per message, made when the stream asks for it, from the published
// state as it is then; frames published meanwhile mark what they
// change, and the snapshot ends only when everything the subscriber was sent
// is current. So a joining subscriber holds a few bits per entity and one
// chunk, never a copy of the world, and no call holds the lock for more than
// one chunk's work. See StreamedSnapshot.
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

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "xform/net_changes.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::server {

// The subscriber's side: told when a message may be ready to take, polled
// regularly (for rate limits and stuck writes), and told when its stream must
// end (world deleted, server shutting down).
class UpdateSink {
 public:
  virtual ~UpdateSink() = default;
  virtual void Wake() = 0;
  virtual void Poll(absl::Time now) = 0;
  virtual void End(const absl::Status& status) = 0;
};

// Who set which entities directly in a frame, for echo suppression: the
// writer's client id, or "" when several (or anonymous) writers set it.
using FrameWriters = absl::flat_hash_map<EntityId, std::string>;

// One outgoing message. Streams that send the same frame share one of these,
// and so its encoding, made once on first use and then only referenced.
class Outgoing {
 public:
  explicit Outgoing(v1::FrameUpdate message) : message_(std::move(message)) {}
  const v1::FrameUpdate& message() const { return message_; }
  const std::string& encoded() const {
    std::call_once(encode_once_,
                   [this] { message_.SerializeToString(&encoded_); });
    return encoded_;
  }

 private:
  v1::FrameUpdate message_;
  mutable std::once_flag encode_once_;
  mutable std::string encoded_;
};

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
};

struct SubscriberStats {
  uint64_t id = 0;
  size_t pending = 0;  // Entities with changes not yet sent.
  uint64_t last_frame_sent = 0;
  uint64_t frames_skipped = 0;  // Over the subscription's life.
};

class Replicator {
 public:
  using SubscriptionId = uint64_t;

  // A subscriber with more than `max_pending` entities' changes folded and
  // unsent (it stopped reading, or reads far slower than the world changes)
  // drops them and is resent its view whole, as a snapshot, when it reads
  // again: a laggard costs O(max_pending), never O(world).
  explicit Replicator(size_t max_pending = 65'536)
      : max_pending_(max_pending) {}
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Publishes the frame `changes` closes (see xform::FrameChanges) and wakes
  // the subscribers it concerns.
  void Publish(const FrameChanges& changes, absl::Time time,
               const FrameWriters& writers = {});

  // Adds a subscription, starting with a snapshot of its view at the last
  // published frame; its deltas begin with the next frame.
  SubscriptionId Subscribe(SubscriptionOptions options,
                           std::shared_ptr<UpdateSink> sink);
  void Unsubscribe(SubscriptionId id);

  // The subscription's next message, or null when it has nothing due (caught
  // up, or rate limited until a later Flush()). Subscribers that are caught up
  // with the whole world share one message per frame, built once.
  std::shared_ptr<const Outgoing> Next(SubscriptionId id, absl::Time now);

  // Polls every subscription's sink: rate-limited messages now due, stuck
  // writes past their deadline. Returns at once, polling nothing, when the
  // replicator is busy (publishing): the caller polls again soon.
  void Flush(absl::Time now);
  // Ends every subscription's stream with `status`.
  void EndAll(const absl::Status& status);

  uint64_t frame() const;
  size_t subscribers() const;
  size_t echo_filtered_subscribers() const;

  std::vector<SubscriberStats> Stats() const;

 private:
  struct Published {
    EntityId parent = kNoEntity;
    // Levels below a root, kept as the frame's changes come in: orders
    // entities parents-first in O(k log k), with no walks up the tree.
    uint32_t depth = 0;
    // The entity's place in slot_entity_, fixed while it lives: what a
    // streamed snapshot's bits are indexed by.
    uint32_t slot = 0;
    Matrix3x4 world;
  };
  // One bit per slot.
  class SlotBits {
   public:
    bool test(size_t slot) const {
      return slot < size_ && (words_[slot / 64] >> (slot % 64)) & 1;
    }
    // Both return whether the bit changed.
    bool set(size_t slot);
    bool reset(size_t slot);
    // Every slot in [0, size) set.
    void SetAll(size_t size);
    // The first set slot at or after `from`; size() if none.
    size_t Find(size_t from) const;
    size_t size() const { return size_; }

   private:
    std::vector<uint64_t> words_;
    size_t size_ = 0;
  };
  // A snapshot being streamed. Each message scans on from
  // `cursor` for stale slots and sends their entities as they are now:
  // created (after the ancestors in its view the subscriber lacks), or, when
  // the subscriber has it already, re-parented and moved. Publish marks what
  // a frame changes in the view stale, and queues what the subscriber had and
  // is destroyed or left the view.
  // What changes behind the cursor waits for the next pass; a pass that would
  // be short, or would not shrink, is sent at once instead (see
  // NextSnapshotPart). The last part goes when nothing is stale or gone: the
  // subscriber's copy, built from all the parts in order, is then the
  // published state at that part's frame. O(slots / 4) bytes, plus a parent
  // chain while one is sent.
  struct StreamedSnapshot {
    SlotBits known;  // The subscriber has the slot's entity.
    SlotBits stale;  // The slot's entity must be sent (again).
    size_t stale_count = 0;
    size_t cursor = 0;
    size_t pass_sent = 0;        // Entities sent in this pass.
    std::vector<EntityId> gone;  // Destroyed, and the subscriber had them.
    // A parent chain not yet sent (slots, the root-most last), valid while
    // no entity is destroyed or re-parented: a chain deeper than one message
    // is walked once, not once per message.
    std::vector<uint32_t> chain;
    uint64_t chain_epoch = 0;
    uint32_t part = 0;
    uint64_t skipped_before = 0;  // Frames missed before it began.
  };
  struct Subscription {
    SubscriptionOptions options;
    bool whole_world = true;
    absl::flat_hash_set<EntityId> listed;
    absl::flat_hash_set<EntityId> roots;
    // The entities in the subtrees of `roots`, kept as frames come in, so
    // membership is a lookup and not a walk to the root. O(view) memory.
    absl::flat_hash_set<EntityId> in_subtree;
    std::shared_ptr<UpdateSink> sink;
    // Messages committed to, sent before anything else: snapshot chunks, and
    // the rest of a frame whose first part went out.
    std::deque<std::shared_ptr<const Outgoing>> parts;
    // The shared parts of the frames since its last message, while this
    // subscriber is caught up but for them. Frames it has not started on are
    // kept (shared with the other subscribers: O(1) each a frame), not
    // folded into `pending` frame by frame, until it reads again, or they
    // would hold more than max_pending entities (it resyncs) or more than
    // the world (they fold into `pending`, which the world bounds).
    std::vector<std::shared_ptr<const Outgoing>> ready;
    size_t ready_frames = 0;
    size_t ready_entities = 0;
    // What changed in its view since its last message (entering the view is
    // being created to it, leaving it being destroyed).
    NetChanges pending;
    uint64_t last_frame_sent = 0;
    uint64_t frames_skipped = 0;
    // Frames that changed this subscriber's view since its last message
    // (the FrameUpdate.frames_skipped definition), and whether the frame
    // being published has, so far.
    uint64_t frames_with_changes = 0;
    bool noted = false;
    // Fell too far behind: `pending` was dropped, and the next message is a
    // fresh snapshot of the view (which the Mirror diffs, as on a resync).
    bool resync = false;
    absl::Time next_allowed = absl::InfinitePast();
    // Set while its snapshot streams; pending stays empty then.
    std::unique_ptr<StreamedSnapshot> snapshot;
  };

  // The parts every caught-up whole-world subscriber gets for a frame.
  static std::vector<std::shared_ptr<const Outgoing>> FrameParts(
      const FrameChanges& changes, absl::Time time, size_t max_bytes);
  // Takes the next of the parts committed to, noting the frame sent.
  static std::shared_ptr<const Outgoing> TakePart(Subscription& s);
  // Whether `e` is in a filtered subscription's view (as of its last update).
  bool InView(const Subscription& s, EntityId e) const;
  // The entities whose move in this frame was only `client`'s own direct
  // write: set by it, and by no other writer, nor below one that another
  // writer set. O(entities moved), whatever the depth.
  absl::flat_hash_set<EntityId> Echoes(const std::string& client,
                                       const FrameWriters& writers) const;
  // The published state takes in a frame's changes.
  void TakeIn(const FrameChanges& changes);
  // Visits `e` and everything below it in the published state.
  template <typename F>
  void ForEachInSubtree(EntityId e, F&& f) const;
  // Folds an event into the subscriber's pending events, or, while its
  // snapshot streams, into the snapshot's bits.
  void Note(Subscription& s, EntityId e, NetChange change) const;
  void NoteInSnapshot(StreamedSnapshot& snap, EntityId e,
                      NetChange change) const;
  // Turns untaken shared parts back into pending events.
  void Fold(Subscription& s) const;
  void RemoveChild(EntityId parent, EntityId child);
  // Starts streaming the subscriber's view (and rebuilds a subtree view's
  // membership, in O(view)).
  void BuildSnapshot(Subscription& s);
  // The streamed snapshot's next part.
  std::shared_ptr<const Outgoing> NextSnapshotPart(Subscription& s);
  uint32_t NewSlot(EntityId e);
  // Parents-first order: by depth in the published state.
  void SortByDepth(std::vector<EntityId>& entities) const;

  // Guards everything below. A std::mutex rather than absl::Mutex: Debian's
  // Abseil is built without ThreadSanitizer annotations, so TSan cannot see
  // absl::Mutex's ordering, and this class is what the TSan build checks.
  // The private helpers above expect it held.
  const size_t max_pending_;
  mutable std::mutex mu_;
  absl::flat_hash_map<EntityId, Published> state_;
  // Entities by slot (kNoEntity: free), and the free slots.
  std::vector<EntityId> slot_entity_;
  std::vector<uint32_t> free_slots_;
  // The slots the last TakeIn freed, by entity.
  absl::flat_hash_map<EntityId, uint32_t> freed_slot_of_;
  // Counts frames that destroyed or re-parented entities: a saved parent
  // chain is valid only within one.
  uint64_t structure_epoch_ = 0;
  // Children by parent in the published state; kNoEntity holds the roots.
  absl::flat_hash_map<EntityId, std::vector<EntityId>> children_;
  uint64_t frame_ = 0;
  absl::Time frame_time_;
  SubscriptionId next_id_ = 1;
  absl::flat_hash_map<SubscriptionId, std::unique_ptr<Subscription>> subs_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATOR_H_
