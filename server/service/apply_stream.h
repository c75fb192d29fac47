// Copyright 2026 The xform Authors.
//
// ApplyStream: batches in order, one in flight; the first error ends it.
// Every status it ends with says which batches applied.

#ifndef XFORM_SERVER_SERVICE_APPLY_STREAM_H_
#define XFORM_SERVER_SERVICE_APPLY_STREAM_H_

#include <atomic>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/host/world_host.h"
#include "server/service/gatekeeper.h"
#include "server/service/refusal_guard.h"

namespace xform::server {

class ApplyStreamReactor;

// The open ApplyStreams, so that shutdown can end them.
class WriterRegistry {
 public:
  void Add(const std::shared_ptr<ApplyStreamReactor>& writer) {
    absl::MutexLock lock(&mu_);
    writers_.emplace(writer.get(), writer);
  }
  void Remove(ApplyStreamReactor* writer) {
    absl::MutexLock lock(&mu_);
    writers_.erase(writer);
  }
  void EndAll(const absl::Status& status);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<ApplyStreamReactor*, std::weak_ptr<ApplyStreamReactor>>
      writers_ ABSL_GUARDED_BY(mu_);
};

using ApplyStreamReactorBase =
    grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// Starts `caller`'s ApplyStream; the reactor owns itself until OnDone().
ApplyStreamReactorBase* StartApplyStream(grpc::CallbackServerContext* context,
                                         WorldHost& host,
                                         WriterRegistry& registry,
                                         RefusalGuard* refusals,
                                         std::atomic<int>& calls,
                                         const Caller& caller);

// An ApplyStream refused at its start: it only finishes, with `status`.
ApplyStreamReactorBase* RefusedApplyStream(const absl::Status& status);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_APPLY_STREAM_H_
