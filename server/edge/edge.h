// Copyright 2026 The xform Authors.
//
// Edge: what stands between the network and xformd's gRPC server. Debian
// ships gRPC 1.51, without upstream's later fixes, and this library is the
// one place that works around what it lacks:
//   - its listener dies at the first accept() that fails for want of a
//     descriptor (fixed upstream in 1.53): plaintext connections are taken
//     by our Acceptor (acceptor.h) and handed to gRPC; TLS ones, which gRPC
//     1.51 cannot take from a descriptor, through an accept4() of ours in
//     front of the C library's (grpc_listener_admission.h). Either way a
//     ConnectionAdmission (connection_admission.h) keeps connections under
//     the descriptor ceiling and each address to its share
//     (connections_per_address.h), and refuses addresses cut off;
//   - it has no defence against HTTP/2 rapid reset (upstream's from 1.60):
//     a connection whose client cancels calls too fast is cut off
//     (cancel_flood_guard.h), and one whose cancels wait unread in its
//     socket, plaintext only (stream_reset_scan.h).
// Who is at the other end of a call, for logs and for counting by address:
// peer_address.h.
//
//   absl::StatusOr<std::unique_ptr<Edge>> edge = Edge::Install(options,
//   builder); std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
//   (*edge)->Start(*server);  ...  (*edge)->Stop();
//
// Thread-safe once started.

#ifndef XFORM_SERVER_EDGE_EDGE_H_
#define XFORM_SERVER_EDGE_EDGE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/edge/connection_admission.h"

namespace xform::server {

class Acceptor;

struct EdgeOptions {
  std::string listen;  // HOST:PORT; port 0 takes one the kernel picks.
  // TLS credentials (tls.h), or null: plaintext.
  std::shared_ptr<grpc::ServerCredentials> tls;
  AdmissionOptions admission;
  // Calls a connection's client may cancel a second before it is cut off
  // (--max_cancels_per_connection_per_second); 0: not counted.
  int max_cancels_per_connection_per_second = 1'000;
  // RST_STREAM frames waiting unread on a plaintext connection that get it
  // cut off (--max_queued_stream_resets); 0: not looked for.
  int max_queued_stream_resets = 100;
};

class Edge {
 public:
  // Listens as `options` say: adds the listening port, or the Acceptor, and
  // the guard's interceptor, to `builder`, before its BuildAndStart().
  static absl::StatusOr<std::unique_ptr<Edge>> Install(
      const EdgeOptions& options, grpc::ServerBuilder& builder);
  ~Edge();  // Stops.
  Edge(const Edge&) = delete;
  Edge& operator=(const Edge&) = delete;

  // Once `server` is built and started: takes connections until Stop().
  // An error if its listening port was not bound.
  absl::Status Start(grpc::Server& server);
  // No connection is taken after it (connections open go on).
  void Stop();

  int port() const;
  bool tls() const { return acceptor_ == nullptr; }
  const ConnectionAdmission& admission() const { return *admission_; }
  // Cuts off the connection gRPC calls `grpc_peer`, if the edge admitted
  // it, and refuses its address for `penalty` (see ConnectionAdmission).
  void CutOff(absl::string_view grpc_peer, absl::Duration penalty,
              absl::string_view why);

 private:
  Edge() = default;

  std::unique_ptr<Acceptor> acceptor_;  // Plaintext; else gRPC's listener.
  ConnectionAdmission* admission_ = nullptr;
  int tls_port_ = 0;  // Bound by gRPC's listener at BuildAndStart.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_EDGE_H_
