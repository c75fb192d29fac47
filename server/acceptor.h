// Copyright 2026 The xform Authors.
//
// Acceptor takes xformd's plaintext connections itself and hands each one to
// gRPC (grpc::AddInsecureChannelFromFd). gRPC 1.51's own listener stops
// accepting for good after one accept() fails with EMFILE, and the server is
// then deaf until restarted, health checks included. This one never lets
// connections use up the process's descriptors: it refuses (accepts and
// closes at once) a connection that would take a descriptor past its ceiling,
// keeping the rest for the server itself, and should accept() fail anyway it
// waits and tries again.
//
// The ceiling is on descriptor numbers, which is exact for this purpose: the
// kernel hands out the lowest free one, so an accepted descriptor numbered n
// means n are in use below it.
//
// Within the ceiling, no one client address (an IPv6 /64) may hold more than
// its share of the connections (ConnectionsPerAddress): over it, the new
// connection is refused the same way, so one host, hostile or misconfigured,
// cannot keep every other out.
//
// Every 100 ms it also looks at what each connection has sent that gRPC has
// not read yet (a recv() with MSG_PEEK, where enough bytes wait) and cuts
// off one holding `max_queued_stream_resets` RST_STREAM frames or more: an
// HTTP/2 rapid reset flood that gRPC 1.51's reader would otherwise take in
// whole before anything above it sees a call (stream_reset_scan.h). Cost: an
// ioctl(FIONREAD) per connection every 100 ms (every 70 us times the
// connections, when longer: about 2% of a core), and a peek of at most 64 KiB
// at a connection with enough bytes waiting.
//
// Thread-safe; one thread of its own.

#ifndef XFORM_SERVER_ACCEPTOR_H_
#define XFORM_SERVER_ACCEPTOR_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/connections_per_address.h"

namespace xform::server {

struct AcceptorOptions {
  // Most connections at once (--max_connections); 0: as many as the
  // descriptor limit allows after the reserve.
  int max_connections = 0;
  // Most connections at once from one client address
  // (--max_connections_per_address); 0: half of the connections allowed.
  int max_connections_per_address = 0;
  // How long an address whose connection was cut off (CutOff) is refused.
  absl::Duration cut_off_penalty = absl::Seconds(10);
  // RST_STREAM frames waiting unread on one connection that get it cut off
  // (--max_queued_stream_resets); 0: not looked for.
  int max_queued_stream_resets = 100;
  // Descriptors kept for everything but connections (gRPC's own, files).
  int reserved_descriptors = 64;
};

class Acceptor {
 public:
  // Binds and listens on `host_port` ("0.0.0.0:50051", "[::1]:0",
  // "localhost:50051"); port 0 takes one the kernel picks.
  static absl::StatusOr<std::unique_ptr<Acceptor>> Listen(
      absl::string_view host_port, AcceptorOptions options);
  ~Acceptor();  // Stops.

  int port() const { return port_; }
  // The highest descriptor number a connection may have.
  int ceiling() const { return ceiling_; }
  // Most connections one client address may hold at once.
  int max_per_address() const { return per_address_.limit(); }
  // Connections refused at the ceiling, and accept() failures waited out.
  uint64_t refused() const { return refused_.load(); }
  uint64_t accept_errors() const { return accept_errors_.load(); }

  // Hands connections to `server`, which must be started, until Stop().
  void Start(grpc::Server* server);
  // Closes the listening socket; no connection is handed over after it.
  void Stop();

  // Ends the connection handed over as `fd` (a shutdown(): gRPC sees it
  // close and cleans up) and refuses its address's new connections for
  // `cut_off_penalty`, so that reconnecting does not start over at once;
  // logs it with `why` ("it started calls faster than ..."). For abuse
  // found above the transport (CallFloodGuard), and the Acceptor's own.
  // Any thread.
  void CutOff(int fd, absl::string_view why);

 private:
  Acceptor(int listen_fd, int port, int ceiling, int max_per_address,
           absl::Duration cut_off_penalty, int max_queued_stream_resets);
  void Loop(grpc::Server* server);
  // Whether a connection just accepted as `fd` from `peer` may be kept.
  bool Admit(int fd, const sockaddr_storage& peer);
  // Cuts off the connections with `max_queued_stream_resets_` resets or
  // more waiting unread; returns how many it looked at. The loop's thread.
  int CutOffResetFloods();

  const int listen_fd_;
  const int port_;
  const int ceiling_;
  ConnectionsPerAddress per_address_;  // The loop's thread's alone.
  const absl::Duration cut_off_penalty_;
  const int max_queued_stream_resets_;
  absl::Mutex penalty_mu_;
  // Addresses cut off, and until when they are refused.
  absl::flat_hash_map<ConnectionsPerAddress::Client, absl::Time> penalized_
      ABSL_GUARDED_BY(penalty_mu_);
  // Connections cut off and not yet closed, by descriptor.
  absl::flat_hash_set<int> cut_off_ ABSL_GUARDED_BY(penalty_mu_);
  int wake_[2] = {-1, -1};  // A pipe that ends the loop's poll().
  std::thread thread_;
  std::atomic<uint64_t> refused_ = 0;
  std::atomic<uint64_t> refused_per_address_ = 0;  // Paces its log lines.
  std::atomic<uint64_t> accept_errors_ = 0;
};

// What to call a call's peer in logs and listings: gRPC's name for it
// (ServerContext::peer()), but for a connection an Acceptor handed over,
// which gRPC names by its descriptor ("fd:12"), the address at the other end
// as gRPC writes one ("ipv4:10.0.0.5:41234", "ipv6:[::1]:41234"). One
// getpeername() for those. Should the connection have closed meanwhile, its
// descriptor may be another's or none: then "fd:12" stays, or, rarely, a
// dying call is named by the connection that reused it.
std::string PeerAddress(absl::string_view grpc_peer);

}  // namespace xform::server

#endif  // XFORM_SERVER_ACCEPTOR_H_
