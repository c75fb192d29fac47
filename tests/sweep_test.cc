// Copyright 2026 The xform Authors.

#include "src/sweep.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "xform/internal/math_kernels.h"

namespace xform::internal {
namespace {

// A random forest in pre-order: `n` instances, each a child of a recent one
// (or a root), so chains, wide fans and deep runs all occur; and a local
// matrix per instance.
struct Forest {
  std::vector<Index> parent;
  std::vector<uint32_t> subtree_size;
  std::vector<Matrix3x4> local;
  std::vector<Matrix3x4> world;

  Forest(size_t n, std::mt19937& rng, double root_chance, int recent) {
    parent.resize(n);
    std::uniform_real_distribution<float> u(-1, 1);
    for (size_t i = 0; i < n; ++i) {
      const bool root = i == 0 || std::bernoulli_distribution(root_chance)(rng);
      // The parent must be an ancestor-or-self of the previous instance for
      // the order to stay pre-order: walk up from i - 1 a random few steps.
      Index p = root ? kNoIndex : static_cast<Index>(i - 1);
      for (int up = rng() % recent; p != kNoIndex && up > 0; --up) {
        p = parent[p];
      }
      parent[i] = p;
    }
    subtree_size.assign(n, 1);
    for (size_t i = n; i-- > 0;) {
      if (parent[i] != kNoIndex) subtree_size[parent[i]] += subtree_size[i];
    }
    local.resize(n);
    for (Matrix3x4& m : local) {
      m = Matrix3x4();
      m.m[3] = u(rng);
      m.m[7] = u(rng);
      m.m[11] = u(rng);
      m.m[0] = 1 + u(rng) / 8;  // A little scale and shear: products differ.
      m.m[1] = u(rng) / 8;
    }
    world.assign(n, Matrix3x4());
    for (size_t i = 0; i < n; ++i) world[i] = Exact(i);
  }

  // The world matrix by definition, walking up.
  Matrix3x4 Exact(size_t i) const {
    return parent[i] == kNoIndex ? local[i]
                                 : Multiply(world[parent[i]], local[i]);
  }
  // The same product the sweep uses: this tests which instances are swept,
  // and in what order, not the arithmetic (world_test does that).
  static Matrix3x4 Multiply(const Matrix3x4& a, const Matrix3x4& b) {
    Matrix3x4 out;
    MultiplyAffine(a.m.data(), b.m.data(), out.m.data());
    return out;
  }

  SweepJob Job(absl::Span<const SweepRange> ranges) {
    return {.parent = parent,
            .subtree_size = subtree_size,
            .local = local,
            .ranges = ranges,
            .world = absl::MakeSpan(world)};
  }
};

// Independent ranges: whole subtrees of random roots, sorted and disjoint.
std::vector<SweepRange> RandomRanges(const Forest& f, size_t count,
                                     std::mt19937& rng) {
  std::vector<Index> roots;
  for (size_t k = 0; k < count; ++k) roots.push_back(rng() % f.parent.size());
  std::sort(roots.begin(), roots.end());
  std::vector<SweepRange> ranges;
  Index covered = 0;
  for (Index root : roots) {
    if (root < covered) continue;
    covered = root + f.subtree_size[root];
    ranges.push_back({root, covered});
  }
  return ranges;
}

// Every strategy (scattered single instances, many thin ranges, one big run
// split in two, a deep chain that cannot be split) recomputes exactly the
// instances in its ranges, from their parents, and nothing else.
TEST(SweepJobTest, RunRecomputesExactlyTheRanges) {
  std::mt19937 rng(11);
  struct Shape {
    size_t n;
    double root_chance;
    int recent;
    size_t ranges;
  };
  for (const Shape& shape : {Shape{50'000, 0.001, 3, 2'000},  // scattered
                             Shape{50'000, 0.2, 2, 300},      // thin ranges
                             Shape{50'000, 0.0001, 4, 1},     // one big run
                             Shape{20'000, 0, 1, 1}}) {       // a chain
    Forest forest(shape.n, rng, shape.root_chance, shape.recent);
    const std::vector<SweepRange> ranges =
        RandomRanges(forest, shape.ranges, rng);
    // Change the locals everywhere; only the ranges may pick that up.
    std::vector<Matrix3x4> before = forest.world;
    for (Matrix3x4& m : forest.local) m.m[3] += 1;
    const SweepJob job = forest.Job(ranges);
    ASSERT_TRUE(job.Validate());
    EXPECT_TRUE(job.Run());
    std::vector<bool> in_range(shape.n, false);
    for (const SweepRange& r : ranges) {
      for (Index i = r.first; i < r.last; ++i) in_range[i] = true;
    }
    for (size_t i = 0; i < shape.n; ++i) {
      if (in_range[i]) {
        ASSERT_EQ(forest.world[i], forest.Exact(i)) << "instance " << i;
      } else {
        ASSERT_EQ(forest.world[i], before[i]) << "instance " << i;
      }
    }
  }
}

TEST(SweepJobTest, RunReportsAnOverflow) {
  std::mt19937 rng(3);
  Forest forest(10, rng, 0, 1);  // A chain.
  forest.local[0].m[0] = 1e30f;  // Scaled 1e30 ...
  forest.local[1].m[3] = 1e10f;  // ... over a child at 1e10.
  const SweepRange all{0, 10};
  EXPECT_FALSE(forest.Job({&all, 1}).Run());
}

TEST(SweepJobTest, ValidateRefusesBadRanges) {
  std::mt19937 rng(5);
  Forest forest(100, rng, 0.1, 2);
  const std::vector<SweepRange> unsorted = {{50, 60}, {10, 20}};
  const std::vector<SweepRange> overlapping = {{10, 30}, {20, 40}};
  const std::vector<SweepRange> empty_range = {{10, 10}};
  const std::vector<SweepRange> out_of_bounds = {{90, 101}};
  for (const auto* ranges :
       {&unsorted, &overlapping, &empty_range, &out_of_bounds}) {
    EXPECT_FALSE(forest.Job(*ranges).Validate());
  }
  SweepJob short_world = forest.Job({});
  short_world.world = short_world.world.subspan(1);
  EXPECT_FALSE(short_world.Validate());
  EXPECT_TRUE(forest.Job({}).Validate());
}

}  // namespace
}  // namespace xform::internal
