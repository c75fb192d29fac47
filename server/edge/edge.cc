// Copyright 2026 The xform Authors.

#include "server/edge/edge.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/edge/acceptor.h"
#include "server/edge/cancel_flood_guard.h"
#include "server/edge/grpc_listener_admission.h"

namespace xform::server {

absl::StatusOr<std::unique_ptr<Edge>> Edge::Install(
    const EdgeOptions& options, grpc::ServerBuilder& builder) {
  auto edge = std::unique_ptr<Edge>(new Edge());
  if (options.tls != nullptr) {
    absl::StatusOr<ConnectionAdmission*> admission =
        AdmitGrpcListenerConnections(options.admission);
    if (!admission.ok()) return admission.status();
    edge->admission_ = *admission;
    builder.AddListeningPort(options.listen, options.tls, &edge->tls_port_);
  } else {
    absl::StatusOr<std::unique_ptr<Acceptor>> acceptor = Acceptor::Listen(
        options.listen,
        {.admission = options.admission,
         .max_queued_stream_resets = options.max_queued_stream_resets});
    if (!acceptor.ok()) return acceptor.status();
    edge->acceptor_ = *std::move(acceptor);
    edge->admission_ = &edge->acceptor_->admission();
  }
  if (options.max_cancels_per_connection_per_second > 0) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        guards;
    guards.push_back(std::make_unique<CancelFloodGuard>(
        options.max_cancels_per_connection_per_second, edge->admission_));
    builder.experimental().SetInterceptorCreators(std::move(guards));
  }
  return edge;
}

Edge::~Edge() { Stop(); }

absl::Status Edge::Start(grpc::Server& server) {
  if (acceptor_ != nullptr) {
    acceptor_->Start(&server);
  } else if (tls_port_ == 0) {
    return absl::UnavailableError("gRPC's listener did not bind its port");
  }
  return absl::OkStatus();
}

void Edge::Stop() {
  if (acceptor_ != nullptr) acceptor_->Stop();
}

int Edge::port() const {
  return acceptor_ != nullptr ? acceptor_->port() : tls_port_;
}

void Edge::CutOff(absl::string_view grpc_peer, absl::Duration penalty,
                  absl::string_view why) {
  admission_->CutOffPeer(grpc_peer, penalty, why);
}

}  // namespace xform::server
