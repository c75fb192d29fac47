// Copyright 2026 The xform Authors.

#include "server/edge/connection_admission.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/base/log.h"

namespace xform::server {

absl::StatusOr<std::unique_ptr<ConnectionAdmission>>
ConnectionAdmission::Create(int lowest_fd, const AdmissionOptions& options) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  int ceiling = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 30) -
                                 options.reserved_descriptors);
  if (options.max_connections > 0) {
    ceiling = std::min(ceiling, lowest_fd + options.max_connections);
  }
  if (ceiling <= lowest_fd) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the descriptor limit (", limit.rlim_cur,
                     ") leaves no room for connections after the reserve of ",
                     options.reserved_descriptors));
  }
  const int per_address = options.max_connections_per_address > 0
                              ? options.max_connections_per_address
                              : std::max(1, (ceiling - lowest_fd) / 2);
  return std::unique_ptr<ConnectionAdmission>(
      new ConnectionAdmission(ceiling, per_address, options.cut_off_penalty));
}

ConnectionAdmission::ConnectionAdmission(int ceiling, int max_per_address,
                                         absl::Duration cut_off_penalty)
    : ceiling_(ceiling),
      max_per_address_(max_per_address),
      cut_off_penalty_(cut_off_penalty),
      per_address_(max_per_address) {}

bool ConnectionAdmission::Admit(int fd, const sockaddr_storage& peer) {
  if (fd > ceiling_) {
    // Taking it would leave the server too few descriptors of its own.
    refused_at_ceiling_.Log('W',
                            "connection refused: at the connection limit "
                            "(descriptor ",
                            ceiling_, ")");
    return false;
  }
  const ConnectionsPerAddress::Client client =
      ConnectionsPerAddress::Client::Of(peer);
  const absl::Time now = absl::Now();
  std::string name = GrpcPeerName(peer);
  absl::MutexLock lock(&mu_);
  cut_off_.erase(fd);  // Its number was freed: that connection closed.
  if (auto it = penalized_.find(client); it != penalized_.end()) {
    if (now < it->second) return false;  // Cut off a moment ago.
    penalized_.erase(it);
  }
  if (!per_address_.Admit(fd, client, now)) {
    refused_per_address_.Log('W', "connection from ", name,
                             " refused: its address holds ", max_per_address_,
                             " connections (--max_connections_per_address)");
    return false;
  }
  if (by_fd_.size() <= static_cast<size_t>(fd)) by_fd_.resize(fd + 1);
  Admitted& admitted = by_fd_[fd];
  if (!admitted.name.empty()) {
    if (auto it = fd_of_name_.find(admitted.name);
        it != fd_of_name_.end() && it->second == fd) {
      fd_of_name_.erase(it);
    }
  }
  if (!name.empty()) fd_of_name_[name] = fd;
  admitted = {.serial = ++serials_, .name = std::move(name)};
  return true;
}

std::optional<ConnectionAdmission::Connection> ConnectionAdmission::Find(
    absl::string_view grpc_peer) const {
  int fd = -1;
  absl::string_view number = grpc_peer;
  const bool by_number = absl::ConsumePrefix(&number, "fd:");
  if (by_number && (!absl::SimpleAtoi(number, &fd) || fd < 0)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  if (!by_number) {
    auto it = fd_of_name_.find(grpc_peer);
    if (it == fd_of_name_.end()) return std::nullopt;
    fd = it->second;
  }
  if (static_cast<size_t>(fd) >= by_fd_.size() || by_fd_[fd].serial == 0) {
    return std::nullopt;
  }
  return Connection{.fd = fd, .serial = by_fd_[fd].serial};
}

std::vector<int> ConnectionAdmission::Counted() const {
  std::vector<int> fds;
  absl::MutexLock lock(&mu_);
  per_address_.ForEachCounted([&fds](int fd) { fds.push_back(fd); });
  return fds;
}

bool ConnectionAdmission::StillOpen(int fd) const {
  absl::MutexLock lock(&mu_);
  return per_address_.StillOpen(fd);
}

void ConnectionAdmission::CutOffPeer(absl::string_view grpc_peer,
                                     absl::Duration penalty,
                                     absl::string_view why) {
  if (const std::optional<Connection> connection = Find(grpc_peer)) {
    CutOff(*connection, why, penalty);
  }
}

void ConnectionAdmission::CutOff(const Connection& connection,
                                 absl::string_view why,
                                 std::optional<absl::Duration> penalty) {
  {
    absl::MutexLock lock(&mu_);
    const auto fd = static_cast<size_t>(connection.fd);
    if (connection.fd < 0 || fd >= by_fd_.size() ||
        by_fd_[fd].serial != connection.serial) {
      return;  // That connection closed, and its number is another's now.
    }
  }
  CutOff(connection.fd, why, "", penalty);
}

void ConnectionAdmission::CutOff(int fd, absl::string_view why,
                                 absl::string_view grpc_peer,
                                 std::optional<absl::Duration> penalty) {
  const absl::Duration refused_for = penalty.value_or(cut_off_penalty_);
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) {
    return;  // Closed already.
  }
  const std::string name = GrpcPeerName(peer);
  if (!grpc_peer.empty() && !absl::StartsWith(grpc_peer, "fd:") &&
      name != grpc_peer) {
    return;  // That connection closed, and its number is another's now.
  }
  {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    // Once: until gRPC closes it, a connection cut off still has its number,
    // and may still have unread bytes and calls that count.
    if (!cut_off_.insert(fd).second) return;
    if (penalized_.size() >= 4096) {  // Bounded: drop the expired.
      absl::erase_if(penalized_,
                     [now](const auto& entry) { return entry.second <= now; });
    }
    absl::Time& until = penalized_[ConnectionsPerAddress::Client::Of(peer)];
    until = std::max(until, now + refused_for);
  }
  shutdown(fd, SHUT_RDWR);
  Log('W', "connection from ", name, " cut off: ", why,
      "; its address is refused for ", absl::FormatDuration(refused_for));
}

}  // namespace xform::server
