// Copyright 2026 The xform Authors.
//
// xformd: hosts worlds of entity transforms and streams each frame's changes
// to subscribers over gRPC. SIGTERM/SIGINT shut it down gracefully: health
// goes NOT_SERVING, subscriber streams finish, in-flight calls complete, exit.
// Its flags and their checks: xformd_config.h.

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/access/access_policy.h"
#include "server/base/log.h"
#include "server/base/memory_policy.h"
#include "server/cluster/cluster_node.h"
#include "server/demo.h"
#include "server/edge/edge.h"
#include "server/service/gatekeeper.h"
#include "server/service/health_service.h"
#include "server/service/reflection_service.h"
#include "server/service/refusal_guard.h"
#include "server/service/service.h"
#include "server/service/tls.h"
#include "server/service/transport.h"
#include "server/storage/storage.h"
#include "server/xformd_config.h"
#include "xform/internal/release_mutexes.h"

namespace xform::server {
namespace {

// Signals are taken by one thread with sigwait(); every other thread, gRPC's
// included, inherits the blocked mask. SIGHUP and SIGQUIT are taken too, so
// that neither kills the server abruptly: SIGQUIT stops it like SIGTERM,
// SIGHUP reloads --auth_file (or is logged, without one).
sigset_t TakeSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int taken : {SIGTERM, SIGINT, SIGQUIT, SIGHUP}) {
    sigaddset(&signals, taken);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// A server exposed to many clients runs out of file descriptors at the soft
// limit, often 1024, long before the hard one; and gRPC 1.51's listener stops
// accepting for good after one EMFILE. So take all the kernel allows.
void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  Log('I', "file descriptors: ", limit.rlim_cur, " (soft limit was ", before,
      ")");
}

// The worlds' logs: the cluster's (--cluster, whose node `cluster` is
// then), --data_dir's, or none.
absl::StatusOr<std::unique_ptr<WorldLogStore>> OpenStorage(
    const XformdConfig& config, ClusterNode** cluster) {
  if (config.cluster) {
    absl::StatusOr<std::unique_ptr<ClusterNode>> node =
        ClusterNode::Connect(*config.cluster);
    if (!node.ok()) return node.status();
    Log('I', "worlds are durable in the cluster's JetStream (",
        DescribeCluster(*config.cluster), ")");
    *cluster = node->get();
    return std::unique_ptr<WorldLogStore>(*std::move(node));
  }
  if (!config.storage) {
    Log('W',
        "no --data_dir: worlds live in memory only, and a restart loses "
        "them");
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Storage>> storage =
      Storage::Open(*config.storage);
  if (!storage.ok()) return storage.status();
  Log('I', "worlds are durable in ", config.storage->data_dir, " (",
      DescribeDurability(*config.storage), ")");
  return std::unique_ptr<WorldLogStore>(*std::move(storage));
}

// --auth_file's policy, or one open to all.
absl::StatusOr<std::shared_ptr<const AccessPolicy>> LoadPolicy(
    const std::string& auth_file) {
  if (auth_file.empty()) {
    Log('W', "no --auth_file: no access control, every caller may do anything");
    return AccessPolicy::OpenToAll();
  }
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> policy =
      AccessPolicy::Load(auth_file);
  if (!policy.ok()) return policy;
  Log('I', "access control: ", (*policy)->size(), " principal(s) from ",
      auth_file,
      (*policy)->anonymous() != nullptr
          ? ", and anonymous callers as principal '" +
                (*policy)->anonymous()->name + "'"
          : "; callers without credentials are refused");
  return policy;
}

// The edge as configured: TLS credentials made from the files, checked now.
absl::StatusOr<std::unique_ptr<Edge>> InstallEdge(
    const XformdConfig& config, grpc::ServerBuilder& builder) {
  EdgeOptions options = config.edge;
  if (config.tls) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        ServerTlsCredentials(*config.tls);
    if (!credentials.ok()) return credentials.status();
    options.tls = *std::move(credentials);
    Log('I', "TLS from ", config.tls->certificate_chain,
        config.tls->client_ca.empty()
            ? ""
            : ", client certificates required (--tls_client_ca)",
        "; certificate files re-read as they change");
  } else if (!IsLoopback(config.listen)) {
    Log('W', "serving PLAINTEXT on ", config.listen,
        ", which is not a loopback address: anyone on the network can read "
        "the streams and see tokens; give --tls_cert and --tls_key");
  }
  return Edge::Install(options, builder);
}

// The services every caller reaches; health is open to all (probes).
struct Services {
  Services(const XformdConfig& config, WorldHost& host,
           const std::shared_ptr<Gatekeeper>& gatekeeper, Edge** edge)
      : xform(host, OptionsFor(config, gatekeeper, edge)),
        health(config.health),
        reflection(config.reflection
                       ? std::make_unique<ReflectionService>(
                             std::vector<std::string>{
                                 v1::Xform::service_full_name(),
                                 grpc::health::v1::Health::service_full_name()},
                             gatekeeper)
                       : nullptr) {}

