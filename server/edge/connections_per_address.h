// Copyright 2026 The xform Authors.
//
// ConnectionsPerAddress: how many of the connections admitted to gRPC
// (ConnectionAdmission) each client address still holds, so that one host
// cannot take every connection slot (--max_connections_per_address).
//
// gRPC 1.51 does not tell anyone when it closes a connection's descriptor.
// What the kernel does tell: a descriptor number is reused only after it was
// closed, and a socket keeps one (device, inode) pair for its life. So each
// admitted connection is remembered by its descriptor with that pair, and
//   - a descriptor accepted again is proof its previous connection closed;
//   - an address at its limit has its descriptors checked with fstat(): one
//     now closed, or naming another file, is a connection gone.
// The count can lag a close (never lead one), so an address at its limit is
// refused only when the check finds every connection still open. The check
// is O(limit) fstat() calls, made at most once per `recheck_after` for an
// address, so a host that keeps connecting at its limit costs at most
// limit / recheck_after calls a second; in between it is refused at once.
//
// Addresses: an IPv4 address is one client; IPv6 ones are grouped by their
// /64 prefix, the block a single host is usually given (an IPv4-mapped IPv6
// address counts as the IPv4 one).
//
// Memory: one entry per admitted descriptor, so O(--max_connections).
// Not thread-safe: ConnectionAdmission's lock guards it.

#ifndef XFORM_SERVER_EDGE_CONNECTIONS_PER_ADDRESS_H_
#define XFORM_SERVER_EDGE_CONNECTIONS_PER_ADDRESS_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace xform::server {

class ConnectionsPerAddress {
 public:
  // Whose connection it is: an IPv4 address, or an IPv6 /64.
  struct Client {
    uint64_t high = 0;
    uint64_t low = 0;
    // From a peer's address (accept()'s, getpeername()'s); other families
    // (a Unix socket) are all one client.
    static Client Of(const sockaddr_storage& address);
    friend bool operator==(const Client&, const Client&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Client& c) {
      return H::combine(std::move(h), c.high, c.low);
    }
  };

  // `limit`: connections one client may hold at once, >= 1.
  explicit ConnectionsPerAddress(
      int limit, absl::Duration recheck_after = absl::Milliseconds(100));

  int limit() const { return limit_; }

  // Whether `client` may have the connection just accepted as `fd`; if so,
  // it is counted until found closed. `now` paces the checks (above).
  bool Admit(int fd, const Client& client, absl::Time now);

  // Connections counted for `client`: at least those it still holds.
  int Counted(const Client& client) const;

  // Calls `visit(fd)` for every connection counted, whichever its client:
  // O(connections counted). Some may have closed since (StillOpen).
  template <typename Visit>
  void ForEachCounted(Visit visit) const {
    for (const auto& [client, held] : held_) {
      for (int fd : held.fds) visit(fd);
    }
  }

  // Whether `fd`, a connection counted, still is the socket admitted under
  // it: not closed, nor its number given to another file since.
  bool StillOpen(int fd) const;

 private:
  // The socket behind an admitted descriptor, by its (device, inode).
  struct Admitted {
    dev_t device = 0;
    ino_t inode = 0;
    Client client;
    bool held = false;
  };
  struct Held {
    std::vector<int> fds;
    absl::Time checked = absl::InfinitePast();
  };

  // Whether `client` holds `limit_` connections, checking them first if it
  // did and they were not checked within `recheck_after_`.
  bool AtLimit(const Client& client, absl::Time now);
  // Drops the connection once admitted as `fd`, known or found closed.
  void Forget(int fd);

  const int limit_;
  const absl::Duration recheck_after_;
  std::vector<Admitted> by_fd_;
  absl::flat_hash_map<Client, Held> held_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_CONNECTIONS_PER_ADDRESS_H_
