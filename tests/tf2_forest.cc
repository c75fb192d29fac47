// Copyright 2026 The xform Authors.

#include "tests/tf2_forest.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glm/gtc/quaternion.hpp"
#include "gtest/gtest.h"

namespace xform {

std::string FrameName(EntityId entity) {
  return entity == kNoEntity ? "world" : absl::StrCat("e", entity);
}

Forest::Forest(uint32_t seed, int entities, int max_depth, bool smooth)
    : random_(seed), smooth_(smooth) {
  parent_.assign(entities + 1, kNoEntity);
  depth_.assign(entities + 1, 0);
  is_static_.assign(entities + 1, false);
  writer_.assign(entities + 1, 0);
  for (EntityId e = 1; e <= static_cast<EntityId>(entities); ++e) {
    parent_[e] = PickParent(e, max_depth);
    is_static_[e] = Uniform(0, 1) < 0.2;
    writer_[e] = static_cast<int>(random_() % kWriters);
  }
  max_depth_ = max_depth;
}

std::vector<Sample> Forest::Write(double seconds) {
  std::vector<Sample> samples;
  for (EntityId e = 1; e < parent_.size(); ++e) {
    samples.push_back(
        {e, kStart, parent_[e], LocalAt(e, kStart), SampleKind::kCreate});
  }
  for (int w = 0; w < kWriters; ++w) {
    const Stamp period = kSecond / kRates[w];
    for (Stamp t = kStart + period + w * 1'000'003;
         t < kStart + static_cast<Stamp>(seconds * kSecond); t += period) {
      for (EntityId e = 1; e < parent_.size(); ++e) {
        if (writer_[e] != w || is_static_[e]) continue;
        SampleKind kind = SampleKind::kSet;
        if (Uniform(0, 1) < 0.01) {
          parent_[e] = PickParent(e, max_depth_);
          kind = SampleKind::kLink;
        }
        samples.push_back({e, t, parent_[e], LocalAt(e, t), kind});
      }
    }
  }
  // Stable by stamp, then shuffled in blocks of 40: a writer's late
  // samples land after others' newer ones.
  std::stable_sort(
      samples.begin() + (parent_.size() - 1), samples.end(),
      [](const Sample& a, const Sample& b) { return a.stamp < b.stamp; });
  for (size_t b = parent_.size() - 1; b < samples.size(); b += 40) {
    std::shuffle(samples.begin() + b,
                 samples.begin() + std::min(samples.size(), b + 40), random_);
  }
  return samples;
}

EntityId Forest::PickParent(EntityId e, int max_depth) {
  // Mostly the previous entity, so chains get deep.
  for (int attempt = 0; attempt < 8; ++attempt) {
    EntityId parent = Uniform(0, 1) < 0.7 ? e - 1 : random_() % e;
    if (parent == kNoEntity || depth_[parent] + 1 < max_depth) {
      depth_[e] = parent == kNoEntity ? 0 : depth_[parent] + 1;
      return parent;
    }
  }
  depth_[e] = 0;
  return kNoEntity;
}

// Smooth motion (as joints and sensors sample it: a small turn between
// samples) or a random pose at every sample.
Transform Forest::LocalAt(EntityId e, Stamp t) {
  if (!smooth_) return RandomLocal();
  const double seconds = static_cast<double>(t - kStart) / kSecond;
  const float angle = static_cast<float>(seconds * (0.2 + 0.1 * (e % 7)));
  Transform local;
  local.position = glm::vec3(0.1f * (e % 5), std::sin(angle), 0.3f);
  local.rotation = glm::normalize(
      glm::angleAxis(angle, glm::normalize(glm::vec3(1, e % 3, 2))) *
      glm::quat(0.8f, 0.1f * (e % 4), 0.2f, 0.3f));
  return local;
}

Transform Forest::RandomLocal() {
  Transform t;
  t.position = glm::vec3(Uniform(-1, 1), Uniform(-1, 1), Uniform(-1, 1));
  t.rotation = glm::normalize(glm::quat(Uniform(-1, 1), Uniform(-1, 1),
                                        Uniform(-1, 1), Uniform(-1, 1)));
  return t;
}

void FeedTf2(const Sample& s, bool is_static, Tf2Oracle* tf2) {
  Tf2Pose pose;
  pose.translation = {s.local.position.x, s.local.position.y,
                      s.local.position.z};
  pose.rotation = {s.local.rotation.x, s.local.rotation.y, s.local.rotation.z,
                   s.local.rotation.w};
  tf2->Set(FrameName(s.parent), FrameName(s.entity), s.stamp, pose, is_static);
}

Answer FromTf2(const Tf2Answer& tf2, absl::StatusCode future) {
  Answer answer;
  answer.what = tf2.what;
  answer.future = future;
  switch (tf2.outcome) {
    case Tf2Outcome::kOk: {
      const auto& q = tf2.pose.rotation;
      answer.pose = glm::mat4_cast(glm::dquat(q[3], q[0], q[1], q[2]));
      const auto& t = tf2.pose.translation;
      answer.pose[3] = glm::dvec4(t[0], t[1], t[2], 1.0);
      break;
    }
    case Tf2Outcome::kExtrapolationPast:
      answer.code = absl::StatusCode::kOutOfRange;
      break;
    case Tf2Outcome::kExtrapolationFuture:
      answer.code = future;
      break;
    case Tf2Outcome::kExtrapolationOneSample:
      answer.code = absl::StatusCode::kAborted;
      break;
    case Tf2Outcome::kConnectivity:
      answer.code = absl::StatusCode::kFailedPrecondition;
      break;
    case Tf2Outcome::kLookup:
      answer.code = absl::StatusCode::kNotFound;
      break;
  }
  return answer;
}

bool Agree(const Answer& tf2, const absl::StatusOr<TimedPose>& ours,
           const std::string& what) {
  if (tf2.code == absl::StatusCode::kAborted) {
    const bool extrapolates =
        !ours.ok() && (ours.status().code() == absl::StatusCode::kOutOfRange ||
                       ours.status().code() == tf2.future);
    EXPECT_TRUE(extrapolates)
        << what << ": tf2 " << tf2.what << "; ours " << ours.status();
    return extrapolates;
  }
  if (ours.status().code() != tf2.code) {
    ADD_FAILURE() << what << ": tf2 " << absl::StatusCodeToString(tf2.code)
                  << " " << tf2.what << "; ours " << ours.status();
    return false;
  }
  if (!ours.ok()) return true;
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 4; ++col) {
      const double expected = tf2.pose[col][row];
      const double got = ours->pose(row, col);
      if (std::abs(expected - got) > 1e-5 * std::max(1.0, std::abs(expected))) {
        ADD_FAILURE() << what << ": [" << row << "][" << col << "] tf2 "
                      << expected << ", ours " << got;
        return false;
      }
    }
  }
  return true;
}

