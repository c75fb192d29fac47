// Copyright 2026 The xform Authors.
//
// xformd: hosts worlds of entity transforms and streams each frame's changes
// to subscribers over gRPC. SIGTERM/SIGINT shut it down gracefully: health
// goes NOT_SERVING, subscriber streams finish, in-flight calls complete, exit.

#include <malloc.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/access_policy.h"
#include "server/edge/edge.h"
#include "server/demo.h"
#include "server/gatekeeper.h"
#include "server/health_service.h"
#include "server/log.h"
#include "server/reflection_service.h"
#include "server/refusal_guard.h"
#include "server/service.h"
#include "server/storage.h"
#include "server/tls.h"
#include "server/transport.h"
#include "xform/internal/release_mutexes.h"
#include "xform/v1/wire.h"
#include "xform/world.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "HOST:PORT to serve on");
ABSL_FLAG(double, tick_hz, 60,
          "Default publish rate of tick-mode worlds, in [0.01, 1000]");
ABSL_FLAG(uint64_t, max_worlds, 64, "Most worlds the server holds");
ABSL_FLAG(uint64_t, max_entities, 4'000'000, "Most entities per world");
ABSL_FLAG(uint64_t, max_batch, 1'000'000, "Most entities named by one write");
ABSL_FLAG(uint64_t, max_commands, 65'536,
          "Most commands in one write (each is a list of entities)");
ABSL_FLAG(uint64_t, max_ancestor_walk, 30'000'000,
          "Most ancestors one write's walks to the root may pass in all: "
          "set-worlds, keep-world links and children-keeping destroys walk "
          "their entity's depth (2-3 ns a step), a link's cycle check what "
          "the write re-parented above its new parent (about 14 ns a step)");
ABSL_FLAG(uint64_t, max_subscribers, 256, "Most subscribers per world");
ABSL_FLAG(uint64_t, max_filter_ids, 65'536,
          "Most entities and subtrees one subscription may list");
ABSL_FLAG(uint64_t, max_pending, 65'536,
          "Changed entities a subscriber may have unsent before it is resent "
          "its view whole (a snapshot) instead: bounds a laggard's memory");
ABSL_FLAG(uint64_t, snapshot_burst_mb, 128,
          "MiB that streamed snapshots may hold, server-wide, in parts made "
          "ahead of their streams so as to end while their world changes "
          "faster than they stream; past it they take turns");
ABSL_FLAG(uint64_t, max_message_bytes, xform::kDefaultMaxMessageBytes,
          "Largest message in or out; larger requests get RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, memory_quota_mb, 192,
          "gRPC's resource quota: transport buffers across all connections");
ABSL_FLAG(int, keepalive_ms, 20'000,
          "Keepalive ping interval on idle connections; 0 disables");
ABSL_FLAG(int, min_client_ping_interval_ms, 10'000,
          "Clients pinging more often than this without data are dropped");
ABSL_FLAG(int, max_connection_idle_ms, 0,
          "Close connections without calls for this long; 0: never");
ABSL_FLAG(int, max_connection_age_ms, 0,
          "Close connections this old (calls get 10 s to end); 0: never");
ABSL_FLAG(int, max_connections, 0,
          "Most connections at once; 0: all the descriptor limit allows, "
          "less 64 kept for the server. Over it, connections are closed");
ABSL_FLAG(int, max_connections_per_address, 0,
          "Most connections at once from one client address (IPv6: one /64); "
          "0: half of --max_connections. Over it, connections are closed");
ABSL_FLAG(int, max_cancels_per_connection_per_second, 1'000,
          "A connection whose client cancels more calls than this in a "
          "second (HTTP/2 rapid reset) is cut off, and its address refused "
          "for --cut_off_penalty_ms; 0: no limit. Calls that end as they "
          "should are not counted, however many");
ABSL_FLAG(int, max_queued_stream_resets, 100,
          "A plaintext connection with this many cancelled streams sent and "
          "waiting unread is cut off (HTTP/2 rapid reset, a flood gRPC would "
          "take in whole), and its address refused for --cut_off_penalty_ms; "
          "0: not looked for");
