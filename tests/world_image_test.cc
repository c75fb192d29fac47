// Copyright 2026 The xform Authors.
//
// A World through its image and back (what a snapshot file holds), and a
// batch that its commit check refuses (what a journal that cannot write
// does): both must leave the world exactly as it was, bit for bit.

#include "xform/world_image.h"

#include <cstring>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/random_batches.h"
#include "xform/world.h"

namespace xform {
namespace {

// Every entity's parent, local and world matrix, bitwise equal.
void ExpectSameWorld(const World& a, const World& b) {
  ASSERT_EQ(a.size(), b.size());
  WorldImage image;
  a.CopyImage(&image);
  for (EntityId e : image.entity) {
    ASSERT_TRUE(b.Has(e)) << e;
    EXPECT_EQ(*a.Parent(e), *b.Parent(e)) << e;
    const Transform la = *a.Local(e), lb = *b.Local(e);
    EXPECT_EQ(std::memcmp(&la, &lb, sizeof la), 0) << e;
    const Matrix3x4 wa = *a.WorldMatrix(e), wb = *b.WorldMatrix(e);
    EXPECT_EQ(std::memcmp(&wa, &wb, sizeof wa), 0) << e;
  }
}

World RandomWorld(uint64_t seed, int batches) {
  World world;
  testing::RandomBatches random(seed, 1);
  for (int k = 0; k < batches; ++k) random.Next(world, 20);
  return world;
}

TEST(WorldImageTest, RoundTripIsExact) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    World world = RandomWorld(seed, 60);
    FrameChanges changes;
    world.EndFrame(&changes);
    WorldImage image;
    world.CopyImage(&image);
    absl::StatusOr<World> back = World::FromImage(image);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_TRUE(back->CheckConsistency().ok());
    ExpectSameWorld(world, *back);
    EXPECT_EQ(world.frame(), back->frame());
    // And it goes on as the original does: the same batches, the same bits.
    testing::RandomBatches more(seed + 100, 1'000'000);
    World model = world;
    for (int k = 0; k < 20; ++k) {
      const std::vector<Command> batch = more.Next(model, 10);
      ASSERT_TRUE(world.Apply(batch).ok());
      ASSERT_TRUE(back->Apply(batch).ok());
    }
    ExpectSameWorld(world, *back);
  }
}

TEST(WorldImageTest, HalvesMakeTheWholeImage) {
  const World world = RandomWorld(9, 50);
  WorldImage whole, halves;
  world.CopyImage(&whole);
  const size_t half = world.size() / 2;
  world.CopyImage(&halves, 0, half);
  world.CopyImage(&halves, half, world.size());
  EXPECT_EQ(halves.entity, whole.entity);
  EXPECT_EQ(halves.parent, whole.parent);
  EXPECT_EQ(std::memcmp(halves.position.data(), whole.position.data(),
                        whole.size() * sizeof(glm::vec3)),
            0);
  EXPECT_EQ(std::memcmp(halves.rotation.data(), whole.rotation.data(),
                        whole.size() * sizeof(glm::quat)),
            0);
  EXPECT_EQ(std::memcmp(halves.scale.data(), whole.scale.data(),
                        whole.size() * sizeof(glm::vec3)),
            0);
  EXPECT_EQ(halves.frame, whole.frame);
}

TEST(WorldImageTest, KeepsTheFrameOpen) {
  World world = RandomWorld(7, 10);
  FrameChanges changes;
  for (int k = 0; k < 5; ++k) world.EndFrame(&changes);
  WorldImage image;
  world.CopyImage(&image);
  absl::StatusOr<World> back = World::FromImage(image);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->frame(), world.frame());
  back->EndFrame(&changes);  // Nothing changed in a rebuilt world's frame.
  EXPECT_TRUE(changes.empty());
}

TEST(WorldImageTest, RefusesWhatIsNoWorld) {
  World world = RandomWorld(3, 30);
  WorldImage good;
  world.CopyImage(&good);
  ASSERT_GT(good.size(), 4u);
  size_t child = 1;
  while (good.parent[child] == WorldImage::kRoot) ++child;
  const auto refused = [](const WorldImage& image) {
    absl::StatusOr<World> back = World::FromImage(image);
    return !back.ok() && back.status().code() == absl::StatusCode::kDataLoss;
  };
  WorldImage bad = good;
  bad.entity[2] = bad.entity[1];
  EXPECT_TRUE(refused(bad)) << "a repeated id";
  bad = good;
  bad.entity[0] = kNoEntity;
  EXPECT_TRUE(refused(bad)) << "id 0";
  bad = good;
  bad.parent[child] = static_cast<uint32_t>(child);
  EXPECT_TRUE(refused(bad)) << "its own parent";
  bad = good;
  bad.parent[0] = 3;
  EXPECT_TRUE(refused(bad)) << "a parent after its child";
  bad = good;
  bad.rotation[0] = glm::quat(2, 0, 0, 0);
  EXPECT_TRUE(refused(bad)) << "not a unit quaternion";
  bad = good;
  bad.scale[1].y = 0;
  EXPECT_TRUE(refused(bad)) << "a zero scale";
  bad = good;
  bad.position[1].x = std::nanf("");
  EXPECT_TRUE(refused(bad)) << "NaN";
  bad = good;
  bad.scale.pop_back();
  EXPECT_TRUE(refused(bad)) << "columns of different lengths";
  // Not pre-order: a root in the middle of another root's range.
  WorldImage chain;
  chain.entity = {1, 2, 3};
  chain.parent = {WorldImage::kRoot, WorldImage::kRoot, 0};
  chain.position.assign(3, glm::vec3(0));
  chain.rotation.assign(3, glm::quat(1, 0, 0, 0));
  chain.scale.assign(3, glm::vec3(1));
  EXPECT_TRUE(refused(chain)) << "not pre-order";
  chain.parent = {WorldImage::kRoot, 0, 0};
  EXPECT_FALSE(refused(chain));
}

// A refused commit takes the batch back whole, on both of Apply's paths.
TEST(WorldImageTest, ARefusedCommitChangesNothing) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    World world = RandomWorld(seed, 40);
    FrameChanges changes;
    world.EndFrame(&changes);
    testing::RandomBatches random(seed + 7, 1'000'000);
    // Part of the frame is written before the refused batch.
    World model = world;
    ASSERT_TRUE(world.Apply(random.Next(model, 5)).ok());
    const World before = world;
    World scratch = world;
    const std::vector<Command> batch = random.Next(scratch, 15);
    const absl::Status refused = world.Apply(
        batch, [] { return absl::UnavailableError("the journal is full"); });
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
    ASSERT_TRUE(world.CheckConsistency().ok());
    ExpectSameWorld(before, world);
    // The frame reports what the accepted batch did, not the refused one.
    World copy = before;
    FrameChanges want, got;
    copy.EndFrame(&want);
    world.EndFrame(&got);
    EXPECT_EQ(got.moved, want.moved);
    EXPECT_EQ(got.created, want.created);
    EXPECT_EQ(got.destroyed, want.destroyed);
    EXPECT_EQ(got.reparented, want.reparented);
    // A commit that agrees leaves the batch applied.
    bool asked = false;
    ASSERT_TRUE(world
                    .Apply(batch,
                           [&] {
                             asked = true;
                             return absl::OkStatus();
                           })
                    .ok());
    EXPECT_TRUE(asked);
    ExpectSameWorld(scratch, world);
  }
}

}  // namespace
}  // namespace xform
