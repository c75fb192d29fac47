// Copyright 2026 The xform Authors.
//
// xform::History is where a world's entities were: per entity, the stamped
// local poses and parent links of the last `window`, and lookups of one
// entity's pose in another's frame at a stamp, interpolated as tf2's
// BufferCore does (docs/time.md). A World knows only the present; a server
// records into a History what each batch left (Record), stamped with the
// time the batch's poses were true.
//
// Stamps are nanoseconds on whatever clock a world's writers agree on.
//
// The model, tf2's, with the world's origin as the root frame of every tree
// (kNoEntity: a root entity's parent):
//   - An entity's samples hold its local pose (position, rotation, scale) and
//     its parent at a stamp. Between two samples with the same parent a pose
//     is interpolated: lerp for position and scale, shortest-path slerp for
//     rotation. Across a parent change it is not (the older sample holds
//     until the newer one: a re-parent is a jump).
//   - An entity that was created and never set since is static: its pose
//     holds from its creation on, at any later stamp. Once set, it is known
//     only from its oldest sample to its newest; outside that a lookup fails,
//     as tf2's extrapolation does. Unless `hold_to_newest`: then its newest
//     sample holds until the newest stamp recorded for any entity (a
//     writer that sends only what moved says, with each batch, that the
//     rest stayed where it was).
//   - A destroyed entity is not connected to anything from the stamp of its
//     destruction on; its history before it is kept for the window.
//   - Samples are pruned per entity as in tf2: those older than the entity's
//     newest minus the window. A sample older than that is not recorded.
//     Recording at a stamp an entity has a sample at replaces that sample.
//
// Lookup errors (absl codes; the server maps kUnavailable to waiting):
//   NOT_FOUND            an entity that has no history
//   FAILED_PRECONDITION  an entity destroyed before the stamp
//   RESOURCE_EXHAUSTED   a chain longer than max_links (or a loop)
//   OUT_OF_RANGE         a stamp older than a link's oldest sample (or its
//                        creation); the message names that stamp
//   UNAVAILABLE          a stamp newer than a link's newest sample: not
//                        known yet; the message names that stamp
// The message names the entity. Which link's error is reported when several
// fail is tf2's choice too (the source's chain, unless the target's fails).
//
// Costs (s = samples an entity holds, d = depth of the chains below the
// common ancestor): Record O(log s) amortized, O(s) for a sample older than
// the entity's newest; Lookup O(d log s), no allocation for chains up to 64
// deep. Memory: 36 bytes a pose sample, plus a parent entry per re-parent
// and a scale entry per scale change.
//
// Thread safety: a plain value, as World.

#ifndef XFORM_HISTORY_H_
#define XFORM_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "glm/gtc/quaternion.hpp"
#include "glm/vec3.hpp"
#include "xform/transform.h"

namespace xform {

using Stamp = int64_t;  // Nanoseconds.

struct HistoryOptions {
  // How far back each entity's samples reach from its newest (tf2's cache
  // time; 10 s as tf2's default).
  Stamp window_nanos = 10'000'000'000;
  // A bound on MemoryBytes(); 0 for none. When recording passes it, the
  // window shrinks by a quarter and every entity is pruned to it, until the
  // history fits (window() says how far back it reaches then).
  size_t max_bytes = 0;
  // An entity's newest sample holds until newest() (above); false: tf2's
  // model, each link known only up to its own newest sample.
  bool hold_to_newest = false;
  // The most links a lookup walks up one chain: past it, RESOURCE_
  // EXHAUSTED (a lookup costs O(links), under its caller's lock). A loop
  // (out-of-order re-parents can make one at a stamp) ends there too.
  size_t max_links = size_t{1} << 20;
};

// What a lookup found: `source`'s pose in `target`'s frame.
struct TimedPose {
  Matrix3x4 pose;
  // The stamp looked up at (the latest common one for a lookup at 0).
  Stamp stamp = 0;
  // The oldest and newest sample stamps that the interpolation used.
  Stamp oldest_used = 0;
  Stamp newest_used = 0;
};

enum class SampleKind : uint8_t {
  kCreate,  // The entity appeared: static until set.
  kLink,    // A new parent; the pose may be recomputed (keep-world).
  kSet,     // A pose set: the entity is dynamic from now on.
};

class History {
 public:
  // An affine transform in double: what lookups compose (src/history.cc).
  struct Affine;

