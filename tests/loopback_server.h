// Copyright 2026 The xform Authors.
//
// A real xformd service (WorldHost + XformService, with xformd's health and
// reflection services) in the test's process, listening on 127.0.0.1 at a port
// the kernel picks. Tests talk to it over real loopback gRPC, as clients would.

#ifndef XFORM_TESTS_LOOPBACK_SERVER_H_
#define XFORM_TESTS_LOOPBACK_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "server/service/health_service.h"
#include "server/service/reflection_service.h"
#include "server/service/service.h"
#include "server/service/transport.h"

namespace xform::server {

class LoopbackServer {
 public:
  // Starts listening; false if the server could not be built. `port` 0 lets
  // the kernel choose; a fixed port restarts a server where clients expect it.
  // `prepare` runs before the port opens: worlds a client must find already
  // there, whole, when it reconnects.
  bool Start(const Limits& limits, ServiceOptions options = {}, int port = 0,
             std::function<void(WorldHost&)> prepare = nullptr,
             HealthOptions health_options = {}) {
    // Frames fan out over two threads, as on a 2-core xformd.
    host_ =
        std::make_unique<WorldHost>(limits, 60, nullptr, /*fanout_threads=*/2);
    if (prepare) prepare(*host_);
    service_ = std::make_unique<XformService>(*host_, options);
    health_ = std::make_unique<HealthService>(health_options);
    reflection_ = std::make_unique<ReflectionService>(
        std::vector<std::string>{v1::Xform::service_full_name(),
                                 grpc::health::v1::Health::service_full_name()},
        service_->gatekeeper());
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    builder.RegisterService(health_.get());
    builder.RegisterService(reflection_.get());
    ConfigureTransport({.max_message_bytes = limits.max_message_bytes},
                       &builder);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && port_ != 0;
  }

  // Ends every stream (UNAVAILABLE, as xformd does on SIGTERM) and stops.
  void Stop() {
    if (server_) {
      service_->EndAllStreams(absl::UnavailableError("server stopping"));
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
      server_->Wait();
    }
    server_.reset();
    reflection_.reset();
    health_.reset();
    service_.reset();
    host_.reset();
  }

  ~LoopbackServer() { Stop(); }

  WorldHost& host() { return *host_; }
  grpc::Server& grpc_server() { return *server_; }
  HealthService& health() { return *health_; }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  std::unique_ptr<WorldHost> host_;
  std::unique_ptr<XformService> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<ReflectionService> reflection_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace xform::server

#endif  // XFORM_TESTS_LOOPBACK_SERVER_H_
