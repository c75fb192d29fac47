// Copyright 2026 The xform Authors.
//
// xform::History against tf2's BufferCore (Debian's libtf2, in this binary),
// on the same data: chains 10 deep under the world, every link stamped at
// 100 Hz for 10 s (tf2's default window), so each link holds 1,000 samples.
// Each benchmark times both sides in alternating batches within one run, so
// that the ratio does not depend on which ran while the machine was busy.
//
//   BM_LookupVsTf2   a leaf in the world's frame at a random stamp inside
//                    the window: lookups/s each, vs_tf2 = ours over tf2's
//                    (/0 smooth motion, /1 a random pose every sample)
//   BM_InsertVsTf2   recording one stamped sample: ns each, vs_tf2 = ours
//                    over tf2's (below 1 is cheaper)
//   BM_MemoryVsTf2   heap bytes per stored sample (glibc's mallinfo2, so
//                    allocator overhead counts for both), vs_tf2 = ours over
//                    tf2's

#include <malloc.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "tests/tf2_oracle.h"
#include "xform/history.h"
#include "xform/world.h"

namespace xform {
namespace {

constexpr int kDepth = 10;
constexpr int kChains = 10;
constexpr Stamp kSecond = 1'000'000'000;
constexpr Stamp kPeriod = kSecond / 100;
constexpr Stamp kStart = 1000 * kSecond;
constexpr int kTicks = 1000;  // 10 s at 100 Hz.

EntityId EntityOf(int chain, int level) {
  return static_cast<EntityId>(chain * kDepth + level + 1);
}
std::string FrameOf(EntityId entity) {
  return entity == kNoEntity ? "world" : absl::StrCat("e", entity);
}

// Each link turns and slides smoothly, as a joint or a tracked body sampled
// at 100 Hz does; or, `random`, takes a random pose at every tick (the worst
// case for interpolation: a large turn between every two samples).
Transform LocalAt(std::mt19937& random, int tick, int link,
                  bool random_poses = false) {
  std::uniform_real_distribution<float> u(-1, 1);
  Transform t;
  if (random_poses) {
    t.position = {u(random), u(random), static_cast<float>(tick) * 1e-3f};
    t.rotation = glm::normalize(glm::quat(u(random), u(random), u(random), 1));
    return t;
  }
  const float seconds = static_cast<float>(tick) * 0.01f;
  t.position = {0.3f, std::sin(seconds), 0.1f};
  t.rotation = glm::normalize(
      glm::angleAxis(seconds * 0.7f,
                     glm::normalize(glm::vec3(0.1f * (link % 5), 1, 0))) *
      glm::quat(0.9f, 0.1f, 0.2f, 0.3f));
  return t;
}

Tf2Pose PoseOf(const Transform& t) {
  Tf2Pose pose;
  pose.translation = {t.position.x, t.position.y, t.position.z};
  pose.rotation = {t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w};
  return pose;
}

EntityId ParentOf(int chain, int level) {
  return level == 0 ? kNoEntity : EntityOf(chain, level - 1);
}

// Both sides filled with the same samples, tick by tick.
struct Filled {
  History history;
  Tf2Oracle tf2{10.0};
  explicit Filled(bool random_poses) {
    std::mt19937 random(7);
    for (int tick = 0; tick < kTicks; ++tick) {
      for (int chain = 0; chain < kChains; ++chain) {
        for (int level = 0; level < kDepth; ++level) {
          const Transform local =
              LocalAt(random, tick, chain * kDepth + level, random_poses);
          const Stamp stamp = kStart + tick * kPeriod;
          history.Record(EntityOf(chain, level), stamp, ParentOf(chain, level),
                         local,
                         tick == 0 ? SampleKind::kCreate : SampleKind::kSet);
          tf2.Set(FrameOf(ParentOf(chain, level)),
                  FrameOf(EntityOf(chain, level)), stamp, PoseOf(local), false);
        }
      }
    }
  }
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void BM_LookupVsTf2(benchmark::State& state) {
  static Filled* smooth = new Filled(false);
  static Filled* random_poses = new Filled(true);
  Filled* filled = state.range(0) == 0 ? smooth : random_poses;
  std::mt19937 random(11);
  std::uniform_int_distribution<Stamp> stamp_in_window(
      kStart + kPeriod, kStart + (kTicks - 1) * kPeriod);
  constexpr int kBatch = 256;
  std::vector<std::pair<EntityId, Stamp>> batch(kBatch);
  std::vector<std::string> leaf_names(kChains);
  for (int chain = 0; chain < kChains; ++chain) {
    leaf_names[chain] = FrameOf(EntityOf(chain, kDepth - 1));
  }
  double ours_seconds = 0;
  double tf2_seconds = 0;
  int64_t lookups = 0;
  for (auto _ : state) {
    for (auto& [chain, stamp] : batch) {
      chain = random() % kChains;
      stamp = stamp_in_window(random);
    }
    auto start = std::chrono::steady_clock::now();
    for (const auto& [chain, stamp] : batch) {
      auto found = filled->history.Lookup(
          kNoEntity, EntityOf(static_cast<int>(chain), kDepth - 1), stamp);
      benchmark::DoNotOptimize(found);
    }
    ours_seconds += SecondsSince(start);
    start = std::chrono::steady_clock::now();
    for (const auto& [chain, stamp] : batch) {
      auto found = filled->tf2.Lookup("world", leaf_names[chain], stamp);
      benchmark::DoNotOptimize(found);
    }
    tf2_seconds += SecondsSince(start);
    lookups += kBatch;
  }
  state.counters["ours_per_s"] = lookups / ours_seconds;
  state.counters["tf2_per_s"] = lookups / tf2_seconds;
  state.counters["vs_tf2"] = tf2_seconds / ours_seconds;
}
// 0: smooth motion; 1: a random pose at every tick.
BENCHMARK(BM_LookupVsTf2)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_InsertVsTf2(benchmark::State& state) {
  // Each iteration appends a tick to fresh structures one window long, so
  // inserts include tf2's and our pruning.
  std::mt19937 random(5);
  std::vector<Transform> locals(kChains * kDepth);
  double ours_seconds = 0;
  double tf2_seconds = 0;
  int64_t inserts = 0;
  for (auto _ : state) {
    state.PauseTiming();
    History history;
    Tf2Oracle tf2(10.0);
    state.ResumeTiming();
    for (int tick = 0; tick < 2 * kTicks; ++tick) {
      for (size_t i = 0; i < locals.size(); ++i) {
        locals[i] = LocalAt(random, tick, static_cast<int>(i));
      }
      const Stamp stamp = kStart + tick * kPeriod;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kChains * kDepth; ++i) {
        history.Record(EntityOf(i / kDepth, i % kDepth), stamp,
                       ParentOf(i / kDepth, i % kDepth), locals[i],
                       SampleKind::kSet);
      }
      ours_seconds += SecondsSince(start);
      start = std::chrono::steady_clock::now();
      for (int i = 0; i < kChains * kDepth; ++i) {
        tf2.Set(FrameOf(ParentOf(i / kDepth, i % kDepth)),
                FrameOf(EntityOf(i / kDepth, i % kDepth)), stamp,
                PoseOf(locals[i]), false);
      }
      tf2_seconds += SecondsSince(start);
      inserts += kChains * kDepth;
    }
  }
  state.counters["ours_ns"] = ours_seconds * 1e9 / inserts;
  state.counters["tf2_ns"] = tf2_seconds * 1e9 / inserts;
  state.counters["vs_tf2"] = ours_seconds / tf2_seconds;
}
BENCHMARK(BM_InsertVsTf2)->Unit(benchmark::kMillisecond)->Iterations(3);

size_t HeapBytes() { return mallinfo2().uordblks; }

void BM_MemoryVsTf2(benchmark::State& state) {
  for (auto _ : state) {
    size_t before = HeapBytes();
    auto* history = new History();
    std::mt19937 random(3);
    for (int tick = 0; tick < kTicks; ++tick) {
      for (int i = 0; i < kChains * kDepth; ++i) {
        history->Record(EntityOf(i / kDepth, i % kDepth),
                        kStart + tick * kPeriod,
                        ParentOf(i / kDepth, i % kDepth),
                        LocalAt(random, tick, i), SampleKind::kSet);
      }
    }
    const double ours = static_cast<double>(HeapBytes() - before) /
                        static_cast<double>(history->samples());
    delete history;
    before = HeapBytes();
    auto* tf2 = new Tf2Oracle(10.0);
    for (int tick = 0; tick < kTicks; ++tick) {
      for (int i = 0; i < kChains * kDepth; ++i) {
        tf2->Set(FrameOf(ParentOf(i / kDepth, i % kDepth)),
                 FrameOf(EntityOf(i / kDepth, i % kDepth)),
                 kStart + tick * kPeriod, PoseOf(LocalAt(random, tick, i)),
                 false);
      }
    }
    const double theirs = static_cast<double>(HeapBytes() - before) /
                          static_cast<double>(kTicks * kChains * kDepth);
    delete tf2;
    state.counters["ours_bytes"] = ours;
    state.counters["tf2_bytes"] = theirs;
    state.counters["vs_tf2"] = ours / theirs;
  }
}
BENCHMARK(BM_MemoryVsTf2)->Unit(benchmark::kMillisecond)->Iterations(1);

// What history adds to a server's frame: the 100k-entity world with 1% of
// it set a frame (at 60 Hz) for a minute, recorded as xformd records a
// batch, against the World applying the same sets: ns a set each, the
// ratio, and the memory it holds with a window of range(0) seconds.
void BM_RecordFrameOfSets(benchmark::State& state) {
  constexpr EntityId kEntities = 100'000;
  constexpr int kMoved = 1000;
  World world;
  History history({.window_nanos = state.range(0) * kSecond});
  std::vector<CreateOp> creates;
  for (EntityId e = 1; e <= kEntities; ++e) {
    creates.push_back({e, e % 10 == 1 ? kNoEntity : e - 1, Transform()});
  }
  if (!world.CreateMany(creates).ok()) state.SkipWithError("create");
  for (const CreateOp& op : creates) {
    history.Record(op.entity, kStart, op.parent, op.local, SampleKind::kCreate);
  }
  std::mt19937 random(1);
  std::vector<SetLocalOp> sets(kMoved);
  Stamp stamp = kStart;
  double world_seconds = 0;
  double history_seconds = 0;
  int64_t recorded = 0;
  for (auto _ : state) {
    stamp += kSecond / 60;
    for (SetLocalOp& set : sets) {
      set.entity = 1 + random() % kEntities;
      set.local.position = {static_cast<float>(random() % 100), 0, 0};
    }
    auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(world.SetLocals(sets));
    world_seconds += SecondsSince(start);
    start = std::chrono::steady_clock::now();
    for (size_t k = 0; k < sets.size(); ++k) {
      // As xformd records a batch (server/host/world_history.cc).
      if (k + 16 < sets.size()) history.Prefetch(sets[k + 16].entity);
      if (k + 8 < sets.size()) history.PrefetchSamples(sets[k + 8].entity);
      history.RecordSet(sets[k].entity, stamp, sets[k].local);
    }
    history_seconds += SecondsSince(start);
    recorded += kMoved;
  }
  state.counters["world_ns"] = world_seconds * 1e9 / recorded;
  state.counters["history_ns"] = history_seconds * 1e9 / recorded;
  state.counters["history_over_world"] = history_seconds / world_seconds;
  state.counters["samples"] = static_cast<double>(history.samples());
  state.counters["history_mb"] = history.MemoryBytes() / 1e6;
}
BENCHMARK(BM_RecordFrameOfSets)
    ->Arg(10)
    ->Arg(60)
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(3600);  // A minute at 60 Hz.

}  // namespace
}  // namespace xform

BENCHMARK_MAIN();