  explicit History(HistoryOptions options = {});

  // `entity` had `local` under `parent` at `stamp`.
  void Record(EntityId entity, Stamp stamp, EntityId parent,
              const Transform& local, SampleKind kind);
  // A pose set: as Record, under the parent `entity` has at its newest
  // sample (a set changes no parent), without the caller finding it.
  // False, recording nothing, for an entity without history.
  bool RecordSet(EntityId entity, Stamp stamp, const Transform& local);
  // Brings `entity`'s entry toward the cache ahead of a Record of it: a
  // batch's loop prefetches a few entities ahead, so that the misses of
  // scattered entities overlap.
  void Prefetch(EntityId entity) const { tracks_.prefetch(entity); }
  // The second stage, a few entities later (its entry in the cache by
  // then): the end of its samples, where the next one goes.
  void PrefetchSamples(EntityId entity) const;

  // `entity` was destroyed at `stamp`. An entity created again later starts
  // a new history.
  void RecordDestroy(EntityId entity, Stamp stamp);

  // `source`'s pose in `target`'s frame at `stamp`; 0 for the latest stamp
  // at which every link between them is known (tf2's rule). kNoEntity names
  // the world's origin.
  absl::StatusOr<TimedPose> Lookup(EntityId target, EntityId source,
                                   Stamp stamp) const;
  // tf2's advanced form: where `source` was at `source_stamp`, in `target`'s
  // frame at `target_stamp`, taking `fixed` as not having moved between.
  absl::StatusOr<TimedPose> Lookup(EntityId target, Stamp target_stamp,
                                   EntityId source, Stamp source_stamp,
                                   EntityId fixed) const;

  // `entity`'s newest sample's stamp; 0 when it has no history.
  Stamp NewestOf(EntityId entity) const;
  // `entity`'s parent at `stamp` (at its newest for a stamp past it);
  // NOT_FOUND when it has no history.
  absl::StatusOr<EntityId> ParentAt(EntityId entity, Stamp stamp) const;

  // The window now (options' until the memory bound shrinks it).
  Stamp window() const { return window_; }
  // The newest stamp recorded, over all entities (0 before any).
  Stamp newest() const { return newest_; }
  // Samples not recorded because they were older than their entity's window.
  uint64_t refused_old() const { return refused_old_; }
  size_t entities() const { return tracks_.size(); }
  size_t samples() const { return samples_; }
  // Bytes held: each entity's columns (capacity) and its map entry.
  size_t MemoryBytes() const;

