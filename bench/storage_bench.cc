// Copyright 2026 The xform Authors.
//
// What durability costs, part by part (no gRPC): a journal record's bytes
// per set-local and its encoding; appending records; a snapshot's copy of
// a world (what its world lock is held for); rebuilding a world from a
// snapshot's image; replaying journaled physics steps. The process-level
// figures (throughput per --fsync policy, restart time, a snapshot's stall)
// are tools/durability_bench.sh's.
//
//   ./build/bench/xform_storage_bench

#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "server/storage/journal.h"
#include "tools/scenes.h"
#include "xform/v1/wire.h"
#include "xform/world.h"
#include "xform/world_image.h"

namespace xform {
namespace {

using server::EncodeRecord;
using server::RecordType;

constexpr int kSetLocals = 5000;  // xform-load's writer workload: a batch.

World Scene(size_t n) {
  World world;
  const std::vector<CreateOp> scene = MakeScene(SceneShape::kScene, n);
  if (!world.CreateMany(scene).ok()) std::abort();
  return world;
}

// A physics step's request over the scene's leaves, as a client sends it.
v1::ApplyRequest PhysicsStep(const std::vector<EntityId>& leaves,
                             std::mt19937& rng) {
  std::vector<Command> batch;
  for (int k = 0; k < kSetLocals; ++k) {
    batch.push_back(
        SetLocalOp{leaves[rng() % leaves.size()], RandomTransform(rng)});
  }
  v1::ApplyRequest request;
  request.set_world("load");
  v1::AppendCommands(batch, &request);
  return request;
}

void BM_JournalRecord(benchmark::State& state) {
  const std::vector<CreateOp> scene = MakeScene(SceneShape::kScene, 100'000);
  const std::vector<EntityId> leaves = Leaves(scene);
  std::mt19937 rng(1);
  const v1::ApplyRequest request = PhysicsStep(leaves, rng);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string payload;
    request.SerializeToString(&payload);
    const std::string record = EncodeRecord(RecordType::kBatch, 7, payload);
    bytes = record.size();
    benchmark::DoNotOptimize(record.data());
  }
  state.counters["bytes_per_set_local"] =
      static_cast<double>(bytes) / kSetLocals;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_JournalRecord);

void BM_JournalAppend(benchmark::State& state) {
  const std::string path = absl::StrCat("/tmp/xform_storage_bench_", getpid());
  unlink(path.c_str());
  auto writer = server::JournalWriter::Create(
      path, server::FsyncPolicy::kNo, EncodeRecord(RecordType::kWorld, 0, ""));
  if (!writer.ok()) std::abort();
  const std::string record =
      EncodeRecord(RecordType::kBatch, 1, std::string(state.range(0), 'x'));
  for (auto _ : state) {
    if (!(*writer)->Append(record).ok()) std::abort();
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * record.size()));
  unlink(path.c_str());
}
BENCHMARK(BM_JournalAppend)->Arg(250'000);

// The world lock's hold during a snapshot: the copy, into memory faulted in
// beforehand.
void BM_CopyImage(benchmark::State& state) {
  const World world = Scene(state.range(0));
  WorldImage image;
  image.Resize(world.size());
  for (auto _ : state) {
    world.CopyImage(&image);
    benchmark::DoNotOptimize(image.entity.data());
  }
  state.SetItemsProcessed(
      static_cast<int64_t>(state.iterations() * world.size()));
}
BENCHMARK(BM_CopyImage)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Unit(benchmark::kMillisecond);

// A restart's rebuild of a world from its snapshot (the file read aside).
void BM_FromImage(benchmark::State& state) {
  WorldImage image;
  Scene(state.range(0)).CopyImage(&image);
  for (auto _ : state) {
    state.PauseTiming();
    WorldImage copy = image;  // Taken over by FromImage, as a restart's is.
    state.ResumeTiming();
    absl::StatusOr<World> world = World::FromImage(std::move(copy));
    if (!world.ok()) std::abort();
    benchmark::DoNotOptimize(world->size());
  }
  state.SetItemsProcessed(
      static_cast<int64_t>(state.iterations() * image.size()));
}
BENCHMARK(BM_FromImage)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

// A restart's replay of journaled physics steps on a 1M world: parse,
// convert, apply, per record. 10 s at 60 Hz is 600 of them.
void BM_ReplayPhysicsStep(benchmark::State& state) {
  const std::vector<CreateOp> scene = MakeScene(SceneShape::kScene, 1'000'000);
  World world;
  if (!world.CreateMany(scene).ok()) std::abort();
  const std::vector<EntityId> leaves = Leaves(scene);
  std::mt19937 rng(2);
  std::vector<std::string> payloads(16);
  for (std::string& p : payloads)
    PhysicsStep(leaves, rng).SerializeToString(&p);
  size_t k = 0;
  for (auto _ : state) {
    v1::ApplyRequest request;
    const std::string& payload = payloads[k++ % payloads.size()];
    request.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
    absl::StatusOr<std::vector<Command>> commands =
        v1::ToCommands(request, 1'000'000);
    if (!commands.ok() || !world.Apply(*commands).ok()) std::abort();
  }
  state.SetItemsProcessed(
      static_cast<int64_t>(state.iterations() * kSetLocals));
}
BENCHMARK(BM_ReplayPhysicsStep)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace xform

BENCHMARK_MAIN();