  static ServiceOptions OptionsFor(const XformdConfig& config,
                                   std::shared_ptr<Gatekeeper> gatekeeper,
                                   Edge** edge) {
    ServiceOptions options = config.service;
    options.gatekeeper = std::move(gatekeeper);
    // Cuts off through the edge, made after the service: set before calls.
    options.refusal_guard = std::make_shared<RefusalGuard>(
        config.refusals, [edge](absl::string_view peer, absl::Duration penalty,
                                absl::string_view why) {
          if (*edge != nullptr) (*edge)->CutOff(peer, penalty, why);
        });
    return options;
  }
  void Register(grpc::ServerBuilder& builder) {
    builder.RegisterService(&xform);
    builder.RegisterService(&health);
    if (reflection != nullptr) builder.RegisterService(reflection.get());
  }
  void SetServing(bool serving) {
    health.SetServingStatus("", serving);
    health.SetServingStatus(v1::Xform::service_full_name(), serving);
  }

  XformService xform;
  HealthService health;
  std::unique_ptr<ReflectionService> reflection;
};

// A cluster node's worlds, as a health of their own
// ("xform.v1.Xform.worlds"): NOT_SERVING while any is wedged (its log
// holds a record no node can load past), which the log and GetWorld name.
void WatchWedgedWorlds(ClusterNode& cluster, HealthService& health) {
  const std::string worlds =
      absl::StrCat(v1::Xform::service_full_name(), ".worlds");
  health.SetServingStatus(worlds, true);
  cluster.set_on_wedged(
      [&health, worlds](const std::vector<std::string>& wedged) {
        health.SetServingStatus(worlds, wedged.empty());
      });
}

// Waits for a signal that stops the server; SIGHUP meanwhile reloads the
// auth file (a file that does not parse keeps the policy in force).
int ServeUntilStopped(const sigset_t& signals, const std::string& auth_file,
                      Gatekeeper& gatekeeper) {
  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGHUP) {
    if (auth_file.empty()) {
      Log('I', "SIGHUP: no --auth_file to reload; still serving");
      continue;
    }
    absl::StatusOr<std::shared_ptr<const AccessPolicy>> reloaded =
        AccessPolicy::Load(auth_file);
    if (!reloaded.ok()) {
      Log('E', "SIGHUP: keeping the access control in force: ",
          reloaded.status().message());
      continue;
    }
    Log('I', "SIGHUP: access control reloaded: ", (*reloaded)->size(),
        " principal(s) from ", auth_file);
    gatekeeper.Reload(*std::move(reloaded));
  }
  Log('I', "signal ", signal, " (", strsignal(signal), "): shutting down");
  return signal;
}

