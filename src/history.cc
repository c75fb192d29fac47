// Copyright 2026 The xform Authors.

#include "xform/history.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "glm/mat3x3.hpp"

namespace xform {

// An affine transform in double: what a lookup composes.
struct History::Affine {
  glm::dmat3 linear{1.0};
  glm::dvec3 translation{0.0};

  friend Affine operator*(const Affine& a, const Affine& b) {
    return {a.linear * b.linear, a.linear * b.translation + a.translation};
  }
  Affine Inverse() const {
    const glm::dmat3 inverse = glm::inverse(linear);
    return {inverse, -(inverse * translation)};
  }
};

namespace {

using Affine = History::Affine;

// sin(x) / x, and acos(1 - y) / sqrt(2y), by their series: for the small
// angles between samples that come at a rate these are exact to double
// rounding (the first term left out is below 1e-15 of the result at the
// bounds Tf2Slerp uses them within) and cost no libm call.
double SinOverX(double x) {
  const double x2 = x * x;
  return 1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72)));
}
double AcosNearOne(double y) {
  return std::sqrt(2 * y) *
         (1 + y * (1.0 / 12 +
                   y * (3.0 / 160 + y * (5.0 / 896 + y * 35.0 / 18432))));
}

// tf2's Quaternion::slerp, in double: shortest path, no renormalization:
// (a sin((1-t)θ) ± b sin(tθ)) / sin θ, θ half the angle between them.
glm::dquat Tf2Slerp(const glm::dquat& a, const glm::dquat& b, double t) {
  const double dot = a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  const double s = std::sqrt(glm::dot(a, a) * glm::dot(b, b));
  const double cos_theta = std::clamp(std::abs(dot) / s, -1.0, 1.0);
  if (cos_theta == 1.0) return a;
  double s0;
  double s1;
  if (cos_theta > 0.9999) {  // θ below 0.0142: the series.
    const double theta = AcosNearOne(1 - cos_theta);
    const double over = 1 / SinOverX(theta);
    s0 = (1 - t) * SinOverX((1 - t) * theta) * over;
    s1 = t * SinOverX(t * theta) * over;
  } else {
    // One acos and one sincos: sin((1-t)θ) = sin θ cos tθ - cos θ sin tθ.
    const double theta = std::acos(cos_theta);
    const double sin_theta = std::sqrt(1.0 - cos_theta * cos_theta);
    double sin_t;
    double cos_t;
    sincos(t * theta, &sin_t, &cos_t);
    s0 = (sin_theta * cos_t - cos_theta * sin_t) / sin_theta;
    s1 = sin_t / sin_theta;
  }
  if (dot < 0) s1 = -s1;
  return glm::dquat(a.w * s0 + b.w * s1, a.x * s0 + b.x * s1,
                    a.y * s0 + b.y * s1, a.z * s0 + b.z * s1);
}

Affine TrsAffine(const glm::dvec3& position, const glm::dquat& rotation,
                 const glm::dvec3& scale) {
  Affine m{glm::mat3_cast(rotation), position};
  m.linear[0] *= scale.x;
  m.linear[1] *= scale.y;
  m.linear[2] *= scale.z;
  return m;
}

// The first index whose stamp is after `stamp`, for a stamp inside the
// track: guessed from the stamps' spacing (samples mostly come at a rate),
// then galloped to, so a lookup touches one or two cache lines of a long
// track rather than a binary search's ten.
size_t GuessIndex(size_t n, Stamp first, Stamp last, Stamp stamp) {
  const double span = static_cast<double>(last - first);
  if (span <= 0 || stamp <= first) return 0;
  const size_t guess = static_cast<size_t>(static_cast<double>(stamp - first) /
                                           span * static_cast<double>(n - 1));
  return std::min(guess, n - 1);
}

template <typename Track>
size_t UpperBoundNear(const Track& track, Stamp stamp) {
  auto stamps = [&track](size_t i) { return track.samples[i].stamp(); };
  const size_t n = track.samples.size();
  const size_t guess =
      GuessIndex(n, track.first_stamp, track.last_stamp, stamp);
  size_t low;
  size_t high;
  if (stamps(guess) <= stamp) {
    low = guess;
    size_t step = 1;
    while (low + step < n && stamps(low + step) <= stamp) {
      low += step;
      step *= 2;
    }
    high = std::min(n, low + step);
  } else {
    high = guess;
    size_t step = 1;
    while (high >= step && stamps(high - step) > stamp) {
      high -= step;
      step *= 2;
    }
    low = high >= step ? high - step : 0;
  }
  while (low < high) {  // The first after `stamp` in [low, high).
    const size_t mid = low + (high - low) / 2;
    if (stamps(mid) <= stamp) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

Matrix3x4 ToMatrix3x4(const Affine& a) {
  Matrix3x4 out;
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) {
      out.m[4 * row + col] = static_cast<float>(a.linear[col][row]);
    }
    out.m[4 * row + 3] = static_cast<float>(a.translation[row]);
  }
  return out;
}

