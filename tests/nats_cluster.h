// Copyright 2026 The xform Authors.
//
// NATS servers for tests: real nats-server processes (Debian's), JetStream
// on with file storage in a directory of the test's, clustered over
// loopback routes when there are several. Each can be killed (-9) and
// started again on the same ports and storage.

#ifndef XFORM_TESTS_NATS_CLUSTER_H_
#define XFORM_TESTS_NATS_CLUSTER_H_

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

extern char** environ;

namespace xform::testing {

// How the servers are set up: each message at most `max_payload` bytes;
// TLS with this certificate and key (PEM files) when given; clients
// required to present `token` when given.
struct NatsOptions {
  int64_t max_payload = 1 << 20;
  std::string tls_cert;
  std::string tls_key;
  std::string token;
};

class NatsCluster {
 public:
  explicit NatsCluster(int servers, NatsOptions options = {})
      : dir_(absl::StrCat(::testing::TempDir(), "xform_nats_", getpid(), "_",
                          ++count_)),
        options_(std::move(options)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < servers; ++i) {
      nodes_.push_back({.client_port = FreePort(), .route_port = FreePort()});
    }
    for (int i = 0; i < servers; ++i) {
      WriteConfig(i);
      Start(i);
    }
    for (int i = 0; i < servers; ++i) WaitReady(i);
  }
  ~NatsCluster() {
    for (size_t i = 0; i < nodes_.size(); ++i) Kill(static_cast<int>(i));
    std::filesystem::remove_all(dir_);
  }

  int size() const { return static_cast<int>(nodes_.size()); }
  std::string Url(int i) const {
    return absl::StrCat("nats://127.0.0.1:", nodes_[i].client_port);
  }
  // Every server's URL, comma-separated, as --cluster takes them.
  std::string Urls() const {
    std::vector<std::string> urls;
    for (int i = 0; i < size(); ++i) urls.push_back(Url(i));
    return absl::StrJoin(urls, ",");
  }
  // Server i's name in the cluster ("n0"...), as JetStream names leaders.
  static std::string Name(int i) { return absl::StrCat("n", i); }

  // kill -9, and waits for it to be gone.
  void Kill(int i) {
    Node& node = nodes_[i];
    if (node.pid == 0) return;
    kill(node.pid, SIGKILL);
    waitpid(node.pid, nullptr, 0);
    node.pid = 0;
  }

  // Starts server i (again), on its ports and storage; waits until it
  // takes connections.
  void Restart(int i) {
    Start(i);
    WaitReady(i);
  }

  std::string Log(int i) const {
    std::ifstream in(LogPath(i));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  struct Node {
    int client_port = 0;
    int route_port = 0;
    pid_t pid = 0;
    size_t log_start = 0;  // Where this start's lines begin.
  };

  // A port the kernel reports free now: the routes must be named before
  // the servers start.
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    socklen_t size = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    close(fd);
    return ntohs(address.sin_port);
  }

  std::string LogPath(int i) const {
    return absl::StrCat(dir_, "/n", i, ".log");
  }
  std::string ConfigPath(int i) const {
    return absl::StrCat(dir_, "/n", i, ".conf");
  }

  void WriteConfig(int i) const {
    std::ofstream conf(ConfigPath(i));
    conf << "server_name: " << Name(i) << "\n"
         << "listen: 127.0.0.1:" << nodes_[i].client_port << "\n"
         << "max_payload: " << options_.max_payload << "\n"
         << "jetstream { store_dir: \"" << dir_ << "/store" << i << "\" }\n";
    if (!options_.tls_cert.empty()) {
      conf << "tls { cert_file: \"" << options_.tls_cert << "\", key_file: \""
           << options_.tls_key << "\" }\n";
    }
    if (!options_.token.empty()) {
      conf << "authorization { token: \"" << options_.token << "\" }\n";
    }
    if (nodes_.size() > 1) {
      std::vector<std::string> routes;
      for (size_t j = 0; j < nodes_.size(); ++j) {
        if (static_cast<int>(j) == i) continue;
        routes.push_back(
            absl::StrCat("nats-route://127.0.0.1:", nodes_[j].route_port));
      }
      conf << "cluster { name: xform, listen: 127.0.0.1:"
           << nodes_[i].route_port << ", routes: ["
           << absl::StrJoin(routes, ", ") << "] }\n";
    }
  }

  void Start(int i) {
    Node& node = nodes_[i];
    node.log_start = Log(i).size();
    const std::string command =
        absl::StrCat("exec nats-server -c ", ConfigPath(i), " 2>>", LogPath(i));
    char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                    const_cast<char*>(command.c_str()), nullptr};
    if (posix_spawn(&node.pid, "/bin/sh", nullptr, nullptr, argv, environ) !=
        0) {
      node.pid = 0;
    }
  }

  void WaitReady(int i) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (Log(i).find("Server is ready", nodes_[i].log_start) !=
          std::string::npos) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "nats-server " << i << " did not start: " << Log(i);
  }

  static inline int count_ = 0;
  const std::string dir_;
  const NatsOptions options_;
  std::vector<Node> nodes_;
};

}  // namespace xform::testing

#endif  // XFORM_TESTS_NATS_CLUSTER_H_
