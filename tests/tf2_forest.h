// Copyright 2026 The xform Authors.
//
// What the tests that hold xform's time to tf2 share: a random forest of
// stamped samples (chains up to 50 deep, writers at different rates
// delivering out of order, re-parents, static links), fed alike to tf2's
// BufferCore and to ours (the core's History, or xformd), and the
// comparison of one lookup's answers: poses within 1e-5, every tf2 error an
// error of ours with the matching code.

#ifndef XFORM_TESTS_TF2_FOREST_H_
#define XFORM_TESTS_TF2_FOREST_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "glm/glm.hpp"
#include "tests/tf2_oracle.h"
#include "xform/history.h"
#include "xform/transform.h"

namespace xform {

inline constexpr Stamp kSecond = 1'000'000'000;
inline constexpr Stamp kStart = 1000 * kSecond;  // ros::Time is unsigned s.

// "world" for the origin, e<id> for an entity: tf2's frame names.
std::string FrameName(EntityId entity);

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
  Forest(uint32_t seed, int entities, int max_depth, bool smooth);

  // Samples for `seconds`, in the order they are delivered: the creates,
  // then each writer's ticks, shuffled within blocks so that many arrive
  // out of order.
  std::vector<Sample> Write(double seconds);

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

  EntityId PickParent(EntityId e, int max_depth);
  Transform LocalAt(EntityId e, Stamp t);
  Transform RandomLocal();

  std::mt19937 random_;
  std::vector<EntityId> parent_;
  std::vector<int> depth_;
  std::vector<bool> is_static_;
  std::vector<int> writer_;
  int max_depth_ = 0;
  bool smooth_ = false;
};

// tf2's setTransform of one sample.
void FeedTf2(const Sample& s, bool is_static, Tf2Oracle* tf2);

// tf2's answer as ours would be: a pose, or the code we give its error
// (kAborted standing for "an extrapolation, either way").
struct Answer {
  absl::StatusCode code = absl::StatusCode::kOk;
  absl::StatusCode future = absl::StatusCode::kUnavailable;  // See below.
  glm::dmat4 pose{1.0};
  std::string what;
};
// `future`: the code ours gives a stamp past what is known (the core's
// UNAVAILABLE; xformd's DEADLINE_EXCEEDED, after waiting).
Answer FromTf2(const Tf2Answer& tf2,
               absl::StatusCode future = absl::StatusCode::kUnavailable);

// Compares one lookup; false (with a test failure naming `what`) when they
// differ.
bool Agree(const Answer& tf2, const absl::StatusOr<TimedPose>& ours,
           const std::string& what);

// The lookup of ours being held to tf2: plain (target, source, stamp) and
// advanced (target at target_stamp, source at source_stamp, via fixed).
struct OurLookups {
  std::function<absl::StatusOr<TimedPose>(EntityId, EntityId, Stamp)> plain;
  std::function<absl::StatusOr<TimedPose>(EntityId, Stamp, EntityId, Stamp,
                                          EntityId)>
      advanced;
  absl::StatusCode future = absl::StatusCode::kUnavailable;  // As FromTf2.
};

struct LookupTally {
  int agreed = 0;
  int errors = 0;  // Of those agreed, errors of both.
  int failures = 0;
};

// Asks tf2 and ours `plain` lookups between random frames at random stamps
// over a forest written for `seconds` (a tenth at stamp 0, the latest
// common one), then `advanced` advanced ones; stops after 5 failures.
LookupTally CompareLookups(Forest& forest, const Tf2Oracle& tf2, double seconds,
                           int plain, int advanced, const OurLookups& ours);

}  // namespace xform

#endif  // XFORM_TESTS_TF2_FOREST_H_
