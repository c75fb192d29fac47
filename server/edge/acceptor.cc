// Copyright 2026 The xform Authors.

#include "server/edge/acceptor.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/server_posix.h"
#include "server/base/log.h"
#include "server/edge/stream_reset_scan.h"

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

namespace {

// The addresses HOST:PORT names (a bracketed IPv6 host too), for a
// listener.
absl::StatusOr<std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>>
ListenAddresses(absl::string_view host_port) {
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
  return std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>(found,
                                                            &freeaddrinfo);
}

// A non-blocking socket listening on `a`, or -1 with the reason in *error.
int ListenOn(const addrinfo& a, std::string* error) {
  const int fd = socket(
      a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol);
  if (fd < 0) {
    *error = strerror(errno);
    return -1;
  }
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (bind(fd, a.ai_addr, a.ai_addrlen) != 0 || listen(fd, 1024) != 0) {
    *error = strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  return bound.ss_family == AF_INET6
             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Listen(
    absl::string_view host_port, AcceptorOptions options) {
  auto addresses = ListenAddresses(host_port);
  if (!addresses.ok()) return addresses.status();
  std::string last_error = "no address";
  for (addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    const int fd = ListenOn(*a, &last_error);
    if (fd < 0) continue;
    absl::StatusOr<std::unique_ptr<ConnectionAdmission>> admission =
        ConnectionAdmission::Create(fd, options.admission);
    if (!admission.ok()) {
      close(fd);
      return admission.status();
    }
    return std::unique_ptr<Acceptor>(
        new Acceptor(fd, BoundPort(fd), *std::move(admission),
                     options.max_queued_stream_resets));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", host_port, ": ", last_error));
}

Acceptor::Acceptor(int listen_fd, int port,
                   std::unique_ptr<ConnectionAdmission> admission,
                   int max_queued_stream_resets)
    : listen_fd_(listen_fd),
      port_(port),
      admission_(std::move(admission)),
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
          accept_errors_.Log('W', "accept failed (", strerror(errno),
                             "); retrying every ", kRetryAfterErrorMs, " ms");
          wait_ms = kRetryAfterErrorMs;
        }
        break;
      }
      if (!admission_->Admit(fd, peer)) {
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

int Acceptor::CutOffResetFloods() {
  std::string unread;  // Room made at the first connection worth a peek.
  const int enough_bytes = max_queued_stream_resets_ * kResetFrameBytes;
  std::vector<int> floods;
  int looked_at = 0;
  for (int fd : admission_->Counted()) {
    ++looked_at;
    int waiting = 0;
    if (ioctl(fd, FIONREAD, &waiting) != 0 || waiting < enough_bytes) {
      continue;
    }
    unread.resize(kPeekBytes);
    const ssize_t got =
        recv(fd, unread.data(), unread.size(), MSG_PEEK | MSG_DONTWAIT);
    if (got >= enough_bytes &&
        CountStreamResets(absl::string_view(unread.data(), got)) >=
            max_queued_stream_resets_) {
      floods.push_back(fd);
    }
  }
  for (int fd : floods) {
    // Not another file that took its number since the peek.
    if (!admission_->StillOpen(fd)) continue;
    admission_->CutOff(
        fd, absl::StrCat("it had ", max_queued_stream_resets_,
                         " or more cancelled streams waiting unread "
                         "(HTTP/2 rapid reset, --max_queued_stream_resets)"));
  }
  return looked_at;
}

}  // namespace xform::server
