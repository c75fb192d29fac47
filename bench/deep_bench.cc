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

#include <algorithm>
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
#include "bench/bench_support.h"
#include "grpcpp/grpcpp.h"
#include "xform/v1/xform.grpc.pb.h"

ABSL_FLAG(int, entities, 1'000'000, "Entities in each world");
ABSL_FLAG(int, link_depth, 80'000, "Depth of the chain for the links case");
ABSL_FLAG(int, links, 5'000, "Entities linked in the links case");
ABSL_FLAG(int, port, 50093, "Loopback port for xformd");
ABSL_FLAG(std::string, xformd, XFORMD_PATH, "The xformd binary");

namespace {

using xform::bench::AddTrs;
using xform::bench::Call;
using xform::bench::Channel;
using xform::bench::GapWatchProcess;
using xform::v1::FrameUpdate;

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

struct Row {
  std::string name;
  double deep_ms = 0, flat_ms = 0, deep_gap_ms = 0, flat_gap_ms = 0;
};

class Bench {
 public:
  explicit Bench(const std::string& address)
      : address_(address), stub_(xform::v1::Xform::NewStub(Channel(address))) {}

  bool CreateWorld(const std::string& name, xform::v1::FrameMode mode) {
    return xform::bench::CreateWorld(*stub_, name, mode);
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
  Row Case(const std::string& name, GapWatchProcess& watch, Op&& op) {
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
  xform::bench::ServerProcess server(
      absl::GetFlag(FLAGS_xformd), address,
      {"--max_batch=2000000", "--max_message_bytes=268435456",
       "--write_timeout_ms=600000"});
  if (!server.ok()) return 1;
  Bench bench(address);
  GapWatchProcess watch(address);
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Main();
}
