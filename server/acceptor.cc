// Copyright 2026 The xform Authors.

#include "server/acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/server_posix.h"
#include "server/log.h"
#include "server/stream_reset_scan.h"

namespace xform::server {
namespace {

// How long to wait after accept() fails for want of a resource (EMFILE,
// ENFILE, ENOBUFS, ENOMEM) before trying again; the connection waits in the
// kernel's backlog meanwhile.
constexpr int kRetryAfterErrorMs = 50;

// How often the connections' unread bytes are looked at for a rapid reset
// flood: every 100 ms, or, with many connections, as often as keeps the look
// (about 1.4 us a connection, measured with 4,000) near 2% of a core. And
// how much of them: a flood's pairs of frames are about 100 bytes, so 64 KiB
// holds hundreds of its resets.
constexpr absl::Duration kResetFloodCheckEvery = absl::Milliseconds(100);
constexpr absl::Duration kResetFloodCheckPerConnection = absl::Microseconds(70);
constexpr size_t kPeekBytes = 64 * 1024;
// An RST_STREAM frame's size, so the fewest bytes that hold a given count.
constexpr int kResetFrameBytes = 13;

}  // namespace

std::string PeerAddress(absl::string_view grpc_peer) {
  int fd = -1;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") ||
      !absl::SimpleAtoi(grpc_peer, &fd) || fd < 0) {
    return std::string(grpc_peer);
  }
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  char host[INET6_ADDRSTRLEN] = {};
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    if (address.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
      if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)) != nullptr) {
        return absl::StrCat("ipv4:", host, ":", ntohs(in->sin_port));
      }
    } else if (address.ss_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
      if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)) != nullptr) {
        return absl::StrCat("ipv6:[", host, "]:", ntohs(in6->sin6_port));
      }
    }
  }
  return absl::StrCat("fd:", fd);
}

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Listen(
    absl::string_view host_port, AcceptorOptions options) {
  const size_t colon = host_port.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", host_port, ": expected HOST:PORT"));
  }
  std::string host(host_port.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", host_port, ": bad port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int error = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                    service.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", host_port, ": ", gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found,
                                                               &freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
               a->ai_protocol);
    if (fd < 0) {
      last_error = strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
      last_error = strerror(errno);
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
    const int bound_port =
        bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    int ceiling = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 30) -
                                   options.reserved_descriptors);
    if (options.max_connections > 0) {
      // Connections take the descriptors above those open now.
      ceiling = std::min(ceiling, fd + options.max_connections);
    }
    if (ceiling <= fd) {
      close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("the descriptor limit (", limit.rlim_cur,
                       ") leaves no room for connections after the reserve of ",
                       options.reserved_descriptors));
    }
    // Connections take the descriptors above the listening one.
    const int per_address = options.max_connections_per_address > 0
                                ? options.max_connections_per_address
                                : std::max(1, (ceiling - fd) / 2);
    return std::unique_ptr<Acceptor>(new Acceptor(
        fd, bound_port, ceiling, per_address, options.cut_off_penalty,
        options.max_queued_stream_resets));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", host_port, ": ", last_error));
}

Acceptor::Acceptor(int listen_fd, int port, int ceiling, int max_per_address,
                   absl::Duration cut_off_penalty, int max_queued_stream_resets)
    : listen_fd_(listen_fd),
      port_(port),
      ceiling_(ceiling),
      per_address_(max_per_address),
      cut_off_penalty_(cut_off_penalty),
      max_queued_stream_resets_(std::max(max_queued_stream_resets, 0)) {
  if (pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
}

Acceptor::~Acceptor() {
  Stop();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void Acceptor::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Loop(server); });
}

void Acceptor::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  if (write(wake_[1], &byte, 1) < 0) {
    // The pipe cannot be full: one byte is ever written.
  }
  thread_.join();
  close(listen_fd_);
}

