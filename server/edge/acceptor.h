// Copyright 2026 The xform Authors.
//
// Acceptor takes xformd's plaintext connections itself and hands each one to
// gRPC (grpc::AddInsecureChannelFromFd). gRPC 1.51's own listener stops
// accepting for good after one accept() fails with EMFILE, and the server is
// then deaf until restarted, health checks included. This one keeps only
// the connections its ConnectionAdmission admits (connection_admission.h:
// the descriptor ceiling, each address's share, addresses cut off), so
// connections never use up the process's descriptors, and should accept()
// fail anyway it waits and tries again.
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

#ifndef XFORM_SERVER_EDGE_ACCEPTOR_H_
#define XFORM_SERVER_EDGE_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server.h"
#include "server/base/log.h"
#include "server/edge/connection_admission.h"

namespace xform::server {

struct AcceptorOptions {
  AdmissionOptions admission;
  // RST_STREAM frames waiting unread on one connection that get it cut off
  // (--max_queued_stream_resets); 0: not looked for.
  int max_queued_stream_resets = 100;
};

class Acceptor {
 public:
  // Binds and listens on `host_port` ("0.0.0.0:50051", "[::1]:0",
  // "localhost:50051"); port 0 takes one the kernel picks.
  static absl::StatusOr<std::unique_ptr<Acceptor>> Listen(
      absl::string_view host_port, AcceptorOptions options);
  ~Acceptor();  // Stops.

  int port() const { return port_; }
  // Which connections it keeps; cuts off abuse found above the transport
  // (CancelFloodGuard, RefusalGuard) as well as its own.
  ConnectionAdmission& admission() { return *admission_; }

  // Hands connections to `server`, which must be started, until Stop().
  void Start(grpc::Server* server);
  // Closes the listening socket; no connection is handed over after it.
  void Stop();

 private:
  Acceptor(int listen_fd, int port,
           std::unique_ptr<ConnectionAdmission> admission,
           int max_queued_stream_resets);
  void Loop(grpc::Server* server);
  // Cuts off the connections with `max_queued_stream_resets_` resets or
  // more waiting unread; returns how many it looked at. The loop's thread.
  int CutOffResetFloods();

  const int listen_fd_;
  const int port_;
  const std::unique_ptr<ConnectionAdmission> admission_;
  const int max_queued_stream_resets_;
  int wake_[2] = {-1, -1};  // A pipe that ends the loop's poll().
  std::thread thread_;
  LogThrottle accept_errors_;  // A line a second, counting the rest.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_ACCEPTOR_H_
