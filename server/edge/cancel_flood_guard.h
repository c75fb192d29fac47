// Copyright 2026 The xform Authors.
//
// CancelFloodGuard: cuts off a connection whose client cancels calls faster
// than --max_cancels_per_connection_per_second.
//
// Why: HTTP/2 "rapid reset" (CVE-2023-44487). A client opens a stream and
// cancels it at once (HEADERS, then RST_STREAM), over and over; each costs
// gRPC a call (about 100 us of CPU) but never holds a stream slot, so
// HTTP/2's concurrent-stream limit does not bound it. gRPC 1.51 has none of
// the mitigations later versions added: one such connection took a 2-core
// xformd's healthy world from 60 writes a second to 24 and its memory from
// 97 MB to 1 GB; two, to 4 a second and 8.7 GB (docs/security.md).
//
// What it counts is what the attack is made of, calls their own client
// cancelled, and not calls: an honest client may make tens of thousands of
// short calls a second on one connection (as Redis's and etcd's clients
// do), and counting those cut one writing a batch a call off after 0.13 s,
// with everyone behind its address. A call is seen cancelled as it ends:
// each call gets a small interceptor that, at POST_RECV_CLOSE (the call
// over, the client's close or cancel received), asks whether it was
// cancelled. Calls cancelled by their client or past their deadline count;
// calls that ended as they should do not.
//
// A connection over the rate (a token bucket a connection, holding a
// second's worth) is cut off once by the ConnectionAdmission that admitted
// it (shut down, its address kept out for a while). A flood that keeps gRPC's
// reader from ever running dry is never seen here, as its calls wait behind
// the reader: the Acceptor looks for those in a plaintext connection's bytes
// (stream_reset_scan.h); a TLS connection's are encrypted.
//
// Cost: per call, a lookup of its connection and an interceptor (an
// allocation, and a virtual call a batch of operations); two locks and a
// hash lookup more for a call that was cancelled. Memory: an entry per
// connection that had a call cancelled, O(--max_connections).
//
// Thread-safe.

#ifndef XFORM_SERVER_EDGE_CANCEL_FLOOD_GUARD_H_
#define XFORM_SERVER_EDGE_CANCEL_FLOOD_GUARD_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/base/token_bucket.h"
#include "server/edge/connection_admission.h"

namespace xform::server {

class CancelFloodGuard
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `max_per_second` >= 1. `admission` outlives the guard.
  CancelFloodGuard(int max_per_second, ConnectionAdmission* admission);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Counts a call of `connection` cancelled at `now`; true when it is the
  // one that takes it over the rate (it is then cut off).
  bool CountCancelled(const ConnectionAdmission::Connection& connection,
                      absl::Time now);

 private:
  class Probe;
  struct Cancels {
    uint64_t serial = 0;  // Which connection on the descriptor.
    TokenBucket bucket;
  };

  const double max_per_second_;
  ConnectionAdmission* const admission_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, Cancels> cancels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_CANCEL_FLOOD_GUARD_H_
