// Copyright 2026 The xform Authors.

#include "xform/world.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace xform {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

Transform At(float x, float y, float z) {
  Transform t;
  t.position = {x, y, z};
  return t;
}

Transform Trs(glm::vec3 p, float angle, glm::vec3 axis, glm::vec3 s) {
  Transform t;
  t.position = p;
  t.rotation = glm::angleAxis(angle, glm::normalize(axis));
  t.scale = s;
  return t;
}

void ExpectMatrixNear(const Matrix3x4& a, const Matrix3x4& b,
                      float tol = 1e-4f) {
  for (int k = 0; k < 12; ++k)
    EXPECT_NEAR(a.m[k], b.m[k], tol) << "element " << k;
}

// Everything observable about a world, to show a refused batch changed nothing.
using Fingerprint =
    std::map<EntityId, std::tuple<EntityId, std::vector<float>, Matrix3x4>>;
Fingerprint Take(const World& w) {
  Fingerprint f;
  w.ForEach([&](EntityId e, EntityId parent, const Matrix3x4& m) {
    const Transform t = *w.Local(e);
    f[e] = {
        parent,
        {t.position.x, t.position.y, t.position.z, t.rotation.x, t.rotation.y,
         t.rotation.z, t.rotation.w, t.scale.x, t.scale.y, t.scale.z},
        m};
  });
  return f;
}

// A small scene: 1 -> {2 -> {4, 5}, 3}, and a second root 10 -> 11.
class SceneTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(world_
                    .CreateMany({{1, kNoEntity, At(1, 0, 0)},
                                 {2, 1, At(0, 1, 0)},
                                 {3, 1, At(0, 0, 1)},
                                 {4, 2, At(1, 0, 0)},
                                 {5, 2, At(2, 0, 0)},
                                 {10, kNoEntity, At(0, 0, 0)},
                                 {11, 10, At(5, 5, 5)}})
                    .ok());
    world_.EndFrame(&changes_);
    before_ = Take(world_);
  }

  // A refused call: the exact code, and no trace in the state or the frame.
  void ExpectRefused(const absl::Status& status, absl::StatusCode code) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_EQ(Take(world_), before_);
    world_.EndFrame(&changes_);
    EXPECT_TRUE(changes_.empty());
  }

  World world_;
  FrameChanges changes_;
  Fingerprint before_;
};

TEST_F(SceneTest, WorldIsParentWorldTimesLocal) {
  EXPECT_EQ(world_.WorldMatrix(5)->translation(), glm::vec3(3, 1, 0));
  EXPECT_EQ(world_.WorldMatrix(11)->translation(), glm::vec3(5, 5, 5));
  ASSERT_TRUE(world_
                  .SetLocal(1, Trs({0, 0, 0}, glm::radians(90.0f), {0, 0, 1},
                                   {2, 2, 2}))
                  .ok());
  // Rotating x onto y and doubling: 4 at parent-local (1, 1, 0) lands at (-2,
  // 2, 0).
  const glm::vec3 p = world_.WorldMatrix(4)->translation();
  EXPECT_NEAR(p.x, -2, 1e-5);
  EXPECT_NEAR(p.y, 2, 1e-5);
  EXPECT_NEAR(p.z, 0, 1e-5);
}

TEST_F(SceneTest, ReadsParentsChildrenSubtree) {
  EXPECT_EQ(*world_.Parent(4), 2u);
  EXPECT_EQ(*world_.Parent(1), kNoEntity);
  EXPECT_THAT(*world_.Children(1), UnorderedElementsAre(2, 3));
  EXPECT_THAT(*world_.Subtree(2), ElementsAre(2, 4, 5));
  EXPECT_TRUE(world_.Has(11));
  EXPECT_FALSE(world_.Has(12));
  EXPECT_EQ(world_.size(), 7u);
  EXPECT_EQ(world_.Local(3)->position, glm::vec3(0, 0, 1));
}

TEST_F(SceneTest, ABatchRecomputesExactlyTheUnionOfAffectedSubtrees) {
  const uint64_t before = world_.stats().recomputed;
  // 2's subtree {2, 4, 5} contains 4; 11 is alone; 1 is not touched.
  ASSERT_TRUE(world_
                  .SetLocals({{4, At(9, 0, 0)},
                              {2, At(0, 2, 0)},
                              {11, At(1, 1, 1)},
                              {4, At(8, 0, 0)}})
                  .ok());
  EXPECT_EQ(world_.stats().recomputed - before, 4u);
  EXPECT_EQ(world_.WorldMatrix(4)->translation(), glm::vec3(9, 2, 0));
}

