// Copyright 2026 The xform Authors.

#include "server/edge/connections_per_address.h"

#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

namespace xform::server {
namespace {

uint64_t LoadBigEndian(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

ConnectionsPerAddress::Client ConnectionsPerAddress::Client::Of(
    const sockaddr_storage& address) {
  // IPv4 as its IPv4-mapped IPv6 form (::ffff:a.b.c.d), whole.
  constexpr uint64_t kMapped = uint64_t{0xffff} << 32;
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    return {.high = 0, .low = kMapped | ntohl(in.sin_addr.s_addr)};
  }
  if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    const uint8_t* bytes = in6.sin6_addr.s6_addr;
    const uint64_t high = LoadBigEndian(bytes);
    const uint64_t low = LoadBigEndian(bytes + 8);
    if (high == 0 && (low >> 32) == 0xffff) return {.high = 0, .low = low};
    return {.high = high, .low = 0};  // Its /64.
  }
  return {};
}

ConnectionsPerAddress::ConnectionsPerAddress(int limit,
                                             absl::Duration recheck_after)
    : limit_(std::max(limit, 1)), recheck_after_(recheck_after) {}

bool ConnectionsPerAddress::Admit(int fd, const Client& client,
                                  absl::Time now) {
  if (fd < 0) return false;
  if (static_cast<size_t>(fd) >= by_fd_.size()) by_fd_.resize(fd + 1);
  // The kernel reused the number: whatever held it before is closed.
  Forget(fd);
  if (AtLimit(client, now)) return false;
  struct stat about {};
  if (fstat(fd, &about) != 0) return false;
  by_fd_[fd] = {.device = about.st_dev,
                .inode = about.st_ino,
                .client = client,
                .held = true};
  held_[client].fds.push_back(fd);
  return true;
}

bool ConnectionsPerAddress::AtLimit(const Client& client, absl::Time now) {
  auto it = held_.find(client);
  if (it == held_.end() || static_cast<int>(it->second.fds.size()) < limit_) {
    return false;
  }
  if (now - it->second.checked < recheck_after_) return true;
  it->second.checked = now;
  std::vector<int>& fds = it->second.fds;
  std::erase_if(fds, [this](int fd) {
    if (StillOpen(fd)) return false;
    by_fd_[fd].held = false;
    return true;
  });
  const bool at_limit = static_cast<int>(fds.size()) >= limit_;
  if (fds.empty()) held_.erase(it);
  return at_limit;
}

int ConnectionsPerAddress::Counted(const Client& client) const {
  auto it = held_.find(client);
  return it == held_.end() ? 0 : static_cast<int>(it->second.fds.size());
}

void ConnectionsPerAddress::Forget(int fd) {
  Admitted& admitted = by_fd_[fd];
  if (!admitted.held) return;
  admitted.held = false;
  auto it = held_.find(admitted.client);
  if (it == held_.end()) return;
  std::vector<int>& fds = it->second.fds;
  if (auto at = std::find(fds.begin(), fds.end(), fd); at != fds.end()) {
    fds.erase(at);
  }
  if (fds.empty()) held_.erase(it);
}

bool ConnectionsPerAddress::StillOpen(int fd) const {
  const Admitted& admitted = by_fd_[fd];
  struct stat about {};
  return fstat(fd, &about) == 0 && about.st_dev == admitted.device &&
         about.st_ino == admitted.inode;
}

}  // namespace xform::server