LookupTally CompareLookups(Forest& forest, const Tf2Oracle& tf2, double seconds,
                           int plain, int advanced, const OurLookups& ours) {
  LookupTally tally;
  for (int i = 0; i < plain && tally.failures < 5; ++i) {
    const EntityId target = forest.RandomFrame();
    const EntityId source = forest.RandomFrame();
    // From just after the creations (tf2's static links hold at every
    // stamp, ours from their creation on) to past the newest samples.
    Stamp stamp =
        kStart + 1 +
        static_cast<Stamp>(forest.Uniform(0, seconds + 0.5) * kSecond);
    if (i % 10 == 0) stamp = 0;  // The latest common stamp.
    const std::string what = absl::StrCat("lookup ", FrameName(target), " <- ",
                                          FrameName(source), " at ", stamp);
    const Answer expected = FromTf2(
        tf2.Lookup(FrameName(target), FrameName(source), stamp), ours.future);
    const bool ok = Agree(expected, ours.plain(target, source, stamp), what);
    tally.agreed += ok;
    tally.failures += !ok;
    tally.errors += ok && expected.code != absl::StatusCode::kOk;
  }
  // Advanced: a source at one stamp, in a target's frame at another.
  for (int i = 0; i < advanced && tally.failures < 5; ++i) {
    const EntityId target = forest.RandomFrame();
    const EntityId source = forest.RandomFrame();
    const EntityId fixed = forest.RandomFrame();
    const Stamp t1 =
        kStart + static_cast<Stamp>(forest.Uniform(0.1, seconds) * kSecond);
    const Stamp t2 =
        kStart + static_cast<Stamp>(forest.Uniform(0.1, seconds) * kSecond);
    const std::string what =
        absl::StrCat("advanced ", FrameName(target), "@", t2, " <- ",
                     FrameName(source), "@", t1, " via ", FrameName(fixed));
    const Answer expected =
        FromTf2(tf2.Lookup(FrameName(target), t2, FrameName(source), t1,
                           FrameName(fixed)),
                ours.future);
    const bool ok =
        Agree(expected, ours.advanced(target, t2, source, t1, fixed), what);
    tally.agreed += ok;
    tally.failures += !ok;
  }
  return tally;
}

}  // namespace xform
