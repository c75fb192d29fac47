// Copyright 2026 The xform Authors.
//
// Durability, against xformd as a process: acknowledged writes survive
// kill -9; a full disk refuses writes and nothing else; health says
// NOT_SERVING until recovery is done.
//
// The crash loop (CrashTest): a loop of: start xformd with
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
//   XFORM_CRASH_CYCLES=100 ./build/tests/xform_durability_process_test
//     --gtest_filter=CrashTest.*

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/acknowledged_writes.h"
#include "tests/random_batches.h"
#include "tests/wait_until.h"
#include "tests/xformd_process.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/world.h"

namespace xform {
namespace {

using testing::ConnectReady;
using testing::Settle;
using testing::Write;
using testing::Writer;

int Cycles() {
  const char* cycles = std::getenv("XFORM_CRASH_CYCLES");
  return cycles != nullptr ? std::max(1, std::atoi(cycles)) : 8;
}

TEST(CrashTest, AcknowledgedWritesSurviveKill9) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "xform_crash_", getpid());
  std::filesystem::remove_all(data_dir);
  const std::vector<std::string> flags = {absl::StrCat("--data_dir=", data_dir),
                                          "--fsync=always",
                                          "--snapshot_every=16KiB"};
  std::vector<Writer> writers = testing::ThreeWriters();
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
      const bool pending_before = w.pending.has_value();
      bool in_flight_landed = false;
      const std::string differs = Settle(*client, w, &in_flight_landed);
      ASSERT_EQ(differs, "") << "cycle " << cycle << ", world " << w.world;
      landed += in_flight_landed;
      lost += !in_flight_landed && pending_before;
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
    absl::SleepFor(
        absl::Milliseconds(std::uniform_int_distribution<int>(150, 900)(rng)));
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

// A tmpfs of `megabytes` at a directory of its own, unmounted at the end;
// empty when this machine does not let the test mount one.
class SmallDisk {
 public:
  explicit SmallDisk(int megabytes)
      : path_(
            absl::StrCat(::testing::TempDir(), "xform_small_disk_", getpid())) {
    std::filesystem::create_directories(path_);
    const std::string size = absl::StrCat("size=", megabytes, "m");
    if (mount("xform-test", path_.c_str(), "tmpfs", 0, size.c_str()) != 0) {
      error_ = std::strerror(errno);
    }
  }
  ~SmallDisk() {
    if (error_.empty()) umount2(path_.c_str(), MNT_DETACH);
  }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

  // Writes a file until the disk is full.
  void Fill() {
    std::ofstream out(path_ + "/filler", std::ios::binary);
    const std::string block(4096, 'f');
    while (out.write(block.data(), block.size())) {
    }
  }
  void Free() { std::filesystem::remove(path_ + "/filler"); }

 private:
  std::string path_;
  std::string error_;
};

Transform At(float x) {
  Transform t;
  t.position = {x, 0, 0};
  return t;
}

TEST(FullDiskTest, WritesFailUnavailableWhileStreamsGoOnThenResume) {
  SmallDisk disk(4);
  if (!disk.error().empty()) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << disk.error() << ")";
  }
  testing::Xformd server(
      {absl::StrCat("--data_dir=", disk.path(), "/data"), "--fsync=always"});
  std::unique_ptr<Client> client = ConnectReady(server.address());
  ASSERT_NE(client, nullptr) << server.Log();
  ASSERT_TRUE(
      client->CreateWorld("w", {.mode = FrameMode::kTick, .tick_hz = 30}).ok());
  ASSERT_TRUE(client->Apply("w", {CreateOp{1, kNoEntity, At(1)}}).ok());
  std::unique_ptr<Client> watcher = ConnectReady(server.address());
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(*watcher, {.world = "w"});
  ASSERT_TRUE(mirror.ok());
  ASSERT_TRUE((*mirror)->WaitForSync(absl::Seconds(10)));
  // The snapshot may be of the frame before entity 1's (a tick world).
  ASSERT_TRUE(WaitUntil([&] { return (*mirror)->Has(1); }, absl::Seconds(10),
                        "the mirror to hold entity 1"));

  disk.Fill();
  // Big enough not to fit in what the journal's last page has left.
  std::vector<Command> batch = {SetLocalOp{1, At(2)}};
  for (EntityId e = 2; e < 5000; ++e) batch.push_back(CreateOp{e, 1, At(5)});
  absl::StatusOr<uint64_t> refused = client->Apply("w", batch);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
  EXPECT_NE(refused.status().message().find("disk is full"), std::string::npos)
      << refused.status();
  // Nothing of it applied; reads and the stream go on.
  absl::StatusOr<std::vector<EntityState>> read = client->Read("w", {1});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0].local.position.x, 1);
  EXPECT_EQ(client->Read("w", {2}).status().code(),
            absl::StatusCode::kNotFound);
  // The stream went on without a resync: shown below by the first frame
  // after the disk is freed arriving with resyncs() still 0.

  disk.Free();
  ASSERT_TRUE(client->Apply("w", {SetLocalOp{1, At(3)}}).ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        const absl::StatusOr<Matrix3x4> world = (*mirror)->WorldMatrix(1);
        return world.ok() && world->m[3] == 3;
      },
      absl::Seconds(10), "the write after the disk freed"));
  EXPECT_EQ((*mirror)->WorldMatrix(1)->m[3], 3) << "the stream stopped";
  EXPECT_EQ((*mirror)->resyncs(), 0);
}

