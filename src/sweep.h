// Copyright 2026 The xform Authors.
//
// SweepJob: the core's hot loop as a job of its own, the way ozz-animation's
// LocalToModelJob is one. For every instance of a world's pre-ordered columns
// in `ranges`, parents before children:
//
//   world[i] = world[parent[i]] * local[i]   (local[i] alone for a root)
//
// Inputs and outputs are spans over the columns; the job owns nothing and
// knows nothing of entities, slots or frames. World::Propagate collects the
// ranges a batch dirtied and runs it.
//
// The strategy follows the ranges' shape: single instances all over the world
// (a physics step moving leaves) with prefetching a few ranges ahead; many
// small ranges scattered thinly, several at a time so their cache misses
// overlap; one big run split into two independent halves swept in lockstep,
// so each half's product fills the other's wait on the one before it.
//
// Cost: O(instances in ranges), plus for the two-cursor split at most
// kMaxSplitDescents short walks (bounded, whatever the depth).
// Not thread-safe for one world; jobs over different columns are independent.

#ifndef XFORM_SRC_SWEEP_H_
#define XFORM_SRC_SWEEP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "xform/transform.h"
#include "xform/world.h"

namespace xform::internal {

class SweepStep;  // One instance's product (sweep.cc).

struct SweepJob {
  // One per instance, in pre-order: the parent's index (kNoIndex for a
  // root), the subtree's size including the instance, the local matrix.
  absl::Span<const Index> parent;
  absl::Span<const uint32_t> subtree_size;
  absl::Span<const Matrix3x4> local;
  // Sorted, disjoint and independent: no range holds another's root's parent.
  absl::Span<const SweepRange> ranges;
  // Written for every instance in `ranges`; read for their parents.
  absl::Span<Matrix3x4> world;

  // Whether the spans agree in length and the ranges are sorted, disjoint
  // and within them. O(ranges).
  bool Validate() const;
  // Sweeps. Returns false when a product overflowed to a non-finite value
  // (finite inputs can: a parent scaled 1e30 over a child at 1e10); the
  // matrices are written all the same, and the caller undoes the batch.
  //
  // A job that fails Validate() aborts, in debug and AddressSanitizer builds
  // (the sanitized tests and the fuzzers) only. Unlike ozz's jobs, whose
  // inputs are the caller's, this one is made by World from its own columns
  // every frame: an invalid job is a bug of ours, not bad input, so it is
  // looked for where bugs are looked for, and not paid for on every frame
  // elsewhere (O(ranges): a compare or two a moved leaf, beside its ~10 ns
  // product).
  bool Run() const;

 private:
  Index end_of(Index i) const { return i + subtree_size[i]; }
  // Splits `ranges`, holding `total` instances, into two lists of
  // independent ranges of about total / 2 each, sweeping the few roots it
  // descends through to cut a subtree.
  void SplitInHalves(const SweepStep& step, size_t total,
                     std::vector<SweepRange>* first_half,
                     std::vector<SweepRange>* second_half) const;
  // The subtree of the sibling run `run` that holds instance `i`, or
  // kNoIndex when that takes too long to find (a deep chain).
  Index SiblingHolding(SweepRange run, Index i) const;
};

}  // namespace xform::internal

#endif  // XFORM_SRC_SWEEP_H_
