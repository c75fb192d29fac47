// Copyright 2026 The xform Authors.
//
// Subscribe's stream: a reactor that writes one message at a time, pulled
// from the world's replicator when the last write completes or when the
// replicator wakes it, and ends as its State says (subscribe_stream.cc has
// the diagram).

#ifndef XFORM_SERVER_SERVICE_SUBSCRIBE_STREAM_H_
#define XFORM_SERVER_SERVICE_SUBSCRIBE_STREAM_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/base/build_pool.h"
#include "server/host/world_host.h"
#include "server/service/gatekeeper.h"
#include "server/service/write_watchdog.h"

namespace xform::server {

// Starts `caller`'s stream of `world` as `options` say, setting `*out` to
// its reactor (which owns itself until OnDone()) before anything else can
// run on it.
void StartSubscribeStream(grpc::CallbackServerContext* context,
                          std::shared_ptr<HostedWorld> world,
                          SubscriptionOptions options, WriteWatchdog& watchdog,
                          BuildPool& pool, std::atomic<int>& calls,
                          const Caller& caller,
                          grpc::ServerWriteReactor<grpc::ByteBuffer>** out);

// A Subscribe refused at its start: it only finishes, with `status`.
grpc::ServerWriteReactor<grpc::ByteBuffer>* RefusedSubscribeStream(
    const absl::Status& status);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_SUBSCRIBE_STREAM_H_
