// Copyright 2026 The xform Authors.
//
// What the process benchmarks (xform_deep_bench, xform_join_bench) share: an
// xformd started as a process on loopback, plain calls to it, and GapWatch, a
// small 60 Hz world whose stream is watched for gaps while a benchmark loads
// another world.

#ifndef XFORM_BENCH_BENCH_SUPPORT_H_
#define XFORM_BENCH_BENCH_SUPPORT_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/repeated_field.h"
#include "grpcpp/grpcpp.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform::bench {

// A channel with room for big messages, not shared with other channels.
std::shared_ptr<grpc::Channel> Channel(const std::string& address);

// Applies `request`; false (after printing the status) on an error.
bool Call(xform::v1::Xform::Stub& stub, const xform::v1::ApplyRequest& request,
          uint64_t* frame = nullptr);

bool CreateWorld(xform::v1::Xform::Stub& stub, const std::string& name,
                 xform::v1::FrameMode mode, double tick_hz = 0);

// A local transform at x along the x axis, as the wire's 10 floats.
void AddTrs(float x, google::protobuf::RepeatedField<float>* out);

// xformd, started with `flags` and listening on `address`; SIGTERM and
// waited for on destruction.
class ServerProcess {
 public:
  ServerProcess(const std::string& binary, const std::string& address,
                const std::vector<std::string>& flags);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Whether it came up (answers on its address within 20 s).
  bool ok() const { return ok_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  bool ok_ = false;
};

// A world "ticking" at 60 Hz with one entity that a writer moves every 5 ms,
// and a subscriber noting the longest time between two of its messages.
class GapWatch {
 public:
  explicit GapWatch(const std::string& address);
  ~GapWatch();
  void Reset();
  // The longest time between two messages' arrivals.
  double MaxGapMs();
  // The longest time between two messages' publications (their
  // server_time): a gap here is the server not publishing, not delivering.
  double MaxPublishedGapMs();
  // The longest of the writer's Apply calls.
  double MaxWriteMs();

 private:
  std::unique_ptr<xform::v1::Xform::Stub> stub_;
  grpc::ClientContext context_;
  std::atomic<bool> stop_{false};
  std::thread writer_;
  std::thread reader_;
  absl::Mutex mu_;
  absl::Duration gap_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration published_gap_ ABSL_GUARDED_BY(mu_);
  absl::Duration write_ ABSL_GUARDED_BY(mu_);
  absl::Time last_published_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// GapWatch in a process of its own (xform_gap_watch), so that what it sees
// is the server's doing: in the benchmark's process its stream would share
// gRPC's client threads with the benchmark's big streams, and measure them.
class GapWatchProcess {
 public:
  explicit GapWatchProcess(const std::string& address);
  ~GapWatchProcess();
  GapWatchProcess(const GapWatchProcess&) = delete;
  GapWatchProcess& operator=(const GapWatchProcess&) = delete;

  // As GapWatch's.
  void Reset();
  double MaxGapMs() { return Ask().gap_ms; }
  double MaxPublishedGapMs() { return Ask().published_gap_ms; }
  double MaxWriteMs() { return Ask().write_ms; }

 private:
  struct Figures {
    double gap_ms = -1, published_gap_ms = -1, write_ms = -1;
  };
  Figures Ask();
  // One command line to the watcher, and its answer line.
  std::string Say(const std::string& command);

  pid_t pid_ = 0;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

}  // namespace xform::bench

#endif  // XFORM_BENCH_BENCH_SUPPORT_H_
