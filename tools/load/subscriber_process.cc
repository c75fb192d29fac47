// Copyright 2026 The xform Authors.

#include "tools/load/subscriber_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "tools/load/spawn.h"
#include "tools/load/transports.h"

namespace xform::load {
namespace {

using Json = nlohmann::json;

// Received, whole, both ways (the latencies as they were recorded, so the
// parent pools them with its own subscribers' as if recorded there).
Json ToJson(const Received& r) {
  return {{"latency_ms", r.latency_ms},
          {"arrived_ms", r.arrived_ms},
          {"messages", r.messages},
          {"frames", r.frames},
          {"updates", r.updates},
          {"bytes", r.bytes},
          {"snapshot_messages", r.snapshot_messages},
          {"snapshot_updates", r.snapshot_updates},
          {"snapshot_bytes", r.snapshot_bytes},
          {"disconnects", r.disconnects},
          {"pid", r.pid}};
}

Received FromJson(const Json& j) {
  Received r;
  r.latency_ms = j.at("latency_ms").get<std::vector<double>>();
  r.arrived_ms = j.at("arrived_ms").get<std::vector<double>>();
  r.messages = j.at("messages").get<uint64_t>();
  r.frames = j.at("frames").get<uint64_t>();
  r.updates = j.at("updates").get<uint64_t>();
  r.bytes = j.at("bytes").get<uint64_t>();
  r.snapshot_messages = j.at("snapshot_messages").get<uint64_t>();
  r.snapshot_updates = j.at("snapshot_updates").get<uint64_t>();
  r.snapshot_bytes = j.at("snapshot_bytes").get<uint64_t>();
  r.disconnects = j.at("disconnects").get<uint64_t>();
  r.pid = j.at("pid").get<pid_t>();
  return r;
}

// Reads what is there to read from `fd` onto `into`, waiting at most
// `timeout_ms` for the first byte; false at end of file or an error.
bool ReadSome(int fd, std::string& into, int timeout_ms) {
  pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
  const int ready = poll(&p, 1, timeout_ms);
  if (ready < 0) return errno == EINTR;
  if (ready == 0) return true;
  char buffer[1 << 16];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  into.append(buffer, static_cast<size_t>(n));
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SubscriberProcess>> SubscriberProcess::Start(
    const std::vector<std::string>& command) {
  int to_child[2];
  int from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) {
    return absl::InternalError("pipe2 failed");
  }
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return absl::InternalError("pipe2 failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the copies; the originals close at exec.
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  const pid_t pid = Spawn(command, &actions);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    return absl::InternalError(absl::StrCat("cannot start ", command[0]));
  }
  return std::unique_ptr<SubscriberProcess>(
      new SubscriberProcess(pid, to_child[1], from_child[0]));
}

SubscriberProcess::~SubscriberProcess() {
  close(to_child_);
  close(from_child_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<bool> SubscriberProcess::Ready() {
  if (heard_.find("ready\n") != std::string::npos) return true;
  if (!ReadSome(from_child_, heard_, /*timeout_ms=*/0)) {
    return absl::UnavailableError("a subscriber process ended before ready");
  }
  return heard_.find("ready\n") != std::string::npos;
}

void SubscriberProcess::Say(const char* line) {
  // A line is far below PIPE_BUF: written whole or not at all (the child
  // gone: SIGPIPE is ignored, and Stop() finds its end).
  [[maybe_unused]] ssize_t n = write(to_child_, line, std::strlen(line));
}

void SubscriberProcess::StartMeasuring() { Say("start\n"); }

absl::StatusOr<std::vector<Received>> SubscriberProcess::Stop() {
  Say("stop\n");
  heard_.clear();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ReadSome(from_child_, heard_, /*timeout_ms=*/100)) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("a subscriber process did not report");
    }
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = 0;
  const Json report = Json::parse(heard_, nullptr, /*allow_exceptions=*/false);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !report.is_array()) {
    return absl::UnavailableError("a subscriber process failed to report");
  }
  std::vector<Received> received;
  for (const Json& one : report) received.push_back(FromJson(one));
  return received;
}

int ServeSubscriberProcess(const ClientOptions& options,
                           const std::string& world,
                           MirrorOptions::Encoding encoding, float precision,
                           double max_rate_hz, int subscribers, int first,
                           int stride, const std::optional<Camera>& camera) {
  std::vector<std::unique_ptr<Subscriber>> subs;
  subs.reserve(subscribers);
  for (int s = 0; s < subscribers; ++s) {
    subs.push_back(StartStreamSubscriber(options, world, encoding, precision,
                                         max_rate_hz, /*stalls=*/false,
                                         first + s * stride, camera));
  }
  const absl::Time ready_by = absl::Now() + absl::Seconds(120);
  for (auto& s : subs) {
    while (!s->Ready()) {
      if (absl::Now() > ready_by) {
        std::fprintf(stderr, "subscriber process: not ready in 120 s\n");
        return 1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  std::cout << "ready" << std::endl;
  std::string line;
  if (!std::getline(std::cin, line) || line != "start") return 1;
  for (auto& s : subs) {
    s->recorder().StartMeasuring(absl::InfiniteFuture(), absl::ZeroDuration());
  }
  if (!std::getline(std::cin, line) || line != "stop") return 1;
  Json report = Json::array();
  for (auto& s : subs) {
    s->recorder().StopMeasuring();
    report.push_back(ToJson(s->recorder().Take()));
  }
  std::cout << report.dump() << std::endl;
  return 0;
}

}  // namespace xform::load
