// Copyright 2026 The xform Authors.
//
// What a moved entity costs to put on the wire and take off it, raw (the
// FrameUpdate's moved and moved_world) against compact (compact_moves.h),
// per entity, for a frame of 5,000 moves like xform-load's scene workload:
// leaves of the scene stepping a frame's worth of motion (deltas), or sent
// whole (a snapshot, a folded frame). The encoding's bytes per entity are
// reported as a counter.

#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "client/mirror_state.h"
#include "glm/gtc/quaternion.hpp"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "tools/scenes.h"
#include "xform/v1/compact_moves.h"
#include "xform/v1/frame_update.h"
#include "xform/world.h"

namespace xform {
namespace {

constexpr int kMoves = 5000;

// The world matrices of 5,000 leaves of a 100k scene before and after one
// frame's step (as xform-load moves them); or of `moves` leaves of a scene
// of `entities`.
struct Frame {
  std::vector<EntityId> ids;
  std::vector<Matrix3x4> before, after;
  // Indexes into the above in the order the world's frame listed the moves
  // (FrameChanges::moved, its storage order), as xformd adds them.
  std::vector<int> world_order;
  // The whole world before, as a Mirror holds it.
  std::vector<EntityId> all_ids;
  std::vector<Matrix3x4> all_before;
};

const Frame& SceneFrame(size_t entities = 100'000, int moves = kMoves) {
  static auto* frames = new std::map<std::pair<size_t, int>, Frame>;
  auto [it, added] = frames->try_emplace({entities, moves});
  if (!added) return it->second;
  {
    Frame* f = &it->second;
    const std::vector<CreateOp> scene = MakeScene(SceneShape::kScene, entities);
    World world;
    std::vector<Command> create(scene.begin(), scene.end());
    (void)world.Apply(create);
    FrameChanges changes;
    world.EndFrame(&changes);
    for (const CreateOp& op : scene) {
      f->all_ids.push_back(op.entity);
      f->all_before.push_back(*world.WorldMatrix(op.entity));
    }
    std::vector<EntityId> leaves = Leaves(scene);
    std::mt19937 rng(5);
    std::shuffle(leaves.begin(), leaves.end(), rng);
    leaves.resize(static_cast<size_t>(moves));
    std::sort(leaves.begin(), leaves.end());
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<Command> step;
    for (EntityId e : leaves) {
      f->ids.push_back(e);
      f->before.push_back(*world.WorldMatrix(e));
      Transform t = scene[e - 1].local;
      t.position += glm::vec3(u(rng), u(rng), u(rng)) / 60.0f;
      t.rotation = glm::normalize(
          glm::angleAxis(u(rng) / 60,
                         glm::normalize(glm::vec3(u(rng), u(rng), 1))) *
          t.rotation);
      step.push_back(SetLocalOp{e, t});
    }
    (void)world.Apply(step);
    world.EndFrame(&changes);
    for (EntityId e : leaves) f->after.push_back(*world.WorldMatrix(e));
    for (EntityId e : changes.moved) {
      f->world_order.push_back(static_cast<int>(
          std::lower_bound(leaves.begin(), leaves.end(), e) - leaves.begin()));
    }
  }
  return it->second;
}

void BM_EncodeRaw(benchmark::State& state) {
  const Frame& f = SceneFrame();
  size_t bytes = 0;
  for (auto _ : state) {
    v1::FrameUpdateWriter writer(1, absl::Now(), 0, 64 << 20, false);
    writer.Moved(f.ids, f.after[0].m.data());
    std::vector<v1::FrameUpdate> parts = writer.Finish(0);
    std::string out = parts[0].SerializeAsString();
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
  state.counters["bytes_per_entity"] = static_cast<double>(bytes) / kMoves;
}
BENCHMARK(BM_EncodeRaw);

// `in_id_order` false: the moves added as xformd adds a frame's, in the
// order the world listed them (its storage order, not the ids'), so the
// writer's sort has its work to do.
void EncodeCompact(benchmark::State& state, bool deltas,
                   bool in_id_order = true) {
  const Frame& f = SceneFrame();
  std::vector<int> order(kMoves);
  std::iota(order.begin(), order.end(), 0);
  if (!in_id_order) order = f.world_order;
  if (order.size() != static_cast<size_t>(kMoves)) {
    state.SkipWithError("the frame moved more than its leaves");
    return;
  }
  size_t bytes = 0;
  for (auto _ : state) {
    v1::CompactMovesWriter writer(v1::kDefaultPositionPrecision, kMoves);
    for (int k : order) {
      writer.Add(f.ids[k], f.after[k].m.data(),
                 deltas ? &f.before[k] : nullptr);
    }
    v1::FrameUpdate u;
    u.set_compact_moved(writer.Finish());
    u.set_position_precision(v1::kDefaultPositionPrecision);
    std::string out = u.SerializeAsString();
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
  state.counters["bytes_per_entity"] = static_cast<double>(bytes) / kMoves;
}
void BM_EncodeCompactDeltas(benchmark::State& state) {
  EncodeCompact(state, true);
}
void BM_EncodeCompactWhole(benchmark::State& state) {
  EncodeCompact(state, false);
}
void BM_EncodeCompactDeltasInWorldOrder(benchmark::State& state) {
  EncodeCompact(state, true, /*in_id_order=*/false);
}
BENCHMARK(BM_EncodeCompactDeltas);
BENCHMARK(BM_EncodeCompactWhole);
BENCHMARK(BM_EncodeCompactDeltasInWorldOrder);

// Parsing a raw message as gRPC hands it over, in pieces (16 KB here), into
// a new message (argument 0) or into one cleared after the last (1), as a
// Mirror's parses do: a new one's fields grow as each piece is parsed, and
// the matrices' field is copied again at each doubling.
void BM_DecodeRaw(benchmark::State& state) {
  const Frame& f = SceneFrame();
  v1::FrameUpdateWriter writer(1, absl::Now(), 0, 64 << 20, false);
  writer.Moved(f.ids, f.after[0].m.data());
  const std::string bytes = writer.Finish(0)[0].SerializeAsString();
  const bool recycled = state.range(0) != 0;
  v1::FrameUpdate spent;
  for (auto _ : state) {
    google::protobuf::io::ArrayInputStream pieces(
        bytes.data(), static_cast<int>(bytes.size()), 16 << 10);
    if (recycled) {
      spent.Clear();
      spent.ParseFromZeroCopyStream(&pieces);
      benchmark::DoNotOptimize(spent);
    } else {
      v1::FrameUpdate u;
      u.ParseFromZeroCopyStream(&pieces);
      benchmark::DoNotOptimize(u);
    }
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
}
BENCHMARK(BM_DecodeRaw)->Arg(0)->Arg(1);

// The receiver holds the whole world as of the frame before (as a caught-up
// Mirror does): 100k poses, so each delta's lookup is a miss, as in a
// Mirror.
void BM_DecodeCompactDeltas(benchmark::State& state) {
  const Frame& f = SceneFrame();
  v1::CompactMovesWriter whole(v1::kDefaultPositionPrecision);
  v1::CompactMovesWriter delta(v1::kDefaultPositionPrecision);
  for (size_t k = 0; k < f.all_ids.size(); ++k) {
    whole.Add(f.all_ids[k], f.all_before[k].m.data(), nullptr);
  }
  for (int k = 0; k < kMoves; ++k) {
    delta.Add(f.ids[k], f.after[k].m.data(), &f.before[k]);
  }
  v1::FrameUpdate first, next;
  first.set_position_precision(v1::kDefaultPositionPrecision);
  first.set_compact_moved(whole.Finish());
  next.set_position_precision(v1::kDefaultPositionPrecision);
  next.set_compact_moved(delta.Finish());
  const std::string first_bytes = first.SerializeAsString();
  const std::string bytes = next.SerializeAsString();
  for (auto _ : state) {
    state.PauseTiming();
    v1::CompactMovesReader reader;
    v1::FrameUpdate held;
    held.ParseFromString(first_bytes);
    (void)reader.Decode(held);
    state.ResumeTiming();
    v1::FrameUpdate u;
    u.ParseFromString(bytes);
    if (!reader.Decode(u).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(u);
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
}
BENCHMARK(BM_DecodeCompactDeltas);

// A Mirror taking in a frame of 5,000 moves, as its thread does: parse,
// decode (compact), apply to its copy of the whole 100k world, where each
// entity's lookup (in the copy, and in the changes not yet taken) misses the
// cache. Frames alternate forward and back, so compact deltas stay in range.
// First argument 0: nobody takes the changes (xform-load: they hold the
// whole world); 1: they are taken after each frame (a renderer).
// Second: how many Mirrors take each frame in turn. One Mirror's 100k world
// (about 20 MB) partly stays in this machine's caches between frames; 16,
// as xform-load's subscribers, do not, so every row is a trip to memory.
// Third: the world's size (a 1M world moves 10,000 a frame).
std::string MovesMessage(absl::Span<const EntityId> ids,
                         absl::Span<const Matrix3x4> worlds,
                         const Matrix3x4* previous, bool compact,
                         v1::FrameUpdate u = {}) {
  u.set_last_part(true);
  if (compact) {
    v1::CompactMovesWriter writer(v1::kDefaultPositionPrecision);
    for (size_t k = 0; k < ids.size(); ++k) {
      writer.Add(ids[k], worlds[k].m.data(),
                 previous != nullptr ? &previous[k] : nullptr);
    }
    u.set_compact_moved(writer.Finish());
    u.set_position_precision(v1::kDefaultPositionPrecision);
  } else {
    for (size_t k = 0; k < ids.size(); ++k) {
      u.add_moved(ids[k]);
      for (float v : worlds[k].m) u.add_moved_world(v);
    }
  }
  return u.SerializeAsString();
}

// How MirrorApply parses each message.
enum class Parse {
  kFresh,       // ParseFromString into a new message.
  kKept,        // ParseFromString into one kept from the last message.
  kLeftOnWire,  // As a Mirror does: v1::ParseLeavingMovedWorld, its
                // matrices left in the bytes (served in 16 KB blocks, as
                // gRPC's slices come), into a kept message.
};

void MirrorApply(benchmark::State& state, bool compact,
                 Parse parse = Parse::kFresh) {
  // A 1M world moves 10,000 a frame, as xform-load's 1M run does.
  const size_t entities = static_cast<size_t>(state.range(2));
  const int moves = entities > 100'000 ? 10'000 : kMoves;
  const Frame& f = SceneFrame(entities, moves);
  v1::FrameUpdate snapshot;
  snapshot.set_frame(1);
  snapshot.set_snapshot(true);
  snapshot.set_snapshot_done(true);
  for (EntityId e : f.all_ids) {
    snapshot.add_created(e);
    snapshot.add_created_parent(kNoEntity);
  }
  const std::string snapshot_bytes =
      MovesMessage(f.all_ids, f.all_before, nullptr, compact, snapshot);
  const std::string frames[2] = {
      MovesMessage(f.ids, f.after, f.before.data(), compact),
      MovesMessage(f.ids, f.before, f.after.data(), compact)};
  const bool take = state.range(0) != 0;
  std::vector<client_internal::MirrorState> mirrors(state.range(1));
  v1::FrameUpdate kept;
  v1::WireMovedWorlds worlds;
  auto apply = [&](client_internal::MirrorState& mirror,
                   const std::string& bytes) {
    if (parse == Parse::kFresh) {
      v1::FrameUpdate u;
      u.ParseFromString(bytes);
      if (!mirror.Apply(u).ok()) state.SkipWithError("decode failed");
      return;
    }
    absl::Status parsed = absl::OkStatus();
    if (parse == Parse::kKept) {
      kept.ParseFromString(bytes);
    } else {
      google::protobuf::io::ArrayInputStream in(
          bytes.data(), static_cast<int>(bytes.size()), 16 << 10);
      parsed = v1::ParseLeavingMovedWorld(in, kept, worlds);
    }
    // (Both parses clear what they fill first.)
    if (!parsed.ok() || !mirror.Apply(kept, &worlds).ok()) {
      state.SkipWithError("decode failed");
    }
  };
  bool resynced;
  for (client_internal::MirrorState& mirror : mirrors) {
    apply(mirror, snapshot_bytes);
    if (take) mirror.TakeChanges(&resynced);
  }
  int k = 0;
  for (auto _ : state) {
    for (client_internal::MirrorState& mirror : mirrors) {
      apply(mirror, frames[k & 1]);
      if (take) benchmark::DoNotOptimize(mirror.TakeChanges(&resynced));
    }
    ++k;
  }
  state.SetItemsProcessed(state.iterations() * moves * mirrors.size());
}
void BM_MirrorApplyRaw(benchmark::State& state) { MirrorApply(state, false); }
// As BM_MirrorApplyRaw, the fourth argument saying how each message is
// parsed: 0 into a kept message (the Mirror before 2026-11-25), 1 leaving
// its matrices in the bytes (the Mirror since).
void BM_MirrorParseApplyRaw(benchmark::State& state) {
  MirrorApply(state, false,
              state.range(3) == 0 ? Parse::kKept : Parse::kLeftOnWire);
}
void BM_MirrorApplyCompact(benchmark::State& state) {
  MirrorApply(state, true);
}
// 16 Mirrors of a 1M world hold about 2 GB: on 4 KB pages nearly every
// row's page also misses the TLB.
BENCHMARK(BM_MirrorApplyRaw)
    ->ArgsProduct({{0, 1}, {1, 16}, {100'000}})
    ->Args({0, 16, 1'000'000});
BENCHMARK(BM_MirrorParseApplyRaw)
    ->ArgsProduct({{0}, {1, 16}, {100'000}, {0, 1}})
    ->ArgsProduct({{0}, {16}, {1'000'000}, {0, 1}});
BENCHMARK(BM_MirrorApplyCompact)
    ->ArgsProduct({{0, 1}, {1, 16}, {100'000}})
    ->Args({0, 16, 1'000'000});

// The floor under a Mirror's frame on a big world: random cache lines of
// memory far bigger than the caches (512 MB), read independently, as a
// frame's moved entities' rows and held poses are. Argument: how many reads
// ahead each is prefetched (0: none, the out-of-order core alone). Per line
// read (items_per_second); a compact entity touches two such lines (its
// held pose, its row), a raw one one.
void BM_RandomLineReads(benchmark::State& state) {
  constexpr size_t kBytes = size_t{512} << 20;
  constexpr size_t kReads = size_t{1} << 20;
  static std::vector<char>* memory = new std::vector<char>(kBytes, 1);
  std::mt19937_64 rng(23);
  std::vector<uint64_t> offsets(kReads);
  for (uint64_t& offset : offsets) offset = rng() % (kBytes / 64) * 64;
  const size_t ahead = static_cast<size_t>(state.range(0));
  const char* base = memory->data();
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t k = 0; k < kReads; ++k) {
      if (ahead != 0 && k + ahead < kReads) {
        __builtin_prefetch(base + offsets[k + ahead]);
      }
      uint64_t v;
      std::memcpy(&v, base + offsets[k], sizeof(v));
      sum += v;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * kReads);
}
BENCHMARK(BM_RandomLineReads)->Arg(0)->Arg(16);

}  // namespace
}  // namespace xform

BENCHMARK_MAIN();
