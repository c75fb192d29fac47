// Copyright 2026 The xform Authors.
//
// The client's interpolation (include/xform/interpolator.h), fed frames as a
// Mirror feeds it, with arrival times the test chooses: a renderer at 60 Hz
// drawing an entity that moves at constant speed, from frames sent at 10 Hz
// that arrive with +-30 ms of jitter, sees it move at constant speed, within
// the delay the interpolator reports.

#include "xform/interpolator.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace xform {
namespace {

constexpr Stamp kT0 = 1'700'000'000'000'000'000;
constexpr double kSpeed = 2.0;  // Units a second, along x.

// One frame as the Mirror gives it: entity 1's move (and its creation).
struct Frame {
  Stamp stamp;
  absl::Time arrives;
  bool first;
};

void Feed(Interpolator& interpolator, const Frame& frame) {
  const double seconds = static_cast<double>(frame.stamp - kT0) / 1e9;
  Matrix3x4 world;
  world.m[3] = static_cast<float>(kSpeed * seconds);
  std::vector<EntityId> ids = {1};
  std::vector<float> floats(world.m.begin(), world.m.end());
  MirrorUpdate update;
  update.stamp = frame.stamp;
  update.received = frame.arrives;
  update.moved = ids;
  update.moved_world = floats;
  if (frame.first) update.created = ids;
  interpolator.OnUpdate(update);
}

TEST(InterpolatorTest, JitteredTenHertzFramesDrawAtConstantSpeed) {
  Interpolator interpolator;  // Adaptive delay.
  std::mt19937 random(7);
  std::uniform_real_distribution<double> jitter(-30, 30);
  const absl::Time start = absl::FromUnixSeconds(1000);
  std::vector<Frame> frames;
  for (int k = 0; k < 100; ++k) {  // 10 s at 10 Hz.
    const Stamp stamp = kT0 + Stamp{k} * 100'000'000;
    frames.push_back({stamp,
                      start + absl::Milliseconds(100 * k + 50 + jitter(random)),
                      k == 0});
  }
  size_t next = 0;
  double last_x = 0;
  absl::Time last_now;
  double worst_error = 0;
  int drawn = 0;
  for (absl::Time now = start; now < start + absl::Seconds(9.5);
       now += absl::Seconds(1.0 / 60)) {
    while (next < frames.size() && frames[next].arrives <= now) {
      Feed(interpolator, frames[next++]);
    }
    const Stamp at = interpolator.RenderStamp(now);
    if (now < start + absl::Seconds(2)) {  // Measuring its arrivals first.
      last_now = now;
      continue;
    }
    absl::StatusOr<Matrix3x4> world = interpolator.WorldMatrixAt(1, at);
    ASSERT_TRUE(world.ok())
        << world.status() << " at " << absl::FormatTime(now);
    const double x = world->m[3];
    if (drawn++ > 0) {
      const double speed = (x - last_x) / absl::ToDoubleSeconds(now - last_now);
      worst_error = std::max(worst_error, std::abs(speed - kSpeed) / kSpeed);
    }
    last_x = x;
    last_now = now;
  }
  EXPECT_GT(drawn, 400);
  EXPECT_LE(worst_error, 0.01);
  // Behind by no more than one and a half intervals.
  EXPECT_LE(interpolator.delay(), absl::Milliseconds(150));
  EXPECT_GE(interpolator.delay(), absl::Milliseconds(100));
  RecordProperty("worst_speed_error_ppm", static_cast<int>(worst_error * 1e6));
  RecordProperty(
      "delay_ms",
      static_cast<int>(absl::ToDoubleMilliseconds(interpolator.delay())));
}

TEST(InterpolatorTest, AReparentIsAJumpNotASlide) {
  Interpolator interpolator({.delay = absl::Milliseconds(100)});
  const absl::Time start = absl::FromUnixSeconds(1000);
  std::vector<EntityId> ids = {1};
  auto feed = [&](Stamp stamp, float x, bool created, bool reparented) {
    Matrix3x4 world;
    world.m[3] = x;
    std::vector<float> floats(world.m.begin(), world.m.end());
    MirrorUpdate update;
    update.stamp = stamp;
    update.received = start + absl::Nanoseconds(stamp - kT0);
    update.moved = ids;
    update.moved_world = floats;
    if (created) update.created = ids;
    if (reparented) update.reparented = ids;
    interpolator.OnUpdate(update);
  };
  feed(kT0, 0, true, false);
  feed(kT0 + 100'000'000, 1, false, false);
  feed(kT0 + 200'000'000, 50, false, true);  // Re-parented: teleported.
  EXPECT_FLOAT_EQ(interpolator.WorldMatrixAt(1, kT0 + 50'000'000)->m[3], 0.5f);
  EXPECT_FLOAT_EQ(interpolator.WorldMatrixAt(1, kT0 + 150'000'000)->m[3], 1);
  EXPECT_FLOAT_EQ(interpolator.WorldMatrixAt(1, kT0 + 200'000'000)->m[3], 50);
}

}  // namespace
}  // namespace xform
