// Copyright 2026 The xform Authors.

#include "xform/history.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "glm/gtc/matrix_transform.hpp"

namespace xform {
namespace {

// A chain deeper than this at a stamp is a loop (tf2's limit is 1000; our
// chains may be deeper, a loop may not be longer).
constexpr int kMaxDepth = 1 << 20;

// tf2's Quaternion::slerp, in double: shortest path, no renormalization.
glm::dquat Tf2Slerp(const glm::dquat& a, const glm::dquat& b, double t) {
  const double dot = a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  const double s = std::sqrt(glm::dot(a, a) * glm::dot(b, b));
  const double theta = std::acos(std::clamp(std::abs(dot) / s, -1.0, 1.0));
  if (theta == 0) return a;
  const double d = 1.0 / std::sin(theta);
  const double s0 = std::sin((1.0 - t) * theta);
  const double s1 = (dot < 0 ? -1.0 : 1.0) * std::sin(t * theta);
  return glm::dquat((a.w * s0 + b.w * s1) * d, (a.x * s0 + b.x * s1) * d,
                    (a.y * s0 + b.y * s1) * d, (a.z * s0 + b.z * s1) * d);
}

glm::dmat4 TrsMatrix(const glm::dvec3& position, const glm::dquat& rotation,
                     const glm::dvec3& scale) {
  glm::dmat4 m = glm::mat4_cast(rotation);
  m[0] *= scale.x;
  m[1] *= scale.y;
  m[2] *= scale.z;
  m[3] = glm::dvec4(position, 1.0);
  return m;
}

Matrix3x4 ToMatrix3x4(const glm::dmat4& m) {
  Matrix3x4 out;
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 4; ++col) {
      out.m[4 * row + col] = static_cast<float>(m[col][row]);
    }
  }
  return out;
}

std::string Name(EntityId entity) { return absl::StrCat("entity ", entity); }

}  // namespace

template <typename T>
const T& History::Steps<T>::At(Stamp stamp) const {
  auto it = std::upper_bound(from.begin(), from.end(), stamp);
  return value[it == from.begin() ? 0 : (it - from.begin()) - 1];
}

template <typename T>
void History::Steps<T>::Set(Stamp stamp, const T& new_value, bool has_next,
                            Stamp next_sample) {
  // The common case: a sample after every other.
  if (from.empty() || (!has_next && stamp > from.back())) {
    if (from.empty() || !(value.back() == new_value)) {
      from.push_back(stamp);
      value.push_back(new_value);
    }
    return;
  }
  std::optional<T> at_next;
  if (has_next) at_next = At(next_sample);
  size_t k = std::lower_bound(from.begin(), from.end(), stamp) - from.begin();
  if (k < from.size() && from[k] == stamp) {
    from.erase(from.begin() + k);
    value.erase(value.begin() + k);
  }
  if (k == 0 || !(value[k - 1] == new_value)) {
    from.insert(from.begin() + k, stamp);
    value.insert(value.begin() + k, new_value);
  }
  if (at_next && !(At(next_sample) == *at_next)) {
    size_t n =
        std::lower_bound(from.begin(), from.end(), next_sample) - from.begin();
    from.insert(from.begin() + n, next_sample);
    value.insert(value.begin() + n, *at_next);
  }
}

template <typename T>
void History::Steps<T>::DropBefore(Stamp stamp) {
  auto it = std::upper_bound(from.begin(), from.end(), stamp);
  if (it == from.begin()) return;
  size_t keep_from = (it - from.begin()) - 1;  // The entry holding at stamp.
  from.erase(from.begin(), from.begin() + keep_from);
  value.erase(value.begin(), value.begin() + keep_from);
}

template <typename T>
size_t History::Steps<T>::Bytes() const {
  return from.capacity() * sizeof(Stamp) + value.capacity() * sizeof(T);
}

size_t History::Track::Bytes() const {
  return stamps.capacity() * sizeof(Stamp) + poses.capacity() * sizeof(Pose) +
         parents.Bytes() + scales.Bytes();
}

History::History(HistoryOptions options)
    : window_(options.window_nanos), max_bytes_(options.max_bytes) {}

size_t History::MemoryBytes() const {
  return bytes_ + tracks_.capacity() * (sizeof(std::pair<EntityId, Track>) + 1);
}