void Acceptor::Loop(grpc::Server* server) {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  int wait_ms = -1;
  absl::Time next_check = absl::Now() + kResetFloodCheckEvery;
  for (;;) {
    if (max_queued_stream_resets_ > 0) {
      const int until_check = static_cast<int>(absl::ToInt64Milliseconds(
          std::max(next_check - absl::Now(), absl::ZeroDuration())));
      wait_ms = wait_ms < 0 ? until_check : std::min(wait_ms, until_check);
    }
    const int ready = poll(fds, 2, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) break;
    wait_ms = -1;
    if (max_queued_stream_resets_ > 0 && absl::Now() >= next_check) {
      const int looked_at = CutOffResetFloods();
      next_check =
          absl::Now() + std::max(kResetFloodCheckEvery,
                                 looked_at * kResetFloodCheckPerConnection);
    }
    for (;;) {
      sockaddr_storage peer{};
      socklen_t peer_length = sizeof(peer);
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer),
                             &peer_length, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // Out of descriptors or memory: try again shortly, not at once.
          if (accept_errors_.fetch_add(1) == 0) {
            Log('W', "accept failed (", strerror(errno), "); retrying every ",
                kRetryAfterErrorMs, " ms");
          }
          wait_ms = kRetryAfterErrorMs;
        }
        break;
      }
      if (!Admit(fd, peer)) {
        // The client sees the connection close and retries later.
        close(fd);
        continue;
      }
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      grpc::AddInsecureChannelFromFd(server, fd);
    }
  }
}

bool Acceptor::Admit(int fd, const sockaddr_storage& peer) {
  if (fd > ceiling_) {
    // Taking it would leave the server too few descriptors of its own.
    if (refused_.fetch_add(1) % 1000 == 0) {
      Log('W', "connection refused: at the connection limit (descriptor ",
          ceiling_, "); ", refused_.load(), " refused so far");
    }
    return false;
  }
  const ConnectionsPerAddress::Client client =
      ConnectionsPerAddress::Client::Of(peer);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&penalty_mu_);
    cut_off_.erase(fd);  // Its number was freed: that connection closed.
    if (auto it = penalized_.find(client); it != penalized_.end()) {
      if (now < it->second) return false;  // Cut off a moment ago.
      penalized_.erase(it);
    }
  }
  if (!per_address_.Admit(fd, client, now)) {
    if (refused_per_address_.fetch_add(1) % 1000 == 0) {
      Log('W', "connection from ", PeerAddress(absl::StrCat("fd:", fd)),
          " refused: its address holds ", per_address_.limit(),
          " connections (--max_connections_per_address); ",
          refused_per_address_.load(), " refused so far");
    }
    return false;
  }
  return true;
}

int Acceptor::CutOffResetFloods() {
  std::string unread;  // Room made at the first connection worth a peek.
  const int enough_bytes = max_queued_stream_resets_ * kResetFrameBytes;
  std::vector<int> floods;
  int looked_at = 0;
  per_address_.ForEachCounted([&](int fd) {
    ++looked_at;
    int waiting = 0;
    if (ioctl(fd, FIONREAD, &waiting) != 0 || waiting < enough_bytes) return;
    unread.resize(kPeekBytes);
    const ssize_t got =
        recv(fd, unread.data(), unread.size(), MSG_PEEK | MSG_DONTWAIT);
    if (got >= enough_bytes &&
        CountStreamResets(absl::string_view(unread.data(), got)) >=
            max_queued_stream_resets_) {
      floods.push_back(fd);
    }
  });
  for (int fd : floods) {
    // Not another file that took its number since the peek.
    if (!per_address_.StillOpen(fd)) continue;
    CutOff(fd,
           absl::StrCat("it had ", max_queued_stream_resets_,
                        " or more cancelled streams waiting unread "
                        "(HTTP/2 rapid reset, --max_queued_stream_resets)"));
  }
  return looked_at;
}

void Acceptor::CutOff(int fd, absl::string_view why) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) {
    return;  // Closed already.
  }
  const std::string name = PeerAddress(absl::StrCat("fd:", fd));
  {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&penalty_mu_);
    // Once: until gRPC closes it, a connection cut off still has its number,
    // and may still have unread bytes and calls that count.
    if (!cut_off_.insert(fd).second) return;
    if (penalized_.size() >= 4096) {  // Bounded: drop the expired.
      absl::erase_if(penalized_,
                     [now](const auto& entry) { return entry.second <= now; });
    }
    penalized_[ConnectionsPerAddress::Client::Of(peer)] =
        now + cut_off_penalty_;
  }
  shutdown(fd, SHUT_RDWR);
  Log('W', "connection from ", name, " cut off: ", why,
      "; its address is refused for ", absl::FormatDuration(cut_off_penalty_));
}

}  // namespace xform::server
