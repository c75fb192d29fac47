// Copyright 2026 The xform Authors.
//
// The gRPC face of xformd: the xform.v1.Xform service over a WorldHost, on
// gRPC's callback API. Unary calls finish inline; each stream is one small
// reactor (ApplyStream: one batch in flight; Subscribe: one write in flight,
// pulling its next message from the world's Replicator when the previous
// write completes or the replicator wakes it). No thread per stream.

#ifndef XFORM_SERVER_SERVICE_H_
#define XFORM_SERVER_SERVICE_H_

#include "absl/time/time.h"
#include "server/world_host.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform::server {

struct ServiceOptions {
  // A subscriber write outstanding this long cancels its stream.
  absl::Duration write_timeout = absl::Seconds(10);
};

// Subscribe is served raw (grpc::ByteBuffer) so that streams sending the same
// frame share one encoding of it; the other methods are typed.
class XformService final : public v1::Xform::WithRawCallbackMethod_Subscribe<
                               v1::Xform::CallbackService> {
 public:
  XformService(WorldHost& host, ServiceOptions options)
      : host_(host), options_(options) {}

  grpc::ServerUnaryReactor* CreateWorld(grpc::CallbackServerContext* context,
                                        const v1::CreateWorldRequest* request,
                                        v1::WorldInfo* response) override;
  grpc::ServerUnaryReactor* ListWorlds(
      grpc::CallbackServerContext* context,
      const v1::ListWorldsRequest* request,
      v1::ListWorldsResponse* response) override;
  grpc::ServerUnaryReactor* GetWorld(grpc::CallbackServerContext* context,
                                     const v1::GetWorldRequest* request,
                                     v1::WorldInfo* response) override;
  grpc::ServerUnaryReactor* DeleteWorld(
      grpc::CallbackServerContext* context,
      const v1::DeleteWorldRequest* request,
      v1::DeleteWorldResponse* response) override;
  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* context,
                                  const v1::ApplyRequest* request,
                                  v1::ApplyResponse* response) override;
  grpc::ServerBidiReactor<v1::ApplyRequest, v1::ApplyResponse>* ApplyStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext* context,
                                 const v1::ReadRequest* request,
                                 v1::ReadResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  using v1::Xform::WithRawCallbackMethod_Subscribe<
      v1::Xform::CallbackService>::Subscribe;

 private:
  WorldHost& host_;
  const ServiceOptions options_;
};

// absl and gRPC share status code numbering.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_H_
