// Copyright 2026 The xform Authors.
//
// xformd: hosts worlds of entity transforms and streams each frame's changes
// to subscribers over gRPC. SIGTERM/SIGINT shut it down gracefully: health
// goes NOT_SERVING, subscriber streams finish, in-flight calls complete, exit.

#include <cmath>
#include <csignal>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/log.h"
#include "server/service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "HOST:PORT to serve on");
ABSL_FLAG(double, tick_hz, 60, "Default publish rate of tick-mode worlds");
ABSL_FLAG(uint64_t, max_worlds, 64, "Most worlds the server holds");
ABSL_FLAG(uint64_t, max_entities, 4'000'000, "Most entities per world");
ABSL_FLAG(uint64_t, max_batch, 1'000'000, "Most entities named by one write");
ABSL_FLAG(uint64_t, max_subscribers, 256, "Most subscribers per world");
ABSL_FLAG(uint64_t, max_message_bytes, 64 << 20, "Largest message in or out");
ABSL_FLAG(int, keepalive_ms, 20'000, "Keepalive ping interval; 0 disables");
ABSL_FLAG(int, write_timeout_ms, 10'000,
          "A subscriber write stuck this long cancels its stream");
ABSL_FLAG(int, shutdown_grace_ms, 5'000, "How long shutdown waits for calls");
ABSL_FLAG(bool, demo, false,
          "Create world 'demo' (a 10,000-entity scene) and move 1% of it at "
          "every tick, for trying the server out");

namespace xform::server {
namespace {

void AddCreate(uint64_t entity, uint64_t parent, const float (&local)[10],
               v1::CreateCommand* create) {
  create->add_entity(entity);
  create->add_parent(parent);
  for (float f : local) create->add_local(f);
}

// The demo world: 100 trees of 100 entities, each entity under a random
// earlier one of its tree. Every tick turns the roots of 10 trees, so each
// published frame moves about 1,000 entities.
void RunDemo(WorldHost& host, const absl::Notification& stop) {
  v1::CreateWorldRequest create_world;
  create_world.set_name("demo");
  create_world.set_mode(v1::FRAME_MODE_TICK);
  create_world.set_tick_hz(30);
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host.Create(create_world);
  if (!world.ok()) {
    Log('E', "demo: ", world.status().ToString());
    return;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  v1::ApplyRequest scene;
  scene.set_world("demo");
  v1::CreateCommand* create = scene.add_commands()->mutable_create();
  for (uint64_t tree = 0; tree < 100; ++tree) {
    for (uint64_t k = 0; k < 100; ++k) {
      const uint64_t id = tree * 100 + k + 1;
      const uint64_t parent =
          k == 0 ? 0
                 : tree * 100 + 1 +
                       std::uniform_int_distribution<uint64_t>(0, k - 1)(rng);
      const float local[10] = {10 * u(rng), 10 * u(rng), 10 * u(rng), 0, 0,
                               0,           1,           1,           1, 1};
      AddCreate(id, parent, local, create);
    }
  }
  if (absl::StatusOr<uint64_t> s = (*world)->Apply(scene, host.limits());
      !s.ok()) {
    Log('E', "demo: ", s.status().ToString());
    return;
  }
  Log('I',
      "demo: world 'demo' has 10000 entities in 100 trees; moving 10 trees per "
      "tick");
  for (uint64_t step = 0;
       !stop.WaitForNotificationWithTimeout(absl::Milliseconds(33)); ++step) {
    v1::ApplyRequest move;
    move.set_world("demo");
    v1::SetLocalCommand* set = move.add_commands()->mutable_set_local();
    for (uint64_t tree = step % 10; tree < 100; tree += 10) {
      const float angle = 0.05f * static_cast<float>(step);
      set->add_entity(tree * 100 + 1);
      for (float f :
           {static_cast<float>(tree), 0.0f, 0.0f, 0.0f, std::sin(angle / 2),
            0.0f, std::cos(angle / 2), 1.0f, 1.0f, 1.0f}) {
        set->add_local(f);
      }
    }
    if (absl::StatusOr<uint64_t> s = (*world)->Apply(move, host.limits());
        !s.ok()) {
      Log('E', "demo: ", s.status().ToString());
      return;
    }
  }
}

int Main() {
  // Signals are taken by one thread with sigwait(); every other thread,
  // gRPC's included, inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Limits limits;
  limits.max_worlds = absl::GetFlag(FLAGS_max_worlds);
  limits.max_entities_per_world = absl::GetFlag(FLAGS_max_entities);
  limits.max_batch = absl::GetFlag(FLAGS_max_batch);
  limits.max_subscribers = absl::GetFlag(FLAGS_max_subscribers);
  limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  WorldHost host(limits, absl::GetFlag(FLAGS_tick_hz));
  ServiceOptions options;
  options.write_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_write_timeout_ms));
  XformService service(host, options);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(limits.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(limits.max_message_bytes));
  if (const int keepalive = absl::GetFlag(FLAGS_keepalive_ms); keepalive > 0) {
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive / 2);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(
        GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, keepalive / 2);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    Log('E', "cannot listen on ", absl::GetFlag(FLAGS_listen));
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  Log('I', "xformd serving on ", absl::GetFlag(FLAGS_listen), " (port ", port,
      "), default tick ", absl::GetFlag(FLAGS_tick_hz), " Hz");

  absl::Notification stop_demo;
  std::thread demo;
  if (absl::GetFlag(FLAGS_demo))
    demo = std::thread([&] { RunDemo(host, stop_demo); });

  int signal = 0;
  sigwait(&signals, &signal);
  Log('I', "signal ", signal, ": shutting down");
  server->GetHealthCheckService()->SetServingStatus(false);
  stop_demo.Notify();
  if (demo.joinable()) demo.join();
  host.EndAllStreams(absl::UnavailableError("server shutting down"));
  server->Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms)));
  server->Wait();
  Log('I', "stopped");
  return 0;
}

}  // namespace
}  // namespace xform::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "xformd: a networked transform server.\n  xformd "
      "[--listen=0.0.0.0:50051] "
      "[--tick_hz=60] [--demo] ...");
  absl::ParseCommandLine(argc, argv);
  return xform::server::Main();
}