void History::AddBytes(size_t before, const Track& track) {
  bytes_ = bytes_ - before + track.Bytes();
}

void History::Record(EntityId entity, Stamp stamp, EntityId parent,
                     const Transform& local, SampleKind kind) {
  Track& track = tracks_[entity];
  const size_t before = track.Bytes();
  if (track.destroyed_at != INT64_MAX && kind == SampleKind::kCreate) {
    samples_ -= track.stamps.size();
    track = Track();
  }
  if (kind == SampleKind::kSet) track.is_static = false;
  Insert(track, stamp, parent, local);
  AddBytes(before, track);
  newest_ = std::max(newest_, stamp);
  DropDestroyed();
  if (max_bytes_ != 0 && MemoryBytes() > max_bytes_) EnforceBound();
}

void History::Insert(Track& track, Stamp stamp, EntityId parent,
                     const Transform& local) {
  if (!track.stamps.empty() && stamp < track.newest() - window_) {
    ++refused_old_;  // tf2's TF_OLD_DATA: outside the window already.
    return;
  }
  const Pose pose{local.position, local.rotation};
  auto it = std::lower_bound(track.stamps.begin(), track.stamps.end(), stamp);
  const size_t k = it - track.stamps.begin();
  const bool has_next = it != track.stamps.end() && *it != stamp;
  const Stamp next = has_next ? *it : 0;
  if (it != track.stamps.end() && *it == stamp) {
    track.poses[k] = pose;  // A second sample at a stamp replaces the first.
  } else {
    if (track.stamps.size() == track.stamps.capacity()) {
      // Grow by a quarter, not double: samples are most of a history's
      // memory, and a track's length is steady once its window is full.
      const size_t capacity = track.stamps.size() * 5 / 4 + 4;
      track.stamps.reserve(capacity);
      track.poses.reserve(capacity);
    }
    track.stamps.insert(track.stamps.begin() + k, stamp);
    track.poses.insert(track.poses.begin() + k, pose);
    ++samples_;
  }
  track.parents.Set(stamp, parent, has_next, next);
  track.scales.Set(stamp, local.scale, has_next, next);
  Compact(track);
}

size_t History::FirstVisible(const Track& track) const {
  if (track.stamps.size() <= 1) return 0;
  return std::lower_bound(track.stamps.begin(), track.stamps.end(),
                          track.newest() - window_) -
         track.stamps.begin();
}

void History::Compact(Track& track, bool force) {
  const size_t drop = FirstVisible(track);
  const size_t size = track.stamps.size();
  if (drop == 0 || (!force && drop < (size - drop) / 8 + 4)) return;
  const size_t keep = size - drop;
  const size_t capacity = keep + keep / 8 + 4;
  std::vector<Stamp> stamps;
  std::vector<Pose> poses;
  stamps.reserve(capacity);
  poses.reserve(capacity);
  stamps.assign(track.stamps.begin() + drop, track.stamps.end());
  poses.assign(track.poses.begin() + drop, track.poses.end());
  track.stamps = std::move(stamps);
  track.poses = std::move(poses);
  track.parents.DropBefore(track.stamps.front());
  track.scales.DropBefore(track.stamps.front());
  samples_ -= drop;
}

void History::RecordDestroy(EntityId entity, Stamp stamp) {
  auto it = tracks_.find(entity);
  if (it == tracks_.end()) return;
  it->second.destroyed_at = stamp;
  destroyed_.emplace_back(stamp, entity);
  newest_ = std::max(newest_, stamp);
  DropDestroyed();
}

void History::DropDestroyed() {
  while (!destroyed_.empty() && destroyed_.front().first < newest_ - window_) {
    auto it = tracks_.find(destroyed_.front().second);
    // Created again since: that history is kept.
    if (it != tracks_.end() &&
        it->second.destroyed_at == destroyed_.front().first) {
      bytes_ -= it->second.Bytes();
      samples_ -= it->second.stamps.size();
      tracks_.erase(it);
    }
    destroyed_.pop_front();
  }
}

void History::EnforceBound() {
  while (MemoryBytes() > max_bytes_ && window_ > 1'000'000) {
    window_ -= window_ / 4;
    for (auto& [entity, track] : tracks_) {
      const size_t before = track.Bytes();
      Compact(track, /*force=*/true);
      AddBytes(before, track);
    }
  }
}