TEST_F(SceneTest, SetWorldComputesTheLocalThatYieldsIt) {
  ASSERT_TRUE(
      world_.SetLocal(1, Trs({1, 2, 3}, 0.7f, {1, 1, 0}, {2, 2, 2})).ok());
  const Transform wanted = Trs({4, -5, 6}, 1.1f, {0, 1, 1}, {0.5f, 1.5f, 3.0f});
  ASSERT_TRUE(world_.SetWorld(4, wanted).ok());
  ExpectMatrixNear(*world_.WorldMatrix(4), ToMatrix(wanted));
}

TEST_F(SceneTest, LinkKeepsLocalOrWorldAsAsked) {
  const Matrix3x4 world_of_4 = *world_.WorldMatrix(4);
  ASSERT_TRUE(world_.Link(4, 11, LinkMode::kKeepWorld).ok());
  EXPECT_EQ(*world_.Parent(4), 11u);
  ExpectMatrixNear(*world_.WorldMatrix(4), world_of_4);

  ASSERT_TRUE(world_.Link(5, 10, LinkMode::kKeepLocal).ok());
  EXPECT_EQ(world_.Local(5)->position, glm::vec3(2, 0, 0));
  EXPECT_EQ(world_.WorldMatrix(5)->translation(), glm::vec3(2, 0, 0));

  ASSERT_TRUE(world_.Unlink(2, LinkMode::kKeepWorld).ok());
  EXPECT_EQ(*world_.Parent(2), kNoEntity);
  EXPECT_EQ(world_.WorldMatrix(2)->translation(), glm::vec3(1, 1, 0));
  EXPECT_THAT(*world_.Children(1), ElementsAre(3));
}

TEST_F(SceneTest, DestroySubtreeOrReparentChildren) {
  ASSERT_TRUE(world_.Destroy(2, DestroyMode::kReparentChildren).ok());
  EXPECT_FALSE(world_.Has(2));
  EXPECT_EQ(*world_.Parent(4), 1u);
  EXPECT_EQ(world_.WorldMatrix(4)->translation(), glm::vec3(2, 1, 0));
  EXPECT_THAT(*world_.Children(1), UnorderedElementsAre(3, 4, 5));

  ASSERT_TRUE(world_.Destroy(1, DestroyMode::kSubtree).ok());
  EXPECT_EQ(world_.size(), 2u);
  EXPECT_FALSE(world_.Has(5));
  world_.EndFrame(&changes_);
  EXPECT_THAT(changes_.destroyed, UnorderedElementsAre(1, 2, 3, 4, 5));
  EXPECT_TRUE(changes_.reparented.empty());  // 4 and 5 went with 1.
}

TEST_F(SceneTest, StructuralChangesAreNetMovesAreWhatChangedInTheFrame) {
  // Created and destroyed within the frame: never seen.
  ASSERT_TRUE(world_.Create(20, 1, At(1, 1, 1)).ok());
  ASSERT_TRUE(world_.Destroy(20).ok());
  // Relinked and linked back (keeping locals): no reparent, no net move.
  ASSERT_TRUE(world_.Link(5, 10).ok());
  ASSERT_TRUE(world_.Link(5, 2).ok());
  // Setting a local to its current value changes no matrix: not moved.
  ASSERT_TRUE(world_.SetLocal(3, At(0, 0, 1)).ok());
  world_.EndFrame(&changes_);
  EXPECT_TRUE(changes_.created.empty());
  EXPECT_TRUE(changes_.destroyed.empty());
  EXPECT_TRUE(changes_.reparented.empty());
  // 5 moved and came back: listed once, with its (unchanged) matrix.
  EXPECT_THAT(changes_.moved, ElementsAre(5));
  EXPECT_EQ(changes_.moved_world[3], world_.WorldMatrix(5)->m[3]);

  ASSERT_TRUE(world_.SetLocal(2, At(0, 3, 0)).ok());
  ASSERT_TRUE(world_.Create(21, 4, At(0, 0, 0)).ok());
  const uint64_t frame = world_.frame();
  world_.EndFrame(&changes_);
  EXPECT_EQ(changes_.frame, frame);
  EXPECT_EQ(world_.frame(), frame + 1);
  EXPECT_THAT(changes_.moved, UnorderedElementsAre(2, 4, 5, 21));
  EXPECT_THAT(changes_.created, ElementsAre(21));
  EXPECT_THAT(changes_.created_parent, ElementsAre(4));
  ASSERT_EQ(changes_.moved_world.size(), 12 * changes_.moved.size());
  for (size_t k = 0; k < changes_.moved.size(); ++k) {
    EXPECT_EQ(changes_.MovedWorld(k), *world_.WorldMatrix(changes_.moved[k]));
  }
}

