// Copyright 2026 The xform Authors.
//
// The WriteWatchdog on its own: it checks each watched stream every period,
// from its own thread, and forgets streams that went.

#include "server/service/write_watchdog.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/wait_until.h"

namespace xform::server {
namespace {

class FakeStream final : public WriteWatchdog::Stream {
 public:
  explicit FakeStream(absl::Time write_started)
      : write_started_(write_started) {}
  void CancelIfStuck(absl::Time now, absl::Duration timeout) override {
    ++checks;
    if (now - write_started_ > timeout) cancelled = true;
  }
  std::atomic<int> checks{0};
  std::atomic<bool> cancelled{false};

 private:
  const absl::Time write_started_;
};

TEST(WriteWatchdogTest, CancelsAStuckWriteWithinTimeoutAndAPeriod) {
  WriteWatchdog watchdog(absl::Milliseconds(200));
  EXPECT_EQ(watchdog.period(), absl::Milliseconds(20));
  const absl::Time start = absl::Now();
  auto stuck = std::make_shared<FakeStream>(start);
  auto fresh = std::make_shared<FakeStream>(absl::InfiniteFuture());
  watchdog.Watch(stuck);
  watchdog.Watch(fresh);
  EXPECT_TRUE(WaitUntil([&] { return stuck->cancelled.load(); },
                        absl::Seconds(10), "the stuck stream cancelled"));
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(stuck->cancelled);
  EXPECT_GE(took, absl::Milliseconds(200));
  // A period past the timeout, with room for a loaded machine.
  EXPECT_LT(took, absl::Milliseconds(200 + 20 + 500));
  EXPECT_FALSE(fresh->cancelled);
  EXPECT_GT(fresh->checks, 5);
}

TEST(WriteWatchdogTest, ForgetsStreamsThatWent) {
  WriteWatchdog watchdog(absl::Milliseconds(100));
  std::weak_ptr<FakeStream> gone;
  {
    auto stream = std::make_shared<FakeStream>(absl::InfiniteFuture());
    gone = stream;
    watchdog.Watch(stream);
    ASSERT_TRUE(WaitUntil([&] { return stream->checks > 0; }, absl::Seconds(10),
                          "the stream checked"));
  }
  // The watchdog held it only while checking it: it is gone once released.
  EXPECT_TRUE(WaitUntil([&] { return gone.expired(); }, absl::Seconds(10),
                        "the stream released"));
}

TEST(WriteWatchdogTest, PeriodIsATenthOfTheTimeoutWithinBounds) {
  EXPECT_EQ(WriteWatchdog(absl::Milliseconds(50)).period(),
            absl::Milliseconds(10));
  EXPECT_EQ(WriteWatchdog(absl::Seconds(10)).period(), absl::Seconds(1));
  EXPECT_EQ(WriteWatchdog(absl::Minutes(10)).period(), absl::Seconds(1));
}

}  // namespace
}  // namespace xform::server