 private:
  // One pose sample: stamp, position, rotation; scale and parent are kept
  // apart, as they rarely change. The stamp is two 32-bit halves so that a
  // sample is 36 bytes, and one cache line holds the stamp a lookup probes
  // with the pose it then reads.
  struct Sample {
    Sample() = default;
    Sample(Stamp at, const glm::vec3& p, const glm::quat& r)
        : stamp_low(static_cast<uint32_t>(at)),
          stamp_high(static_cast<int32_t>(at >> 32)),
          position(p),
          rotation(r) {}
    Stamp stamp() const {
      return static_cast<Stamp>((static_cast<uint64_t>(stamp_high) << 32) |
                                stamp_low);
    }
    uint32_t stamp_low;
    int32_t stamp_high;
    glm::vec3 position;
    glm::quat rotation;
  };
  static_assert(sizeof(Sample) == 36);
  // A value that changes rarely (parent, scale), kept as the stamps it
  // changes at: entry k holds from its stamp until entry k + 1's.
  template <typename T>
  struct Steps {
    // Inline for the usual one entry: no allocation, no cache miss.
    absl::InlinedVector<Stamp, 1> from;
    absl::InlinedVector<T, 1> value;
    const T& At(Stamp stamp) const;  // The entry holding at `stamp`.
    // Makes `value` hold at `stamp` without changing what holds at
    // `next_sample` (the sample after it, if `has_next`).
    void Set(Stamp stamp, const T& value, bool has_next, Stamp next_sample);
    // Drops entries that no stamp from `stamp` on uses.
    void DropBefore(Stamp stamp);
    size_t Bytes() const;
  };
  // One entity's samples, stamps ascending.
  struct Track {
    Stamp newest() const { return last_stamp; }
    Stamp stamp(size_t i) const { return samples[i].stamp(); }
    // The first and last samples' stamps, kept here too so that a lookup
    // guesses where its stamp lies without touching the ends of `samples`.
    void NoteEnds() {
      first_stamp = samples.front().stamp();
      last_stamp = samples.back().stamp();
    }
    std::vector<Sample> samples;
    Stamp first_stamp = 0;
    Stamp last_stamp = 0;
    Steps<EntityId> parents;
    Steps<glm::vec3> scales;
    Stamp destroyed_at = INT64_MAX;
    bool is_static = true;
    size_t Bytes() const;
  };
  void Insert(Track& track, Stamp stamp, EntityId parent,
              const Transform& local);
  // After a sample went into `track` (which held `bytes_before`): the
  // history's bytes and newest stamp, destroyed entities past the window
  // dropped, the memory bound kept. Record's and RecordSet's one tail.
  void Recorded(const Track& track, size_t bytes_before, Stamp stamp);
  // The first sample of `track` inside the window.
  size_t FirstVisible(const Track& track) const;
  // Room for one more sample in a full track: by dropping the samples
  // left of the window, or growing. Returns how many were dropped.
  size_t MakeRoom(Track& track);
  void DropFront(Track& track, size_t drop);
  // Drops what is left of the window and gives back spare capacity.
  void Shrink(Track& track);
  void EnforceBound();
  void DropDestroyed();
  void AddBytes(size_t before, const Track& track);
  // The samples of `track` to interpolate between at `stamp` (the same
  // twice when one holds), or why none do.
  absl::Status FindSamples(const Track& track, EntityId entity, Stamp stamp,
                           size_t* one, size_t* two) const;
  // tf2's gather: `entity`'s local transform at `stamp` (0: its newest),
  // from its `track` (null when it has none), widening `used` to the
  // samples taken.
  absl::Status Gather(const Track* track, EntityId entity, Stamp stamp,
                      Affine* local, TimedPose* used) const;
  // A chain up from an entity: each link's entity and track, resolved by
  // parent at a stamp before any sample is read, so that the samples the
  // lookup will read are fetched from memory together, not one link after
  // another.
  struct ChainLink {
    EntityId entity;
    const Track* track;  // Null when the entity has no history.
  };
  using Chain = absl::InlinedVector<ChainLink, 32>;
  // Links from `from` up to the origin, or through `last` (included), or
  // to an entity without a parent at `stamp`. False when longer than any
  // chain can be: a loop.
  bool ResolveChain(EntityId from, EntityId last, Stamp stamp,
                    Chain* chain) const;
  // tf2's getLatestTimeAndParent: false when the entity has no parent now.
  bool LatestOf(EntityId entity, Stamp* stamp, EntityId* parent) const;
  absl::StatusOr<Stamp> LatestCommonStamp(EntityId target,
                                          EntityId source) const;
  // tf2's walkToTopParent at a stamp that is not 0; `pose` in double.
  absl::StatusOr<TimedPose> Walk(EntityId target, EntityId source, Stamp stamp,
                                 Affine* pose) const;
  // Lookup, with the pose in double too.
  absl::StatusOr<TimedPose> LookupExact(EntityId target, EntityId source,
                                        Stamp stamp, Affine* pose) const;

  Stamp window_;
  size_t max_bytes_;
  bool hold_to_newest_;
  size_t max_links_;
  Stamp newest_ = 0;
  size_t samples_ = 0;
  size_t bytes_ = 0;
  uint64_t refused_old_ = 0;
  absl::flat_hash_map<EntityId, Track> tracks_;
  // Destroyed entities in the order destroyed, to drop once their
  // destruction is older than the window.
  std::deque<std::pair<Stamp, EntityId>> destroyed_;
};

}  // namespace xform

#endif  // XFORM_HISTORY_H_