std::string Name(EntityId entity) { return absl::StrCat("entity ", entity); }

}  // namespace

template <typename T>
const T& History::Steps<T>::At(Stamp stamp) const {
  if (from.size() == 1) return value[0];
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
  // Only what is allocated: one entry lives in the Track.
  return (from.capacity() > 1 ? from.capacity() * sizeof(Stamp) : 0) +
         (value.capacity() > 1 ? value.capacity() * sizeof(T) : 0);
}

size_t History::Track::Bytes() const {
  return samples.capacity() * sizeof(Sample) + parents.Bytes() + scales.Bytes();
}

History::History(HistoryOptions options)
    : window_(options.window_nanos),
      max_bytes_(options.max_bytes),
      hold_to_newest_(options.hold_to_newest),
      max_links_(options.max_links) {}

size_t History::MemoryBytes() const {
  return bytes_ + tracks_.capacity() * (sizeof(std::pair<EntityId, Track>) + 1);
}

void History::AddBytes(size_t before, const Track& track) {
  bytes_ = bytes_ - before + track.Bytes();
}

void History::Record(EntityId entity, Stamp stamp, EntityId parent,
                     const Transform& local, SampleKind kind) {
  if (auto old = tracks_.find(entity); old != tracks_.end() &&
                                       old->second.destroyed_at != INT64_MAX &&
                                       kind == SampleKind::kCreate) {
    samples_ -= old->second.samples.size();
    bytes_ -= old->second.Bytes();
    tracks_.erase(old);
  }
  Track& track = tracks_[entity];
  const size_t before = track.Bytes();
  if (kind == SampleKind::kSet) track.is_static = false;
  Insert(track, stamp, parent, local);
  Recorded(track, before, stamp);
}

void History::Recorded(const Track& track, size_t bytes_before, Stamp stamp) {
  AddBytes(bytes_before, track);
  newest_ = std::max(newest_, stamp);
  DropDestroyed();
  if (max_bytes_ != 0 && MemoryBytes() > max_bytes_) EnforceBound();
}

void History::PrefetchSamples(EntityId entity) const {
  auto found = tracks_.find(entity);
  if (found == tracks_.end() || found->second.samples.empty()) return;
  __builtin_prefetch(&found->second.samples.back() + 1, /*rw=*/1);
}

bool History::RecordSet(EntityId entity, Stamp stamp, const Transform& local) {
  auto found = tracks_.find(entity);
  if (found == tracks_.end()) return false;
  Track& track = found->second;
  const size_t before = track.Bytes();
  track.is_static = false;
  // The parent is the newest's unless the sample lands before another.
  const EntityId parent = stamp >= track.newest() ? track.parents.value.back()
                                                  : track.parents.At(stamp);
  Insert(track, stamp, parent, local);
  Recorded(track, before, stamp);
  return true;
}

void History::Insert(Track& track, Stamp stamp, EntityId parent,
                     const Transform& local) {
  if (!track.samples.empty() && stamp < track.newest() - window_) {
    ++refused_old_;  // tf2's TF_OLD_DATA: outside the window already.
    return;
  }
  const Sample sample(stamp, local.position, local.rotation);
  // Usually after the last: no search.
  size_t k = track.samples.size();
  if (!track.samples.empty() && stamp <= track.newest()) {
    k = std::lower_bound(
            track.samples.begin(), track.samples.end(), stamp,
            [](const Sample& s, Stamp at) { return s.stamp() < at; }) -
        track.samples.begin();
  }
  const bool exists = k < track.samples.size() && track.stamp(k) == stamp;
  const bool has_next = k < track.samples.size() && !exists;
  const Stamp next = has_next ? track.stamp(k) : 0;
  if (exists) {
    track.samples[k] = sample;  // A second sample at a stamp replaces it.
  } else {
    if (track.samples.size() == track.samples.capacity()) {
      k -= MakeRoom(track);
    }
    track.samples.insert(track.samples.begin() + k, sample);
    ++samples_;
  }
  track.NoteEnds();
  track.parents.Set(stamp, parent, has_next, next);
  track.scales.Set(stamp, local.scale, has_next, next);
}

size_t History::MakeRoom(Track& track) {
  // Samples left of the window are dropped in place once they are a
  // sixteenth of the track (so each is moved about 16 times at most);
  // else the track grows by an eighth, not doubles: samples are most of a
  // history's memory, and a track's length is steady once its window is
  // full, so its capacity settles about a sixteenth above it and no
  // insert allocates.
  const size_t size = track.samples.size();
  const size_t drop = FirstVisible(track);
  if (drop > 0 && drop >= size / 16) {
    DropFront(track, drop);
    return drop;
  }
  track.samples.reserve(size + size / 8 + 4);
  return 0;
}

