// Copyright 2026 The xform Authors.
//
// The transport settings of a gRPC server of xformd's: message sizes, gRPC's
// memory quota, keepalive and its enforcement, connection idle and age. One
// home, so that xformd and the tests' loopback servers are built alike.

#ifndef XFORM_SERVER_SERVICE_TRANSPORT_H_
#define XFORM_SERVER_SERVICE_TRANSPORT_H_

#include <cstddef>

#include "grpcpp/server_builder.h"
#include "xform/message_size.h"

namespace xform::server {

struct TransportOptions {
  // The largest message either way (--max_message_bytes). gRPC refuses a
  // larger incoming one with RESOURCE_EXHAUSTED.
  size_t max_message_bytes = kDefaultMaxMessageBytes;
  // gRPC's resource quota (--memory_quota_mb): what its transports may hold
  // in buffers across all connections. Under pressure gRPC shrinks reads and
  // refuses what would not fit: this is what stops a message far over the
  // size limit, which gRPC 1.51 otherwise buffers whole before checking.
  size_t memory_quota_bytes = size_t{192} << 20;
  // Server pings on idle connections this often (0: never), and drops a
  // connection that does not answer within half of it.
  int keepalive_ms = 20'000;
  // Clients may ping no more often than this without data; more often is a
  // strike, and two strikes close the connection (keepalive enforcement).
  int min_client_ping_interval_ms = 10'000;
  // A connection without calls for this long is closed (0: never).
  int max_connection_idle_ms = 0;
  // Connections are closed after this long, calls given the grace to end
  // (0: never); makes clients reconnect, so load spreads after a restart.
  int max_connection_age_ms = 0;
  int max_connection_age_grace_ms = 10'000;
  // Concurrent calls on one connection.
  int max_streams_per_connection = 1'024;
};

// Applies `options` to `builder`.
void ConfigureTransport(const TransportOptions& options,
                        grpc::ServerBuilder* builder);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_TRANSPORT_H_
