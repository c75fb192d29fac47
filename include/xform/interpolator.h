// Copyright 2026 The xform Authors.
//
// An Interpolator keeps a short history of the frames a subscriber
// received, and answers where an entity was at a stamp between them, for a
// renderer that draws a little in the past so that jittery arrivals do not
// stutter (snapshot interpolation: Unity Netcode's interpolated ghosts,
// Mirror's SnapshotInterpolation, Gaffer On Games). A Mirror keeps one when
// MirrorOptions::interpolation is set (Mirror::WorldMatrixAt,
// Mirror::RenderStamp); it can also be fed any MirrorUpdate by hand.
//
// What it keeps: every entity's world pose as each frame gave it, at the
// frame's stamp (FrameUpdate.stamp_nanos), in the core's History with the
// world's origin as every entity's parent, holding each pose until the
// newest frame (an entity that did not move stayed where it was). Between
// two frames a pose is interpolated (lerp, slerp). A re-parent or a
// create is a jump, not interpolated across: the pose before holds until
// the frame that jumps.
//
// When to draw: RenderStamp(now) is the stamp a renderer draws at now,
// `delay` behind the newest frame as this process's clock sees it. The
// clock offset (a frame's arrival less its stamp) is averaged over the
// frames kept; the delay is fixed, or, adaptive, the mean interval between
// frames plus `jitter_factor` times the spread of their arrivals around
// that offset, so that the next frame has almost always come by the time
// it is needed.
//
// Costs: OnUpdate O(entities in the message) (History::Record each);
// WorldMatrixAt O(log samples). Memory: the core's, for `window`.
//
// Thread-safe: one lock, held for each call.

#ifndef XFORM_INTERPOLATOR_H_
#define XFORM_INTERPOLATOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "xform/history.h"
#include "xform/mirror.h"
#include "xform/transform.h"

namespace xform {

class Interpolator {
 public:
  explicit Interpolator(InterpolationOptions options = {});

  // A message as the Mirror applied it: its moves, creates, destroys and
  // re-parents at its stamp; `update.received` is when it came. Snapshot
  // parts and the parts of a frame are taken as they come.
  void OnUpdate(const MirrorUpdate& update);

  // The stamp to draw at now (0 before two frames have come). It moves on
  // at the rate of `now`, steered toward `delay` behind the newest frame
  // by at most 0.5% of the time passed (so what is drawn keeps its speed),
  // or jumping there when more than 250 ms off.
  Stamp RenderStamp(absl::Time now);
  // The delay behind the newest frame that RenderStamp keeps.
  absl::Duration delay() const;

  // `entity`'s world matrix at `stamp` (History's errors); past the newest
  // frame (one that is late), its newest pose.
  absl::StatusOr<Matrix3x4> WorldMatrixAt(EntityId entity, Stamp stamp) const;
  // `source`'s pose in `target`'s frame at `stamp`.
  absl::StatusOr<TimedPose> LookupTransform(EntityId target, EntityId source,
                                            Stamp stamp) const;

 private:
  // An arrival: when, and the stamp it carried.
  struct Arrival {
    absl::Time received;
    Stamp stamp;
  };
  void NoteArrival(absl::Time received, Stamp stamp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A jump: `entity`'s pose before holds until `stamp`.
  void HoldUntil(EntityId entity, Stamp stamp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration DelayLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The mean of arrival less stamp, in ns.
  double OffsetLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const InterpolationOptions options_;
  mutable absl::Mutex mu_;
  History history_ ABSL_GUARDED_BY(mu_);
  std::deque<Arrival> arrivals_ ABSL_GUARDED_BY(mu_);
  // The render clock: the stamp it gave at `clock_time_`.
  bool clock_started_ ABSL_GUARDED_BY(mu_) = false;
  Stamp clock_stamp_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time clock_time_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xform

#endif  // XFORM_INTERPOLATOR_H_
