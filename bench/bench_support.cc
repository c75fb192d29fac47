// Copyright 2026 The xform Authors.

#include "bench/bench_support.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/time/clock.h"

extern char** environ;

namespace xform::bench {

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

bool Call(xform::v1::Xform::Stub& stub, const xform::v1::ApplyRequest& request,
          uint64_t* frame) {
  grpc::ClientContext context;
  xform::v1::ApplyResponse response;
  const grpc::Status status = stub.Apply(&context, request, &response);
  if (!status.ok()) {
    std::fprintf(stderr, "apply: %s\n", status.error_message().c_str());
    return false;
  }
  if (frame) *frame = response.frame();
  return true;
}

bool CreateWorld(xform::v1::Xform::Stub& stub, const std::string& name,
                 xform::v1::FrameMode mode, double tick_hz) {
  grpc::ClientContext context;
  xform::v1::CreateWorldRequest request;
  request.set_name(name);
  request.set_mode(mode);
  request.set_tick_hz(tick_hz);
  xform::v1::WorldInfo info;
  return stub.CreateWorld(&context, request, &info).ok();
}

void AddTrs(float x, google::protobuf::RepeatedField<float>* out) {
  for (float f : {x, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}) {
    out->Add(f);
  }
}

ServerProcess::ServerProcess(const std::string& binary,
                             const std::string& address,
                             const std::vector<std::string>& flags) {
  std::vector<std::string> args = {binary, "--listen=" + address};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  if (posix_spawn(&pid_, binary.c_str(), nullptr, nullptr, argv.data(),
                  environ) != 0) {
    std::fprintf(stderr, "cannot start %s\n", binary.c_str());
    pid_ = 0;
    return;
  }
  ok_ = Channel(address)->WaitForConnected(std::chrono::system_clock::now() +
                                           std::chrono::seconds(20));
  if (!ok_) std::fprintf(stderr, "%s did not come up\n", binary.c_str());
}

ServerProcess::~ServerProcess() {
  if (pid_ == 0) return;
  kill(pid_, ok_ ? SIGTERM : SIGKILL);
  waitpid(pid_, nullptr, 0);
}

GapWatch::GapWatch(const std::string& address)
    : stub_(xform::v1::Xform::NewStub(Channel(address))) {
  CreateWorld(*stub_, "ticking", xform::v1::FRAME_MODE_TICK, 60);
  {
    xform::v1::ApplyRequest one;
    one.set_world("ticking");
    one.add_commands()->mutable_create()->add_entity(1);
    Call(*stub_, one);
  }
  writer_ = std::thread([this] {
    for (int k = 0; !stop_; ++k) {
      xform::v1::ApplyRequest move;
      move.set_world("ticking");
      auto* set = move.add_commands()->mutable_set_local();
      set->add_entity(1);
      AddTrs(static_cast<float>(k), set->mutable_local());
      const absl::Time start = absl::Now();
      Call(*stub_, move);
      const absl::Duration took = absl::Now() - start;
      {
        absl::MutexLock lock(&mu_);
        write_ = std::max(write_, took);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  reader_ = std::thread([this] {
    xform::v1::SubscribeRequest request;
    request.set_world("ticking");
    auto reader = stub_->Subscribe(&context_, request);
    xform::v1::FrameUpdate u;
    while (reader->Read(&u)) {
      const absl::Time now = absl::Now();
      const absl::Time published =
          absl::FromUnixNanos(u.server_time_unix_nanos());
      absl::MutexLock lock(&mu_);
      if (last_ != absl::InfinitePast()) gap_ = std::max(gap_, now - last_);
      if (last_published_ != absl::InfinitePast()) {
        published_gap_ = std::max(published_gap_, published - last_published_);
      }
      last_ = now;
      last_published_ = published;
    }
    reader->Finish().IgnoreError();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

GapWatch::~GapWatch() {
  stop_ = true;
  writer_.join();
  context_.TryCancel();
  reader_.join();
}

void GapWatch::Reset() {
  absl::MutexLock lock(&mu_);
  gap_ = absl::ZeroDuration();
  published_gap_ = absl::ZeroDuration();
  write_ = absl::ZeroDuration();
}

double GapWatch::MaxWriteMs() {
  absl::MutexLock lock(&mu_);
  return absl::ToDoubleMilliseconds(write_);
}

double GapWatch::MaxPublishedGapMs() {
  absl::MutexLock lock(&mu_);
  return absl::ToDoubleMilliseconds(published_gap_);
}

double GapWatch::MaxGapMs() {
  absl::MutexLock lock(&mu_);
  return absl::ToDoubleMilliseconds(gap_);
}

}  // namespace xform::bench
