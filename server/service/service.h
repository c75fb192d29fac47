// Copyright 2026 The xform Authors.
//
// The gRPC face of xformd: the xform.v1.Xform service over a WorldHost, on
// gRPC's callback API. Unary calls finish inline; each stream is one small
// reactor (ApplyStream: one batch in flight; Subscribe: one write in flight,
// pulling its next message from the world's Replicator when the previous
// write completes or the replicator wakes it). No thread per stream; a few
// threads (BuildPool) make the messages that take work.

#ifndef XFORM_SERVER_SERVICE_SERVICE_H_
#define XFORM_SERVER_SERVICE_SERVICE_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/build_pool.h"
#include "server/host/world_host.h"
#include "server/service/caller_budget.h"
#include "server/service/gatekeeper.h"
#include "server/service/refusal_guard.h"
#include "server/service/write_watchdog.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform::server {

// ListSubscribers answers at most this many subscribers a call: about 200
// bytes each, so a page stays well under any message limit.
inline constexpr size_t kMaxSubscribersPerPage = 1000;

struct ServiceOptions {
  // A subscriber write outstanding this long cancels its stream (see
  // write_watchdog.h).
  absl::Duration write_timeout = absl::Seconds(10);
  // Threads that make subscribers' messages (see build_pool.h).
  int build_threads = 2;
  // Who may do what (--auth_file); null: everyone may do anything.
  std::shared_ptr<Gatekeeper> gatekeeper;
  // Cuts off callers that keep being refused (refusal_guard.h); null: none.
  std::shared_ptr<RefusalGuard> refusal_guard;
};

class WriterRegistry;

// Every method is served raw (grpc::ByteBuffer): requests are parsed by
// request_reader.h, which refuses bytes that are no message with
// INVALID_ARGUMENT and hostile shapes before they are parsed, and streams
// that send the same frame share one encoding of it.
using RawXformService = v1::Xform::WithRawCallbackMethod_CreateWorld<
    v1::Xform::WithRawCallbackMethod_ListWorlds<v1::Xform::WithRawCallbackMethod_GetWorld<
        v1::Xform::WithRawCallbackMethod_DeleteWorld<
            v1::Xform::WithRawCallbackMethod_ListSubscribers<
                v1::Xform::WithRawCallbackMethod_Apply<
                    v1::Xform::WithRawCallbackMethod_ApplyStream<
                        v1::Xform::WithRawCallbackMethod_Read<
                            v1::Xform::WithRawCallbackMethod_Subscribe<
                                v1::Xform::WithRawCallbackMethod_UpdateSubscription<
                                    v1::Xform::WithRawCallbackMethod_ListNodes<
                                        v1::Xform::WithRawCallbackMethod_DrainNode<
                                            v1::Xform::WithRawCallbackMethod_SkipRecord<
                                                v1::Xform::
                                                    WithRawCallbackMethod_LookupTransform<
                                                        v1::Xform::
                                                            Service>>>>>>>>>>>>>>;

class XformService final : public RawXformService {
 public:
  XformService(WorldHost& host, ServiceOptions options);
  ~XformService() override;

  using Unary = grpc::ServerUnaryReactor;
  using Bytes = grpc::ByteBuffer;
  Unary* CreateWorld(grpc::CallbackServerContext* context, const Bytes* request,
                     Bytes* response) override;
  Unary* ListWorlds(grpc::CallbackServerContext* context, const Bytes* request,
                    Bytes* response) override;
  Unary* GetWorld(grpc::CallbackServerContext* context, const Bytes* request,
                  Bytes* response) override;
  Unary* DeleteWorld(grpc::CallbackServerContext* context, const Bytes* request,
                     Bytes* response) override;
  Unary* ListSubscribers(grpc::CallbackServerContext* context,
                         const Bytes* request, Bytes* response) override;
  Unary* Apply(grpc::CallbackServerContext* context, const Bytes* request,
               Bytes* response) override;
  grpc::ServerBidiReactor<Bytes, Bytes>* ApplyStream(
      grpc::CallbackServerContext* context) override;
  Unary* Read(grpc::CallbackServerContext* context, const Bytes* request,
              Bytes* response) override;
  grpc::ServerWriteReactor<Bytes>* Subscribe(
      grpc::CallbackServerContext* context, const Bytes* request) override;
  Unary* UpdateSubscription(grpc::CallbackServerContext* context,
                            const Bytes* request, Bytes* response) override;
  Unary* ListNodes(grpc::CallbackServerContext* context, const Bytes* request,
                   Bytes* response) override;
  Unary* DrainNode(grpc::CallbackServerContext* context, const Bytes* request,
                   Bytes* response) override;
  Unary* SkipRecord(grpc::CallbackServerContext* context, const Bytes* request,
                    Bytes* response) override;
  // Answered when the world has the data (HostedWorld::LookupTransform):
  // no thread waits for it.
  Unary* LookupTransform(grpc::CallbackServerContext* context,
                         const Bytes* request, Bytes* response) override;

  // Shutdown: ends every stream with `status`. Subscribers finish after their
  // write in flight; writers after their batch in flight, at once when they
  // are waiting for the next one.
  void EndAllStreams(const absl::Status& status);
  // Calls in progress: streams open, unary calls being handled.
  int active_calls() const { return active_calls_.load(); }
  // Who may do what (ServiceOptions::gatekeeper, or one open to all).
  const std::shared_ptr<Gatekeeper>& gatekeeper() const { return gatekeeper_; }

 private:
  WorldHost& host_;
  const ServiceOptions options_;
  const std::shared_ptr<Gatekeeper> gatekeeper_;
  RefusalGuard* const refusals_;  // options_.refusal_guard's, or null.
  // The entities each caller's region moves judge, paced.
  CallerBudget region_move_work_;
  // Counting a principal's worlds and creating one, as one step.
  absl::Mutex create_mu_;
  std::unique_ptr<WriterRegistry> writers_;
  std::atomic<int> active_calls_ = 0;
  std::unique_ptr<WriteWatchdog> watchdog_;
  // Last, so destroyed first: a task it drops may hold a stream, which
  // counts itself in active_calls_.
  std::unique_ptr<BuildPool> build_pool_;
};

// absl and gRPC share status code numbering.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_SERVICE_H_
