// Copyright 2026 The xform Authors.

#include "xform/region.h"

#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace xform {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A refused region: INVALID_ARGUMENT with `why` in its message.
void ExpectRefused(const absl::StatusOr<Region>& region,
                   const std::string& why) {
  ASSERT_FALSE(region.ok()) << region->ToString();
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find(why), std::string::npos)
      << region.status();
}

TEST(RegionTest, ABoxHoldsWhatIsInsideAndKeepsWhatIsWithinItsMargin) {
  absl::StatusOr<Region> box = Region::Box({0, 0, 0}, {10, 10, 10}, 2);
  ASSERT_TRUE(box.ok()) << box.status();
  EXPECT_TRUE(box->Inside({0, 5, 10}));  // Borders are inside.
  EXPECT_FALSE(box->Inside({-0.5f, 5, 5}));
  // Entering needs the region; staying, the region grown by the margin.
  EXPECT_FALSE(box->Holds(false, {11, 5, 5}));
  EXPECT_TRUE(box->Holds(true, {11, 5, 5}));
  EXPECT_TRUE(box->Holds(true, {12, 12, -2}));
  EXPECT_FALSE(box->Holds(true, {12.01f, 5, 5}));
  glm::vec3 min, max;
  box->GrownBounds(&min, &max);
  EXPECT_EQ(min, glm::vec3(-2, -2, -2));
  EXPECT_EQ(max, glm::vec3(12, 12, 12));
}

TEST(RegionTest, ASphereHoldsWhatIsWithinItsRadius) {
  absl::StatusOr<Region> ball = Region::Sphere({1, 2, 3}, 5, 1);
  ASSERT_TRUE(ball.ok()) << ball.status();
  EXPECT_TRUE(ball->Inside({6, 2, 3}));
  EXPECT_FALSE(ball->Inside({4.6f, 5.6f, 3}));  // In its box, not in it.
  EXPECT_TRUE(ball->Holds(true, {7, 2, 3}));
  EXPECT_FALSE(ball->Holds(false, {7, 2, 3}));
  EXPECT_FALSE(ball->Holds(true, {7.01f, 2, 3}));
  glm::vec3 min, max;
  ball->GrownBounds(&min, &max);
  EXPECT_EQ(min, glm::vec3(-5, -4, -3));
  EXPECT_EQ(max, glm::vec3(7, 8, 9));
  // A point: radius 0 holds its center alone.
  absl::StatusOr<Region> point = Region::Sphere({0, 0, 0}, 0);
  ASSERT_TRUE(point.ok());
  EXPECT_TRUE(point->Inside({0, 0, 0}));
  EXPECT_FALSE(point->Inside({0, 0, 1e-6f}));
}

TEST(RegionTest, WhatHasNoMeaningIsRefused) {
  ExpectRefused(Region::Box({0, kNaN, 0}, {1, 1, 1}), "finite");
  ExpectRefused(Region::Box({0, 0, 0}, {1, kInf, 1}), "finite");
  ExpectRefused(Region::Box({0, 2, 0}, {1, 1, 1}), "inverted");
  ExpectRefused(Region::Box({0, 0, 0}, {1, 1, 1}, -1), "margin");
  ExpectRefused(Region::Box({0, 0, 0}, {1, 1, 1}, kNaN), "margin");
  ExpectRefused(Region::Sphere({0, 0, kInf}, 1), "finite");
  ExpectRefused(Region::Sphere({0, 0, 0}, -1), "radius");
  ExpectRefused(Region::Sphere({0, 0, 0}, kNaN), "radius");
  ExpectRefused(Region::Sphere({0, 0, 0}, 1, -0.5f), "margin");
}

TEST(RegionTest, ParsesWhatTheToolsTakeAndRefusesTheRest) {
  absl::StatusOr<Region> box = Region::Parse("box:-1,-2,-3,4,5,6");
  ASSERT_TRUE(box.ok()) << box.status();
  EXPECT_EQ(*box, *Region::Box({-1, -2, -3}, {4, 5, 6}));
  absl::StatusOr<Region> ball = Region::Parse("sphere:1.5,2,3,50,margin=5");
  ASSERT_TRUE(ball.ok()) << ball.status();
  EXPECT_EQ(*ball, *Region::Sphere({1.5f, 2, 3}, 50, 5));
  EXPECT_EQ(Region::Parse(ball->ToString()).value(), *ball);
  ExpectRefused(Region::Parse("cube:0,0,0,1"), "box:");
  ExpectRefused(Region::Parse("box:0,0,0,1,1"), "6 numbers");
  ExpectRefused(Region::Parse("sphere:0,0,0,1,2"), "4 numbers");
  ExpectRefused(Region::Parse("sphere:0,0,x,1"), "not a number");
  ExpectRefused(Region::Parse("sphere:0,0,0,nan"), "radius");
  ExpectRefused(Region::Parse("box:1,0,0,0,1,1"), "inverted");
  ExpectRefused(Region::Parse("sphere:0,0,0,1,margin=-1"), "margin");
}

}  // namespace
}  // namespace xform
