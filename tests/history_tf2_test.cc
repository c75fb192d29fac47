// Copyright 2026 The xform Authors.
//
// xform::History held to tf2 itself: Debian's libtf2 (ROS 1's 0.7.6
// BufferCore) and a History are fed the same stamped samples (random forests
// of chains up to 50 deep, writers at different rates delivering out of
// order, re-parents, static links), then asked the same lookups at random
// stamps, plain and advanced. Poses agree within 1e-5; every tf2 error is an
// error of ours with the matching code.

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/tf2_oracle.h"
#include "xform/history.h"

namespace xform {
namespace {

constexpr Stamp kSecond = 1'000'000'000;
constexpr Stamp kStart = 1000 * kSecond;  // ros::Time is unsigned seconds.

std::string FrameName(EntityId entity) {
  return entity == kNoEntity ? "world" : absl::StrCat("e", entity);
}

// One sample as both sides take it.
struct Sample {
  EntityId entity;
  Stamp stamp;
  EntityId parent;
  Transform local;
  SampleKind kind;
};

// A random forest written by several writers at their own rates. Parents
// always have smaller ids than their children, so no re-parent makes a loop.
class Forest {
 public:
  Forest(uint32_t seed, int entities, int max_depth, bool smooth)
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

  // Samples for `seconds`, in the order they are delivered: each writer's
  // ticks, shuffled within blocks so that many arrive out of order.
  std::vector<Sample> Write(double seconds) {
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

  bool is_static(EntityId e) const { return is_static_[e]; }
  EntityId RandomFrame() {
    return static_cast<EntityId>(random_() % parent_.size());  // 0: world.
  }
  double Uniform(double low, double high) {
    return std::uniform_real_distribution<double>(low, high)(random_);
  }

 private:
  static constexpr int kWriters = 3;
  static constexpr Stamp kRates[kWriters] = {100, 30, 7};

  EntityId PickParent(EntityId e, int max_depth) {
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
  Transform LocalAt(EntityId e, Stamp t) {
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
  Transform RandomLocal() {
    Transform t;
    t.position = glm::vec3(Uniform(-1, 1), Uniform(-1, 1), Uniform(-1, 1));
    t.rotation = glm::normalize(glm::quat(Uniform(-1, 1), Uniform(-1, 1),
                                          Uniform(-1, 1), Uniform(-1, 1)));
    return t;
  }

  std::mt19937 random_;
  std::vector<EntityId> parent_;
  std::vector<int> depth_;
  std::vector<bool> is_static_;
  std::vector<int> writer_;
  int max_depth_ = 0;
  bool smooth_ = false;
};

void Feed(const Sample& s, bool is_static, History* history, Tf2Oracle* tf2) {
  history->Record(s.entity, s.stamp, s.parent, s.local, s.kind);
  Tf2Pose pose;
  pose.translation = {s.local.position.x, s.local.position.y,
                      s.local.position.z};
  pose.rotation = {s.local.rotation.x, s.local.rotation.y, s.local.rotation.z,
                   s.local.rotation.w};
  tf2->Set(FrameName(s.parent), FrameName(s.entity), s.stamp, pose, is_static);
}

// tf2's answer as ours would be: a pose, or the code we give its error
// (kAborted standing for "an extrapolation, either way").
struct Answer {
  absl::StatusCode code = absl::StatusCode::kOk;
  glm::dmat4 pose{1.0};
  std::string what;
};

Answer FromTf2(const Tf2Answer& tf2) {
  Answer answer;
  answer.what = tf2.what;
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
      answer.code = absl::StatusCode::kUnavailable;
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

// Compares one lookup; returns false (with a failure) when they differ.
bool Agree(const Answer& tf2, const absl::StatusOr<TimedPose>& ours,
           const std::string& what) {
  if (tf2.code == absl::StatusCode::kAborted) {
    const bool extrapolates =
        !ours.ok() && (ours.status().code() == absl::StatusCode::kOutOfRange ||
                       ours.status().code() == absl::StatusCode::kUnavailable);
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

struct OracleCase {
  uint32_t seed;
  int entities;
  int max_depth;
  double seconds;
  bool smooth = false;
};

class HistoryVsTf2 : public testing::TestWithParam<OracleCase> {};

TEST_P(HistoryVsTf2, LookupsAgree) {
  const OracleCase c = GetParam();
  Forest forest(c.seed, c.entities, c.max_depth, c.smooth);
  History history;  // 10 s, as tf2's default.
  Tf2Oracle tf2(10.0);
  for (const Sample& s : forest.Write(c.seconds)) {
    Feed(s, forest.is_static(s.entity), &history, &tf2);
  }
  const Stamp end = kStart + static_cast<Stamp>(c.seconds * kSecond);
  int agreed = 0;
  int errors = 0;
  int failures = 0;
  for (int i = 0; i < 3000 && failures < 5; ++i) {
    const EntityId target = forest.RandomFrame();
    const EntityId source = forest.RandomFrame();
    // From just after the creations (tf2's static links hold at every
    // stamp, ours from their creation on) to past the newest samples.
    Stamp stamp =
        kStart + 1 +
        static_cast<Stamp>(forest.Uniform(0, c.seconds + 0.5) * kSecond);
    if (i % 10 == 0) stamp = 0;  // The latest common stamp.
    const std::string what =
        absl::StrCat("lookup ", FrameName(target), " <- ", FrameName(source),
                     " at ", stamp, " (end ", end, ")");
    const Answer expected =
        FromTf2(tf2.Lookup(FrameName(target), FrameName(source), stamp));
    const bool ok =
        Agree(expected, history.Lookup(target, source, stamp), what);
    agreed += ok;
    failures += !ok;
    errors += ok && expected.code != absl::StatusCode::kOk;
  }
  // Advanced: a source at one stamp, in a target's frame at another.
  for (int i = 0; i < 1000 && failures < 5; ++i) {
    const EntityId target = forest.RandomFrame();
    const EntityId source = forest.RandomFrame();
    const EntityId fixed = forest.RandomFrame();
    const Stamp t1 =
        kStart + static_cast<Stamp>(forest.Uniform(0.1, c.seconds) * kSecond);
    const Stamp t2 =
        kStart + static_cast<Stamp>(forest.Uniform(0.1, c.seconds) * kSecond);
    const std::string what =
        absl::StrCat("advanced ", FrameName(target), "@", t2, " <- ",
                     FrameName(source), "@", t1, " via ", FrameName(fixed));
    const Answer expected = FromTf2(tf2.Lookup(
        FrameName(target), t2, FrameName(source), t1, FrameName(fixed)));
    const bool ok =
        Agree(expected, history.Lookup(target, t2, source, t1, fixed), what);
    agreed += ok;
    failures += !ok;
  }
  EXPECT_EQ(failures, 0);
  // Both kinds of answer were exercised, not only one.
  EXPECT_GT(agreed - errors, 500);
  EXPECT_GT(errors, 50);
  RecordProperty("agreed", agreed);
  RecordProperty("errors", errors);
}

INSTANTIATE_TEST_SUITE_P(
    Forests, HistoryVsTf2,
    testing::Values(OracleCase{1, 40, 10, 3.0}, OracleCase{2, 120, 50, 4.0},
                    OracleCase{3, 60, 50, 12.0},  // Past the 10 s window.
                    OracleCase{4, 200, 20, 2.0},
                    OracleCase{5, 80, 30, 3.0, /*smooth=*/true}));

}  // namespace
}  // namespace xform
