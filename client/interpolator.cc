// Copyright 2026 The xform Authors.

#include "xform/interpolator.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"

namespace xform {
namespace {

// The render clock steers toward its target by at most this fraction of the
// time that passed: what it adds to the speed things seem to move at.
constexpr double kMaxSteer = 0.005;
// Further off than this, it jumps instead (a new stream, a paused process).
constexpr absl::Duration kMaxSteerGap = absl::Milliseconds(250);
// Frames measured before the clock runs on its own: until then each call
// draws at the target, whose delay is still being learnt.
constexpr size_t kFramesBeforeSteering = 8;

}  // namespace

Interpolator::Interpolator(InterpolationOptions options)
    : options_(options),
      history_(HistoryOptions{
          .window_nanos = absl::ToInt64Nanoseconds(options.window),
          .hold_to_newest = true}) {}

void Interpolator::OnUpdate(const MirrorUpdate& update) {
  const Stamp stamp =
      update.stamp != 0 ? update.stamp : absl::ToUnixNanos(update.published);
  // A message without its matrices (MirrorOptions::on_update_matrices off,
  // fed by hand) tells where nothing is.
  if (update.moved_world.size() < 12 * update.moved.size()) return;
  absl::MutexLock lock(&mu_);
  const absl::flat_hash_set<EntityId> created(update.created.begin(),
                                              update.created.end());
  for (EntityId entity : update.reparented) HoldUntil(entity, stamp);
  for (size_t k = 0; k < update.moved.size(); ++k) {
    const EntityId entity = update.moved[k];
    const Transform pose = Decompose(update.MovedWorld(k));
    if (created.contains(entity) && history_.NewestOf(entity) != 0) {
      HoldUntil(entity, stamp);  // Created again, or a resync: a jump.
    }
    if (!history_.RecordSet(entity, stamp, pose)) {
      history_.Record(entity, stamp, kNoEntity, pose, SampleKind::kCreate);
    }
  }
  for (EntityId entity : update.destroyed) {
    history_.RecordDestroy(entity, stamp);
  }
  if (update.snapshot ? update.snapshot_done : update.last_part) {
    NoteArrival(update.received, stamp);
  }
}

void Interpolator::HoldUntil(EntityId entity, Stamp stamp) {
  const Stamp newest = history_.NewestOf(entity);
  if (newest == 0 || newest >= stamp - 1) return;
  absl::StatusOr<TimedPose> before = history_.Lookup(kNoEntity, entity, 0);
  if (!before.ok()) return;
  history_.RecordSet(entity, stamp - 1, Decompose(before->pose));
}

void Interpolator::NoteArrival(absl::Time received, Stamp stamp) {
  if (!arrivals_.empty() && stamp <= arrivals_.back().stamp) return;
  arrivals_.push_back({received, stamp});
  while (arrivals_.size() > options_.frames_measured) arrivals_.pop_front();
}

double Interpolator::OffsetLocked() const {
  double sum = 0;
  for (const Arrival& a : arrivals_) {
    sum += static_cast<double>(absl::ToUnixNanos(a.received) - a.stamp);
  }
  return sum / static_cast<double>(arrivals_.size());
}

absl::Duration Interpolator::DelayLocked() const {
  if (options_.delay > absl::ZeroDuration()) return options_.delay;
  if (arrivals_.size() < 2) return absl::ZeroDuration();
  const double interval =
      static_cast<double>(arrivals_.back().stamp - arrivals_.front().stamp) /
      static_cast<double>(arrivals_.size() - 1);
  const double offset = OffsetLocked();
  double spread = 0;
  for (const Arrival& a : arrivals_) {
    const double off =
        static_cast<double>(absl::ToUnixNanos(a.received) - a.stamp) - offset;
    spread += off * off;
  }
  spread = std::sqrt(spread / static_cast<double>(arrivals_.size()));
  return absl::Nanoseconds(interval + options_.jitter_factor * spread);
}

absl::Duration Interpolator::delay() const {
  absl::MutexLock lock(&mu_);
  return DelayLocked();
}

Stamp Interpolator::RenderStamp(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (arrivals_.size() < 2) return 0;
  const Stamp target = absl::ToUnixNanos(now) -
                       static_cast<Stamp>(OffsetLocked()) -
                       absl::ToInt64Nanoseconds(DelayLocked());
  if (!clock_started_) {
    clock_started_ = arrivals_.size() >= kFramesBeforeSteering;
    clock_stamp_ = target;
    clock_time_ = now;
    return target;
  }
  // Moves on at the rate of `now`, steered toward the target gently, so
  // that what is drawn moves at its own speed.
  const Stamp elapsed = absl::ToInt64Nanoseconds(now - clock_time_);
  const Stamp predicted = clock_stamp_ + elapsed;
  const Stamp error = target - predicted;
  const Stamp step = static_cast<Stamp>(kMaxSteer * elapsed);
  clock_stamp_ = std::abs(error) > absl::ToInt64Nanoseconds(kMaxSteerGap)
                     ? target
                     : predicted + std::clamp(error, -step, step);
  clock_time_ = now;
  return clock_stamp_;
}

absl::StatusOr<Matrix3x4> Interpolator::WorldMatrixAt(EntityId entity,
                                                      Stamp stamp) const {
  absl::MutexLock lock(&mu_);
  // Past the newest frame (it is late): the newest pose, not an error.
  if (stamp > history_.newest()) stamp = history_.newest();
  absl::StatusOr<TimedPose> pose = history_.Lookup(kNoEntity, entity, stamp);
  if (!pose.ok()) return pose.status();
  return pose->pose;
}

absl::StatusOr<TimedPose> Interpolator::LookupTransform(EntityId target,
                                                        EntityId source,
                                                        Stamp stamp) const {
  absl::MutexLock lock(&mu_);
  return history_.Lookup(target, source, stamp);
}

}  // namespace xform
