// Copyright 2026 The xform Authors.
//
// End-to-end replication benchmark. Starts xformd as a process on loopback,
// loads a 1,000,000-entity `scene` world (as in xform_core_bench), then for
// 1, 4 and 16 subscribers drives 60 frames a second, each moving 10,000 world
// matrices (10,000 leaves get a new local), and reports:
//   frames/s      frames published and received per second by the slowest
//                 subscriber
//   latency       publish-to-receive, p50 / p99 / max over every message
//   bytes/entity  wire bytes of the frame messages per moved entity
//   server CPU    xformd's user+system CPU per published frame (/proc)
// Not a test: run it by hand (see docs/benchmarks.md).

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tools/process_stats.h"
#include "tools/scenes.h"
#include "xform/v1/xform.grpc.pb.h"

extern char** environ;

ABSL_FLAG(std::string, xformd, XFORMD_PATH, "The xformd binary");
ABSL_FLAG(int, port, 50123, "Loopback port for the server");
ABSL_FLAG(int, entities, 1'000'000, "World size");
ABSL_FLAG(int, moved, 10'000, "World matrices changed per frame");
ABSL_FLAG(double, hz, 60, "Frames per second driven");
ABSL_FLAG(int, seconds, 10, "Measured seconds per subscriber count");
ABSL_FLAG(std::string, subscribers, "1,4,16", "Subscriber counts to run");

namespace {

using ::xform::tools::CpuSeconds;
using ::xform::tools::Percentile;
using xform::v1::FrameUpdate;

struct Shape {
  std::vector<uint64_t> parent;  // 0: a root.
  std::vector<uint64_t> leaves;  // Entities nobody is the parent of.
};

// The core benchmark's `scene` shape: node i's parent is a random node among
// the previous 64, or none with probability 1% (seed 42).
Shape MakeScene(int n) {
  const std::vector<xform::CreateOp> ops =
      xform::MakeScene(xform::SceneShape::kScene, static_cast<size_t>(n));
  Shape shape;
  for (const xform::CreateOp& op : ops) shape.parent.push_back(op.parent);
  shape.leaves = xform::Leaves(ops);
  return shape;
}

void AddTrs(float x, float angle, google::protobuf::RepeatedField<float>* out) {
  for (float f : {x, 1.0f, 2.0f, 0.0f, std::sin(angle / 2), 0.0f,
                  std::cos(angle / 2), 1.0f, 1.0f, 1.0f}) {
    out->Add(f);
  }
}

struct SubscriberResult {
  std::vector<double> latency_ms;
  uint64_t messages = 0;
  uint64_t moved = 0;
  uint64_t bytes = 0;
  uint64_t skipped = 0;
  uint64_t first_frame = 0;
  uint64_t last_frame = 0;
};

// A subscriber written as a latency-sensitive client would write it: gRPC's
// callback API handles each message on the thread that read it off the
// socket, with no hand-off to an application thread per message (which on
// two shared cores means one more wake-up waiting for a core).
class BenchSubscriber final : public grpc::ClientReadReactor<FrameUpdate> {
 public:
  explicit BenchSubscriber(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stub_ = xform::v1::Xform::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args));
    request_.set_world("bench");
    stub_->async()->Subscribe(&context_, &request_, this);
    StartRead(&update_);
    StartCall();
  }
  ~BenchSubscriber() override {
    context_.TryCancel();
    done_.WaitForNotification();
  }
  bool synced() const { return synced_; }
  bool ended() const { return done_.HasBeenNotified(); }
  void StartMeasuring() { measuring_ = true; }
  SubscriberResult Stop() {
    measuring_ = false;
    absl::MutexLock lock(&mu_);
    return result_;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows.
    const absl::Time now = absl::Now();
    if (update_.snapshot_done()) synced_ = true;
    if (!update_.snapshot() && measuring_) {
      absl::MutexLock lock(&mu_);
      result_.latency_ms.push_back(absl::ToDoubleMilliseconds(
          now - absl::FromUnixNanos(update_.server_time_unix_nanos())));
      ++result_.messages;
      result_.moved += update_.moved_size();
      result_.bytes += update_.ByteSizeLong();
      result_.skipped += update_.frames_skipped();
      if (result_.first_frame == 0) result_.first_frame = update_.frame();
      result_.last_frame = update_.frame();
    }
    StartRead(&update_);
  }
  void OnDone(const grpc::Status& /*status*/) override { done_.Notify(); }

 private:
  std::unique_ptr<xform::v1::Xform::Stub> stub_;
  grpc::ClientContext context_;
  xform::v1::SubscribeRequest request_;
  FrameUpdate update_;
  std::atomic<bool> synced_{false};
  std::atomic<bool> measuring_{false};
  absl::Notification done_;
  absl::Mutex mu_;
  SubscriberResult result_;
};