void History::DropFront(Track& track, size_t drop) {
  track.samples.erase(track.samples.begin(), track.samples.begin() + drop);
  track.NoteEnds();
  track.parents.DropBefore(track.stamp(0));
  track.scales.DropBefore(track.stamp(0));
  samples_ -= drop;
}

size_t History::FirstVisible(const Track& track) const {
  if (track.samples.size() <= 1) return 0;
  return std::lower_bound(
             track.samples.begin(), track.samples.end(),
             track.newest() - window_,
             [](const Sample& s, Stamp at) { return s.stamp() < at; }) -
         track.samples.begin();
}

void History::Shrink(Track& track) {
  if (const size_t drop = FirstVisible(track); drop > 0) {
    DropFront(track, drop);
  }
  track.samples.shrink_to_fit();
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
      samples_ -= it->second.samples.size();
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
      Shrink(track);
      AddBytes(before, track);
    }
  }
}

absl::Status History::FindSamples(const Track& track, EntityId entity,
                                  Stamp stamp, size_t* one, size_t* two) const {
  auto stamps = [&track](size_t i) { return track.stamp(i); };
  const size_t last = track.samples.size() - 1;
  *one = *two = last;
  if (stamp == 0 || stamp == stamps(last)) return absl::OkStatus();
  if (stamp > stamps(last)) {
    const Stamp known_until = hold_to_newest_ ? newest_ : stamps(last);
    if (track.is_static || stamp <= known_until) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        Name(entity), " is known until ", known_until, ": lookup at ", stamp,
        " would extrapolate into the future"));
  }
  const size_t after = UpperBoundNear(track, stamp);
  if (after == 0 || (stamps(after - 1) < track.newest() - window_)) {
    return absl::OutOfRangeError(absl::StrCat(
        Name(entity), " is known from ", stamps(FirstVisible(track)),
        ": lookup at ", stamp, " would extrapolate into the past"));
  }
  *one = after - 1;
  *two = stamps(*one) == stamp || track.is_static ? *one : after;
  return absl::OkStatus();
}

absl::Status History::Gather(const Track* found, EntityId entity, Stamp stamp,
                             Affine* local, TimedPose* used) const {
  if (found == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(entity), " has no history: not connected"));
  }
  const Track& track = *found;
  if (stamp != 0 ? stamp >= track.destroyed_at
                 : track.destroyed_at != INT64_MAX) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(entity), " was destroyed at ", track.destroyed_at,
                     ": not connected at ", stamp));
  }
  size_t one;  // The older sample used, and the newer (the same if one).
  size_t two;
  if (absl::Status found_samples =
          FindSamples(track, entity, stamp, &one, &two);
      !found_samples.ok()) {
    return found_samples;
  }
  const Stamp t1 = track.stamp(one);
  const Stamp t2 = track.stamp(two);
  const EntityId parent = track.parents.At(t1);
  const Sample& p1 = track.samples[one];
  glm::dvec3 position = p1.position;
  glm::dquat rotation = glm::dquat(p1.rotation);
  glm::dvec3 scale = track.scales.At(t1);
  if (one != two && parent == track.parents.At(t2)) {
    // tf2's interpolate: across a re-parent it keeps the older sample.
    const double ratio = static_cast<double>(stamp - t1) / (t2 - t1);
    const Sample& p2 = track.samples[two];
    position += (glm::dvec3(p2.position) - position) * ratio;
    rotation = Tf2Slerp(rotation, glm::dquat(p2.rotation), ratio);
    scale += (glm::dvec3(track.scales.At(t2)) - scale) * ratio;
  } else {
    two = one;
  }
  *local = TrsAffine(position, rotation, scale);
  used->oldest_used = std::min(used->oldest_used, t1);
  used->newest_used = std::max(used->newest_used, track.stamp(two));
  return absl::OkStatus();
}

Stamp History::NewestOf(EntityId entity) const {
  auto found = tracks_.find(entity);
  return found == tracks_.end() ? 0 : found->second.newest();
}

absl::StatusOr<EntityId> History::ParentAt(EntityId entity, Stamp stamp) const {
  auto found = tracks_.find(entity);
  if (found == tracks_.end()) {
    return absl::NotFoundError(absl::StrCat(Name(entity), " has no history"));
  }
  return found->second.parents.At(stamp);
}