absl::Status History::Gather(EntityId entity, Stamp stamp, EntityId* parent,
                             glm::dmat4* local, TimedPose* used) const {
  auto found = tracks_.find(entity);
  if (found == tracks_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(entity), " has no history: not connected"));
  }
  const Track& track = found->second;
  if (stamp != 0 ? stamp >= track.destroyed_at
                 : track.destroyed_at != INT64_MAX) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(entity), " was destroyed at ", track.destroyed_at,
                     ": not connected at ", stamp));
  }
  const size_t first = FirstVisible(track);
  const size_t last = track.stamps.size() - 1;
  size_t one = last;  // The older sample used, and the newer (if two).
  size_t two = last;
  if (stamp == 0 || stamp == track.stamps[last]) {
  } else if (stamp < track.stamps[first]) {
    return absl::OutOfRangeError(absl::StrCat(
        Name(entity), " is known from ", track.stamps[first], ": lookup at ",
        stamp, " would extrapolate into the past"));
  } else if (stamp > track.stamps[last]) {
    if (!track.is_static) {
      return absl::UnavailableError(absl::StrCat(
          Name(entity), " is known until ", track.stamps[last], ": lookup at ",
          stamp, " would extrapolate into the future"));
    }
  } else {
    auto it = std::upper_bound(track.stamps.begin() + first, track.stamps.end(),
                               stamp);
    two = it - track.stamps.begin();
    one = two - 1;
    if (track.stamps[one] == stamp || track.is_static) two = one;
  }
  const Stamp t1 = track.stamps[one];
  const Stamp t2 = track.stamps[two];
  *parent = track.parents.At(t1);
  const Pose& p1 = track.poses[one];
  glm::dvec3 position = p1.position;
  glm::dquat rotation = glm::dquat(p1.rotation);
  glm::dvec3 scale = track.scales.At(t1);
  if (one != two && *parent == track.parents.At(t2)) {
    // tf2's interpolate: across a re-parent it keeps the older sample.
    const double ratio = static_cast<double>(stamp - t1) / (t2 - t1);
    const Pose& p2 = track.poses[two];
    position += (glm::dvec3(p2.position) - position) * ratio;
    rotation = Tf2Slerp(rotation, glm::dquat(p2.rotation), ratio);
    scale += (glm::dvec3(track.scales.At(t2)) - scale) * ratio;
  } else {
    two = one;
  }
  *local = TrsMatrix(position, rotation, scale);
  used->oldest_used = std::min(used->oldest_used, t1);
  used->newest_used = std::max(used->newest_used, track.stamps[two]);
  return absl::OkStatus();
}

bool History::LatestOf(EntityId entity, Stamp* stamp, EntityId* parent) const {
  auto found = tracks_.find(entity);
  if (found == tracks_.end()) return false;
  const Track& track = found->second;
  if (track.destroyed_at != INT64_MAX) return false;
  *stamp = track.is_static ? 0 : track.newest();
  *parent = track.parents.value.back();
  return true;
}

absl::StatusOr<Stamp> History::LatestCommonStamp(EntityId target,
                                                 EntityId source) const {
  constexpr Stamp kNone = std::numeric_limits<Stamp>::max();
  auto done = [](Stamp common) { return common == kNone ? 0 : common; };
  // The source's chain up to the origin: each link's newest and parent.
  std::vector<std::pair<Stamp, EntityId>> chain;
  Stamp common = kNone;
  for (EntityId frame = source; frame != kNoEntity;) {
    Stamp newest;
    EntityId parent;
    if (!LatestOf(frame, &newest, &parent)) break;
    if (newest != 0) common = std::min(common, newest);
    chain.emplace_back(newest, parent);
    frame = parent;
    if (frame == target) return done(common);
    if (chain.size() > kMaxDepth) break;
  }
  // The target's chain, up to a parent the source's chain has.
  common = kNone;
  std::optional<EntityId> common_parent;
  for (EntityId frame = target; frame != kNoEntity;) {
    Stamp newest;
    EntityId parent;
    if (!LatestOf(frame, &newest, &parent)) break;
    if (newest != 0) common = std::min(common, newest);
    if (std::any_of(chain.begin(), chain.end(),
                    [&](const auto& link) { return link.second == parent; })) {
      common_parent = parent;
      break;
    }
    frame = parent;
    if (frame == source) return done(common);
  }
  if (!common_parent) {
    return absl::FailedPreconditionError(absl::StrCat(
        Name(source), " and ", Name(target), " are not connected now"));
  }
  for (const auto& [newest, parent] : chain) {
    if (newest != 0) common = std::min(common, newest);
    if (parent == *common_parent) break;
  }
  return done(common);
}

