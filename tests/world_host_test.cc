// Copyright 2026 The xform Authors.
//
// HostedWorld's locks: what a writer's batch (or a read) waits for while a
// frame is being published.

#include "server/host/world_host.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/cluster/view/redirect.h"
#include "tests/random_batches.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/wire.h"

namespace xform::server {
namespace {

// Holds the publishing thread inside Wake() until released, as a
// subscriber's write can (the kernel's copy into its socket, or the thread
// preempted on a busy box).
class HeldSink final : public UpdateSink {
 public:
  void Wake() override {
    woken.Notify();
    released.WaitForNotification();
  }
  void Poll(absl::Time) override {}
  void End(const absl::Status&) override {}

  absl::Notification woken;
  absl::Notification released;
};

v1::ApplyRequest Batch(const std::vector<Command>& commands,
                       bool end_frame = false) {
  v1::ApplyRequest request;
  request.set_world("w");
  v1::AppendCommands(commands, &request);
  request.set_end_frame(end_frame);
  return request;
}

Transform At(float x) {
  Transform t;
  t.position.x = x;
  return t;
}

// A world with entity 1, published, and a caught-up whole-world subscriber
// whose next wake holds the thread that makes it.
struct HeldWorld {
  explicit HeldWorld(v1::FrameMode mode)
      : world(std::make_shared<HostedWorld>("w", mode, 60)) {
    EXPECT_TRUE(
        world->Apply(Batch({CreateOp{1, kNoEntity, At(0)}}), limits).ok());
    world->Publish();
    id = world->replicator().Subscribe({}, sink);
    while (world->replicator().Next(id, absl::Now()) != nullptr) {
    }
  }