int Main() {
  const std::string address =
      absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port));
  const std::string xformd = absl::GetFlag(FLAGS_xformd);
  const std::string listen = absl::StrCat("--listen=", address);
  char* argv[] = {const_cast<char*>(xformd.c_str()),
                  const_cast<char*>(listen.c_str()),
                  const_cast<char*>("--max_batch=2000000"),
                  const_cast<char*>("--max_message_bytes=268435456"),
                  // 1M-entity snapshots to many clients on 2 cores are slow.
                  const_cast<char*>("--write_timeout_ms=60000"), nullptr};
  pid_t server = 0;
  if (posix_spawn(&server, xformd.c_str(), nullptr, nullptr, argv, environ) !=
      0) {
    std::fprintf(stderr, "cannot start %s\n", xformd.c_str());
    return 1;
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(20))) {
    std::fprintf(stderr, "xformd did not come up\n");
    kill(server, SIGTERM);
    return 1;
  }
  auto stub = xform::v1::Xform::NewStub(channel);
  {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest request;
    request.set_name("bench");
    request.set_mode(xform::v1::FRAME_MODE_DRIVEN);
    xform::v1::WorldInfo info;
    if (!stub->CreateWorld(&context, request, &info).ok()) return 1;
  }
  const int n = absl::GetFlag(FLAGS_entities);
  const Shape shape = MakeScene(n);
  {
    xform::v1::ApplyRequest load;
    load.set_world("bench");
    load.set_end_frame(true);
    auto* create = load.add_commands()->mutable_create();
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int i = 0; i < n; ++i) {
      create->add_entity(i + 1);
      create->add_parent(shape.parent[i]);
      AddTrs(10 * u(rng), 3 * u(rng), create->mutable_local());
    }
    grpc::ClientContext context;
    xform::v1::ApplyResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status status = stub->Apply(&context, load, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "load failed: %s\n", status.error_message().c_str());
      return 1;
    }
    std::printf("loaded %d entities (%zu leaves) in %.0f ms\n", n,
                shape.leaves.size(),
                absl::ToDoubleMilliseconds(absl::Now() - start));
  }

  const int moved = absl::GetFlag(FLAGS_moved);
  const absl::Duration period = absl::Seconds(1.0 / absl::GetFlag(FLAGS_hz));
  std::printf(
      "\n| subscribers | frames/s (driven %.0f) | latency p50 | p99 | max | "
      "bytes/moved entity | server CPU/frame "
      "|\n|---|---|---|---|---|---|---|\n",
      absl::GetFlag(FLAGS_hz));
  const std::vector<std::string> counts =
      absl::StrSplit(absl::GetFlag(FLAGS_subscribers), ',');
  for (const std::string& count : counts) {
    const int subscribers = std::stoi(count);
    // One at a time: each takes its 1M-entity snapshot before the next
    // joins, so what is measured is the steady stream.
    std::vector<std::unique_ptr<BenchSubscriber>> subs;
    for (int s = 0; s < subscribers; ++s) {
      subs.push_back(std::make_unique<BenchSubscriber>(address));
      while (!subs.back()->synced()) {
        if (subs.back()->ended()) {
          std::fprintf(stderr,
                       "a subscriber's stream ended before its snapshot\n");
          kill(server, SIGTERM);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (auto& s : subs) s->StartMeasuring();

    std::mt19937 rng(11);
    const double cpu_before = CpuSeconds(server);
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Seconds(absl::GetFlag(FLAGS_seconds));
    uint64_t frames = 0;
    grpc::ClientContext context;
    auto writer = stub->ApplyStream(&context);
    for (absl::Time next = start; absl::Now() < end; next += period) {
      xform::v1::ApplyRequest frame;
      frame.set_world("bench");
      frame.set_end_frame(true);
      auto* set = frame.add_commands()->mutable_set_local();
      for (int k = 0; k < moved; ++k) {
        // Multiply-shift, not %: no 64-bit division per pick in this driver,
        // which shares the two cores with xformd.
        set->add_entity(
            shape.leaves[(uint64_t{rng()} * shape.leaves.size()) >> 32]);
        AddTrs(static_cast<float>(frames % 100), static_cast<float>(k),
               set->mutable_local());
      }
      xform::v1::ApplyResponse response;
      if (!writer->Write(frame) || !writer->Read(&response)) break;
      ++frames;
      absl::SleepFor(next + period - absl::Now());
    }
    writer->WritesDone();
    writer->Finish();
    const absl::Duration elapsed = absl::Now() - start;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(300));  // Let the last arrive.
    const double cpu = CpuSeconds(server) - cpu_before;

    std::vector<double> latency;
    double slowest_fps = 1e9;
    uint64_t bytes = 0, entities = 0;
    for (auto& s : subs) {
      SubscriberResult r = s->Stop();
      latency.insert(latency.end(), r.latency_ms.begin(), r.latency_ms.end());
      slowest_fps = std::min(slowest_fps, static_cast<double>(r.messages) /
                                              absl::ToDoubleSeconds(elapsed));
      bytes += r.bytes;
      entities += r.moved;
    }
    std::printf(
        "| %d | %.1f published, %.1f received | %.2f ms | %.2f ms | %.2f ms | "
        "%.1f | %.2f ms |\n",
        subscribers,
        static_cast<double>(frames) / absl::ToDoubleSeconds(elapsed),
        slowest_fps, Percentile(latency, 0.5), Percentile(latency, 0.99),
        Percentile(latency, 1.0),
        entities ? static_cast<double>(bytes) / static_cast<double>(entities)
                 : 0.0,
        1000.0 * cpu / static_cast<double>(frames));
    std::fflush(stdout);
  }
  kill(server, SIGTERM);
  int status = 0;
  waitpid(server, &status, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Main();
}
