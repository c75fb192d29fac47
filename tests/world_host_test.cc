// Copyright 2026 The xform Authors.
//
// HostedWorld's locks: what a writer's batch (or a read) waits for while a
// frame is being published.

#include "server/world_host.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace xform::server