ABSL_FLAG(int, max_refused_mb_per_second, 64,
          "A caller (a principal with a token or certificate, else an "
          "address) whose refused calls cost more than this many MiB a "
          "second (each its request's bytes plus 64 KiB) has the connection "
          "cut off and its address refused, 1 s at first, doubling while it "
          "goes on, up to 64 s; 0: no limit");
ABSL_FLAG(int, cut_off_penalty_ms, 10'000,
          "How long an address whose connection was cut off is refused");
ABSL_FLAG(int, max_streams_per_connection, 1'024,
          "Most concurrent calls on one connection");
ABSL_FLAG(int, write_timeout_ms, 10'000,
          "A subscriber write stuck this long cancels its stream");
ABSL_FLAG(int, build_threads, 2,
          "Threads that make subscribers' snapshot parts and pending "
          "changes, apart from gRPC's threads (1 to 64)");
ABSL_FLAG(int, fanout_threads, 0,
          "Threads that start a published frame's writes to its caught-up "
          "subscribers, the publishing thread included (1: it alone; 0: the "
          "core count)");
ABSL_FLAG(int, shutdown_grace_ms, 5'000,
          "How long shutdown waits for calls before cancelling them");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve TLS only (with --tls_key). Re-read "
          "when it changes on disk");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: mutual TLS, every client must present a "
          "certificate that chains to it");
ABSL_FLAG(std::string, auth_file, "",
          "JSON file of principals, their tokens' SHA-256, roles on world "
          "patterns and quotas (docs/security.md); reloaded on SIGHUP. "
          "Empty: no access control, every caller may do anything");
ABSL_FLAG(std::string, reflection, "auto",
          "Serve gRPC reflection: on, off, or auto (on without --auth_file, "
          "off with it). With --auth_file it answers only principals with a "
          "role on some world");
ABSL_FLAG(int, max_health_watches_per_connection, 16,
          "Most health Watch streams one connection may hold open (anyone "
          "may open them, credentials or not)");
ABSL_FLAG(int, max_health_watches_per_address, 1'024,
          "Most health Watch streams one client address (IPv6: one /64) may "
          "hold open over all its connections");
ABSL_FLAG(std::string, data_dir, "",
          "Directory that makes worlds durable: each world's snapshot and "
          "journal (docs/durability.md). Empty: worlds live in memory only, "
          "and a restart loses them");
ABSL_FLAG(std::string, fsync, "everysec",
          "When journal records reach the disk: always (before a write is "
          "acknowledged; concurrent writes share an fsync), everysec (each "
          "second: power loss may lose the last second, a crash of xformd "
          "loses nothing) or no (when the OS chooses)");
ABSL_FLAG(std::string, snapshot_every, "64MiB",
          "Snapshot a world, and start its journal afresh, once its journal "
          "holds this many bytes (64MiB, 500MB) or this long after its last "
          "snapshot (300s, 10m)");
ABSL_FLAG(std::string, recover, "strict",
          "A corrupt journal record at start: strict refuses to start, "
          "naming the file and offset; truncate drops it and the rest of "
          "that world's journal, logging what it dropped");
ABSL_FLAG(bool, demo, false,
          "Create and drive worlds for trying the server out: 'demo' (a "
          "10,000-entity scene moving 1% a tick) and 'solar' (a solar "
          "system of 3,000+ entities whose parents move, for xform-web)");

