// Copyright 2026 The xform Authors.

#include "bench/bench_support.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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

GapWatchProcess::GapWatchProcess(const std::string& address) {
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from[1], STDOUT_FILENO);
  for (int fd : {to[0], to[1], from[0], from[1]}) {
    posix_spawn_file_actions_addclose(&actions, fd);
  }
  std::string binary = XFORM_GAP_WATCH_PATH;
  std::string flag = "--server=" + address;
  char* argv[] = {binary.data(), flag.data(), nullptr};
  if (posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv, environ) !=
      0) {
    std::fprintf(stderr, "cannot start %s\n", binary.c_str());
    pid_ = 0;
  }
  posix_spawn_file_actions_destroy(&actions);
  close(to[0]);
  close(from[1]);
  to_ = fdopen(to[1], "w");
  from_ = fdopen(from[0], "r");
  if (Say("ready?") != "ready") {
    std::fprintf(stderr, "%s did not come up\n", binary.c_str());
  }
}

GapWatchProcess::~GapWatchProcess() {
  if (to_) fclose(to_);  // The watcher ends at the end of its input.
  if (from_) fclose(from_);
  if (pid_ != 0) waitpid(pid_, nullptr, 0);
}

std::string GapWatchProcess::Say(const std::string& command) {
  if (!to_ || !from_) return "";
  std::fprintf(to_, "%s\n", command.c_str());
  std::fflush(to_);
  char line[256];
  if (!std::fgets(line, sizeof line, from_)) return "";
  std::string answer(line);
  while (!answer.empty() && answer.back() == '\n') answer.pop_back();
  return answer;
}

void GapWatchProcess::Reset() { Say("reset"); }

GapWatchProcess::Figures GapWatchProcess::Ask() {
  Figures figures;
  const std::string answer = Say("report");
  std::sscanf(answer.c_str(), "%lf %lf %lf", &figures.gap_ms,
              &figures.published_gap_ms, &figures.write_ms);
  return figures;
}

}  // namespace xform::bench