  Limits limits;
  std::shared_ptr<HostedWorld> world;
  std::shared_ptr<HeldSink> sink = std::make_shared<HeldSink>();
  Replicator::SubscriptionId id = 0;
};

// Runs `f` on a thread of its own; true if it returned within 10 s. Either
// way `held` is released after, so that the test ends.
template <typename F>
bool ReturnsWhileHeld(HeldSink& held, F f) {
  absl::Notification done;
  std::thread call([&] {
    f();
    done.Notify();
  });
  const bool returned = done.WaitForNotificationWithTimeout(absl::Seconds(10));
  held.released.Notify();
  call.join();
  return returned;
}

// A frame's subscribers are woken (and their writes started) while it is
// published, a cost that grows with their number: the world's writers and
// readers must not wait for it.
TEST(HostedWorldTest, BatchesAndReadsDoNotWaitForAFramesSubscribers) {
  HeldWorld held(v1::FRAME_MODE_TICK);
  ASSERT_TRUE(
      held.world->Apply(Batch({SetLocalOp{1, At(1)}}), held.limits).ok());
  std::thread publisher([&] { held.world->Publish(); });
  ASSERT_TRUE(
      held.sink->woken.WaitForNotificationWithTimeout(absl::Seconds(10)));

  absl::StatusOr<uint64_t> batch;
  v1::ReadResponse read;
  absl::Status read_status;
  EXPECT_TRUE(ReturnsWhileHeld(*held.sink, [&] {
    batch = held.world->Apply(Batch({SetLocalOp{1, At(2)}}), held.limits);
    v1::ReadRequest request;
    request.add_entity(1);
    read_status = held.world->Read(request, held.limits, &read);
  }));
  publisher.join();
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_TRUE(read_status.ok()) << read_status;
  // Applied at once, and read back.
  ASSERT_EQ(read.local_size(), 10);
  EXPECT_EQ(read.local(0), 2.0f);  // position.x
}

// In a driven world, a batch that ends the frame publishes it: another
// writer's batch meanwhile goes into the next frame, without waiting.
TEST(HostedWorldTest, ABatchDoesNotWaitForAnotherBatchsPublication) {
  HeldWorld held(v1::FRAME_MODE_DRIVEN);
  absl::StatusOr<uint64_t> ending;
  std::thread ender([&] {
    ending =
        held.world->Apply(Batch({SetLocalOp{1, At(1)}}, true), held.limits);
  });
  ASSERT_TRUE(
      held.sink->woken.WaitForNotificationWithTimeout(absl::Seconds(10)));

  absl::StatusOr<uint64_t> next;
  EXPECT_TRUE(ReturnsWhileHeld(*held.sink, [&] {
    next = held.world->Apply(Batch({SetLocalOp{1, At(2)}}), held.limits);
  }));
  ender.join();
  ASSERT_TRUE(ending.ok()) << ending.status();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, *ending + 1);
}

// --- Write ids, and a replica following a writer's log (as a cluster's
// nodes do, cluster/world_follower.h), without NATS: a log that keeps its
// records in memory, acknowledged at once.

class QuietSink final : public UpdateSink {
 public:
  void Wake() override {}
  void Poll(absl::Time) override {}
  void End(const absl::Status&) override {}
};

// What a writer's log held: each batch with its frame, and each frame end.
struct LoggedRecord {
  bool end = false;
  uint64_t frame = 0;
  std::string batch;
  std::optional<uint64_t> digest;
};

class MemoryLog final : public WorldLog {
 public:
  absl::StatusOr<Acknowledgement> Append(uint64_t frame,
                                         absl::string_view batch) override {
    records.push_back({.frame = frame, .batch = std::string(batch)});
    return Acknowledgement([] { return absl::OkStatus(); });
  }
  absl::Status Snapshot(SnapshotSource&) override { return absl::OkStatus(); }
  bool RecordsFrames() const override { return true; }
  absl::StatusOr<Acknowledgement> EndFrame(uint64_t frame,
                                           std::optional<uint64_t> digest,
                                           absl::Time,
                                           absl::string_view) override {
    records.push_back({.end = true, .frame = frame, .digest = digest});
    return Acknowledgement([] { return absl::OkStatus(); });
  }
  std::vector<LoggedRecord> records;
};

// Everything a subscriber was sent, applied: entity -> (parent, matrix).
struct SeenState {
  std::map<EntityId, std::pair<EntityId, Matrix3x4>> entities;
  uint64_t frame = 0;
  std::vector<uint64_t> frames;  // Each frame's message's.
};
void Take(HostedWorld& world, Replicator::SubscriptionId id, SeenState& seen) {
  while (auto update = world.replicator().Next(id, absl::InfiniteFuture())) {
    const v1::FrameUpdate& u = update->message();
    if (u.snapshot() && u.part() == 0 && !u.keeps_view()) {
      seen.entities.clear();
    }
    for (EntityId e : u.destroyed()) seen.entities.erase(e);
    for (int k = 0; k < u.created_size(); ++k) {
      seen.entities[u.created(k)].first = u.created_parent(k);
    }
    for (int k = 0; k < u.reparented_size(); ++k) {
      seen.entities[u.reparented(k)].first = u.reparented_parent(k);
    }
    const v1::FrameUpdateReader read(u);
    for (int k = 0; k < read.moved_size(); ++k) {
      seen.entities[u.moved(k)].second = read.moved_world(k);
    }
    seen.frame = u.frame();
    // A snapshot's frame is the last published, with changes or without:
    // frames without any (a tick with no batch) are published by the
    // writer alone.
    if (!u.snapshot()) seen.frames.push_back(u.frame());
  }
}

bool SameMatrices(const SeenState& a, const SeenState& b) {
  if (a.entities.size() != b.entities.size()) return false;
  for (const auto& [e, entry] : a.entities) {
    const auto it = b.entities.find(e);
    if (it == b.entities.end() || it->second.first != entry.first ||
        std::memcmp(&it->second.second, &entry.second, sizeof entry.second) !=
            0) {
      return false;
    }
  }
  return true;
}

TEST(HostedWorldTest, ABatchSentAgainWithItsWriteIdAppliesOnce) {
  HostedWorld world("w", v1::FRAME_MODE_DRIVEN, 0);
  const Limits limits;
  v1::ApplyRequest create = Batch({CreateOp{1, kNoEntity, At(0)}});
  create.set_write_id("client-a:1");
  absl::StatusOr<uint64_t> first = world.Apply(create, limits);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<uint64_t> again = world.Apply(create, limits);
  ASSERT_TRUE(again.ok()) << again.status();  // Not ALREADY_EXISTS.
  EXPECT_EQ(*again, *first);
  // Another id applies, and is refused as the world says.
  create.set_write_id("client-a:2");
  EXPECT_EQ(world.Apply(create, limits).status().code(),
            absl::StatusCode::kAlreadyExists);
  create.set_write_id(std::string(65, 'x'));
  EXPECT_EQ(world.Apply(create, limits).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostedWorldTest, AReplicaFollowingTheLogPublishesTheWritersFrames) {
  const Limits limits;
  HostedWorld writer("w", v1::FRAME_MODE_TICK, 60);
  auto log = std::make_shared<MemoryLog>();
  writer.Persist(log);
  HostedWorld replica("w", v1::FRAME_MODE_TICK, 60);
  replica.StopWriting(RedirectTo("world 'w''s writes", {"a", "10.0.0.1:1"}));
  const auto writer_id =
      writer.replicator().Subscribe({}, std::make_shared<QuietSink>());
  const auto replica_id =
      replica.replicator().Subscribe({}, std::make_shared<QuietSink>());
  SeenState from_writer, from_replica;
  testing::RandomBatches random(5, 1);
  World model;
  size_t taken = 0;
  for (int frame = 0; frame < 200; ++frame) {
    // Frames of 0 to 3 batches, some with nothing to publish.
    for (int b = 0; b < frame % 4; ++b) {
      v1::ApplyRequest request = Batch(random.Next(model, 8));
      request.set_write_id(absl::StrCat("w", frame, ".", b));
      ASSERT_TRUE(writer.Apply(request, limits).ok());
    }
    writer.Tick();
    for (; taken < log->records.size(); ++taken) {
      const LoggedRecord& r = log->records[taken];
      ASSERT_TRUE((r.end ? replica.EndLoggedFrame(r.frame, r.digest)
                         : replica.ApplyLogged(r.batch, r.frame))
                      .ok())
          << "record " << taken;
    }
    Take(writer, writer_id, from_writer);
    Take(replica, replica_id, from_replica);
    ASSERT_EQ(from_replica.frames, from_writer.frames) << "frame " << frame;
    ASSERT_TRUE(SameMatrices(from_replica, from_writer)) << "frame " << frame;
  }
  EXPECT_GT(from_writer.frames.size(), 100u);
  // The replica takes no writes: it names the node that does.
  const absl::Status refused =
      replica.Apply(Batch({CreateOp{999999, kNoEntity, At(0)}}), limits)
          .status();
  ASSERT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(RedirectOf(refused).has_value());
  EXPECT_EQ(RedirectOf(refused)->address, "10.0.0.1:1");
  // It knows the writer's write ids, for when it writes the world next.
  v1::ApplyRequest repeated = Batch({CreateOp{1, kNoEntity, At(0)}});
  repeated.set_write_id("w199.2");
  replica.StartWriting(std::make_shared<MemoryLog>());
  absl::StatusOr<uint64_t> frame = replica.Apply(repeated, limits);
  ASSERT_TRUE(frame.ok()) << frame.status();
}

TEST(HostedWorldTest, AReplicaWhoseFrameDiffersFromTheWritersSaysSo) {
  const Limits limits;
  HostedWorld writer("w", v1::FRAME_MODE_DRIVEN, 0);
  auto log = std::make_shared<MemoryLog>();
  writer.Persist(log);
  HostedWorld replica("w", v1::FRAME_MODE_DRIVEN, 0);
  replica.StopWriting(absl::UnavailableError("no writer"));
  ASSERT_TRUE(
      writer.Apply(Batch({CreateOp{1, kNoEntity, At(0)}}, true), limits).ok());
  ASSERT_TRUE(writer.Apply(Batch({SetLocalOp{1, At(2)}}, true), limits).ok());
  ASSERT_EQ(log->records.size(), 4u);
  ASSERT_TRUE(replica.ApplyLogged(log->records[0].batch, 1).ok());
  ASSERT_TRUE(
      replica.EndLoggedFrame(log->records[1].frame, log->records[1].digest)
          .ok());
  // The replica's second batch differs from the writer's.
  ASSERT_TRUE(
      replica
          .ApplyLogged(Batch({SetLocalOp{1, At(3)}}).SerializeAsString(),
                       log->records[2].frame)
          .ok());
  const absl::Status differs =
      replica.EndLoggedFrame(log->records[3].frame, log->records[3].digest);
  EXPECT_EQ(differs.code(), absl::StatusCode::kDataLoss) << differs;
  EXPECT_EQ(replica.replicator().frame(), log->records[1].frame)
      << "the frame that differs is not published";
}

// Applies `log`'s records from `from` on to `replica`, as its follower
// would; the first that fails, or OK.
absl::Status Follow(HostedWorld& replica, const MemoryLog& log, size_t from = 0,
                    size_t to = SIZE_MAX) {
  for (size_t k = from; k < std::min(to, log.records.size()); ++k) {
    const LoggedRecord& r = log.records[k];
    absl::Status s = r.end ? replica.EndLoggedFrame(r.frame, r.digest)
                           : replica.ApplyLogged(r.batch, r.frame);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// A writer lost after it logged an end_frame batch but before it logged
// the frame's end (issue 71: "acknowledged in frame 1931 after frame
// 1931", and a frame acknowledged that no node ever published): the node
// that takes the world ends that frame before it takes a batch.
TEST(HostedWorldTest, ANewWriterEndsTheFrameItsLastWriterLeftOpen) {
  const Limits limits;
  HostedWorld lost("w", v1::FRAME_MODE_DRIVEN, 0);
  auto lost_log = std::make_shared<MemoryLog>();
  lost.Persist(lost_log);
  ASSERT_TRUE(
      lost.Apply(Batch({CreateOp{1, kNoEntity, At(0)}}, true), limits).ok());
  v1::ApplyRequest moved = Batch({SetLocalOp{1, At(2)}}, true);
  moved.set_write_id("client:2");
  absl::StatusOr<uint64_t> acknowledged = lost.Apply(moved, limits);
  ASSERT_TRUE(acknowledged.ok()) << acknowledged.status();
  ASSERT_EQ(lost_log->records.size(), 4u);
  ASSERT_TRUE(lost_log->records[3].end);
  // The new writer read the log without that last end.
  HostedWorld taker("w", v1::FRAME_MODE_DRIVEN, 0);
  taker.StopWriting(absl::UnavailableError("no writer"));
  ASSERT_TRUE(Follow(taker, *lost_log, 0, 3).ok());
  EXPECT_EQ(taker.replicator().frame(), *acknowledged - 1);
  auto log = std::make_shared<MemoryLog>();
  taker.StartWriting(log);
  // The open frame is ended, logged with the lost writer's digest, and
  // published.
  ASSERT_EQ(log->records.size(), 1u);
  EXPECT_TRUE(log->records[0].end);
  EXPECT_EQ(log->records[0].frame, *acknowledged);
  EXPECT_EQ(log->records[0].digest, lost_log->records[3].digest);
  EXPECT_EQ(taker.replicator().frame(), *acknowledged);
  // The batch sent again is answered with its frame; the next batch ends a
  // later one.
  absl::StatusOr<uint64_t> again = taker.Apply(moved, limits);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *acknowledged);
  absl::StatusOr<uint64_t> next =
      taker.Apply(Batch({SetLocalOp{1, At(3)}}, true), limits);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(*next, *acknowledged);
  EXPECT_EQ(taker.replicator().frame(), *next);
}

// Frames that hold nothing are numbered alike on the writer and its
// replicas (issue 71: GetWorld said 2, then 3, on the writer and 1 on the
// replicas): a client's end_frame is logged even when nothing changed; a
// tick with nothing in it closes no frame.
TEST(HostedWorldTest, EveryNodeNumbersTheSameFrames) {
  const Limits limits;
  for (const v1::FrameMode mode :
       {v1::FRAME_MODE_DRIVEN, v1::FRAME_MODE_TICK}) {
    SCOPED_TRACE(v1::FrameMode_Name(mode));
    const bool driven = mode == v1::FRAME_MODE_DRIVEN;
    HostedWorld writer("w", mode, 60);
    auto log = std::make_shared<MemoryLog>();
    writer.Persist(log);
    HostedWorld replica("w", mode, 60);
    replica.StopWriting(absl::UnavailableError("no writer"));
    size_t followed = 0;
    for (int k = 0; k < 6; ++k) {
      // A batch, then frames with nothing in them.
      std::vector<Command> batch;
      if (k % 3 == 0) batch.push_back(CreateOp{EntityId(k + 1), 0, At(k)});
      if (driven || !batch.empty()) {
        absl::StatusOr<uint64_t> applied =
            writer.Apply(Batch(batch, driven), limits);
        ASSERT_TRUE(applied.ok()) << applied.status();
      }
      if (!driven) writer.Tick();
      ASSERT_TRUE(Follow(replica, *log, followed).ok());
      followed = log->records.size();
      EXPECT_EQ(replica.replicator().frame(), writer.replicator().frame())
          << "after batch " << k;
    }
    if (driven) {
      EXPECT_EQ(writer.replicator().frame(), 6u);
    }
  }
}

// A tick world whose writes stopped while its tick was under way (its
// lease lost) closes no frame: the frame is the next writer's to end.
TEST(HostedWorldTest, AWriterThatStoppedClosesNoFrame) {
  const Limits limits;
  HostedWorld writer("w", v1::FRAME_MODE_TICK, 60);
  auto log = std::make_shared<MemoryLog>();
  writer.Persist(log);
  ASSERT_TRUE(
      writer.Apply(Batch({CreateOp{1, kNoEntity, At(0)}}), limits).ok());
  writer.Tick();
  const uint64_t published = writer.replicator().frame();
  ASSERT_TRUE(writer.Apply(Batch({SetLocalOp{1, At(1)}}), limits).ok());
  writer.StopWriting(absl::UnavailableError("its lease was lost"));
  writer.Publish();  // The tick that had found it writable.
  EXPECT_EQ(writer.replicator().frame(), published);
}

}  // namespace
}  // namespace xform::server
