// Copyright 2026 The xform Authors.
//
// A Mirror is a subscriber's local copy of a world (or of the part its filter
// selects): each entity's parent and world matrix, kept current by one xformd
// subscription stream. A renderer asks it for an entity's matrix, for all of
// them, or for what changed since it last asked; it never polls the server.
//
// The stream is read with gRPC's callback API: gRPC's threads only hand
// each message to a queue of at most max_queued messages; nothing of the
// caller's ever runs on them. Two ways to take from the queue:
// - kBackground: a thread of the mirror's own applies every message as it
//   arrives; reads lock briefly and always see whole frames.
// - kCaller: messages wait until the caller calls Update(), typically once
//   at the start of its own frame, so the copy changes only when the caller
//   says.
// Either way, a taker that falls behind fills the queue, the stream stops
// reading, and the server then folds the frames it missed into one.
//
// When the stream drops (the server restarts, the network fails) the mirror
// reconnects with backoff (to the next of a cluster's nodes, given several
// addresses) and, holding the whole world, asks to resume from its frame:
// it is sent only what changed since (resumes()). Where the server cannot
// tell that (another history, a frame older than its resume window) it
// resynchronises from a fresh snapshot; the changes the caller is next
// given say so (`resynced`) and hold the net difference, so nothing is
// missed and nothing needs to be re-read. A mirror
// that fell so far behind that the server resent its view whole (see
// --max_pending) is resynchronised the same way, on the same stream; one of
// the whole world is instead sent only what changed (unless the server no
// longer logs all it destroyed meanwhile), as a snapshot that keeps its view
// (MirrorUpdate::keeps_view), which is no resync.
//
// Thread-safe.

#ifndef XFORM_MIRROR_H_
#define XFORM_MIRROR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "xform/client.h"
#include "xform/region.h"
#include "xform/transform.h"

namespace xform {

// One message as it arrived, for callers that watch the stream itself (a
// monitor, a load driver). The spans are valid only during the callback.
struct MirrorUpdate {
  uint64_t frame = 0;
  bool snapshot = false;       // Part of the initial (or a resync) snapshot.
  bool snapshot_done = false;  // The snapshot's last message.
  // A snapshot that lists only what changed since the previous message (the
  // copy keeps the rest): one the server sends a mirror so far behind that
  // it would otherwise resend the view whole.
  bool keeps_view = false;
  // A frame too big for one message comes in parts; the copy takes them in
  // together, at the last one.
  uint32_t part = 0;
  bool last_part = true;
  // Of the frames that changed this view since the previous message, how
  // many more than one this message folds together (0 when keeping up).
  uint64_t frames_skipped = 0;
  absl::Time published;  // The server's clock at publication.
  // When the poses it carries were true, on the world's writers' clock
  // (FrameUpdate.stamp_nanos; docs/time.md).
  int64_t stamp = 0;
  absl::Time received;  // This process's clock at arrival.
  size_t bytes = 0;     // The message's size on the wire.
  absl::Span<const EntityId> moved;
  // 12 per moved entity; empty where MirrorOptions::on_update_matrices is
  // false.
  absl::Span<const float> moved_world;
  absl::Span<const EntityId> created;
  absl::Span<const EntityId> created_parent;
  absl::Span<const EntityId> destroyed;
  absl::Span<const EntityId> reparented;
  absl::Span<const EntityId> reparented_parent;

  // moved[k]'s world matrix (its 12 floats in moved_world).
  Matrix3x4 MovedWorld(size_t k) const {
    Matrix3x4 m;
    std::copy_n(moved_world.begin() + 12 * k, 12, m.m.begin());
    return m;
  }
};

// A Mirror's interpolation (MirrorOptions::interpolation; interpolator.h).
struct InterpolationOptions {
  // How far back the history reaches: a few times the delay.
  absl::Duration window = absl::Seconds(2);
  // A fixed delay; zero: adaptive (below).
  absl::Duration delay = absl::ZeroDuration();
  // Adaptive: the mean interval between frames plus this many times the
  // spread (standard deviation) of their arrivals about the clock offset.
  double jitter_factor = 2.5;
  // Frames the offset, interval and spread are measured over.
  size_t frames_measured = 64;
};

// MirrorOptions::max_entities unless set: twice xformd's default
// --max_entities, as a mirror counts what a frame creates before what it
// destroys, and a world at the server's limit creates only as it destroys.
inline constexpr size_t kDefaultMirrorMaxEntities = 8'000'000;

struct MirrorOptions {
  enum class Driver { kBackground, kCaller };