namespace xform::server {
namespace {

// Whether HOST:PORT names this machine's loopback only.
bool IsLoopback(absl::string_view listen) {
  absl::string_view host = listen.substr(0, listen.rfind(':'));
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// Every flag's range, checked before anything starts: a bad value is a
// usage error (exit 2), not a server that misbehaves later.
std::vector<std::string> FlagErrors() {
  std::vector<std::string> errors;
  const auto check = [&](bool ok, absl::string_view message) {
    if (!ok) errors.emplace_back(message);
  };
  const double tick_hz = absl::GetFlag(FLAGS_tick_hz);
  check(tick_hz >= kMinTickHz && tick_hz <= kMaxTickHz,
        "--tick_hz must be in [0.01, 1000]");
  check(!absl::GetFlag(FLAGS_listen).empty(), "--listen must name HOST:PORT");
  for (const auto& [value, name] :
       {std::pair{absl::GetFlag(FLAGS_max_worlds), "--max_worlds"},
        {absl::GetFlag(FLAGS_max_entities), "--max_entities"},
        {absl::GetFlag(FLAGS_max_batch), "--max_batch"},
        {absl::GetFlag(FLAGS_max_commands), "--max_commands"},
        {absl::GetFlag(FLAGS_max_ancestor_walk), "--max_ancestor_walk"},
        {absl::GetFlag(FLAGS_max_subscribers), "--max_subscribers"},
        {absl::GetFlag(FLAGS_max_filter_ids), "--max_filter_ids"},
        {absl::GetFlag(FLAGS_max_pending), "--max_pending"},
        {absl::GetFlag(FLAGS_snapshot_burst_mb), "--snapshot_burst_mb"},
        {absl::GetFlag(FLAGS_memory_quota_mb), "--memory_quota_mb"}}) {
    check(value > 0, absl::StrCat(name, " must be at least 1"));
  }
  check(absl::GetFlag(FLAGS_snapshot_burst_mb) <= (uint64_t{1} << 20),
        "--snapshot_burst_mb must be at most 1048576 (1 TiB)");
  const uint64_t max_message = absl::GetFlag(FLAGS_max_message_bytes);
  check(max_message >= 4096 && max_message <= (uint64_t{1} << 30),
        "--max_message_bytes must be in [4096, 1 GiB]");
  check(absl::GetFlag(FLAGS_max_entities) < (uint64_t{1} << 31),
        "--max_entities must be below 2^31");
  for (const auto& [value, name] :
       {std::pair{absl::GetFlag(FLAGS_keepalive_ms), "--keepalive_ms"},
        {absl::GetFlag(FLAGS_min_client_ping_interval_ms),
         "--min_client_ping_interval_ms"},
        {absl::GetFlag(FLAGS_max_connection_idle_ms),
         "--max_connection_idle_ms"},
        {absl::GetFlag(FLAGS_max_connection_age_ms), "--max_connection_age_ms"},
        {absl::GetFlag(FLAGS_shutdown_grace_ms), "--shutdown_grace_ms"}}) {
    check(value >= 0, absl::StrCat(name, " must not be negative"));
  }
  check(absl::GetFlag(FLAGS_write_timeout_ms) > 0,
        "--write_timeout_ms must be at least 1");
  check(absl::GetFlag(FLAGS_fanout_threads) >= 0 &&
            absl::GetFlag(FLAGS_fanout_threads) <= 64,
        "--fanout_threads must be 0 to 64");
  check(absl::GetFlag(FLAGS_build_threads) >= 1 &&
            absl::GetFlag(FLAGS_build_threads) <= 64,
        "--build_threads must be 1 to 64");
  check(absl::GetFlag(FLAGS_max_connections) >= 0,
        "--max_connections must not be negative");
  check(absl::GetFlag(FLAGS_max_connections_per_address) >= 0,
        "--max_connections_per_address must not be negative");
  check(absl::GetFlag(FLAGS_max_cancels_per_connection_per_second) >= 0,
        "--max_cancels_per_connection_per_second must not be negative");
  check(absl::GetFlag(FLAGS_max_queued_stream_resets) >= 0,
        "--max_queued_stream_resets must not be negative");
  check(absl::GetFlag(FLAGS_max_refused_mb_per_second) >= 0,
        "--max_refused_mb_per_second must not be negative");
  check(absl::GetFlag(FLAGS_cut_off_penalty_ms) >= 0,
        "--cut_off_penalty_ms must not be negative");
  check(absl::GetFlag(FLAGS_max_streams_per_connection) > 0,
        "--max_streams_per_connection must be at least 1");
  check(absl::GetFlag(FLAGS_max_health_watches_per_connection) > 0,
        "--max_health_watches_per_connection must be at least 1");
  check(absl::GetFlag(FLAGS_max_health_watches_per_address) > 0,
        "--max_health_watches_per_address must be at least 1");
  check(absl::GetFlag(FLAGS_tls_cert).empty() ==
            absl::GetFlag(FLAGS_tls_key).empty(),
        "--tls_cert and --tls_key go together");
  check(absl::GetFlag(FLAGS_tls_client_ca).empty() ||
            !absl::GetFlag(FLAGS_tls_cert).empty(),
        "--tls_client_ca needs --tls_cert and --tls_key");
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  check(reflection == "auto" || reflection == "on" || reflection == "off",
        "--reflection must be on, off or auto");
  const std::string fsync = absl::GetFlag(FLAGS_fsync);
  check(fsync == "always" || fsync == "everysec" || fsync == "no",
        "--fsync must be always, everysec or no");
  StorageOptions storage;
  if (absl::Status s =
          ParseSnapshotEvery(absl::GetFlag(FLAGS_snapshot_every), &storage);
      !s.ok()) {
    errors.emplace_back(s.message());
  }
  const std::string recover = absl::GetFlag(FLAGS_recover);
  check(recover == "strict" || recover == "truncate",
        "--recover must be strict or truncate");
  return errors;
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

int Main() {
  // Signals are taken by one thread with sigwait(); every other thread,
  // gRPC's included, inherits the blocked mask. SIGHUP and SIGQUIT are taken
  // too, so that neither kills the server abruptly: SIGQUIT stops it like
  // SIGTERM, SIGHUP reloads --auth_file (or is logged, without one).
  sigset_t signals;
  sigemptyset(&signals);
  for (int taken : {SIGTERM, SIGINT, SIGQUIT, SIGHUP}) {
    sigaddset(&signals, taken);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  RaiseFileLimit();
  // Blocks of 8 MB and more (a big world's columns and hash tables) get
  // mappings of their own, returned whole when freed. Without this glibc
  // raises the threshold to the largest block freed so far, and a deleted
  // world's tables stay in the heap. Messages (up to a few MB, made and freed
  // many times a second while snapshots stream) come from the heap rather
  // than a fresh mapping each, faulted in page by page. Keeping more of the
  // heap free (M_TRIM_THRESHOLD 64 MB) was faster still, but then a deleted
  // 1M world left 80 MB behind (XformdProcessTest).
  mallopt(M_MMAP_THRESHOLD, 8 << 20);

  Limits limits;
  limits.max_worlds = absl::GetFlag(FLAGS_max_worlds);
  limits.max_entities_per_world = absl::GetFlag(FLAGS_max_entities);
  limits.max_batch = absl::GetFlag(FLAGS_max_batch);
  limits.max_commands = absl::GetFlag(FLAGS_max_commands);
  limits.max_ancestor_walk = absl::GetFlag(FLAGS_max_ancestor_walk);
  limits.max_subscribers = absl::GetFlag(FLAGS_max_subscribers);
  limits.max_filter_ids = absl::GetFlag(FLAGS_max_filter_ids);
  limits.max_pending = absl::GetFlag(FLAGS_max_pending);
  limits.snapshot_burst_bytes = absl::GetFlag(FLAGS_snapshot_burst_mb) << 20;
  limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  std::unique_ptr<Storage> storage;
  if (const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
      !data_dir.empty()) {
    StorageOptions options;
    options.data_dir = data_dir;
    const std::string fsync = absl::GetFlag(FLAGS_fsync);
    options.fsync = fsync == "always" ? FsyncPolicy::kAlways
                    : fsync == "no"   ? FsyncPolicy::kNo
                                      : FsyncPolicy::kEverySecond;
    ParseSnapshotEvery(absl::GetFlag(FLAGS_snapshot_every), &options)
        .IgnoreError();  // Checked by FlagErrors.
    options.truncate_corrupt = absl::GetFlag(FLAGS_recover) == "truncate";
    absl::StatusOr<std::unique_ptr<Storage>> opened =
        Storage::Open(std::move(options));
    if (!opened.ok()) {
      Log('E', opened.status().message());
      return 1;
    }
    storage = *std::move(opened);
    Log('I', "worlds are durable in ", data_dir, " (--fsync=", fsync,
        ", --snapshot_every=", absl::GetFlag(FLAGS_snapshot_every), ")");
  } else {
    Log('W',
        "no --data_dir: worlds live in memory only, and a restart loses "
        "them");
  }
  const int fanout_threads =
      absl::GetFlag(FLAGS_fanout_threads) > 0
          ? absl::GetFlag(FLAGS_fanout_threads)
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  WorldHost host(limits, absl::GetFlag(FLAGS_tick_hz), std::move(storage),
                 fanout_threads);
  const std::string auth_file = absl::GetFlag(FLAGS_auth_file);
  std::shared_ptr<const AccessPolicy> policy = AccessPolicy::OpenToAll();
  if (!auth_file.empty()) {
    absl::StatusOr<std::shared_ptr<const AccessPolicy>> loaded =
        AccessPolicy::Load(auth_file);
    if (!loaded.ok()) {
      Log('E', loaded.status().message());
      return 1;
    }
    policy = *std::move(loaded);
    Log('I', "access control: ", policy->size(), " principal(s) from ",
        auth_file,
        policy->anonymous() != nullptr
            ? ", and anonymous callers as principal '" +
                  policy->anonymous()->name + "'"
            : "; callers without credentials are refused");
  } else {
    Log('W', "no --auth_file: no access control, every caller may do anything");
  }
  auto gatekeeper = std::make_shared<Gatekeeper>(policy);
  // The edge (below), set before any call.
  Edge* edge_for_refusals = nullptr;
  ServiceOptions options;
  options.gatekeeper = gatekeeper;
  options.refusal_guard = std::make_shared<RefusalGuard>(
      RefusalGuardOptions{.refused_bytes_per_second =
                              absl::GetFlag(FLAGS_max_refused_mb_per_second) *
                              double{1 << 20}},
      [&edge_for_refusals](absl::string_view peer, absl::Duration penalty,
                           absl::string_view why) {
        if (edge_for_refusals != nullptr) {
          edge_for_refusals->CutOff(peer, penalty, why);
        }
      });
  options.write_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_write_timeout_ms));
  options.build_threads = absl::GetFlag(FLAGS_build_threads);
  XformService service(host, options);

  HealthService health({.max_watches_per_connection = absl::GetFlag(
                            FLAGS_max_health_watches_per_connection),
                        .max_watches_per_address = absl::GetFlag(
                            FLAGS_max_health_watches_per_address)});
  const auto set_serving = [&health](bool serving) {
    health.SetServingStatus("", serving);
    health.SetServingStatus(v1::Xform::service_full_name(), serving);
  };
  std::unique_ptr<ReflectionService> reflection;
  if (const std::string mode = absl::GetFlag(FLAGS_reflection);
      mode == "on" || (mode == "auto" && auth_file.empty())) {
    reflection = std::make_unique<ReflectionService>(
        std::vector<std::string>{v1::Xform::service_full_name(),
                                 grpc::health::v1::Health::service_full_name()},
        gatekeeper);
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  grpc::ServerBuilder builder;
  EdgeOptions edge_options = {
      .listen = listen,
      .admission =
          {.max_connections = absl::GetFlag(FLAGS_max_connections),
           .max_connections_per_address =
               absl::GetFlag(FLAGS_max_connections_per_address),
           .cut_off_penalty =
               absl::Milliseconds(absl::GetFlag(FLAGS_cut_off_penalty_ms))},
      .max_cancels_per_connection_per_second =
          absl::GetFlag(FLAGS_max_cancels_per_connection_per_second),
      .max_queued_stream_resets =
          absl::GetFlag(FLAGS_max_queued_stream_resets)};
  if (const std::string cert = absl::GetFlag(FLAGS_tls_cert); !cert.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        ServerTlsCredentials({.certificate_chain = cert,
                              .private_key = absl::GetFlag(FLAGS_tls_key),
                              .client_ca = absl::GetFlag(FLAGS_tls_client_ca)});
    if (!credentials.ok()) {
      Log('E', credentials.status().message());
      return 1;
    }
    edge_options.tls = *std::move(credentials);
    Log('I', "TLS from ", cert,
        absl::GetFlag(FLAGS_tls_client_ca).empty()
            ? ""
            : ", client certificates required (--tls_client_ca)",
        "; certificate files re-read as they change");
  } else if (!IsLoopback(listen)) {
    Log('W', "serving PLAINTEXT on ", listen,
        ", which is not a loopback address: anyone on the network can read "
        "the streams and see tokens; give --tls_cert and --tls_key");
  }
  absl::StatusOr<std::unique_ptr<Edge>> installed =
      Edge::Install(edge_options, builder);
  if (!installed.ok()) {
    Log('E', installed.status().message());
    return 1;
  }
  std::unique_ptr<Edge> edge = *std::move(installed);
  edge_for_refusals = edge.get();
  builder.RegisterService(&service);
  builder.RegisterService(&health);  // Open to all: probes.
  if (reflection != nullptr) builder.RegisterService(reflection.get());
  TransportOptions transport;
  transport.max_message_bytes = limits.max_message_bytes;
  transport.memory_quota_bytes = absl::GetFlag(FLAGS_memory_quota_mb) << 20;
  transport.keepalive_ms = absl::GetFlag(FLAGS_keepalive_ms);
  transport.min_client_ping_interval_ms =
      absl::GetFlag(FLAGS_min_client_ping_interval_ms);
  transport.max_connection_idle_ms =
      absl::GetFlag(FLAGS_max_connection_idle_ms);
  transport.max_connection_age_ms = absl::GetFlag(FLAGS_max_connection_age_ms);
  transport.max_streams_per_connection =
      absl::GetFlag(FLAGS_max_streams_per_connection);
  ConfigureTransport(transport, &builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || !edge->Start(*server).ok()) {
    Log('E', "cannot start the gRPC server on ", listen);
    return 1;
  }
  // Before recovery, which may take a while: the port is bound, so a
  // launcher that asked for port 0 can learn which one it got and wait for
  // SERVING on it.
  Log('I', "xformd listening on ", listen, " (port ", edge->port(), ")");
  // NOT_SERVING (and every call UNAVAILABLE) until the worlds are back.
  set_serving(false);
  if (absl::Status recovered = host.Recover(); !recovered.ok()) {
    Log('E', "recovery failed: ", recovered.message());
    server->Shutdown(absl::ToChronoTime(absl::Now()));
    return 1;
  }
  set_serving(true);
  Log('I', "xformd serving on ", listen, " (port ", edge->port(), ", ",
      edge->tls() ? "TLS" : "plaintext", "), default tick ",
      absl::GetFlag(FLAGS_tick_hz), " Hz; connections use descriptors up to ",
      edge->admission().ceiling(), ", at most ",
      edge->admission().max_per_address(), " from one address");

  absl::Notification stop_demo;
  std::thread demo;
  if (absl::GetFlag(FLAGS_demo))
    demo = std::thread([&] { RunDemoWorlds(host, stop_demo); });

  int signal = 0;
  for (;;) {
    sigwait(&signals, &signal);
    if (signal != SIGHUP) break;
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
    gatekeeper->Reload(*std::move(reloaded));
  }
  Log('I', "signal ", signal, " (", strsignal(signal), "): shutting down");
  set_serving(false);
  edge->Stop();
  stop_demo.Notify();
  if (demo.joinable()) demo.join();
  service.EndAllStreams(absl::UnavailableError("server shutting down"));
  // gRPC's Shutdown(deadline) waits for connections to go, idle ones too,
  // until the deadline; so wait for our calls, then give it only the time
  // to send their last answers.
  const absl::Time grace_end =
      absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms));
  while (service.active_calls() > 0 && absl::Now() < grace_end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (const int left = service.active_calls(); left > 0) {
    Log('W', "shutdown grace over: cancelling ", left, " call(s)");
  }
  server->Shutdown(absl::ToChronoTime(
      std::min(grace_end, absl::Now() + absl::Milliseconds(250))));
  server->Wait();
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
      "[--listen=0.0.0.0:50051] "
      "[--tick_hz=60] [--demo] ...");
  absl::ParseCommandLine(argc, argv);
  xform::internal::UseReleaseMutexes();
  if (const std::vector<std::string> errors = xform::server::FlagErrors();
      !errors.empty()) {
    for (const std::string& error : errors) {
      std::fprintf(stderr, "xformd: %s\n", error.c_str());
    }
    return 2;
  }
  return xform::server::Main();
}