// While a big journal replays, health says NOT_SERVING and calls are
// refused with UNAVAILABLE; then SERVING, with the world whole.
TEST(RecoveryTest, NotServingUntilRecoveryIsDone) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "xform_recovery_", getpid());
  std::filesystem::remove_all(data_dir);
  const std::vector<std::string> flags = {absl::StrCat("--data_dir=", data_dir),
                                          "--snapshot_every=100GiB"};
  constexpr EntityId kEntities = 1'000'000;
  {
    testing::Xformd server(flags);
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->CreateWorld("big", {}).ok());
    for (EntityId first = 1; first <= kEntities; first += 50'000) {
      std::vector<Command> batch;
      for (EntityId e = first; e < first + 50'000; ++e) {
        batch.push_back(
            CreateOp{e, e > 1 && e % 8 != 0 ? e - 1 : kNoEntity, At(1)});
      }
      ASSERT_TRUE(client->Apply("big", batch).ok());
    }
    server.Kill();  // No snapshot: the restart replays the whole journal.
  }
  testing::Xformd server(flags);
  int not_serving = 0, refused = 0;
  bool serving = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!serving && absl::Now() < deadline) {
    // A channel of its own each time: one that failed to connect before
    // the port was open would wait out its reconnect backoff (1 s).
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto health = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
        server.address(), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    if (!health->Check(&context, request, &response).ok()) {
      absl::SleepFor(absl::Milliseconds(2));
      continue;
    }
    if (response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      serving = true;
      break;
    }
    ++not_serving;
    ClientOptions options;
    options.address = server.address();
    options.own_connection = true;
    absl::StatusOr<std::unique_ptr<Client>> early = Client::Connect(options);
    if (early.ok()) {
      const absl::Status status = (*early)->ListWorlds().status();
      if (status.code() == absl::StatusCode::kUnavailable &&
          status.message().find("recovering") != std::string::npos) {
        ++refused;
      }
    }
  }
  ASSERT_TRUE(serving) << server.Log();
  EXPECT_GT(not_serving, 0) << "recovery was over before health answered";
  EXPECT_GT(refused, 0);
  std::unique_ptr<Client> client = ConnectReady(server.address());
  absl::StatusOr<WorldInfo> info = client->GetWorld("big");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->entities, kEntities);
  std::filesystem::remove_all(data_dir);
}

// A set that came late (older than its entity's newest sample) went into
// history only; its journal record says so, so that recovery applies what
// the live world applied, even for a batch that was late whole.
TEST(RecoveryTest, LateSetsStayOutOfTheLiveWorldAfterKill9) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "xform_late_", getpid());
  std::filesystem::remove_all(data_dir);
  const std::vector<std::string> flags = {absl::StrCat("--data_dir=", data_dir),
                                          "--fsync=always",
                                          "--snapshot_every=100GiB"};
  constexpr Stamp kS = 1'000'000'000;
  {
    testing::Xformd server(flags);
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr) << server.Log();
    ASSERT_TRUE(client->CreateWorld("w", {}).ok());
    ASSERT_TRUE(client
                    ->Apply("w",
                            {CreateOp{1, kNoEntity, At(0)},
                             CreateOp{2, kNoEntity, At(0)}},
                            {.stamp = kS})
                    .ok());
    ASSERT_TRUE(client
                    ->Apply("w", {SetLocalOp{1, At(30)}, SetLocalOp{2, At(30)}},
                            {.stamp = 3 * kS})
                    .ok());
    // Late for 1 only; then late whole.
    ASSERT_TRUE(client
                    ->Apply("w", {SetLocalOp{1, At(20)}, SetLocalOp{2, At(20)}},
                            {.stamp = 2 * kS})
                    .ok());
    ASSERT_TRUE(
        client->Apply("w", {SetLocalOp{2, At(40)}}, {.stamp = 4 * kS}).ok());
    ASSERT_TRUE(
        client->Apply("w", {SetLocalOp{1, At(10)}}, {.stamp = kS + 1}).ok());
    server.Kill();
  }
  testing::Xformd server(flags);
  std::unique_ptr<Client> client = ConnectReady(server.address());
  ASSERT_NE(client, nullptr) << server.Log();
  absl::StatusOr<std::vector<EntityState>> now = client->Read("w", {1, 2});
  ASSERT_TRUE(now.ok()) << now.status() << server.Log();
  EXPECT_FLOAT_EQ((*now)[0].local.position.x, 30);
  EXPECT_FLOAT_EQ((*now)[1].local.position.x, 40);
  // Its entities are in history again, as they were at the newest stamp
  // the journal held, and hold from there until they move.
  absl::StatusOr<TimedPose> held =
      client->LookupTransform("w", 0, 2, {.stamp = 9 * kS});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_FLOAT_EQ(held->pose.translation().x, 40);
  ASSERT_TRUE(
      client->Apply("w", {SetLocalOp{2, At(50)}}, {.stamp = 6 * kS}).ok());
  absl::StatusOr<TimedPose> between =
      client->LookupTransform("w", 0, 2, {.stamp = 5 * kS});
  ASSERT_TRUE(between.ok()) << between.status();
  EXPECT_FLOAT_EQ(between->pose.translation().x, 45);
}

}  // namespace
}  // namespace xform
