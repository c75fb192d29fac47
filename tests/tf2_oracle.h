// Copyright 2026 The xform Authors.
//
// tf2's BufferCore (Debian's libtf2, ROS 1's 0.7.6) behind a plain
// interface, for the tests and benchmarks that hold xform::History to it.
// ROS 1's message headers do not compile as C++20 (std::allocator<void>::
// rebind), so tf2_oracle.cc is built as C++17 and nothing of ROS's crosses
// this header.

#ifndef XFORM_TESTS_TF2_ORACLE_H_
#define XFORM_TESTS_TF2_ORACLE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace xform {

// A pose as tf2 keeps one: translation (x, y, z), rotation (x, y, z, w).
struct Tf2Pose {
  std::array<double, 3> translation{};
  std::array<double, 4> rotation{0, 0, 0, 1};
};

// How a tf2 lookup ended.
enum class Tf2Outcome {
  kOk,
  kExtrapolationPast,
  kExtrapolationFuture,
  kExtrapolationOneSample,  // One sample held; tf2 names no direction.
  kConnectivity,
  kLookup,  // A frame tf2 has never heard of.
};

struct Tf2Answer {
  Tf2Outcome outcome = Tf2Outcome::kOk;
  Tf2Pose pose;
  std::string what;
};

class Tf2Oracle {
 public:
  explicit Tf2Oracle(double cache_seconds = 10.0);
  ~Tf2Oracle();

  // tf2's setTransform: `child` under `parent` at `stamp_nanos`.
  bool Set(const std::string& parent, const std::string& child,
           int64_t stamp_nanos, const Tf2Pose& pose, bool is_static);
  Tf2Answer Lookup(const std::string& target, const std::string& source,
                   int64_t stamp_nanos) const;
  Tf2Answer Lookup(const std::string& target, int64_t target_stamp_nanos,
                   const std::string& source, int64_t source_stamp_nanos,
                   const std::string& fixed) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xform

#endif  // XFORM_TESTS_TF2_ORACLE_H_