bool History::LatestOf(EntityId entity, Stamp* stamp, EntityId* parent) const {
  auto found = tracks_.find(entity);
  if (found == tracks_.end()) return false;
  const Track& track = found->second;
  if (track.destroyed_at != INT64_MAX) return false;
  *stamp = track.is_static ? 0 : hold_to_newest_ ? newest_ : track.newest();
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
    if (chain.size() > max_links_) break;
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

bool History::ResolveChain(EntityId from, EntityId last, Stamp stamp,
                           Chain* chain) const {
  for (EntityId frame = from; frame != kNoEntity;) {
    if (chain->size() > max_links_) return false;
    auto found = tracks_.find(frame);
    const Track* track = found == tracks_.end() ? nullptr : &found->second;
    chain->push_back({frame, track});
    if (track == nullptr || frame == last) break;
    if (stamp != 0 ? stamp >= track->destroyed_at
                   : track->destroyed_at != INT64_MAX) {
      break;
    }
    // The sample this link will read, and the one after it.
    const size_t guess = GuessIndex(track->samples.size(), track->first_stamp,
                                    track->last_stamp, stamp);
    __builtin_prefetch(&track->samples[guess]);
    __builtin_prefetch(&track->samples[guess] + 1);
    // The parent at the stamp is the parent at the sample before it (a
    // parent changes only at a sample).
    frame = stamp == 0 ? track->parents.value.back() : track->parents.At(stamp);
  }
  return true;
}

absl::StatusOr<TimedPose> History::Walk(EntityId target, EntityId source,
                                        Stamp stamp, Affine* pose) const {
  TimedPose result;
  result.stamp = stamp;
  result.oldest_used = std::numeric_limits<Stamp>::max();
  result.newest_used = std::numeric_limits<Stamp>::min();
  auto finish = [&result, pose](const Affine& found) {
    *pose = found;
    result.pose = ToMatrix3x4(found);
    if (result.oldest_used > result.newest_used) {
      result.oldest_used = result.newest_used = result.stamp;
    }
    return result;
  };
  auto loop = [this, stamp](EntityId from) {
    return absl::ResourceExhaustedError(
        absl::StrCat(Name(from), "'s chain at ", stamp, " is longer than ",
                     max_links_, " links (a loop, or past the limit)"));
  };
  // Up from the source until the origin or a link not known at the stamp.
  Chain chain;
  if (!ResolveChain(source, target, stamp, &chain)) return loop(source);
  Affine source_to_top;
  EntityId top = kNoEntity;
  absl::Status source_error;
  for (const ChainLink& link : chain) {
    Affine local;
    source_error = Gather(link.track, link.entity, stamp, &local, &result);
    if (!source_error.ok()) {
      top = link.entity;
      break;
    }
    if (link.entity == target) return finish(source_to_top);
    source_to_top = local * source_to_top;
  }
  // Up from the target until that top.
  chain.clear();
  if (!ResolveChain(target, top, stamp, &chain)) return loop(target);
  Affine target_to_top;
  EntityId frame = kNoEntity;
  for (const ChainLink& link : chain) {
    frame = link.entity;
    if (frame == top) break;
    Affine local;
    absl::Status error = Gather(link.track, frame, stamp, &local, &result);
    if (!error.ok()) return error;
    if (frame == source) return finish(target_to_top.Inverse());
    target_to_top = local * target_to_top;
    frame = kNoEntity;  // Its parent, unless a later link says otherwise.
  }
  if (frame != top) return source_error;
  return finish(target_to_top.Inverse() * source_to_top);
}

absl::StatusOr<TimedPose> History::LookupExact(EntityId target, EntityId source,
                                               Stamp stamp,
                                               Affine* pose) const {
  for (EntityId entity : {target, source}) {
    if (entity != kNoEntity && !tracks_.contains(entity)) {
      return absl::NotFoundError(absl::StrCat(Name(entity), " has no history"));
    }
  }
  if (target == source) {
    *pose = Affine();
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
  Affine pose;
  return LookupExact(target, source, stamp, &pose);
}

absl::StatusOr<TimedPose> History::Lookup(EntityId target, Stamp target_stamp,
                                          EntityId source, Stamp source_stamp,
                                          EntityId fixed) const {
  Affine source_in_fixed;
  absl::StatusOr<TimedPose> in_fixed =
      LookupExact(fixed, source, source_stamp, &source_in_fixed);
  if (!in_fixed.ok()) return in_fixed.status();
  Affine fixed_in_target;
  absl::StatusOr<TimedPose> result =
      LookupExact(target, fixed, target_stamp, &fixed_in_target);
  if (!result.ok()) return result.status();
  result->pose = ToMatrix3x4(fixed_in_target * source_in_fixed);
  result->oldest_used = std::min(in_fixed->oldest_used, result->oldest_used);
  result->newest_used = std::max(in_fixed->newest_used, result->newest_used);
  return result;
}

}  // namespace xform
