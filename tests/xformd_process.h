// Copyright 2026 The xform Authors.
//
// An xformd process for tests: the real binary on a free loopback port,
// its log kept, killed at the end of the test if it has not exited.

#ifndef XFORM_TESTS_XFORMD_PROCESS_H_
#define XFORM_TESTS_XFORMD_PROCESS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

extern char** environ;

namespace xform::testing {

// A port the kernel just handed out, so very likely still free.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// An xformd process on a free loopback port. `shell_prefix`, when given, is
// run by /bin/sh before exec'ing xformd (for `ulimit -n 256`).
class Xformd {
 public:
  explicit Xformd(std::vector<std::string> flags,
                  const std::string& shell_prefix = "") {
    address_ = absl::StrCat("127.0.0.1:", FreePort());
    std::string command = absl::StrCat(shell_prefix, " exec ", XFORMD_PATH,
                                       " --listen=", address_);
    for (const std::string& flag : flags) absl::StrAppend(&command, " ", flag);
    const std::string log = absl::StrCat(::testing::TempDir(), "xformd_",
                                         getpid(), "_", ++count_, ".log");
    absl::StrAppend(&command, " 2>", log);
    log_ = log;
    char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                    const_cast<char*>(command.c_str()), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, argv, environ) != 0) {
      pid_ = 0;
    }
  }
  ~Xformd() {
    if (pid_ != 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

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

  // The exit status, or -1 if it has not exited within `timeout`.
  int WaitForExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (absl::Now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
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

 private:
  static inline int count_ = 0;
  std::string address_;
  std::string log_;
  pid_t pid_ = 0;
  bool exited_ = false;
};

}  // namespace xform::testing

#endif  // XFORM_TESTS_XFORMD_PROCESS_H_
