// Copyright 2026 The xform Authors.
//
// An xformd process for tests: the real binary on a loopback port,
// its log kept, killed at the end of the test if it has not exited.

#ifndef XFORM_TESTS_XFORMD_PROCESS_H_
#define XFORM_TESTS_XFORMD_PROCESS_H_

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/wait_until.h"

extern char** environ;

namespace xform::testing {

// An xformd process on a loopback port of the kernel's choosing (port 0,
// learnt from its log), unless `flags` has a --listen of its own: a port
// found free beforehand can be taken by any other test's connection before
// xformd binds it. `shell_prefix`, when given, is run by /bin/sh before
// exec'ing xformd (for `ulimit -n 256`).
class Xformd {
 public:
  explicit Xformd(std::vector<std::string> flags,
                  const std::string& shell_prefix = "") {
    // XFORM_XFORMD: another binary (a long run's own copy, which a
    // rebuild meanwhile leaves alone).
    const char* binary = std::getenv("XFORM_XFORMD");
    std::string command = absl::StrCat(
        shell_prefix, " exec ", binary != nullptr ? binary : XFORMD_PATH);
    bool listen_given = false;
    for (const std::string& flag : flags) {
      listen_given |= flag.rfind("--listen=", 0) == 0;
      absl::StrAppend(&command, " ", flag);
    }
    if (!listen_given) absl::StrAppend(&command, " --listen=127.0.0.1:0");
    const std::string log = absl::StrCat(::testing::TempDir(), "xformd_",
                                         getpid(), "_", ++count_, ".log");
    absl::StrAppend(&command, " 2>", log);
    log_ = log;
    // Emptied first: a log left by an earlier run's process of the same pid
    // would otherwise be read for the port before the shell truncates it.
    std::ofstream(log, std::ios::trunc);
    char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                    const_cast<char*>(command.c_str()), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, argv, environ) != 0) {
      pid_ = 0;
      return;
    }
    WaitForPort(absl::Seconds(30));
  }
  ~Xformd() {
    if (pid_ != 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // 127.0.0.1 and the port xformd bound; empty if it exited first.
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  std::shared_ptr<grpc::Channel> Connect() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), args);
    channel->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::seconds(20));
    return channel;
  }

  // kill -9, and waits for it to be gone.
  void Kill() {
    if (pid_ == 0 || exited_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
  }

  // Sends `signal` (SIGSTOP, SIGCONT: a node paused).
  void Signal(int signal) {
    if (pid_ != 0 && !exited_) kill(pid_, signal);
  }

  // The exit status, or -1 if it has not exited within `timeout`.
  int WaitForExit(absl::Duration timeout) {
    // Not exiting may be what the caller wants to see: -1 says so.
    return WaitUntil([&] { return Exited(); }, timeout, "xformd's exit")
               ? exit_code_
               : -1;
  }

  // The peak resident set, in MB (VmHWM).
  double PeakRssMb() const {
    std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) {
        return std::stod(line.substr(6)) / 1024;
      }
    }
    return -1;
  }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Whether the log holds `text` within `timeout`: for what xformd logs
  // just after the act a test sees (a connection cut off, then logged).
  bool WaitForLog(const std::string& text, absl::Duration timeout) const {
    return static_cast<bool>(WaitUntil(
        [&] { return Log().find(text) != std::string::npos; }, timeout, text));
  }

 private:
  // Reaps the process if it has exited, keeping its exit code.
  bool Exited() {
    int status = 0;
    if (!exited_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ =
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exited_;
  }

  // Reads the bound port from the line xformd logs once it has bound it,
  // before recovering its worlds.
  void WaitForPort(absl::Duration timeout) {
    static constexpr std::string_view kListening = "xformd listening on ";
    static constexpr std::string_view kPort = " (port ";
    const absl::Time deadline = absl::Now() + timeout;
    while (!Exited() && absl::Now() < deadline) {
      const std::string log = Log();
      const size_t line = log.find(kListening);
      const size_t port =
          line == std::string::npos ? line : log.find(kPort, line);
      if (port != std::string::npos &&
          log.find(')', port) != std::string::npos) {
        address_ = absl::StrCat("127.0.0.1:",
                                std::atoi(log.c_str() + port + kPort.size()));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  static inline int count_ = 0;
  std::string address_;
  std::string log_;
  pid_t pid_ = 0;
  bool exited_ = false;
  int exit_code_ = -1;
};

}  // namespace xform::testing

#endif  // XFORM_TESTS_XFORMD_PROCESS_H_