  std::string world;
  // The server's filters: empty lists mirror the whole world; otherwise these
  // entities and the subtrees below these roots (SubscribeRequest).
  std::vector<EntityId> entities;
  std::vector<EntityId> subtrees;
  // The view limited to the entities whose positions are in this region
  // (xform/region.h), intersected with the lists above: an entity entering
  // it comes as created, one leaving as destroyed.
  std::optional<Region> region;
  // At most this many messages per second (0: every published frame).
  double max_rate_hz = 0;
  // Leave out what this client's own batches set (Client's client_id).
  bool no_echo = false;

  // How the server sends world matrices. kRaw: 12 floats each. kCompact:
  // a few bytes each, positions to within position_precision (0: the
  // server's default, 0.001) and rotations to within 0.01 degree; a matrix
  // with shear still comes exact. The copy and the callbacks see matrices
  // either way.
  enum class Encoding { kRaw, kCompact };
  Encoding encoding = Encoding::kRaw;
  float position_precision = 0;

  Driver driver = Driver::kBackground;
  // How many messages may wait to be applied (for kCaller, for Update())
  // before the stream waits. They wait as the bytes that came, and are
  // parsed when taken. Two more, applied and cleared, are kept for the
  // parses to fill, so that a message's fields are not grown again for
  // each one (frames' messages of up to 4 MB; not snapshots'): a mirror
  // holds up to max_queued messages and 8 MB besides.
  int max_queued = 4;
  // The most entities the copy may hold: what bounds the mirror's memory
  // whatever its server sends (where ids are dense, 64 to 128 bytes an
  // entity raw and 128 to 256 compact, the rows of ids not held taking
  // room beside them; at most about 400 bytes an entity whatever the ids;
  // twice that through a resync). A frame or snapshot part that could take the
  // copy past it (counting every entity it creates, before those it destroys),
  // or a frame whose parts, held until its last, would take more than 256 bytes
  // for each of max_entities (a frame lists an entity at most once in each
  // of its lists, well under that), is refused: the stream is dropped with
  // RESOURCE_EXHAUSTED (status()) and retried like a broken one, and the
  // copy stays as the frame before left it. Set it to at least twice the
  // server's --max_entities.
  size_t max_entities = kDefaultMirrorMaxEntities;
  // Reconnect backoff: doubles from min to max while the server is away.
  absl::Duration reconnect_min = absl::Milliseconds(50);
  absl::Duration reconnect_max = absl::Seconds(2);
  // Called after each message is applied, on the thread that applied it
  // (the mirror's own, or Update()'s caller), without the mirror's lock
  // held: it may read the mirror.
  std::function<void(const MirrorUpdate&)> on_update;
  // false: on_update's MirrorUpdate::moved_world is left empty (its other
  // lists are not): for a caller that wants each message's times and ids,
  // not its matrices, which the copy holds. It spares a copy of every
  // matrix a message carries (the copy reads them where they came).
  bool on_update_matrices = true;
  // Called once a frame (or a snapshot) is whole in the copy, with its
  // number, after on_update, on the same thread and terms: a renderer's
  // push.
  std::function<void(uint64_t frame)> on_frame;
  // Keeps a short history of the frames, for drawing a little in the past
  // (RenderStamp, WorldMatrixAt): see interpolator.h. None: no cost.
  std::optional<InterpolationOptions> interpolation;
};

// What changed since the caller last asked: net, each entity in at most one
// of created / destroyed, and listed in `moved` if its matrix changed.
struct MirrorChanges {
  uint64_t frame = 0;  // The mirror's frame now.
  // The stream was re-established and the copy rebuilt from a snapshot in
  // the meantime; the lists are still exact (old copy versus new).
  bool resynced = false;
  std::vector<EntityId> moved;
  std::vector<EntityId> created;
  std::vector<EntityId> destroyed;
  std::vector<EntityId> reparented;

  bool empty() const {
    return moved.empty() && created.empty() && destroyed.empty() &&
           reparented.empty();
  }
};

// TakeChanges() with the values: every entity created, moved or
// re-parented since the caller last asked, each with its parent and world
// matrix as the copy holds them now, and the entities destroyed. All of it
// is read in one lock, so it is one frame's copy, coherent: what a gateway
// forwarding the copy (xform-web) sends on.
struct MirrorChangedState {
  uint64_t frame = 0;
  // That frame's stamp (FrameUpdate.stamp_nanos): when the poses were true.
  int64_t stamp = 0;
  bool resynced = false;           // As in MirrorChanges.
  std::vector<EntityId> entities;  // Created, moved or re-parented.
  std::vector<EntityId> parents;   // Parallel to entities.
  std::vector<Matrix3x4> worlds;   // Parallel to entities.
  // Parallel to entities when asked for (TakeChangedState): the parent's
  // world matrix (the identity for a root, or a parent not in the view).
  std::vector<Matrix3x4> parent_worlds;
  std::vector<EntityId> destroyed;

