// Copyright 2026 The xform Authors.
//
// xform_join_bench: a join storm. Subscribers join a big, busy world all at
// once while healthy subscribers follow it and another world's 60 Hz stream
// is watched for gaps. xformd runs as a process on loopback.
//
// The world: --entities, 1000 roots with 999 children each, ticking at 60 Hz,
// a writer setting --moves random entities every 16 ms. Reported: how long
// until every joiner has its snapshot (median, slowest), xformd's RSS before
// and at its peak, the healthy subscribers' worst latency (publication to
// receipt) and whether any stream was ended, and the other world's longest gap.
//
// With --laggards=N, then: xformd's RSS and the healthy subscribers' p99 and
// worst latency over --laggard_s with no laggard, and again once N
// subscribers have their snapshot and stop reading.
//
//   ./build/bench/xform_join_bench [--joiners=20] [--laggards=50]
//       [--entities=1000000] [--xformd=PATH]  (to compare builds in one run)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_support.h"
#include "grpcpp/grpcpp.h"
#include "tools/process_stats.h"
#include "xform/v1/xform.grpc.pb.h"

ABSL_FLAG(int, entities, 1'000'000, "Entities in the big world");
ABSL_FLAG(int, joiners, 20, "Subscribers joining at once");
ABSL_FLAG(int, healthy, 4, "Subscribers following the world throughout");
ABSL_FLAG(int, moves, 5'000, "Entities the writer sets every 16 ms");
ABSL_FLAG(int, laggards, 0,
          "After the storm: subscribers that stop reading once synced");
ABSL_FLAG(int, laggard_s, 20, "How long the laggards are watched");
ABSL_FLAG(int, port, 50094, "Loopback port for xformd");
ABSL_FLAG(std::string, xformd, XFORMD_PATH, "The xformd binary");

namespace {

using xform::bench::AddTrs;
using xform::bench::Call;
using xform::bench::Channel;

// A whole-world subscriber of "big" on its own thread and channel.
class Subscriber {
 public:
  // A laggard stops reading once it has its snapshot.
  explicit Subscriber(const std::string& address, bool laggard = false)
      : stub_(xform::v1::Xform::NewStub(Channel(address))) {
    thread_ = std::thread([this, laggard] {
      xform::v1::SubscribeRequest request;
      request.set_world("big");
      auto reader = stub_->Subscribe(&context_, request);
      xform::v1::FrameUpdate u;
      while (reader->Read(&u)) {
        const absl::Time now = absl::Now();
        absl::MutexLock lock(&mu_);
        if (u.snapshot_done()) synced_at_ = now;
        if (synced_at_ != absl::InfiniteFuture() && !u.snapshot()) {
          const absl::Duration latency =
              now - absl::FromUnixNanos(u.server_time_unix_nanos());
          worst_latency_ = std::max(worst_latency_, latency);
          latencies_ms_.push_back(absl::ToDoubleMilliseconds(latency));
        }
        if (laggard && u.snapshot_done()) {
          mu_.Await(absl::Condition(&cancelling_));
          break;
        }
      }
      const grpc::Status status = reader->Finish();
      absl::MutexLock lock(&mu_);
      ended_ = !cancelling_;
      if (ended_) {
        std::fprintf(stderr, "a stream ended: %d %s\n",
                     static_cast<int>(status.error_code()),
                     status.error_message().c_str());
      }
    });
  }
  ~Subscriber() {
    {
      absl::MutexLock lock(&mu_);
      cancelling_ = true;
    }
    context_.TryCancel();
    thread_.join();
  }
  // When its snapshot completed; false if not within 10 minutes.
  bool WaitSynced(absl::Time* at) {
    absl::MutexLock lock(&mu_);
    const auto synced = [this] {
      mu_.AssertHeld();
      return synced_at_ != absl::InfiniteFuture() || ended_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&synced), absl::Minutes(10)) ||
        ended_) {
      return false;
    }
    *at = synced_at_;
    return true;
  }
  void ResetLatency() {
    absl::MutexLock lock(&mu_);
    worst_latency_ = absl::ZeroDuration();
    latencies_ms_.clear();
  }
  std::vector<double> LatenciesMs() {
    absl::MutexLock lock(&mu_);
    return latencies_ms_;
  }
  double WorstLatencyMs() {
    absl::MutexLock lock(&mu_);
    return absl::ToDoubleMilliseconds(worst_latency_);
  }
  bool ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  std::unique_ptr<xform::v1::Xform::Stub> stub_;
  grpc::ClientContext context_;
  std::thread thread_;
  absl::Mutex mu_;
  absl::Time synced_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Duration worst_latency_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_ms_ ABSL_GUARDED_BY(mu_);
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

int Main() {
  const int n = absl::GetFlag(FLAGS_entities);
  const std::string address =
      absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port));
  xform::bench::ServerProcess server(absl::GetFlag(FLAGS_xformd), address, {});
  if (!server.ok()) return 1;
  auto stub = xform::v1::Xform::NewStub(Channel(address));
  xform::bench::GapWatchProcess watch(address);
  xform::bench::CreateWorld(*stub, "big", xform::v1::FRAME_MODE_TICK, 60);
  for (int first = 1; first <= n; first += 100'000) {
    xform::v1::ApplyRequest build;
    build.set_world("big");
    auto* create = build.add_commands()->mutable_create();
    for (int e = first; e < std::min(first + 100'000, n + 1); ++e) {
      create->add_entity(e);
      // 1000 roots of 999 children each: a move moves one entity.
      create->add_parent(e % 1000 == 1 ? 0 : e - (e - 1) % 1000);
    }
    if (!Call(*stub, build)) return 1;
  }
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::mt19937 rng(1);
    for (int k = 0; !stop; ++k) {
      xform::v1::ApplyRequest move;
      move.set_world("big");
      auto* set = move.add_commands()->mutable_set_local();
      for (int m = 0; m < absl::GetFlag(FLAGS_moves); ++m) {
        set->add_entity(1 + rng() % n);
        AddTrs(static_cast<float>(k % 100), set->mutable_local());
      }
      Call(*stub, move);
      std::this_thread::sleep_for(std::chrono::milliseconds(16));
    }
  });
  std::vector<std::unique_ptr<Subscriber>> healthy;
  for (int k = 0; k < absl::GetFlag(FLAGS_healthy); ++k) {
    healthy.push_back(std::make_unique<Subscriber>(address));
    absl::Time at;
    if (!healthy.back()->WaitSynced(&at)) {
      std::fprintf(stderr, "a healthy subscriber did not sync\n");
      std::_Exit(1);
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (auto& h : healthy) h->ResetLatency();
  watch.Reset();

  const double rss_before = xform::tools::RssMegabytes(server.pid());
  std::atomic<double> rss_peak{rss_before};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      const double rss = xform::tools::RssMegabytes(server.pid());
      if (rss > rss_peak) rss_peak = rss;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subscriber>> joiners;
  for (int k = 0; k < absl::GetFlag(FLAGS_joiners); ++k) {
    joiners.push_back(std::make_unique<Subscriber>(address));
  }
  std::vector<double> join_ms;
  for (auto& j : joiners) {
    absl::Time at;
    if (j->WaitSynced(&at)) {
      join_ms.push_back(absl::ToDoubleMilliseconds(at - start));
    }
  }
  const double storm_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  sampling = false;
  sampler.join();
  double worst_latency = 0;
  int ended = 0;
  for (auto& h : healthy) {
    worst_latency = std::max(worst_latency, h->WorstLatencyMs());
    ended += h->ended();
  }
  const double gap = watch.MaxGapMs();
  const double published_gap = watch.MaxPublishedGapMs();
  const double longest_write = watch.MaxWriteMs();
  joiners.clear();

  // Laggards: RSS and the healthy subscribers' latency over --laggard_s with
  // none, then with --laggards that have their snapshot and stop reading.
  const auto measure = [&](double* rss, double* p99, double* worst) {
    for (auto& h : healthy) h->ResetLatency();
    *rss = 0;
    const absl::Time end =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_laggard_s));
    while (absl::Now() < end) {
      *rss = std::max(*rss, xform::tools::RssMegabytes(server.pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::vector<double> all;
    for (auto& h : healthy) {
      const std::vector<double> some = h->LatenciesMs();
      all.insert(all.end(), some.begin(), some.end());
    }
    *p99 = xform::tools::Percentile(all, 0.99);
    *worst = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  };
  const int laggards = absl::GetFlag(FLAGS_laggards);
  double rss_none = 0, p99_none = 0, worst_none = 0;
  double rss_lag = 0, p99_lag = 0, worst_lag = 0;
  int laggards_synced = 0;
  if (laggards > 0) {
    measure(&rss_none, &p99_none, &worst_none);
    std::vector<std::unique_ptr<Subscriber>> lagging;
    for (int k = 0; k < laggards; ++k) {
      lagging.push_back(std::make_unique<Subscriber>(address, true));
    }
    for (auto& l : lagging) {
      absl::Time at;
      laggards_synced += l->WaitSynced(&at);
    }
    measure(&rss_lag, &p99_lag, &worst_lag);
  }
  int healthy_ended = 0;
  for (auto& h : healthy) healthy_ended += h->ended();
  stop = true;
  writer.join();
  healthy.clear();

  std::printf(
      "| joiners | synced | join median / slowest | RSS before / peak "
      "| healthy worst latency | healthy streams ended "
      "| other world's longest gap (arrival, publication) "
      "| other world's longest write |\n|---|---|---|---|---|---|---|---|\n");
  std::printf(
      "| %d | %zu | %.0f / %.0f ms | %.0f / %.0f MB | %.0f ms | %d "
      "| %.0f ms, %.0f ms | %.0f ms |\n",
      absl::GetFlag(FLAGS_joiners), join_ms.size(),
      xform::tools::Percentile(join_ms, 0.5),
      join_ms.empty() ? storm_ms
                      : *std::max_element(join_ms.begin(), join_ms.end()),
      rss_before, rss_peak.load(), worst_latency, ended, gap, published_gap,
      longest_write);
  if (laggards > 0) {
    std::printf(
        "\n| laggards | synced | RSS peak without / with | healthy p99 "
        "without / with | healthy max without / with | healthy streams "
        "ended |\n|---|---|---|---|---|---|\n");
    std::printf(
        "| %d | %d | %.0f / %.0f MB (%.2fx) | %.1f / %.1f ms | %.0f / %.0f ms "
        "| %d |\n",
        laggards, laggards_synced, rss_none, rss_lag,
        rss_lag / std::max(rss_none, 1.0), p99_none, p99_lag, worst_none,
        worst_lag, healthy_ended);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Main();
}
