// Copyright 2026 The xform Authors.
//
// Core benchmarks on three 1,000,000-transform shapes, every local a random
// non-trivial TRS:
//   wide   1,000 roots with 999 children each
//   scene  node i's parent is a uniformly random node among the previous 64,
//          or none with probability 1% (fixed seed)
//   chains 10,000 chains of depth 100
// Each benchmark reports ns per transform (the `ns_per_transform` counter).
// Two baselines run on the same shapes in the same binary: BM_CopyFloor copies
// the bytes propagation reads and writes (this machine's memory-bandwidth
// floor for it), and BM_NaivePointerGraph updates a pointer-based scene graph
// recursively.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "glm/gtc/matrix_transform.hpp"
#include "glm/gtc/quaternion.hpp"
#include "tests/world_peer.h"
#include "tools/scenes.h"
#include "xform/internal/huge_page_allocator.h"
#include "xform/world.h"

namespace xform {
namespace {

constexpr size_t kTransforms = 1'000'000;

using Shape = SceneShape;
constexpr Shape kWide = SceneShape::kWide;
constexpr Shape kScene = SceneShape::kScene;
constexpr Shape kChains = SceneShape::kChains;

std::vector<CreateOp> MakeShape(Shape shape) {
  return MakeScene(shape, kTransforms);
}

// Built once per shape and shared: building 1M transforms per benchmark would
// dominate the run.
World& SharedWorld(Shape shape) {
  static std::unique_ptr<World> worlds[3];
  if (!worlds[static_cast<int>(shape)]) {
    worlds[static_cast<int>(shape)] = std::make_unique<World>();
    if (!worlds[static_cast<int>(shape)]->CreateMany(MakeShape(shape)).ok())
      std::abort();
    FrameChanges changes;
    worlds[static_cast<int>(shape)]->EndFrame(&changes);
  }
  return *worlds[static_cast<int>(shape)];
}

void SetNsPerTransform(benchmark::State& state,
                       double transforms_per_iteration) {
  state.counters["ns_per_transform"] = benchmark::Counter(
      transforms_per_iteration * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// What a structural change really costs: instances shifted per operation.
void SetRelocated(benchmark::State& state, uint64_t relocated) {
  state.counters["relocated"] =
      static_cast<double>(relocated) / static_cast<double>(state.iterations());
}

// Moves `roots` by alternating their positions, so every matrix below them
// really changes each iteration (an unchanged matrix is skipped by tracking).
std::vector<SetLocalOp> Toggle(World& world, const std::vector<EntityId>& roots,
                               int iteration) {
  std::vector<SetLocalOp> ops;
  ops.reserve(roots.size());
  for (EntityId root : roots) {
    Transform t = *world.Local(root);
    t.position.x += (iteration % 2 == 0) ? 1.0f : -1.0f;
    ops.push_back({root, t});
  }
  return ops;
}

// The median of paired ratios; sorts them.
double Median(std::vector<double>& ratios) {
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

// Closes the frame outside the timing, checking every instance was listed.
void EndFrameUntimed(benchmark::State& state, World& world,
                     FrameChanges* changes) {
  state.PauseTiming();
  world.EndFrame(changes);
  if (changes->moved.size() != kTransforms) {
    state.SkipWithError("not all moved");
  }
  state.ResumeTiming();
}

void BM_Propagate(benchmark::State& state, Shape shape) {
  World& world = SharedWorld(shape);
  const std::vector<EntityId> roots = Roots(MakeShape(shape));
  FrameChanges changes;
  int iteration = 0;
  for (auto _ : state) {
    state.PauseTiming();
    WorldPeer::SetLocalsWithoutPropagating(world,
                                           Toggle(world, roots, iteration++));
    state.ResumeTiming();
    WorldPeer::Propagate(world);
    EndFrameUntimed(state, world, &changes);
  }
  SetNsPerTransform(state, kTransforms);
}

// Every root moved through the public call: the set-locals (a lookup and a
// new local matrix per root) and then the same propagation as BM_Propagate.
void BM_MoveAllRoots(benchmark::State& state, Shape shape) {
  World& world = SharedWorld(shape);
  const std::vector<EntityId> roots = Roots(MakeShape(shape));
  FrameChanges changes;
  int iteration = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<SetLocalOp> ops = Toggle(world, roots, iteration++);
    state.ResumeTiming();
    if (!world.SetLocals(ops).ok()) state.SkipWithError("set locals failed");
    EndFrameUntimed(state, world, &changes);
  }
  state.counters["roots"] = static_cast<double>(roots.size());
  SetNsPerTransform(state, kTransforms);
}

// Propagation alone, as BM_Propagate: the 1% of roots get their new locals
// outside the timing.
void BM_PropagateOnePercentRoots(benchmark::State& state, Shape shape) {
  World& world = SharedWorld(shape);
  std::vector<EntityId> roots = Roots(MakeShape(shape));
  std::mt19937 rng(7);
  FrameChanges changes;
  uint64_t recomputed = 0;
  int iteration = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::shuffle(roots.begin(), roots.end(), rng);
    const std::vector<EntityId> moved(roots.begin(),
                                      roots.begin() + roots.size() / 100);
    WorldPeer::SetLocalsWithoutPropagating(world,
                                           Toggle(world, moved, iteration++));
    const uint64_t before = world.stats().recomputed;
    state.ResumeTiming();
    WorldPeer::Propagate(world);
    state.PauseTiming();
    recomputed += world.stats().recomputed - before;
    world.EndFrame(&changes);
    state.ResumeTiming();
  }
  const double per_iteration =
      static_cast<double>(recomputed) / static_cast<double>(state.iterations());
  state.counters["recomputed"] = per_iteration;
  // Per node actually recomputed: compare with BM_Propagate's per-node cost.
  SetNsPerTransform(state, per_iteration);
}

void BM_BatchSetLocal10k(benchmark::State& state, Shape shape) {
  World& world = SharedWorld(shape);
  std::mt19937 rng(11);
  std::uniform_int_distribution<EntityId> pick(1, kTransforms);
  FrameChanges changes;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<SetLocalOp> ops(10'000);
    for (SetLocalOp& op : ops) op = {pick(rng), RandomTransform(rng)};
    state.ResumeTiming();
    if (!world.SetLocals(ops).ok()) state.SkipWithError("set locals failed");
    float sum = 0;
    for (const SetLocalOp& op : ops) sum += world.WorldMatrix(op.entity)->m[3];
    benchmark::DoNotOptimize(sum);
    state.PauseTiming();
    world.EndFrame(&changes);
    state.ResumeTiming();
  }
  SetNsPerTransform(state,
                    10'000);  // Per set-local, its propagation and a read.
}

void BM_BulkCreate(benchmark::State& state) {
  const std::vector<CreateOp> ops = MakeShape(kScene);
  size_t bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto world = std::make_unique<World>();
    state.ResumeTiming();
    if (!world->CreateMany(ops).ok()) state.SkipWithError("create failed");
    state.PauseTiming();
    FrameChanges changes;
    world->EndFrame(&changes);
    bytes = world->MemoryBytes();
    world.reset();
    state.ResumeTiming();
  }
  state.counters["bytes_per_transform"] =
      static_cast<double>(bytes) / static_cast<double>(kTransforms);
  state.SetLabel("scene");
  SetNsPerTransform(state, kTransforms);
}

// Subtrees of exactly 1,000 nodes: the roots of `wide`.
void BM_Reparent1k(benchmark::State& state) {
  World& world = SharedWorld(kWide);
  std::mt19937 rng(13);
  std::uniform_int_distribution<EntityId> tree(0, 999);
  FrameChanges changes;
  uint64_t relocated = 0;  // Instances moved in memory to keep pre-order.
  for (auto _ : state) {
    state.PauseTiming();
    const EntityId moved = tree(rng) * 1000 + 1;
    EntityId host = tree(rng) * 1000 + 1;
    if (host == moved) host = (host + 1000) % kTransforms;
    const EntityId new_parent =
        host + 1 + tree(rng) % 999;  // A leaf of another tree.
    const uint64_t before = world.stats().relocated;
    state.ResumeTiming();
    if (!world.Link(moved, new_parent).ok()) state.SkipWithError("link failed");
    state.PauseTiming();
    relocated += world.stats().relocated - before;
    if (!world.Unlink(moved).ok()) state.SkipWithError("unlink failed");
    world.EndFrame(&changes);
    state.ResumeTiming();
  }
  state.SetLabel("wide, 1000-node subtree under a leaf of another tree");
  SetRelocated(state, relocated);
  SetNsPerTransform(state, 1000);
}

// One batch linking 5,000 roots under the leaf of a chain `depth` deep (1:
// under a root): validation's cycle check and the subtree sizes, per link.
// Entities 1..depth, each the child of the one before.
std::vector<CreateOp> Chain(EntityId depth) {
  std::vector<CreateOp> chain;
  for (EntityId e = 1; e <= depth; ++e) {
    chain.push_back({e, e > 1 ? e - 1 : kNoEntity, {}});
  }
  return chain;
}

void BM_LinkBatchUnderLeaf(benchmark::State& state) {
  const EntityId depth = static_cast<EntityId>(state.range(0));
  constexpr EntityId kLinks = 5'000;
  std::vector<Command> links;
  for (EntityId k = 1; k <= kLinks; ++k) {
    links.push_back(LinkOp{depth + k, depth});
  }
  for (auto _ : state) {
    state.PauseTiming();
    World world;
    std::vector<CreateOp> ops = Chain(depth);
    for (EntityId e = depth + 1; e <= depth + kLinks; ++e) {
      ops.push_back({e, kNoEntity, {}});
    }
    if (!world.CreateMany(ops).ok()) state.SkipWithError("create failed");
    state.ResumeTiming();
    if (!world.Apply(links).ok()) state.SkipWithError("links failed");
  }
  state.SetLabel(
      absl::StrCat("5,000 links under the leaf of a chain ", depth, " deep"));
}

// One batch of links, each taking one of the scene's first entities under its
// last root, the latest first (ids n down to 1): shifting the columns moves
// nearly the whole world for each. Arg 1: 1 restructures past kRestructureAt
// links (as xformd does), 0 never.
void BM_RelinkBatch(benchmark::State& state) {
  const std::vector<CreateOp> scene = MakeShape(kScene);
  const EntityId last_root = Roots(scene).back();
  std::vector<Command> links;
  for (EntityId e = static_cast<EntityId>(state.range(0)); e >= 1; --e) {
    links.push_back(LinkOp{e, last_root});
  }
  uint64_t relocated = 0;
  for (auto _ : state) {
    state.PauseTiming();
    World world;
    if (!world.CreateMany(scene).ok()) state.SkipWithError("create failed");
    if (state.range(1) == 0) {
      WorldPeer::RestructureAt(world, std::numeric_limits<size_t>::max());
    }
    const uint64_t before = world.stats().relocated;
    state.ResumeTiming();
    if (!world.Apply(links).ok()) state.SkipWithError("links failed");
    state.PauseTiming();
    relocated += world.stats().relocated - before;
    state.ResumeTiming();
  }
  SetRelocated(state, relocated);
  state.SetLabel(state.range(1) ? "restructuring" : "shifting each");
}

// One batch creating 5,000 entities, each under one of the 5,000 deepest
// nodes of a chain: one run of creates in 5,000 blocks.
void BM_SpawnUnderChain(benchmark::State& state) {
  const EntityId depth = static_cast<EntityId>(state.range(0));
  constexpr EntityId kSpawned = 5'000;
  std::vector<Command> creates;
  for (EntityId k = 0; k < kSpawned; ++k) {
    creates.push_back(CreateOp{depth + 1 + k, depth - k % depth, {}});
  }
  for (auto _ : state) {
    state.PauseTiming();
    World world;
    if (!world.CreateMany(Chain(depth)).ok()) {
      state.SkipWithError("create failed");
    }
    state.ResumeTiming();
    if (!world.Apply(creates).ok()) state.SkipWithError("spawn failed");
  }
  state.SetLabel(
      absl::StrCat("5,000 creates under the deepest nodes of a "
                   "chain ",
                   depth, " deep"));
}

// One batch of 1,000 set-worlds on the leaf of a chain: each walks the chain
// to its root (the walk --max_ancestor_walk bounds). Reports ns a step.
void BM_SetWorldsOnADeepLeaf(benchmark::State& state) {
  const EntityId depth = static_cast<EntityId>(state.range(0));
  constexpr int kSets = 1'000;
  World world;
  if (!world.CreateMany(Chain(depth)).ok())
    state.SkipWithError("create failed");
  std::vector<Command> sets;
  for (int k = 0; k < kSets; ++k) {
    Transform t;
    t.position = {static_cast<float>(k), 0, 0};
    sets.push_back(SetWorldOp{depth, t});
  }
  FrameChanges changes;
  for (auto _ : state) {
    if (!world.Apply(sets).ok()) state.SkipWithError("sets failed");
    state.PauseTiming();
    world.EndFrame(&changes);
    state.ResumeTiming();
  }
  state.counters["ns_per_step"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kSets * depth,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// One batch that links k roots into a chain, each under the one before:
// each link's cycle check walks up through the links before it.
void BM_LinkRootsIntoAChain(benchmark::State& state) {
  const EntityId count = static_cast<EntityId>(state.range(0));
  std::vector<CreateOp> roots;
  for (EntityId e = 1; e <= count; ++e) roots.push_back({e, kNoEntity, {}});
  std::vector<Command> links;
  for (EntityId e = 2; e <= count; ++e) links.push_back(LinkOp{e, e - 1});
  for (auto _ : state) {
    state.PauseTiming();
    World world;
    if (!world.CreateMany(roots).ok()) state.SkipWithError("create failed");
    state.ResumeTiming();
    if (!world.Apply(links).ok()) state.SkipWithError("links failed");
  }
}

void BM_Destroy1k(benchmark::State& state) {
  World& world = SharedWorld(kWide);
  std::mt19937 rng(17);
  std::uniform_int_distribution<EntityId> tree(0, 999);
  FrameChanges changes;
  uint64_t relocated = 0;  // Instances moved in memory to keep pre-order.
  for (auto _ : state) {
    state.PauseTiming();
    const EntityId root = tree(rng) * 1000 + 1;
    std::vector<CreateOp> again;
    const std::vector<EntityId> subtree = *world.Subtree(root);
    for (EntityId e : subtree) {
      again.push_back({e, *world.Parent(e), *world.Local(e)});
    }
    const uint64_t before = world.stats().relocated;
    state.ResumeTiming();
    if (!world.Destroy(root).ok()) state.SkipWithError("destroy failed");
    state.PauseTiming();
    relocated += world.stats().relocated - before;
    if (!world.CreateMany(again).ok()) state.SkipWithError("recreate failed");
    world.EndFrame(&changes);
    state.ResumeTiming();
  }
  state.SetLabel("wide, 1000-node subtree");
  SetRelocated(state, relocated);
  SetNsPerTransform(state, 1000);
}

// ---------------------------------------------------------------------------
// Baselines.

// The bytes propagation streams: a 48-byte local matrix and a parent index
// in, a 48-byte world matrix out, with no arithmetic beyond using the parent
// index. Propagation also reads parent world matrices, which are mostly still
// in cache; this floor does not, so it is a little generous to the baseline.
// Its columns sit on 2 MB pages like the world's, so the floor is the best
// copy this machine does, not one slowed by TLB misses the world avoids.
struct FloorColumns {
  explicit FloorColumns(Shape shape)
      : local(kTransforms), parent(kTransforms), world(kTransforms) {
    const std::vector<CreateOp> ops = MakeShape(shape);
    for (size_t i = 0; i < kTransforms; ++i) {
      local[i] = ToMatrix(ops[i].local);
      parent[i] = static_cast<uint32_t>(ops[i].parent);
    }
  }
  void Copy() {
    for (size_t i = 0; i < kTransforms; ++i) {
      world[i] = local[i];
      world[i].m[11] += static_cast<float>(parent[i]);
    }
    benchmark::DoNotOptimize(world.data());
    benchmark::ClobberMemory();
  }
  internal::Column<Matrix3x4> local;
  internal::Column<uint32_t> parent;
  internal::Column<Matrix3x4> world;
};

void BM_CopyFloor(benchmark::State& state, Shape shape) {
  FloorColumns floor(shape);
  for (auto _ : state) floor.Copy();
  SetNsPerTransform(state, kTransforms);
}

// BM_Propagate / BM_CopyFloor, each pair measured a few milliseconds apart:
// on a shared VM whose speed drifts by tens of percent between benchmarks,
// the median of paired ratios is the steadier comparison. The time reported
// is the propagation's.
void BM_PropagateOverFloor(benchmark::State& state, Shape shape) {
  World& world = SharedWorld(shape);
  FloorColumns floor(shape);
  const std::vector<EntityId> roots = Roots(MakeShape(shape));
  FrameChanges changes;
  std::vector<double> ratios;
  int iteration = 0;
  for (auto _ : state) {
    WorldPeer::SetLocalsWithoutPropagating(world,
                                           Toggle(world, roots, iteration++));
    const auto start = std::chrono::steady_clock::now();
    floor.Copy();
    const auto copied = std::chrono::steady_clock::now();
    WorldPeer::Propagate(world);
    const auto propagated = std::chrono::steady_clock::now();
    world.EndFrame(&changes);
    if (changes.moved.size() != kTransforms) {
      state.SkipWithError("not all moved");
    }
    const std::chrono::duration<double> floor_s = copied - start;
    const std::chrono::duration<double> propagate_s = propagated - copied;
    state.SetIterationTime(propagate_s.count());
    ratios.push_back(propagate_s.count() / floor_s.count());
  }
  state.counters["over_floor"] = Median(ratios);
  SetNsPerTransform(state, kTransforms);
}

// Seconds one propagation of the pending changes takes.
double TimedPropagate(World& world) {
  const auto start = std::chrono::steady_clock::now();
  WorldPeer::Propagate(world);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// BM_PropagateOnePercentRoots' cost per recomputed node over BM_Propagate's,
// the "no more than 2x" comparison, each pair measured a few
// milliseconds apart for the same reason as BM_PropagateOverFloor.
//
// Each iteration propagates every root and closes that frame, whose moved
// list of 1M matrices leaves the cache full of other, dirty lines: a harsher
// start than BM_PropagateOnePercentRoots', where the frame before moved 1% too.
// Then it propagates 1% of the roots (the time reported, `part_ns_per_node`),
// and the same ones again at once (`warm_ns_per_node`: the cost with their
// lines in cache, so the rest of `part` is memory).
void BM_OnePercentOverFull(benchmark::State& state, Shape shape) {
  World& world = SharedWorld(shape);
  std::vector<EntityId> roots = Roots(MakeShape(shape));
  std::mt19937 rng(7);
  FrameChanges changes;
  std::vector<double> ratios;
  std::vector<double> full_ns;
  std::vector<double> part_ns;
  std::vector<double> warm_ns;
  int iteration = 0;
  for (auto _ : state) {
    WorldPeer::SetLocalsWithoutPropagating(world,
                                           Toggle(world, roots, iteration));
    full_ns.push_back(TimedPropagate(world) * 1e9 /
                      static_cast<double>(kTransforms));
    world.EndFrame(&changes);

    std::shuffle(roots.begin(), roots.end(), rng);
    const std::vector<EntityId> moved(roots.begin(),
                                      roots.begin() + roots.size() / 100);
    for (std::vector<double>* sample : {&part_ns, &warm_ns}) {
      WorldPeer::SetLocalsWithoutPropagating(world,
                                             Toggle(world, moved, iteration++));
      const uint64_t before = world.stats().recomputed;
      const double seconds = TimedPropagate(world);
      const auto recomputed =
          static_cast<double>(world.stats().recomputed - before);
      world.EndFrame(&changes);
      sample->push_back(seconds * 1e9 / recomputed);
      if (sample == &part_ns) state.SetIterationTime(seconds);
    }
    ratios.push_back(part_ns.back() / full_ns.back());
  }
  state.counters["over_full"] = Median(ratios);
  state.counters["full_ns_per_node"] = Median(full_ns);
  state.counters["part_ns_per_node"] = Median(part_ns);
  state.counters["warm_ns_per_node"] = Median(warm_ns);
}

// The textbook scene graph: a heap node per transform, child pointers, a
// recursive update with 4x4 matrices.
struct NaiveNode {
  glm::vec3 position;
  glm::quat rotation;
  glm::vec3 scale;
  glm::mat4 world;
  std::vector<NaiveNode*> children;
};

void NaiveUpdate(NaiveNode* node, const glm::mat4& parent_world) {
  node->world = parent_world * glm::translate(glm::mat4(1.0f), node->position) *
                glm::mat4_cast(node->rotation) *
                glm::scale(glm::mat4(1.0f), node->scale);
  for (NaiveNode* child : node->children) NaiveUpdate(child, node->world);
}

void BM_NaivePointerGraph(benchmark::State& state, Shape shape) {
  const std::vector<CreateOp> ops = MakeShape(shape);
  std::vector<std::unique_ptr<NaiveNode>> nodes(kTransforms);
  std::vector<NaiveNode*> roots;
  for (size_t i = 0; i < kTransforms; ++i) {
    nodes[i] = std::make_unique<NaiveNode>();
    nodes[i]->position = ops[i].local.position;
    nodes[i]->rotation = ops[i].local.rotation;
    nodes[i]->scale = ops[i].local.scale;
    if (ops[i].parent == kNoEntity) {
      roots.push_back(nodes[i].get());
    } else {
      nodes[ops[i].parent - 1]->children.push_back(nodes[i].get());
    }
  }
  for (auto _ : state) {
    for (NaiveNode* root : roots) NaiveUpdate(root, glm::mat4(1.0f));
    benchmark::ClobberMemory();
  }
  SetNsPerTransform(state, kTransforms);
}

}  // namespace

void RegisterAll() {
  using Fn = void (*)(benchmark::State&, Shape);
  const struct {
    const char* name;
    Fn fn;
    benchmark::TimeUnit unit;
  } per_shape[] = {
      {"BM_CopyFloor", BM_CopyFloor, benchmark::kMillisecond},
      {"BM_Propagate", BM_Propagate, benchmark::kMillisecond},
      {"BM_MoveAllRoots", BM_MoveAllRoots, benchmark::kMillisecond},
      {"BM_NaivePointerGraph", BM_NaivePointerGraph, benchmark::kMillisecond},
      {"BM_PropagateOnePercentRoots", BM_PropagateOnePercentRoots,
       benchmark::kMicrosecond},
      {"BM_BatchSetLocal10k", BM_BatchSetLocal10k, benchmark::kMicrosecond},
  };
  for (const auto& b : per_shape) {
    for (Shape shape : {kWide, kScene, kChains}) {
      const std::string name =
          std::string(b.name) + "/" + SceneShapeName(shape);
      benchmark::RegisterBenchmark(name.c_str(), b.fn, shape)->Unit(b.unit);
    }
  }
  for (Shape shape : {kWide, kScene, kChains}) {
    const std::string name =
        std::string("BM_PropagateOverFloor/") + SceneShapeName(shape);
    benchmark::RegisterBenchmark(name.c_str(), BM_PropagateOverFloor, shape)
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime();
  }
  for (Shape shape : {kWide, kScene, kChains}) {
    const std::string name =
        std::string("BM_OnePercentOverFull/") + SceneShapeName(shape);
    // Each iteration also runs a full sweep and closes two frames: a fixed
    // count keeps this from running thousands of them to fill min_time.
    benchmark::RegisterBenchmark(name.c_str(), BM_OnePercentOverFull, shape)
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime()
        ->Iterations(60);
  }
  benchmark::RegisterBenchmark("BM_BulkCreate/scene", BM_BulkCreate)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(5);
  benchmark::RegisterBenchmark("BM_Reparent1k", BM_Reparent1k)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_Destroy1k", BM_Destroy1k)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_RelinkBatch", BM_RelinkBatch)
      ->ArgsProduct({{1, 4, 8, 16, 64}, {0, 1}})
      ->Args({65'536, 1})
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("BM_SpawnUnderChain", BM_SpawnUnderChain)
      ->Arg(5'000)
      ->Arg(80'000)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("BM_SetWorldsOnADeepLeaf",
                               BM_SetWorldsOnADeepLeaf)
      ->Arg(1'000)
      ->Arg(80'000)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("BM_LinkRootsIntoAChain", BM_LinkRootsIntoAChain)
      ->Arg(4'096)
      ->Arg(16'384)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(1);
  benchmark::RegisterBenchmark("BM_LinkBatchUnderLeaf", BM_LinkBatchUnderLeaf)
      ->Arg(1)
      ->Arg(80'000)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
}

}  // namespace xform

int main(int argc, char** argv) {
  xform::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
