// Copyright 2026 The xform Authors.
//
// CallFloodGuard: cuts off a plaintext connection that starts calls faster
// than --max_calls_per_connection_per_second.
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
// handed to `cut_off` once (the Acceptor shuts it down and keeps its address
// out for a while). Connections gRPC took itself (TLS) are named by address,
// not descriptor, and are not counted. A flood that keeps gRPC's reader from
// ever running dry is never seen here, as its calls wait behind the reader:
// the Acceptor looks for those in the bytes (stream_reset_scan.h).
//
// Cost: a lock and a hash lookup per call. Memory: an entry per connection
// that made a call, O(--max_connections).
//
// Thread-safe.

#ifndef XFORM_SERVER_CALL_FLOOD_GUARD_H_
#define XFORM_SERVER_CALL_FLOOD_GUARD_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"

namespace xform::server {

class CallFloodGuard
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `max_per_second` >= 1. `cut_off(fd)` runs on a gRPC thread, without
  // the guard's lock.
  CallFloodGuard(int max_per_second, std::function<void(int fd)> cut_off);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Counts a call on the connection handed over as `fd` at `now`; true when
  // it is the call that takes it over the limit (it is then cut off).
  bool Count(int fd, absl::Time now);

 private:
  struct Window {
    absl::Time start = absl::InfinitePast();
    int64_t calls = 0;
  };

  const int64_t max_per_second_;
  const std::function<void(int)> cut_off_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_CALL_FLOOD_GUARD_H_