  bool empty() const { return entities.empty() && destroyed.empty(); }
};

class Mirror {
 public:
  // Subscribes through `client`, which must outlive the mirror. Returns at
  // once; WaitForSync() waits for the first snapshot. A subscription the
  // server refuses (no such world, a bad filter) is retried like a dropped
  // stream; status() says why.
  static absl::StatusOr<std::unique_ptr<Mirror>> Start(Client& client,
                                                       MirrorOptions options);
  ~Mirror();  // Cancels the stream and joins the mirror's thread.
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  // kCaller: applies the messages that have arrived; returns how many.
  int Update();

  // Blocks until the copy holds a complete snapshot (and, for kCaller, the
  // caller's Update() has applied it), or the timeout passes.
  bool WaitForSync(absl::Duration timeout);
  // Blocks until the copy's frame is at least `frame`.
  bool WaitForFrame(uint64_t frame, absl::Duration timeout);

  // The copy. NOT_FOUND for an entity not in it.
  absl::StatusOr<Matrix3x4> WorldMatrix(EntityId entity) const;
  absl::StatusOr<EntityId> Parent(EntityId entity) const;
  bool Has(EntityId entity) const;
  size_t size() const;
  uint64_t frame() const;  // The frame the copy is at; 0 before a snapshot.
  // Every entity with its world matrix, structure-of-arrays, in no order.
  void CopyAll(std::vector<EntityId>* entities,
               std::vector<Matrix3x4>* worlds) const;

  // What changed since the previous call (or since Start: the first call
  // lists everything in the copy as created and moved, O(copy)). Changes
  // are kept only from the first call on, so a caller that never asks
  // pays nothing for them.
  MirrorChanges TakeChanges();
  // The same, with the values (above); it drains what TakeChanges() would
  // report, so a caller uses one or the other. O(changes), in the lock that
  // applying messages takes too. With `with_parent_worlds`, each entity's
  // parent's world matrix too, from the same frame (a recorder that writes
  // each entity in its parent's frame: tools/foxglove/transforms.h).
  MirrorChangedState TakeChangedState(bool with_parent_worlds = false);
  // The same, but listing every entity in the copy (as created and moved),
  // with what was destroyed since the last take: for a viewer that must
  // rebuild its own copy (a new reader of the same view, or one that drops
  // what it had after a resync). O(copy); later takes are changes again.
  MirrorChangedState TakeWholeState(bool with_parent_worlds = false);

  bool synced() const;  // A complete snapshot is applied, stream up.
  // Snapshots applied after the first one, but those that kept the view.
  int resyncs() const;
  // Streams that came back after one broke and were sent only what changed
  // since the copy's frame (SubscribeRequest.resume_from_frame), by the
  // same server or another node of its cluster: no resync.
  int resumes() const;
  absl::Status status() const;  // Why the stream last ended; OK while up.

  // Moves the view's region (a mirror made with MirrorOptions::region) on
  // its open stream (UpdateSubscription): the server sends what entered
  // the view as created and what left it as destroyed, never the view
  // whole. A stream made later (a reconnection) subscribes with the latest
  // region. FAILED_PRECONDITION for a mirror without a region; otherwise
  // the server's answer (OK while no stream is open).
  absl::Status SetRegion(const Region& region);

  // With MirrorOptions::interpolation (FAILED_PRECONDITION without): the
  // stamp a renderer draws at now, the delay it keeps behind the newest
  // frame, and where entities were at a stamp (interpolator.h).
  absl::StatusOr<Stamp> RenderStamp(absl::Time now = absl::Now());
  absl::StatusOr<absl::Duration> InterpolationDelay() const;
  absl::StatusOr<Matrix3x4> WorldMatrixAt(EntityId entity, Stamp stamp) const;
  absl::StatusOr<TimedPose> LookupTransform(EntityId target, EntityId source,
                                            Stamp stamp) const;

 private:
  class Impl;
  explicit Mirror(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xform

#endif  // XFORM_MIRROR_H_
