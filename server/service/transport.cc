// Copyright 2026 The xform Authors.

#include "server/service/transport.h"

#include <algorithm>
#include <climits>

#include "grpcpp/resource_quota.h"

namespace xform::server {

void ConfigureTransport(const TransportOptions& options,
                        grpc::ServerBuilder* builder) {
  const int max_message =
      static_cast<int>(std::min<size_t>(options.max_message_bytes, INT_MAX));
  builder->SetMaxReceiveMessageSize(max_message);
  builder->SetMaxSendMessageSize(max_message);
  grpc::ResourceQuota quota("xformd");
  quota.Resize(options.memory_quota_bytes);
  builder->SetResourceQuota(quota);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                              options.max_streams_per_connection);
  if (options.keepalive_ms > 0) {
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                                options.keepalive_ms);
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                                std::max(1, options.keepalive_ms / 2));
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  }
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      options.min_client_ping_interval_ms);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  if (options.max_connection_idle_ms > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                options.max_connection_idle_ms);
  }
  if (options.max_connection_age_ms > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                                options.max_connection_age_ms);
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                options.max_connection_age_grace_ms);
  }
}

}  // namespace xform::server
