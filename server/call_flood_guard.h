// Copyright 2026 The xform Authors.
//
// CallFloodGuard: cuts off a connection that starts calls faster than
// --max_calls_per_connection_per_second.
//
// Why: HTTP/2 "rapid reset" (CVE-2023-44487). A client opens a stream and
// cancels it at once, over and over; each costs gRPC a call (about 100 us of
// CPU) but never holds a stream slot, so HTTP/2's concurrent-stream limit
// does not bound it. gRPC 1.51 has none of the mitigations later versions
// added: one such connection took a 2-core xformd's healthy world from 60
// writes a second to 24 and its memory from 97 MB to 1 GB; two, to 4 a
// second and 8.7 GB (docs/security.md, "HTTP/2 rapid reset").
//
// Such calls never reach a handler (the stream is gone before its request
// arrives), but gRPC does create each one's server interceptors, so this is
// a server interceptor factory that counts calls per connection and creates
// no interceptor. A connection over the limit in any one-second window is
// cut off once by the ConnectionAdmission that admitted it (shut down, its
// address kept out for a while), which also finds it from gRPC's name for
// the peer: its descriptor ("fd:12") for one the Acceptor handed over, its
// address for one gRPC's TLS listener took. A flood that keeps gRPC's
// reader from ever running dry is never seen here, as its calls wait behind
// the reader: the Acceptor looks for those in a plaintext connection's bytes
// (stream_reset_scan.h); a TLS connection's are encrypted.
//
// Cost: two locks and two hash lookups per call. Memory: an entry per
// connection that made a call, O(--max_connections).
//
// Thread-safe.

#ifndef XFORM_SERVER_CALL_FLOOD_GUARD_H_
#define XFORM_SERVER_CALL_FLOOD_GUARD_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/connection_admission.h"

namespace xform::server {

class CallFloodGuard
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `max_per_second` >= 1. `admission` outlives the guard.
  CallFloodGuard(int max_per_second, ConnectionAdmission* admission);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Counts a call on `connection` at `now`; true when it is the call that
  // takes it over the limit (it is then cut off).
  bool Count(const ConnectionAdmission::Connection& connection, absl::Time now);

 private:
  // One connection's calls in the second from `start`.
  struct Window {
    uint64_t serial = 0;  // Which connection on the descriptor.
    absl::Time start = absl::InfinitePast();
    int64_t calls = 0;
  };

  const int64_t max_per_second_;
  ConnectionAdmission* const admission_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_CALL_FLOOD_GUARD_H_