TEST_F(SceneTest, DestroyedAndCreatedAgainIsNotACreation) {
  ASSERT_TRUE(world_.Destroy(3).ok());
  ASSERT_TRUE(world_.Create(3, 10, At(0, 0, 1)).ok());
  world_.EndFrame(&changes_);
  EXPECT_TRUE(changes_.created.empty());
  EXPECT_TRUE(changes_.destroyed.empty());
  EXPECT_THAT(changes_.reparented, ElementsAre(3));
  EXPECT_THAT(changes_.reparented_parent, ElementsAre(10));
  EXPECT_THAT(changes_.moved, ElementsAre(3));  // Its parent moved it.
}

TEST_F(SceneTest, SwappingParentAndChildReplaysInOrder) {
  // 2 under 4 after 4 leaves 2: both reparented; 4 must be listed first.
  ASSERT_TRUE(world_.Apply({LinkOp{4, 1}, LinkOp{2, 4}}).ok());
  world_.EndFrame(&changes_);
  EXPECT_THAT(changes_.reparented, ElementsAre(4, 2));
  EXPECT_THAT(changes_.reparented_parent, ElementsAre(1, 4));
}

TEST_F(SceneTest, LaterCommandsSeeEarlierOnesInTheSameBatch) {
  ASSERT_TRUE(
      world_
          .Apply({CreateOp{30, 11, At(1, 0, 0)}, CreateOp{31, 30, At(1, 0, 0)},
                  LinkOp{2, 31}, SetLocalOp{31, At(2, 0, 0)},
                  DestroyOp{30, DestroyMode::kReparentChildren},
                  SetWorldOp{5, At(0, 0, 0)}})
          .ok());
  EXPECT_EQ(*world_.Parent(31), 11u);
  EXPECT_EQ(*world_.Parent(2), 31u);
  EXPECT_EQ(world_.WorldMatrix(31)->translation(), glm::vec3(8, 5, 5));
  EXPECT_EQ(world_.WorldMatrix(4)->translation(), glm::vec3(9, 6, 5));
  ExpectMatrixNear(*world_.WorldMatrix(5), Matrix3x4{});
}

TEST(WorldTest, EntitiesInSeveralWorldsAreIndependent) {
  World a, b;
  ASSERT_TRUE(a.Create(7, kNoEntity, At(1, 0, 0)).ok());
  ASSERT_TRUE(b.Create(7, kNoEntity, At(2, 0, 0)).ok());
  ASSERT_TRUE(b.Create(8, 7, At(0, 1, 0)).ok());
  EXPECT_EQ(a.WorldMatrix(7)->translation(), glm::vec3(1, 0, 0));
  EXPECT_EQ(b.WorldMatrix(8)->translation(), glm::vec3(2, 1, 0));
  EXPECT_FALSE(a.Has(8));
}

TEST(WorldTest, MovingOnePercentOfRootsTouchesOnlyTheirSubtrees) {
  World world;
  std::vector<CreateOp> ops;
  for (EntityId root = 1; root <= 100; ++root) {
    ops.push_back({root * 1000, kNoEntity, At(1, 0, 0)});
    for (EntityId c = 1; c < 50; ++c)
      ops.push_back({root * 1000 + c, root * 1000, At(0, 1, 0)});
  }
  ASSERT_TRUE(world.CreateMany(ops).ok());
  const uint64_t before = world.stats().recomputed;
  ASSERT_TRUE(world.SetLocal(42000, At(3, 0, 0)).ok());
  EXPECT_EQ(world.stats().recomputed - before, 50u);
  EXPECT_EQ(world.WorldMatrix(42049)->translation(), glm::vec3(3, 1, 0));
}

// Big sweeps take two cursors and split subtrees to balance them, scattered
// ones take four ranges at a time or prefetch range by range, and many roots
// are radix-sorted; whatever the shape, each instance must end up exactly
// parent world * local, and each recomputed one be listed once.
enum class Tree { kOneDeepTree, kOneFlatRoot, kOneLongChain, kManySmallTrees };

class LargeSweepTest : public testing::TestWithParam<Tree> {
 protected:
  static constexpr EntityId kCount = 20'000;

  void SetUp() override {
    std::uniform_int_distribution<EntityId> back(1, 64);
    std::vector<CreateOp> ops;
    for (EntityId e = 1; e <= kCount; ++e) {
      EntityId parent = kNoEntity;
      switch (GetParam()) {
        case Tree::kOneDeepTree:
          if (e > 1) {
            const EntityId step = back(rng_);
            parent = e > step ? e - step : 1;
          }
          break;
        case Tree::kOneFlatRoot:
          parent = e == 1 ? kNoEntity : 1;
          break;
        case Tree::kOneLongChain:
          parent = e - 1;
          break;
        case Tree::kManySmallTrees:
          parent = e % 50 == 1 ? kNoEntity : e - 1 - (e % 3 == 0);
          break;
      }
      if (parent == kNoEntity) roots_.push_back(e);
      ops.push_back({e, parent, RandomTrs()});
    }
    ASSERT_TRUE(world_.CreateMany(ops).ok());
    world_.EndFrame(&changes_);
  }