// gRPC's Shutdown(deadline) waits for connections to go, idle ones too,
// until the deadline; so this waits for our calls, then gives it only the
// time to send their last answers.
void DrainAndStop(const XformdConfig& config, grpc::Server& server,
                  XformService& service) {
  service.EndAllStreams(absl::UnavailableError("server shutting down"));
  const absl::Time grace_end = absl::Now() + config.shutdown_grace;
  while (service.active_calls() > 0 && absl::Now() < grace_end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (const int left = service.active_calls(); left > 0) {
    Log('W', "shutdown grace over: cancelling ", left, " call(s)");
  }
  server.Shutdown(absl::ToChronoTime(
      std::min(grace_end, absl::Now() + absl::Milliseconds(250))));
  server.Wait();
}

// Where clients reach this node of a cluster: --advertise_address, or
// --listen's host (the host name for a wildcard one) and the port bound.
std::string AdvertisedAddress(const XformdConfig& config, int port) {
  if (!config.cluster->address.empty()) return config.cluster->address;
  std::string host(config.listen.substr(0, config.listen.rfind(':')));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

int Fail(const absl::Status& status) {
  Log('E', status.message());
  return 1;
}

// The worlds of --data_dir or of the cluster, loaded before SERVING (a
// cluster's node also starts following and writing its worlds).
absl::Status RecoverWorlds(const XformdConfig& config, int port,
                           WorldHost& host, ClusterNode* cluster) {
  if (cluster != nullptr) {
    cluster->set_address(AdvertisedAddress(config, port));
  }
  if (absl::Status recovered = host.Recover(); !recovered.ok()) {
    return recovered;
  }
  return cluster != nullptr ? cluster->Serve(host) : absl::OkStatus();
}

void LogServing(const XformdConfig& config, Edge& edge) {
  Log('I', "xformd serving on ", config.listen, " (port ", edge.port(), ", ",
      edge.tls() ? "TLS" : "plaintext", "), default tick ", config.tick_hz,
      " Hz; connections use descriptors up to ", edge.admission().ceiling(),
      ", at most ", edge.admission().max_per_address(), " from one address");
}

int Main(const XformdConfig& config) {
  const sigset_t signals = TakeSignals();
  RaiseFileLimit();
  ConfigureHeap();
  ClusterNode* cluster = nullptr;
  absl::StatusOr<std::unique_ptr<WorldLogStore>> storage =
      OpenStorage(config, &cluster);
  if (!storage.ok()) return Fail(storage.status());
  WorldHost host(config.limits, config.tick_hz, *std::move(storage),
                 config.fanout_threads);
  host.set_cluster(cluster);
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> policy =
      LoadPolicy(config.auth_file);
  if (!policy.ok()) return Fail(policy.status());
  auto gatekeeper = std::make_shared<Gatekeeper>(*policy);
  Edge* edge_for_guards = nullptr;
  Services services(config, host, gatekeeper, &edge_for_guards);

  grpc::ServerBuilder builder;
  absl::StatusOr<std::unique_ptr<Edge>> edge = InstallEdge(config, builder);
  if (!edge.ok()) return Fail(edge.status());
  edge_for_guards = edge->get();
  services.Register(builder);
  ConfigureTransport(config.transport, &builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || !(*edge)->Start(*server).ok()) {
    return Fail(absl::UnavailableError(
        absl::StrCat("cannot start the gRPC server on ", config.listen)));
  }
  // Before recovery, which may take a while: the port is bound, so a
  // launcher that asked for port 0 can learn which one it got and wait for
  // SERVING on it. NOT_SERVING (and every call UNAVAILABLE) until then.
  Log('I', "xformd listening on ", config.listen, " (port ", (*edge)->port(),
      ")");
  services.SetServing(false);
  if (cluster != nullptr) WatchWedgedWorlds(*cluster, services.health);
  if (absl::Status recovered =
          RecoverWorlds(config, (*edge)->port(), host, cluster);
      !recovered.ok()) {
    server->Shutdown(absl::ToChronoTime(absl::Now()));
    return Fail(recovered);
  }
  services.SetServing(true);
  LogServing(config, **edge);
  DemoWorlds demo(host, config.demo, config.demo_city_entities);

  ServeUntilStopped(signals, config.auth_file, *gatekeeper);
  services.SetServing(false);
  (*edge)->Stop();
  demo.Stop();
  // Its worlds' writers move to other nodes now, not a lease later.
  if (cluster != nullptr) cluster->Leave();
  DrainAndStop(config, *server, services.xform);
  if (host.durable()) {
    Log('I', "snapshotting every world before exit");
    host.SnapshotAll();
  }
  Log('I', "stopped");
  return 0;
}

}  // namespace
}  // namespace xform::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "xformd: a networked transform server.\n  xformd "
      "[--listen=0.0.0.0:50051] [--tick_hz=60] [--demo] ...");
  absl::ParseCommandLine(argc, argv);
  xform::internal::UseReleaseMutexes();
  const absl::StatusOr<xform::server::XformdConfig> config =
      xform::server::XformdConfig::FromFlags();
  if (!config.ok()) {
    for (absl::string_view problem :
         absl::StrSplit(config.status().message(), '\n')) {
      std::fprintf(stderr, "xformd: %.*s\n", static_cast<int>(problem.size()),
                   problem.data());
    }
    return 2;
  }
  return xform::server::Main(*config);
}
