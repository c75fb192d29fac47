// Copyright 2026 The xform Authors.
//
// xform_health_probe: asks a gRPC server's health service (grpc.health.v1)
// whether it is serving, for container HEALTHCHECKs and orchestrators. Exits
// 0 when SERVING, 1 otherwise (NOT_SERVING, unreachable, or no answer by the
// deadline), printing why. grpc_health_probe does the same but is not a
// Debian package.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace {

std::string DefaultAddress() {
  const char* env = std::getenv("XFORM_PROBE_ADDR");
  return env != nullptr ? env : "127.0.0.1:50051";
}

}  // namespace

ABSL_FLAG(std::string, addr, DefaultAddress(),
          "Server address (default: $XFORM_PROBE_ADDR, else 127.0.0.1:50051)");
ABSL_FLAG(std::string, service, "",
          "Service to ask about; empty asks about the server as a whole");
ABSL_FLAG(double, timeout_s, 3, "Deadline of the check");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_addr),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: health check failed: %s\n",
                 absl::GetFlag(FLAGS_addr).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  const bool serving =
      response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::printf("%s: %s\n", absl::GetFlag(FLAGS_addr).c_str(),
              grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                  response.status())
                  .c_str());
  return serving ? 0 : 1;
}
