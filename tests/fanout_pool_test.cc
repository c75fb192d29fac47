// Copyright 2026 The xform Authors.

#include "server/replication/fanout_pool.h"

#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace xform::server {
namespace {

// Counts its wakes and notes the threads they came on.
class CountingSink final : public UpdateSink {
 public:
  void Wake() override {
    ++wakes;
    absl::MutexLock lock(&mu);
    threads.insert(std::this_thread::get_id());
  }
  void Poll(absl::Time) override {}
  void End(const absl::Status&) override {}

  std::atomic<int> wakes{0};
  absl::Mutex mu;
  std::set<std::thread::id> threads;
};

std::vector<std::shared_ptr<CountingSink>> Sinks(int n) {
  std::vector<std::shared_ptr<CountingSink>> sinks;
  for (int k = 0; k < n; ++k) sinks.push_back(std::make_shared<CountingSink>());
  return sinks;
}

std::vector<std::shared_ptr<UpdateSink>> AsSinks(
    const std::vector<std::shared_ptr<CountingSink>>& sinks) {
  return {sinks.begin(), sinks.end()};
}

TEST(FanoutPoolTest, EverySinkIsWokenOnceSpreadOverTheThreads) {
  FanoutPool pool(3);
  const auto sinks = Sinks(64);
  pool.WakeAll(AsSinks(sinks));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::set<std::thread::id> threads;
  for (const auto& sink : sinks) {
    while (sink->wakes.load() == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(sink->wakes.load(), 1);
    absl::MutexLock lock(&sink->mu);
    threads.insert(sink->threads.begin(), sink->threads.end());
  }
  // The caller's share, and the pool's (one pool thread may take both of
  // its shares when the other is slow to wake).
  EXPECT_GE(threads.size(), 2u);
  EXPECT_TRUE(threads.contains(std::this_thread::get_id()));
}

TEST(FanoutPoolTest, OneThreadOrOneSinkIsWokenOnTheCaller) {
  for (int threads : {1, 4}) {
    FanoutPool pool(threads);
    const auto sinks = Sinks(threads == 1 ? 8 : 1);
    pool.WakeAll(AsSinks(sinks));
    for (const auto& sink : sinks) {
      EXPECT_EQ(sink->wakes.load(), 1);  // At once: no hand-off.
      absl::MutexLock lock(&sink->mu);
      EXPECT_TRUE(sink->threads.contains(std::this_thread::get_id()));
    }
  }
}

}  // namespace
}  // namespace xform::server