  Transform RandomTrs() {
    return Trs({u_(rng_), u_(rng_), u_(rng_)}, u_(rng_) * 3,
               {u_(rng_), u_(rng_), 1}, {1 + u_(rng_) / 10, 1, 1});
  }

  // Sets `entities` (in the order given) and checks the whole world and the
  // frame's moved list against the union of their subtrees.
  void MoveAndCheck(const std::vector<EntityId>& entities) {
    std::vector<SetLocalOp> moves;
    std::set<EntityId> subtrees;
    for (EntityId e : entities) {
      moves.push_back({e, RandomTrs()});
      const std::vector<EntityId> subtree = *world_.Subtree(e);
      subtrees.insert(subtree.begin(), subtree.end());
    }
    const uint64_t before = world_.stats().recomputed;
    ASSERT_TRUE(world_.SetLocals(moves).ok());
    EXPECT_EQ(world_.stats().recomputed - before, subtrees.size());
    int wrong = 0;
    for (EntityId e = 1; e <= kCount && wrong < 5; ++e) {
      const EntityId parent = *world_.Parent(e);
      const Matrix3x4 parent_world =
          parent == kNoEntity ? Matrix3x4{} : *world_.WorldMatrix(parent);
      const Matrix3x4 expected =
          Multiply(parent_world, ToMatrix(*world_.Local(e)));
      if (!(*world_.WorldMatrix(e) == expected)) {
        ADD_FAILURE() << "entity " << e << " is not parent world * local";
        ++wrong;
      }
    }
    world_.EndFrame(&changes_);
    EXPECT_EQ(changes_.moved.size(), subtrees.size()) << "listed twice?";
    EXPECT_EQ(std::set<EntityId>(changes_.moved.begin(), changes_.moved.end()),
              subtrees);
  }

  // Appends `count` random entities, perhaps repeated or nested.
  void AddRandomEntities(int count, std::vector<EntityId>* out) {
    std::uniform_int_distribution<EntityId> any(1, kCount);
    for (int k = 0; k < count; ++k) out->push_back(any(rng_));
  }

  // Each of `entities` once, in random order.
  std::vector<EntityId> DistinctShuffled(std::vector<EntityId> entities) {
    std::sort(entities.begin(), entities.end());
    entities.erase(std::unique(entities.begin(), entities.end()),
                   entities.end());
    std::shuffle(entities.begin(), entities.end(), rng_);
    return entities;
  }

  std::mt19937 rng_{5};
  std::uniform_real_distribution<float> u_{-1, 1};
  World world_;
  FrameChanges changes_;
  std::vector<EntityId> roots_;
};

TEST_P(LargeSweepTest, MovingEveryRootRecomputesEverything) {
  MoveAndCheck(roots_);
  EXPECT_EQ(changes_.moved.size(), kCount);
}

TEST_P(LargeSweepTest, ScatteredMovesRecomputeTheirSubtrees) {
  // A physics step: thousands of entities in no order, some nested.
  std::vector<EntityId> entities;
  AddRandomEntities(3000, &entities);
  MoveAndCheck(DistinctShuffled(std::move(entities)));
}

