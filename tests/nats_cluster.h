// Copyright 2026 The xform Authors.
//
// NATS servers for tests: real nats-server processes (Debian's), JetStream
// on with file storage in a directory of the test's, clustered over
// loopback routes when there are several. Each can be killed (-9) and
// started again on the same ports and storage.

#ifndef XFORM_TESTS_NATS_CLUSTER_H_
#define XFORM_TESTS_NATS_CLUSTER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/wait_until.h"

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
      nodes_.push_back({.client_port = FreePort(),
                        .route_port = FreePort(),
                        .monitor_port = FreePort()});
    }
    for (int i = 0; i < servers; ++i) {
      WriteConfig(i);
      Start(i);
    }
    for (int i = 0; i < servers; ++i) WaitReady(i);
  }
  ~NatsCluster() {
    for (size_t i = 0; i < nodes_.size(); ++i) Kill(static_cast<int>(i));
    // XFORM_KEEP_NATS keeps the servers' logs and stores, to look into.
    if (std::getenv("XFORM_KEEP_NATS") == nullptr) {
      std::filesystem::remove_all(dir_);
    }
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

  // Waits until server i says, on its monitoring port's /healthz, that it
  // is current: JetStream on, and every stream and consumer it holds a
  // replica of caught up with its group. A server started again after a
  // kill takes a while to be; losing another before it is loses a
  // stream's quorum, two failures at once, not one.
  bool WaitCurrent(int i, absl::Duration timeout) {
    return static_cast<bool>(WaitUntil(
        [&] {
          return absl::StrContains(HttpGet(nodes_[i].monitor_port, "/healthz"),
                                   "\"ok\"");
        },
        timeout, "nats-server's /healthz ok"));
  }

  // A port free now that stays ours across restarts as far as a test can
  // make it: below the kernel's ephemeral range (ip_local_port_range), so
  // that no outgoing connection takes it while its server is down (a
  // client retrying a dead node's port can even connect to itself, and
  // the node came back to "Address already in use"), chosen at random
  // among the ports that bind now.
  static int FreePort() {
    int ephemeral_low = 32768;
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
    const int low = 16000;  // Fixed ports of other tests are below.
    const int high = std::max(low + 1000, ephemeral_low);
    static std::mt19937 random(std::random_device{}());
    for (;;) {
      const int port =
          std::uniform_int_distribution<int>(low, high - 1)(random);
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool free =
          bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
      close(fd);
      if (free) return port;
    }
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
    int monitor_port = 0;  // HTTP monitoring (/healthz).
    pid_t pid = 0;
    size_t log_start = 0;  // Where this start's lines begin.
  };

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
         << "http: 127.0.0.1:" << nodes_[i].monitor_port << "\n"
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
    EXPECT_TRUE(WaitUntil(
        [&] {
          return Log(i).find("Server is ready", nodes_[i].log_start) !=
                 std::string::npos;
        },
        absl::Seconds(20), "nats-server to be ready"))
        << "nats-server " << i << ": " << Log(i);
  }

  // The body of an HTTP/1.0 GET of `path` on a loopback port ("" if it
  // fails): enough for nats-server's monitoring endpoints.
  static std::string HttpGet(int port, const std::string& path) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return "";
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{.tv_sec = 2, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    std::string response;
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) ==
        0) {
      const std::string request =
          absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
      if (write(fd, request.data(), request.size()) ==
          static_cast<ssize_t>(request.size())) {
        char buffer[4096];
        ssize_t got;
        while ((got = read(fd, buffer, sizeof buffer)) > 0) {
          response.append(buffer, static_cast<size_t>(got));
        }
      }
    }
    close(fd);
    const size_t body = response.find("\r\n\r\n");
    return body == std::string::npos ? "" : response.substr(body + 4);
  }

  static inline int count_ = 0;
  const std::string dir_;
  const NatsOptions options_;
  std::vector<Node> nodes_;
};

}  // namespace xform::testing

#endif  // XFORM_TESTS_NATS_CLUSTER_H_