absl::StatusOr<TimedPose> History::Walk(EntityId target, EntityId source,
                                        Stamp stamp, glm::dmat4* pose) const {
  TimedPose result;
  result.stamp = stamp;
  result.oldest_used = std::numeric_limits<Stamp>::max();
  result.newest_used = std::numeric_limits<Stamp>::min();
  auto finish = [&result, pose](const glm::dmat4& found) {
    *pose = found;
    result.pose = ToMatrix3x4(found);
    if (result.oldest_used > result.newest_used) {
      result.oldest_used = result.newest_used = result.stamp;
    }
    return result;
  };
  // Up from the source until the origin or a link not known at the stamp.
  glm::dmat4 source_to_top(1.0);
  EntityId top = kNoEntity;
  absl::Status source_error;
  int depth = 0;
  for (EntityId frame = source; frame != kNoEntity; ++depth) {
    EntityId parent;
    glm::dmat4 local;
    source_error = Gather(frame, stamp, &parent, &local, &result);
    if (!source_error.ok()) {
      top = frame;
      break;
    }
    if (frame == target) return finish(source_to_top);
    source_to_top = local * source_to_top;
    frame = parent;
    if (depth > kMaxDepth) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(source), "'s chain at ", stamp, " is a loop"));
    }
  }
  // Up from the target until that top.
  glm::dmat4 target_to_top(1.0);
  EntityId frame = target;
  for (depth = 0; frame != top && frame != kNoEntity; ++depth) {
    EntityId parent;
    glm::dmat4 local;
    absl::Status error = Gather(frame, stamp, &parent, &local, &result);
    if (!error.ok()) return error;
    if (frame == source) return finish(glm::inverse(target_to_top));
    target_to_top = local * target_to_top;
    frame = parent;
    if (depth > kMaxDepth) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(target), "'s chain at ", stamp, " is a loop"));
    }
  }
  if (frame != top) return source_error;
  return finish(glm::inverse(target_to_top) * source_to_top);
}

absl::StatusOr<TimedPose> History::LookupExact(EntityId target, EntityId source,
                                               Stamp stamp,
                                               glm::dmat4* pose) const {
  for (EntityId entity : {target, source}) {
    if (entity != kNoEntity && !tracks_.contains(entity)) {
      return absl::NotFoundError(absl::StrCat(Name(entity), " has no history"));
    }
  }
  if (target == source) {
    *pose = glm::dmat4(1.0);
    TimedPose same;
    same.stamp = stamp;
    return same;
  }
  if (stamp == 0) {
    absl::StatusOr<Stamp> common = LatestCommonStamp(target, source);
    if (!common.ok()) return common.status();
    stamp = *common;
  }
  return Walk(target, source, stamp, pose);
}

absl::StatusOr<TimedPose> History::Lookup(EntityId target, EntityId source,
                                          Stamp stamp) const {
  glm::dmat4 pose;
  return LookupExact(target, source, stamp, &pose);
}

absl::StatusOr<TimedPose> History::Lookup(EntityId target, Stamp target_stamp,
                                          EntityId source, Stamp source_stamp,
                                          EntityId fixed) const {
  glm::dmat4 source_in_fixed;
  absl::StatusOr<TimedPose> in_fixed =
      LookupExact(fixed, source, source_stamp, &source_in_fixed);
  if (!in_fixed.ok()) return in_fixed.status();
  glm::dmat4 fixed_in_target;
  absl::StatusOr<TimedPose> result =
      LookupExact(target, fixed, target_stamp, &fixed_in_target);
  if (!result.ok()) return result.status();
  result->pose = ToMatrix3x4(fixed_in_target * source_in_fixed);
  result->oldest_used = std::min(in_fixed->oldest_used, result->oldest_used);
  result->newest_used = std::max(in_fixed->newest_used, result->newest_used);
  return result;
}

}  // namespace xform