TEST_P(LargeSweepTest, AFewSubtreesScatteredOverTheWorldRecompute) {
  // A few percent of the roots, as a game moves some of its objects, plus a
  // few entities inside other trees: many mid-sized ranges, far apart.
  std::vector<EntityId> entities;
  std::bernoulli_distribution one_in_ten(0.1);
  for (EntityId root : roots_) {
    if (one_in_ten(rng_)) entities.push_back(root);
  }
  AddRandomEntities(40, &entities);
  MoveAndCheck(DistinctShuffled(std::move(entities)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, LargeSweepTest,
                         testing::Values(Tree::kOneDeepTree, Tree::kOneFlatRoot,
                                         Tree::kOneLongChain,
                                         Tree::kManySmallTrees));

TEST_F(SceneTest, SettingTheSameLocalRecomputesAndListsNothing) {
  const uint64_t before = world_.stats().recomputed;
  ASSERT_TRUE(
      world_.SetLocals({{2, *world_.Local(2)}, {11, At(5, 5, 5)}}).ok());
  EXPECT_EQ(world_.stats().recomputed, before);
  world_.EndFrame(&changes_);
  EXPECT_TRUE(changes_.empty());
  // A different local does move its subtree.
  ASSERT_TRUE(world_.SetLocal(11, At(5, 5, 6)).ok());
  world_.EndFrame(&changes_);
  EXPECT_THAT(changes_.moved, ElementsAre(11));
}

// The header promises concurrent const calls are safe (TSan checks this in
// the xform_core_test_tsan build).
TEST(WorldTest, ConcurrentReadsOfAConstWorldAgree) {
  World world;
  std::vector<CreateOp> ops;
  for (EntityId e = 1; e <= 2000; ++e)
    ops.push_back({e, e > 10 ? e / 10 : kNoEntity, At(1, 0, 0)});
  ASSERT_TRUE(world.CreateMany(ops).ok());
  const World& reader = world;
  std::vector<std::thread> threads;
  std::vector<double> sums(4, 0.0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (EntityId e = 1; e <= 2000; ++e) {
        sums[t] += reader.WorldMatrix(e)->m[3];
        sums[t] += static_cast<double>(reader.Children(e)->size());
        sums[t] += static_cast<double>(*reader.Parent(e));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(sums[t], sums[0]);
}

TEST(WorldTest, MemoryIsAccounted) {
  World world;
  std::vector<CreateOp> ops;
  for (EntityId e = 1; e <= 1000; ++e)
    ops.push_back({e, e > 1 ? e - 1 : kNoEntity, At(1, 0, 0)});
  ASSERT_TRUE(world.CreateMany(ops).ok());
  EXPECT_GT(world.MemoryBytes(),
            1000 * (sizeof(Matrix3x4) + sizeof(Transform)));
  EXPECT_NEAR(world.WorldMatrix(1000)->translation().x, 1000.0f, 1e-3f);
}

// Ids are the writer's: dense ones go in an array, any other (a hash, a
// handle with high bits) in a hash map beside it (internal/id_index.h).
// Both kinds work alike, and far ones do not grow the array.
TEST(WorldTest, IdsFarApartWorkAndTakeNoMoreThanTheyNeed) {
  const std::vector<EntityId> far = {uint64_t{1} << 40, (uint64_t{1} << 63) + 5,
                                     ~uint64_t{0}, 123'456'789'012};
  World world;
  std::vector<CreateOp> ops = {{1, kNoEntity, At(1, 0, 0)}};
  EntityId parent = 1;
  for (EntityId e : far) {
    ops.push_back({e, parent, At(1, 0, 0)});
    parent = e;
  }
  ASSERT_TRUE(world.CreateMany(ops).ok());
  ASSERT_TRUE(world.CheckConsistency().ok()) << world.CheckConsistency();
  EXPECT_NEAR(world.WorldMatrix(far.back())->translation().x, 5.0f, 1e-5f);
  EXPECT_LT(world.MemoryBytes(), 64u << 10);

  // A far id twice in one batch is refused like a dense one, and the batch
  // leaves nothing claimed.
  EXPECT_EQ(world
                .CreateMany({{uint64_t{1} << 50, kNoEntity, {}},
                             {uint64_t{1} << 50, kNoEntity, {}}})
                .code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(world.Has(uint64_t{1} << 50));

  ASSERT_TRUE(world.SetLocals({{far[1], At(0, 2, 0)}}).ok());
  EXPECT_NEAR(world.WorldMatrix(far.back())->translation().y, 2.0f, 1e-5f);
  ASSERT_TRUE(world.Destroy(far[2], DestroyMode::kReparentChildren).ok());
  EXPECT_FALSE(world.Has(far[2]));
  EXPECT_EQ(*world.Parent(far[3]), far[1]);
  ASSERT_TRUE(world.Create(far[2], far[3], At(0, 0, 3)).ok());
  ASSERT_TRUE(world.CheckConsistency().ok()) << world.CheckConsistency();
  EXPECT_NEAR(world.WorldMatrix(far[2])->translation().z, 3.0f, 1e-5f);
}

// ---------------------------------------------------------------------------
// Bad input: one test per case, each showing the code and that nothing changed.

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Finite numbers whose products overflow: refused by every path (the
// set-local fast path, creations, general batches with links and destroys),
// and taken back without a trace, in the state or in the frame's changes.
class OverflowTest : public testing::Test {
 protected:
  void SetUp() override {
    Transform huge;
    huge.scale = {1e30f, 1e30f, 1e30f};
    ASSERT_TRUE(world_
                    .CreateMany({{1, kNoEntity, huge},
                                 {2, 1, At(1, 0, 0)},
                                 {3, 2, At(0, 1, 0)},
                                 {4, kNoEntity, At(3e38f, 0, 0)},
                                 {5, kNoEntity, At(1e10f, 0, 0)},
                                 {6, 5, At(1, 1, 1)},
                                 {7, 4, At(-1, 0, 0)},
                                 {8, kNoEntity, At(2, 0, 0)},
                                 {9, 8, At(0, 2, 0)},
                                 {10, 9, At(0, 0, 2)}})
                    .ok());
    world_.EndFrame(&changes_);
    before_ = Take(world_);
  }
  void ExpectTakenBack(const absl::Status& status) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("non-finite"), std::string::npos);
    EXPECT_EQ(Take(world_), before_);
    EXPECT_TRUE(world_.CheckConsistency().ok()) << world_.CheckConsistency();
    world_.EndFrame(&changes_);
    EXPECT_TRUE(changes_.empty()) << changes_.moved.size() << " moved";
  }
  World world_;
  FrameChanges changes_;
  Fingerprint before_;
};

TEST_F(OverflowTest, SetLocalsThatOverflowAreTakenBack) {
  ExpectTakenBack(world_.SetLocal(2, At(1e10f, 0, 0)));
  // A batch of several, the bad one last; an entity set twice.
  ExpectTakenBack(world_.SetLocals({{8, At(5, 0, 0)},
                                    {9, At(1, 0, 0)},
                                    {9, At(2, 0, 0)},
                                    {7, At(3e38f, 0, 0)}}));
  // A world of its own that is finite, with children that are not.
  Transform world;
  world.scale = {3e38f, 3e38f, 3e38f};
  ExpectTakenBack(world_.SetWorld(8, world));
}

TEST_F(OverflowTest, CreationsThatOverflowAreTakenBack) {
  ExpectTakenBack(world_.Create(20, 1, At(1e10f, 0, 0)));
  ExpectTakenBack(world_.Create(20, 4, At(3e38f, 0, 0)));
  ExpectTakenBack(world_.CreateMany(
      {{20, 8, At(1, 0, 0)}, {21, 20, At(1, 0, 0)}, {22, 1, At(0, 0, 1e9f)}}));
  ExpectTakenBack(world_.Apply(
      {CreateOp{20, kNoEntity, {}}, CreateOp{21, 20, {}},
       LinkOp{20, 1, LinkMode::kKeepLocal}, SetLocalOp{21, At(1e9f, 0, 0)}}));
}

TEST_F(OverflowTest, GeneralBatchesThatOverflowAreTakenBack) {
  ExpectTakenBack(world_.Link(5, 1));  // 1e10 under a 1e30 scale.
  ExpectTakenBack(world_.Apply(
      {DestroyOp{9, DestroyMode::kReparentChildren},
       DestroyOp{6, DestroyMode::kSubtree}, LinkOp{8, 4, LinkMode::kKeepLocal},
       SetLocalOp{2, At(2, 0, 0)}, LinkOp{7, 1, LinkMode::kKeepWorld},
       SetLocalOp{3, At(0, 1e10f, 0)}}));
}

// Entities the batch both created and destroyed come back in the undo and
// go again: nothing of them may be listed (this crashed once).
TEST_F(OverflowTest, CreatedAndDestroyedInTheBatchAreTakenBack) {
  ExpectTakenBack(world_.Apply(
      {CreateOp{20, kNoEntity, {}}, CreateOp{21, 20, {}},
       DestroyOp{20, DestroyMode::kSubtree}, SetLocalOp{2, At(1e10f, 0, 0)}}));
}

// A refused batch that destroys what an earlier batch of the frame moved
// leaves that move listed.
TEST_F(OverflowTest, EarlierMovesOfTheFrameStayListed) {
  ASSERT_TRUE(world_.SetLocal(9, At(0, 3, 0)).ok());
  const Fingerprint moved = Take(world_);
  const absl::Status refused = world_.Apply(
      {DestroyOp{8, DestroyMode::kSubtree}, SetLocalOp{2, At(1e10f, 0, 0)}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Take(world_), moved);
  world_.EndFrame(&changes_);
  EXPECT_TRUE(changes_.created.empty());
  EXPECT_TRUE(changes_.destroyed.empty());
  EXPECT_TRUE(changes_.reparented.empty());
  std::set<EntityId> listed(changes_.moved.begin(), changes_.moved.end());
  EXPECT_EQ(listed, (std::set<EntityId>{9, 10}));
}

// Each set-world walks from its entity to the root: a batch of them on the
// leaf of a deep chain is bounded in all, and past the bound taken back whole
// (including the links before it, here enough to restructure the world).
TEST(WorldTest, WalksToTheRootAreBoundedPerBatch) {
  constexpr EntityId kDepth = 10'000;
  constexpr EntityId kLeaf = kDepth;
  constexpr EntityId kOther = kDepth + 1;
  World world;
  std::vector<CreateOp> chain;
  for (EntityId e = 1; e <= kDepth; ++e) {
    chain.push_back({e, e > 1 ? e - 1 : kNoEntity, At(0, 1, 0)});
  }
  chain.push_back({kOther, kNoEntity, At(5, 0, 0)});
  for (EntityId e = kOther + 1; e <= kOther + 20; ++e) {
    chain.push_back({e, kNoEntity, {}});
  }
  ASSERT_TRUE(world.CreateMany(chain).ok());
  world.set_max_ancestor_walk(100'000);
  FrameChanges changes;
  world.EndFrame(&changes);

  // Five walk 9,999 ancestors each, 49,995 in all: within the bound.
  std::vector<Command> five(5, SetWorldOp{kLeaf, At(1, 2, 3)});
  ASSERT_TRUE(world.Apply(five).ok());
  EXPECT_EQ(world.WorldMatrix(kLeaf)->translation(), glm::vec3(1, 2, 3));
  world.EndFrame(&changes);
  const Fingerprint before = Take(world);

  std::vector<Command> many;
  for (EntityId e = kOther + 1; e <= kOther + 20; ++e) {
    many.push_back(LinkOp{e, kOther});
  }
  many.push_back(SetLocalOp{kOther, At(7, 0, 0)});
  // The links' cycle checks walk one each; the tenth set-world (command 30)
  // brings the count to 20 + 10 x 9,999 = 100,010.
  for (int k = 0; k < 20; ++k) many.push_back(SetWorldOp{kLeaf, At(k, 0, 0)});
  const absl::Status refused = world.Apply(many);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("command 30:"), std::string::npos)
      << refused;
  EXPECT_EQ(Take(world), before);
  EXPECT_TRUE(world.CheckConsistency().ok()) << world.CheckConsistency();
  world.EndFrame(&changes);
  EXPECT_TRUE(changes.empty());
}

// A link's cycle check walks up from the new parent through what the batch
// re-parented: linking k roots into a chain walks k^2/2 (65,536 of them:
// 2.1e9 steps, half a minute). The same bound refuses it before anything
// applies.
TEST(WorldTest, CycleChecksWalksAreBoundedPerBatch) {
  World world;
  std::vector<CreateOp> roots;
  for (EntityId e = 1; e <= 200; ++e) roots.push_back({e, kNoEntity, {}});
  ASSERT_TRUE(world.CreateMany(roots).ok());
  FrameChanges changes;
  world.EndFrame(&changes);
  world.set_max_ancestor_walk(1'000);
  const Fingerprint before = Take(world);
  std::vector<Command> chain;
  for (EntityId e = 2; e <= 200; ++e) chain.push_back(LinkOp{e, e - 1});
  const absl::Status refused = world.Apply(chain);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("(link entity"), std::string::npos)
      << refused;
  EXPECT_EQ(Take(world), before);
  world.EndFrame(&changes);
  EXPECT_TRUE(changes.empty());
  // Forty links walk 40 x 41 / 2 = 820.
  chain.resize(40);
  EXPECT_TRUE(world.Apply(chain).ok());
}

TEST_F(SceneTest, UnknownEntityIsNotFound) {
  ExpectRefused(world_.SetLocal(99, At(0, 0, 0)), absl::StatusCode::kNotFound);
  ExpectRefused(world_.SetWorld(99, At(0, 0, 0)), absl::StatusCode::kNotFound);
  ExpectRefused(world_.Destroy(99), absl::StatusCode::kNotFound);
  ExpectRefused(world_.Link(99, 1), absl::StatusCode::kNotFound);
  EXPECT_EQ(world_.Local(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(world_.WorldMatrix(99).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(world_.Parent(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(world_.Children(99).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SceneTest, UnknownParentIsNotFound) {
  ExpectRefused(world_.Create(50, 99, At(0, 0, 0)),
                absl::StatusCode::kNotFound);
  ExpectRefused(world_.Link(4, 99), absl::StatusCode::kNotFound);
}

TEST_F(SceneTest, DuplicateCreateIsAlreadyExists) {
  ExpectRefused(world_.Create(3, kNoEntity, At(0, 0, 0)),
                absl::StatusCode::kAlreadyExists);
}

TEST_F(SceneTest, DuplicateInOneBulkCreateIsAlreadyExistsAndRollsBack) {
  ExpectRefused(world_.CreateMany(
                    {{40, kNoEntity, {}}, {41, 40, {}}, {40, kNoEntity, {}}}),
                absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(world_.Has(40));
  EXPECT_TRUE(world_.Create(40, kNoEntity, {}).ok());  // The id is free again.
}

TEST_F(SceneTest, NonFiniteNumbersAreInvalid) {
  ExpectRefused(world_.SetLocal(4, At(kNan, 0, 0)),
                absl::StatusCode::kInvalidArgument);
  Transform inf_scale;
  inf_scale.scale.y = kInf;
  ExpectRefused(world_.SetLocal(4, inf_scale),
                absl::StatusCode::kInvalidArgument);
  Transform nan_rotation;
  nan_rotation.rotation.x = kNan;
  ExpectRefused(world_.Create(50, 1, nan_rotation),
                absl::StatusCode::kInvalidArgument);
  ExpectRefused(world_.SetWorld(4, At(0, -kInf, 0)),
                absl::StatusCode::kInvalidArgument);
}

TEST_F(SceneTest, ZeroScaleIsInvalid) {
  Transform flat;
  flat.scale = {1, 0, 1};
  ExpectRefused(world_.SetLocal(4, flat), absl::StatusCode::kInvalidArgument);
  flat.scale = {1, 1, -1e-9f};
  ExpectRefused(world_.Create(50, kNoEntity, flat),
                absl::StatusCode::kInvalidArgument);
}

TEST_F(SceneTest, NonUnitRotationIsInvalid) {
  Transform t;
  t.rotation = glm::quat(1.1f, 0, 0, 0);
  ExpectRefused(world_.SetLocal(4, t), absl::StatusCode::kInvalidArgument);
  t.rotation = glm::quat(0, 0, 0, 0);
  ExpectRefused(world_.SetWorld(4, t), absl::StatusCode::kInvalidArgument);
  // Within tolerance is accepted and stored normalized.
  t.rotation = glm::quat(1.0002f, 0, 0, 0);
  ASSERT_TRUE(world_.SetLocal(4, t).ok());
  EXPECT_FLOAT_EQ(glm::length(world_.Local(4)->rotation), 1.0f);
}

TEST_F(SceneTest, ReservedIdZeroIsInvalid) {
  ExpectRefused(world_.Create(kNoEntity, 1, {}),
                absl::StatusCode::kInvalidArgument);
  ExpectRefused(world_.SetLocal(kNoEntity, {}),
                absl::StatusCode::kInvalidArgument);
  ExpectRefused(world_.Destroy(kNoEntity), absl::StatusCode::kInvalidArgument);
}

TEST_F(SceneTest, CycleIsFailedPrecondition) {
  ExpectRefused(world_.Link(1, 4), absl::StatusCode::kFailedPrecondition);
  ExpectRefused(world_.Link(2, 5), absl::StatusCode::kFailedPrecondition);
  // A cycle made by the batch's own earlier command.
  ExpectRefused(world_.Apply({LinkOp{10, 5}, LinkOp{1, 11}}),
                absl::StatusCode::kFailedPrecondition);
}

// The cycle check answers from the world's pre-order ranges where the batch
// left an entity's ancestry alone, and follows the batch where it did not.
TEST_F(SceneTest, CycleChecksFollowTheBatch) {
  // 4 comes under 1 directly when 2 goes keeping its children.
  ExpectRefused(world_.Apply({DestroyOp{2, DestroyMode::kReparentChildren},
                              LinkOp{1, 4}}),
                absl::StatusCode::kFailedPrecondition);
  // A new entity under 5, then 1 under it.
  ExpectRefused(world_.Apply({CreateOp{70, 5, {}}, LinkOp{1, 70}}),
                absl::StatusCode::kFailedPrecondition);
  // Not a cycle: 2 (with 4) moved under 10 first, so 1 may go under 4.
  ASSERT_TRUE(world_.Apply({LinkOp{2, 10}, LinkOp{1, 4}}).ok());
  EXPECT_EQ(*world_.Parent(1), 4u);
  EXPECT_EQ(*world_.Parent(2), 10u);
}

TEST_F(SceneTest, SelfParentIsFailedPrecondition) {
  ExpectRefused(world_.Link(3, 3), absl::StatusCode::kFailedPrecondition);
  ExpectRefused(world_.Create(60, 60, {}),
                absl::StatusCode::kFailedPrecondition);
}

TEST_F(SceneTest, ABatchIsValidatedWholeBeforeAnyOfItApplies) {
  // Valid commands first, a bad one last: none of them may land.
  ExpectRefused(world_.Apply({CreateOp{70, 1, At(1, 1, 1)},
                              SetLocalOp{4, At(5, 5, 5)}, DestroyOp{3},
                              LinkOp{11, 2}, SetLocalOp{4, At(kNan, 0, 0)}}),
                absl::StatusCode::kInvalidArgument);
  // A command about an entity an earlier command destroyed.
  ExpectRefused(
      world_.Apply({DestroyOp{2, DestroyMode::kSubtree}, SetLocalOp{5, {}}}),
      absl::StatusCode::kNotFound);
  ExpectRefused(world_.SetLocals({{4, At(1, 2, 3)}, {99, At(1, 2, 3)}}),
                absl::StatusCode::kNotFound);
}

TEST_F(SceneTest, ErrorsNameTheCommandAndEntity) {
  const absl::Status s = world_.Apply({SetLocalOp{4, {}}, LinkOp{1, 5}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("command 1"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("entity 1"));
}

}  // namespace
}  // namespace xform
