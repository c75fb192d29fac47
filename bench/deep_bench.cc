// Copyright 2026 The xform Authors.
//
// xform_deep_bench: what a million-deep chain costs the server, against the
// same operation on a flat world of as many roots, while another world's
// 60 Hz stream is watched for gaps. xformd runs as a process on loopback.
//
// Cases (each timed from the request to the subscriber having all of it):
//   subscribe     a subtree subscription of the chain's root / a whole-world
//                 subscription of the flat world: the snapshot
//   move root     the root moves under a subtree subscriber / every root
//                 moves under a whole-world one
//   build         the world is built under a rate-limited subscriber
//   echo          a writer with a client id sets 1% of the entities under an
//                 echo-filtered subscriber, then another writer moves one
//   links         --links entities are linked under the chain's leaf / under
//                 a root, in one batch (chain --link_depth deep)
//
//   ./build/bench/xform_deep_bench [--entities=1000000] [--link_depth=80000]

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "xform/v1/xform.grpc.pb.h"

ABSL_FLAG(int, entities, 1'000'000, "Entities in each world");
ABSL_FLAG(int, link_depth, 80'000, "Depth of the chain for the links case");
ABSL_FLAG(int, links, 5'000, "Entities linked in the links case");
ABSL_FLAG(int, port, 50093, "Loopback port for xformd");
ABSL_FLAG(std::string, xformd, XFORMD_PATH, "The xformd binary");

extern char** environ;

namespace {

using xform::v1::FrameUpdate;

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

bool Call(xform::v1::Xform::Stub& stub, const xform::v1::ApplyRequest& r,
          uint64_t* frame = nullptr) {
  grpc::ClientContext context;
  xform::v1::ApplyResponse response;
  const grpc::Status status = stub.Apply(&context, r, &response);
  if (!status.ok()) {
    std::fprintf(stderr, "apply: %s\n", status.error_message().c_str());
    return false;
  }
  if (frame) *frame = response.frame();
  return true;
}

void AddTrs(float x, google::protobuf::RepeatedField<float>* out) {
  for (float f : {x, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}) {
    out->Add(f);
  }
}

// A subscription read on its own thread, counting the entities it holds and
// the last complete frame.
class Reader {
 public:
  Reader(std::shared_ptr<grpc::Channel> channel,
         xform::v1::SubscribeRequest request)
      : stub_(xform::v1::Xform::NewStub(channel)) {
    thread_ = std::thread([this, request] {
      auto reader = stub_->Subscribe(&context_, request);
      FrameUpdate u;
      while (reader->Read(&u)) {
        absl::MutexLock lock(&mu_);
        entities_ += u.created_size() - u.destroyed_size();
        if (u.last_part()) frame_ = u.frame();
      }
      reader->Finish().IgnoreError();
    });
  }
  ~Reader() {
    context_.TryCancel();
    thread_.join();
  }
  // Waits until the stream has a complete `frame`; false after 10 minutes.
  bool WaitFor(uint64_t frame) {
    absl::MutexLock lock(&mu_);
    const auto reached = [&] {
      mu_.AssertHeld();
      return frame_ >= frame;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Minutes(10));
  }
  int64_t entities() {
    absl::MutexLock lock(&mu_);
    return entities_;
  }

 private:
  std::unique_ptr<xform::v1::Xform::Stub> stub_;
  grpc::ClientContext context_;
  std::thread thread_;
  absl::Mutex mu_;
  int64_t entities_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t frame_ ABSL_GUARDED_BY(mu_) = 0;
};

// The other world: a writer moves an entity every 5 ms, a subscriber notes
// the longest time between two messages since Reset().
class GapWatch {
 public:
  explicit GapWatch(const std::string& address)
      : stub_(xform::v1::Xform::NewStub(Channel(address))) {
    writer_ = std::thread([this] {
      for (int k = 0; !stop_; ++k) {
        xform::v1::ApplyRequest move;
        move.set_world("ticking");
        auto* set = move.add_commands()->mutable_set_local();
        set->add_entity(1);
        AddTrs(static_cast<float>(k), set->mutable_local());
        Call(*stub_, move);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    reader_ = std::thread([this] {
      xform::v1::SubscribeRequest request;
      request.set_world("ticking");
      auto reader = stub_->Subscribe(&context_, request);
      FrameUpdate u;
      while (reader->Read(&u)) {
        const absl::Time now = absl::Now();
        absl::MutexLock lock(&mu_);
        if (last_ != absl::InfinitePast()) {
          gap_ = std::max(gap_, now - last_);
        }
        last_ = now;
      }
      reader->Finish().IgnoreError();
    });
  }
  ~GapWatch() {
    stop_ = true;
    writer_.join();
    context_.TryCancel();
    reader_.join();
  }
  void Reset() {
    absl::MutexLock lock(&mu_);
    gap_ = absl::ZeroDuration();
  }
  double MaxGapMs() {
    absl::MutexLock lock(&mu_);
    return absl::ToDoubleMilliseconds(gap_);
  }

 private:
  std::unique_ptr<xform::v1::Xform::Stub> stub_;
  grpc::ClientContext context_;
  std::atomic<bool> stop_{false};
  std::thread writer_;
  std::thread reader_;
  absl::Mutex mu_;
  absl::Duration gap_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

struct Row {
  std::string name;
  double deep_ms = 0, flat_ms = 0, deep_gap_ms = 0, flat_gap_ms = 0;
};

class Bench {
 public:
  explicit Bench(const std::string& address)
      : address_(address), stub_(xform::v1::Xform::NewStub(Channel(address))) {}

  bool CreateWorld(const std::string& name, xform::v1::FrameMode mode,
                   double hz = 0) {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest request;
    request.set_name(name);
    request.set_mode(mode);
    request.set_tick_hz(hz);
    xform::v1::WorldInfo info;
    return stub_->CreateWorld(&context, request, &info).ok();
  }
  void DeleteWorld(const std::string& name) {
    grpc::ClientContext context;
    xform::v1::DeleteWorldRequest request;
    request.set_name(name);
    xform::v1::DeleteWorldResponse response;
    stub_->DeleteWorld(&context, request, &response).IgnoreError();
  }

  // A chain (each entity under the one before) or as many roots.
  xform::v1::ApplyRequest Build(const std::string& world, bool deep, int n) {
    xform::v1::ApplyRequest request;
    request.set_world(world);
    request.set_end_frame(true);
    auto* create = request.add_commands()->mutable_create();
    for (int e = 1; e <= n; ++e) {
      create->add_entity(e);
      create->add_parent(deep ? e - 1 : 0);
    }
    return request;
  }

  xform::v1::SubscribeRequest Subscription(const std::string& world) {
    xform::v1::SubscribeRequest request;
    request.set_world(world);
    return request;
  }

  // Runs `op` on the deep and the flat world and times each.
  template <typename Op>
  Row Case(const std::string& name, GapWatch& watch, Op&& op) {
    Row row{name};
    for (bool deep : {true, false}) {
      watch.Reset();
      const absl::Time start = absl::Now();
      if (!op(deep)) std::fprintf(stderr, "%s failed\n", name.c_str());
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
      (deep ? row.deep_ms : row.flat_ms) = ms;
      (deep ? row.deep_gap_ms : row.flat_gap_ms) = watch.MaxGapMs();
      std::fprintf(stderr, "%s %s: %.0f ms, gap %.0f ms\n", name.c_str(),
                   deep ? "deep" : "flat", ms, watch.MaxGapMs());
    }
    return row;
  }

  const std::string address_;
  std::unique_ptr<xform::v1::Xform::Stub> stub_;
};

int Main() {
  const int n = absl::GetFlag(FLAGS_entities);
  const std::string address =
      absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port));
  const std::string xformd = absl::GetFlag(FLAGS_xformd);
  const std::string listen = absl::StrCat("--listen=", address);
  char* argv[] = {const_cast<char*>(xformd.c_str()),
                  const_cast<char*>(listen.c_str()),
                  const_cast<char*>("--max_batch=2000000"),
                  const_cast<char*>("--max_message_bytes=268435456"),
                  const_cast<char*>("--write_timeout_ms=600000"),
                  nullptr};
  pid_t server = 0;
  if (posix_spawn(&server, xformd.c_str(), nullptr, nullptr, argv, environ) !=
      0) {
    std::fprintf(stderr, "cannot start %s\n", xformd.c_str());
    return 1;
  }
  if (!Channel(address)->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(20))) {
    std::fprintf(stderr, "xformd did not come up\n");
    kill(server, SIGKILL);
    return 1;
  }
  Bench bench(address);
  bench.CreateWorld("ticking", xform::v1::FRAME_MODE_TICK, 60);
  {
    xform::v1::ApplyRequest one;
    one.set_world("ticking");
    one.add_commands()->mutable_create()->add_entity(1);
    Call(*bench.stub_, one);
  }
  GapWatch watch(address);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto world = [](bool deep) { return deep ? "deep" : "flat"; };
  std::vector<Row> rows;

  // build: under a rate-limited whole-world subscriber.
  rows.push_back(
      bench.Case("build (rate-limited subscriber)", watch, [&](bool deep) {
        bench.CreateWorld(world(deep), xform::v1::FRAME_MODE_DRIVEN);
        xform::v1::SubscribeRequest request = bench.Subscription(world(deep));
        request.set_max_rate_hz(30);
        Reader reader(Channel(address), request);
        uint64_t frame = 0;
        return Call(*bench.stub_, bench.Build(world(deep), deep, n), &frame) &&
               reader.WaitFor(frame) && reader.entities() == n;
      }));
  // subscribe: the whole chain as a subtree, the flat world whole.
  rows.push_back(bench.Case("subscribe (snapshot)", watch, [&](bool deep) {
    xform::v1::SubscribeRequest request = bench.Subscription(world(deep));
    if (deep) request.add_subtree(1);
    Reader reader(Channel(address), request);
    return reader.WaitFor(1) && reader.entities() == n;
  }));
  // move root: everything moves, under a subtree subscriber of the root.
  {
    std::vector<std::unique_ptr<Reader>> readers;
    for (bool deep : {true, false}) {
      xform::v1::SubscribeRequest request = bench.Subscription(world(deep));
      if (deep) request.add_subtree(1);
      readers.push_back(std::make_unique<Reader>(Channel(address), request));
      readers.back()->WaitFor(1);
    }
    rows.push_back(bench.Case(
        "move everything (subtree subscriber)", watch, [&](bool deep) {
          xform::v1::ApplyRequest move;
          move.set_world(world(deep));
          move.set_end_frame(true);
          auto* set = move.add_commands()->mutable_set_local();
          for (int e = 1; e <= (deep ? 1 : n); ++e) {
            set->add_entity(e);
            AddTrs(1, set->mutable_local());
          }
          uint64_t frame = 0;
          return Call(*bench.stub_, move, &frame) &&
                 readers[deep ? 0 : 1]->WaitFor(frame);
        }));
  }
  // echo: a writer sets 1% along the world, an echo-filtered subscriber.
  rows.push_back(bench.Case(
      "1% set by a writer (no-echo subscriber)", watch, [&](bool deep) {
        xform::v1::SubscribeRequest request = bench.Subscription(world(deep));
        request.set_no_echo_client_id("physics");
        Reader reader(Channel(address), request);
        reader.WaitFor(1);
        xform::v1::ApplyRequest move;
        move.set_world(world(deep));
        move.set_end_frame(true);
        move.set_client_id("physics");
        auto* set = move.add_commands()->mutable_set_local();
        for (int e = 1; e <= n; e += 100) {
          set->add_entity(e);
          AddTrs(2, set->mutable_local());
        }
        // Directly set entities are not echoed back (in the flat world, none
        // is sent at all): another writer's move marks the end.
        xform::v1::ApplyRequest marker;
        marker.set_world(world(deep));
        marker.set_end_frame(true);
        marker.set_client_id("other");
        auto* other = marker.add_commands()->mutable_set_local();
        other->add_entity(2);
        AddTrs(3, other->mutable_local());
        uint64_t frame = 0;
        return Call(*bench.stub_, move) && Call(*bench.stub_, marker, &frame) &&
               reader.WaitFor(frame);
      }));
  bench.DeleteWorld("deep");
  bench.DeleteWorld("flat");

  // links: under the leaf of a chain / under a root, one batch.
  const int depth = absl::GetFlag(FLAGS_link_depth);
  const int links = absl::GetFlag(FLAGS_links);
  rows.push_back(bench.Case(
      absl::StrCat(links, " links in one batch (", depth, " deep)"), watch,
      [&](bool deep) {
        const std::string name = absl::StrCat(world(deep), "_links");
        bench.CreateWorld(name, xform::v1::FRAME_MODE_DRIVEN);
        xform::v1::ApplyRequest build = bench.Build(name, deep, depth);
        auto* extra = build.add_commands()->mutable_create();
        for (int k = 1; k <= links; ++k) extra->add_entity(depth + k);
        if (!Call(*bench.stub_, build)) return false;
        xform::v1::ApplyRequest link;
        link.set_world(name);
        link.set_end_frame(true);
        auto* command = link.add_commands()->mutable_link();
        for (int k = 1; k <= links; ++k) {
          command->add_entity(depth + k);
          command->add_parent(deep ? depth : 1);
        }
        return Call(*bench.stub_, link);
      }));

  std::printf(
      "\n| case (%d entities) | 1M-deep chain | flat | deep / flat "
      "| other world's longest gap (deep, flat) |\n|---|---|---|---|---|\n",
      n);
  for (const Row& row : rows) {
    std::printf("| %s | %.0f ms | %.0f ms | %.2fx | %.0f ms, %.0f ms |\n",
                row.name.c_str(), row.deep_ms, row.flat_ms,
                row.deep_ms / std::max(row.flat_ms, 1e-3), row.deep_gap_ms,
                row.flat_gap_ms);
  }
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Main();
}
