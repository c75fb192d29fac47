// Copyright 2026 The xform Authors.
//
// Acknowledged writes survive kill -9. A loop of: start xformd with
// --data_dir and --fsync=always (and snapshots every few KB, so that
// crashes land in snapshots and journal rotations too); writers apply
// random valid batches (creates, links, destroys, set-locals, set-worlds),
// each to its own world, and keep a model of exactly the batches the server
// acknowledged; kill -9 at a random moment; restart. After each restart,
// every world must equal its model, or its model plus the one batch that
// was in flight when the server died, and never anything between: batches
// stay atomic through crashes. Frames go on from the last acknowledged one.
// Worlds created and deleted (acknowledged) stay so.
//
// CI runs XFORM_CRASH_CYCLES cycles (default 8); the full run is 100:
//   XFORM_CRASH_CYCLES=100 ./build/tests/xform_crash_test

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/random_batches.h"
#include "tests/xformd_process.h"
#include "xform/client.h"
#include "xform/world.h"

namespace xform {
namespace {

// One writer, its world, and what the server acknowledged of it.
struct Writer {
  std::string world;
  WorldOptions options;
  bool streamed = false;  // Through ApplyStream rather than Apply.
  testing::RandomBatches random;
  World model;                                 // The acknowledged batches.
  std::optional<std::vector<Command>> pending;  // In flight at the crash.
  uint64_t acknowledged = 0;                   // Batches, over all cycles.
  uint64_t last_frame = 0;                     // The last one acknowledged.
  bool in_flight_landed = false;
};

std::unique_ptr<Client> ConnectReady(const std::string& address) {
  ClientOptions options;
  options.address = address;
  options.own_connection = true;
  options.deadline = absl::Seconds(10);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    // Calls are UNAVAILABLE until recovery is over.
    if (client.ok() && (*client)->ListWorlds().ok()) return *std::move(client);
    absl::SleepFor(absl::Milliseconds(20));
  }
  return nullptr;
}

// Whether the server's world holds exactly `model`: the same entities, each
// with the same parent, local and world matrix, bit for bit.
std::string Differs(Client& client, const std::string& world,
                    const World& model) {
  absl::StatusOr<WorldInfo> info = client.GetWorld(world);
  if (!info.ok()) return info.status().ToString();
  if (info->entities != model.size()) {
    return absl::StrCat(info->entities, " entities, the model ", model.size());
  }
  std::vector<EntityId> ids;
  model.ForEach([&](EntityId e, EntityId, const Matrix3x4&) { ids.push_back(e); });
  if (ids.empty()) return "";
  absl::StatusOr<std::vector<EntityState>> read = client.Read(world, ids);
  if (!read.ok()) return read.status().ToString();
  for (const EntityState& got : *read) {
    const Transform local = *model.Local(got.entity);
    const Matrix3x4 matrix = *model.WorldMatrix(got.entity);
    if (got.parent != *model.Parent(got.entity) ||
        std::memcmp(&got.local, &local, sizeof local) != 0 ||
        std::memcmp(&got.world, &matrix, sizeof matrix) != 0) {
      return absl::StrCat("entity ", got.entity, " differs");
    }
  }
  return "";
}

// Applies random batches until the server stops answering.
void Write(Client& client, Writer& writer) {
  std::unique_ptr<BatchWriter> stream;
  if (writer.streamed) {
    absl::StatusOr<std::unique_ptr<BatchWriter>> opened =
        client.OpenWriter(writer.world);
    if (!opened.ok()) return;
    stream = *std::move(opened);
  }
  for (;;) {
    World next = writer.model;
    std::vector<Command> batch = writer.random.Next(next, 12);
    writer.pending = batch;
    const ApplyOptions options{.end_frame = writer.options.mode ==
                                            FrameMode::kDriven};
    absl::StatusOr<uint64_t> frame =
        stream != nullptr ? stream->Write(batch, options)
                          : client.Apply(writer.world, batch, options);
    if (!frame.ok()) return;  // The server is gone: `pending` in flight.
    EXPECT_GE(*frame, writer.last_frame) << writer.world;
    writer.last_frame = *frame;
    writer.model = std::move(next);
    writer.pending.reset();
    ++writer.acknowledged;
  }
}

int Cycles() {
  const char* cycles = std::getenv("XFORM_CRASH_CYCLES");
  return cycles != nullptr ? std::max(1, std::atoi(cycles)) : 8;
}

TEST(CrashTest, AcknowledgedWritesSurviveKill9) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "xform_crash_", getpid());
  std::filesystem::remove_all(data_dir);
  const std::vector<std::string> flags = {
      absl::StrCat("--data_dir=", data_dir), "--fsync=always",
      "--snapshot_every=16KiB"};
  std::vector<Writer> writers;
  writers.push_back({.world = "tick",
                     .options = {.mode = FrameMode::kTick, .tick_hz = 100},
                     .random = testing::RandomBatches(1, 1)});
  writers.push_back({.world = "driven",
                     .options = {.mode = FrameMode::kDriven},
                     .random = testing::RandomBatches(2, 1)});
  writers.push_back({.world = "streamed",
                     .options = {.mode = FrameMode::kTick, .tick_hz = 30},
                     .streamed = true,
                     .random = testing::RandomBatches(3, 1)});
  std::mt19937 rng(42);
  int landed = 0, lost = 0, snapshots = 0;
  std::string churn;  // A world created in the last cycle, acknowledged.
  const int cycles = Cycles();
  for (int cycle = 0; cycle < cycles; ++cycle) {
    testing::Xformd server(flags);
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr) << "cycle " << cycle << ": " << server.Log();
    if (cycle == 0) {
      for (Writer& w : writers) {
        ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
      }
    }
    // Each world is its model, or its model and the batch in flight.
    for (Writer& w : writers) {
      std::string differs = Differs(*client, w.world, w.model);
      if (differs.empty()) {
        lost += w.pending.has_value();
      } else {
        ASSERT_TRUE(w.pending.has_value())
            << "cycle " << cycle << ", world " << w.world << ": " << differs;
        World with_pending = w.model;
        ASSERT_TRUE(with_pending.Apply(*w.pending).ok());
        const std::string also = Differs(*client, w.world, with_pending);
        ASSERT_EQ(also, "") << "cycle " << cycle << ", world " << w.world
                            << ": neither the acknowledged batches ("
                            << differs << ") nor them and the one in flight";
        w.model = std::move(with_pending);
        ++landed;
      }
      w.pending.reset();
      w.random.Adopt(w.model);
      absl::StatusOr<WorldInfo> info = client->GetWorld(w.world);
      ASSERT_TRUE(info.ok());
      EXPECT_GE(info->frame, w.last_frame) << "frames went back: " << w.world;
      w.last_frame = info->frame;
    }
    // Creates and deletes that were acknowledged stay done.
    absl::StatusOr<std::vector<WorldInfo>> worlds = client->ListWorlds();
    ASSERT_TRUE(worlds.ok());
    EXPECT_EQ(worlds->size(), writers.size() + (churn.empty() ? 0 : 1));
    if (!churn.empty()) {
      ASSERT_TRUE(client->GetWorld(churn).ok()) << churn << " was lost";
      ASSERT_TRUE(client->DeleteWorld(churn).ok());
    }
    churn = absl::StrCat("churn-", cycle);
    ASSERT_TRUE(client->CreateWorld(churn, {}).ok());

    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<Client>> clients;
    for (Writer& w : writers) {
      clients.push_back(ConnectReady(server.address()));
      ASSERT_NE(clients.back(), nullptr);
      threads.emplace_back(
          [&client = *clients.back(), &w] { Write(client, w); });
    }
    absl::SleepFor(absl::Milliseconds(
        std::uniform_int_distribution<int>(150, 900)(rng)));
    server.Kill();
    for (std::thread& t : threads) t.join();
    const std::string log = server.Log();
    for (size_t at = 0; (at = log.find("snapshot of", at)) != std::string::npos;
         ++at) {
      ++snapshots;
    }
  }
  uint64_t batches = 0;
  for (const Writer& w : writers) batches += w.acknowledged;
  std::printf(
      "%d cycles: %llu batches acknowledged, %d snapshots; at the crashes, "
      "%d batches in flight had landed and %d had not\n",
      cycles, static_cast<unsigned long long>(batches), snapshots, landed,
      lost);
  EXPECT_GT(batches, static_cast<uint64_t>(cycles) * 10);
  // Crashes fell among snapshots and journal rotations too.
  EXPECT_GT(snapshots, 0);
  std::filesystem::remove_all(data_dir);
}

}  // namespace
}  // namespace xform
