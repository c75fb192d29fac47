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

#ifndef XFORM_SERVER_REPLICATION_REPLICATOR_H_
#define XFORM_SERVER_REPLICATION_REPLICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/replication/burst_budget.h"
#include "server/replication/echo_filter.h"
#include "server/replication/outgoing.h"
#include "xform/region.h"
#include "xform/stream_stats.h"
#include "xform/subscriber_info.h"
#include "xform/world.h"

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

// FrameWriters (who set which entities directly in a frame, for echo
// suppression) is in echo_filter.h.

// A subscriber's messages hold at most this many bytes of entries by
// default: a few MB whatever the message limit, since one huge write would
// hold the stream (and its write deadline) for seconds.
inline constexpr size_t kDefaultPartBudgetBytes = 4 << 20;

struct SubscriptionOptions {
  // Both empty: the whole world.
  std::vector<EntityId> entities;
  std::vector<EntityId> subtrees;
  // The view limited to the entities whose positions are in this region,
  // by its rule (xform/region.h), judged after every frame: intersected
  // with the lists above.
  std::optional<Region> region;
  // Who subscribed (a principal's name): only they may move its region.
  std::string owner;
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
  // A subscriber whose stream broke, holding the whole world as of this
  // frame (0: none) of this history (see Replicator::set_history). One of
  // the whole world that accepts kept-view snapshots and filters no echoes
  // is owed what changed after it, from the published state, as one that
  // fell behind would be, where the replicator can tell that: the same
  // history, and a frame no older than the resume window (the last whole
  // publication, the destroyed log's reach). The rest start with their
  // view whole. A frame not published yet (another node of a cluster,
  // ahead of this one) is waited for.
  uint64_t resume_from_frame = 0;
  uint64_t resume_history = 0;  // The history that frame belongs to.
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
  // Destructions are logged for `resume_frames` frames whoever needs them,
  // so that a subscriber that comes back within them can be resumed
  // (SubscriptionOptions::resume_from_frame); at most max_pending of them.
  explicit Replicator(size_t max_pending = 65'536,
                      std::shared_ptr<BurstBudget> burst_budget = nullptr,
                      std::shared_ptr<Fanout> fanout = nullptr,
                      uint64_t resume_frames = 0);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Publishes the frame `changes` closes (see xform::FrameChanges) and wakes
  // the subscribers it concerns (through the Fanout, if any: their writes
  // may then still be starting when it returns).
  void Publish(const FrameChanges& changes, absl::Time time,
               const FrameWriters& writers = {});
  // Publishes all of `world` as frame `frame`, before it has subscribers (a
  // world recovered from disk): O(n), without a FrameChanges of it all.
  // Subscribers may resume from `resumable_from` on (a later frame than
  // `frame` where `world` holds part of it).
  void PublishWhole(const World& world, uint64_t frame, absl::Time time,
                    uint64_t resumable_from);
  void PublishWhole(const World& world, uint64_t frame, absl::Time time) {
    PublishWhole(world, frame, time, frame);
  }
  // Publishes all of `world` as frame `frame` in place of what was
  // published (a world reloaded: a cluster's replica that fell out of
  // step): every subscriber is resent its view whole, after the messages
  // it was committed to. O(n + subscribers + their filters).
  void Reset(const World& world, uint64_t frame, absl::Time time,
             uint64_t resumable_from);

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
  // The oldest frame a subscriber may resume from now (see
  // SubscriptionOptions::resume_from_frame).
  uint64_t resumable_from() const;
  size_t subscribers() const;
  // Subscriptions that filter echoes; without the lock, so that a world's
  // batches (which track their writers only while there are such) never
  // wait for a publication. O(1).
  size_t echo_filtered_subscribers() const;

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
  void CountWritten(size_t bytes);
  void CountCutOff();

  // Names the history the frames published belong to, sent on every
  // snapshot part (FrameUpdate.history): frames of one history with the
  // same number hold the same changes, wherever published, so a
  // subscriber may resume from one (SubscriptionOptions). A history that
  // may have lost frames it published (a restart that recovered less than
  // it had published) is a new one. Before the first Subscribe.
  void set_history(uint64_t history);
  uint64_t history() const;

  // What a region move's work (the slots it will judge) may cost its
  // caller: OK to go ahead (charged), or the status it is refused with.
  using AffordRegionMove = absl::FunctionRef<absl::Status(size_t slots)>;
  // Moves the region of subscription `id`, which `owner` made (Subscription
  // Options::owner), to `region`: what enters its view is noted to it as
  // created, what leaves as destroyed, judged on the state as last
  // published, and its next messages carry them (the sink is woken).
  // NOT_FOUND for no such subscription of `owner`'s; FAILED_PRECONDITION
  // for one without a region; RESOURCE_EXHAUSTED past `max_per_second`
  // moves of it a second (0: no limit), or as `afford` says, with nothing
  // changed. O(cells the old and new regions cover + the entities in
  // them), in parts of the membership walk's chunk (32,768 slots), the
  // lock released between them: frames and other subscribers go on. A
  // move of the same view still under way (another call's) is finished
  // first.
  absl::Status MoveRegion(SubscriptionId id, absl::string_view owner,
                          const Region& region, double max_per_second,
                          absl::Time now, AffordRegionMove afford);

  // The edge of the cells region views are found by (SpatialIndex), in
  // world units: 32 unless set. Before the first Subscribe.
  void set_region_cell_size(float size);
  // With this many region views or more, each frame's moves are sorted by
  // the cells they left and entered, once, so that each view visits the
  // moves near it (O(cells its region covers + moves in them)) rather
  // than every move (O(moved)). 8 unless set.
  void set_region_views_to_sort_moves(size_t views);
  // Whether the world keeps a spatial index now: from its first region
  // view's Subscribe until 600 frames after its last one left.
  bool keeps_spatial_index() const;

  // Slots a subtree view's membership walk visits under one hold at first
  // (32,768, about 0.5 ms): tests make it small, so that frames come
  // between the chunks. Before the first Subscribe.
  void set_membership_walk_chunk_for_testing(size_t slots);
  // Called where Next() releases the lock partway (between the chunks of
  // a kept view's scan or a membership walk, and while a burst's copy is
  // made), Subscribe between the parts of a spatial index's build, and
  // MoveRegion between a move's parts:
  // tests change the subscription or publish frames there. Set while no
  // other thread uses the replicator.
  void set_unlocked_for_testing(std::function<void()> call);

 private:
  // The state and the steps (replicator_impl.h), behind the lock.
  class Impl;
  const std::unique_ptr<Impl> impl_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_REPLICATOR_H_
