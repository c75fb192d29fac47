// Copyright 2026 The xform Authors.
//
// ConnectionAdmission decides which accepted connections xformd keeps, for
// whichever listener accepted them: the Acceptor (plaintext, acceptor.h) or
// gRPC's own TLS listener (grpc_listener_admission.h). A connection is
// refused (closed at once; the client sees it close and retries later) when
//   - its descriptor is above the ceiling: the soft RLIMIT_NOFILE less a
//     reserve for the server's own files, or --max_connections above the
//     descriptors open when the admission was made. Exact, since the kernel
//     hands out the lowest free number: a connection numbered n means n
//     descriptors are in use below it. So connections never use up the
//     process's descriptors;
//   - its address (an IPv6 /64) holds its share already
//     (ConnectionsPerAddress), so one host cannot keep every other out;
//   - its address was cut off (CutOff) less than `cut_off_penalty` ago.
//
// It also tells connections apart above the transport: gRPC names one an
// Acceptor handed over by its descriptor ("fd:12") and one it accepted
// itself by its peer's address ("ipv4:10.0.0.5:41234"); Find() gives the
// descriptor for either, and which admission of that descriptor it is, so
// that abuse seen above the transport (CancelFloodGuard) is counted per
// connection, not per descriptor number, and can be cut off.
//
// Cost: Admit is O(1) but at an address's limit, where it may fstat() the
// address's connections (at most once per 100 ms an address). Find is a
// hash lookup. Memory: O(connections admitted), bounded by the ceiling.
//
// Thread-safe.

#ifndef XFORM_SERVER_EDGE_CONNECTION_ADMISSION_H_
#define XFORM_SERVER_EDGE_CONNECTION_ADMISSION_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/log.h"
#include "server/edge/connections_per_address.h"
#include "server/edge/peer_address.h"

namespace xform::server {

struct AdmissionOptions {
  // Most connections at once (--max_connections); 0: as many as the
  // descriptor limit allows after the reserve.
  int max_connections = 0;
  // Most connections at once from one client address
  // (--max_connections_per_address); 0: half of the connections allowed.
  int max_connections_per_address = 0;
  // How long an address whose connection was cut off (CutOff) is refused.
  absl::Duration cut_off_penalty = absl::Seconds(10);
  // Descriptors kept for everything but connections (gRPC's own, files).
  int reserved_descriptors = 64;
};

class ConnectionAdmission {
 public:
  // For connections that will take descriptors above `lowest_fd` (the
  // listening socket's, or the highest open now). An error when the
  // descriptor limit leaves no room for any after the reserve.
  static absl::StatusOr<std::unique_ptr<ConnectionAdmission>> Create(
      int lowest_fd, const AdmissionOptions& options);

  // The highest descriptor number a connection may have.
  int ceiling() const { return ceiling_; }
  // Most connections one client address may hold at once.
  int max_per_address() const { return max_per_address_; }

  // Whether to keep the connection just accepted as `fd` from `peer`; if so
  // it is counted until found closed. Refusals are logged, paced.
  bool Admit(int fd, const sockaddr_storage& peer);

  // Ends the connection `fd` (a shutdown(): gRPC sees it close and cleans
  // up) and refuses its address's new connections for `penalty` (else
  // `cut_off_penalty`; an address already refused for longer stays so), so
  // that reconnecting does not start over at once; logs it with `why`.
  // Once per connection. With `grpc_peer` (a name Find took), only if `fd`
  // is still that peer's. Any thread.
  void CutOff(int fd, absl::string_view why, absl::string_view grpc_peer = "",
              std::optional<absl::Duration> penalty = std::nullopt);
  // CutOff of the connection gRPC calls `grpc_peer`, if it was admitted.
  void CutOffPeer(absl::string_view grpc_peer, absl::Duration penalty,
                  absl::string_view why);

  // An admitted connection: its descriptor, and which admission of that
  // descriptor number it is (a serial never reused), since gRPC does not
  // say when it closes one and the kernel reuses the number.
  struct Connection {
    int fd = -1;
    uint64_t serial = 0;
  };
  // The connection gRPC calls `grpc_peer` (ServerContext::peer()), if one
  // was admitted under that name. A lookup, no system call: should the
  // connection have closed, the number may be free or another file's
  // (CutOff checks).
  std::optional<Connection> Find(absl::string_view grpc_peer) const;
  // CutOff of `connection`, if its descriptor is still that admission's.
  void CutOff(const Connection& connection, absl::string_view why,
              std::optional<absl::Duration> penalty = std::nullopt);

  // The connections counted, some perhaps closed since (StillOpen).
  std::vector<int> Counted() const;
  // Whether `fd`, a connection counted, still is the socket admitted under
  // it: not closed, nor its number given to another file since.
  bool StillOpen(int fd) const;

 private:
  ConnectionAdmission(int ceiling, int max_per_address,
                      absl::Duration cut_off_penalty);

  const int ceiling_;
  const int max_per_address_;
  const absl::Duration cut_off_penalty_;
  mutable absl::Mutex mu_;
  ConnectionsPerAddress per_address_ ABSL_GUARDED_BY(mu_);
  // Addresses cut off, and until when they are refused.
  absl::flat_hash_map<ConnectionsPerAddress::Client, absl::Time> penalized_
      ABSL_GUARDED_BY(mu_);
  // Connections cut off and not yet closed, by descriptor.
  absl::flat_hash_set<int> cut_off_ ABSL_GUARDED_BY(mu_);
  // The last connection admitted on each descriptor number: its serial and
  // its name as gRPC writes its peer; and the names back to the numbers. A
  // number admitted again replaces its old entry.
  struct Admitted {
    uint64_t serial = 0;
    std::string name;
  };
  std::vector<Admitted> by_fd_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> fd_of_name_ ABSL_GUARDED_BY(mu_);
  uint64_t serials_ ABSL_GUARDED_BY(mu_) = 0;
  LogThrottle refused_at_ceiling_;   // A line a second, counting the rest.
  LogThrottle refused_per_address_;  // Likewise.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_CONNECTION_ADMISSION_H_
