// Copyright 2026 The xform Authors.

#include "server/xformd_config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "xform/message_size.h"

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
ABSL_FLAG(double, region_cell_size, 32,
          "Edge of the cells region subscriptions are found by, in world "
          "units: about a third of a typical region's width (32 suits "
          "spheres of radius 50; docs/benchmarks.md)");
ABSL_FLAG(uint64_t, max_region_cells, uint64_t{1} << 40,
          "Most cells (--region_cell_size) one subscription's region, grown "
          "by its margin, may cover; the work a frame is bounded by the "
          "occupied cells whatever this is");
ABSL_FLAG(double, max_region_moves_hz, 240,
          "How often a subscription's region may move (UpdateSubscription), "
          "a second; 0: no limit");
ABSL_FLAG(double, max_region_move_entities_per_second, 8e6,
          "The entities a caller's region moves (UpdateSubscription) may "
          "judge a second, all its subscriptions together: a move is "
          "refused while its caller is in debt, else charged what it "
          "judged; 0: no limit");
ABSL_FLAG(uint64_t, resume_frames, 600,
          "Frames a subscriber whose stream broke may resume from, sent only "
          "what changed since (its view whole past them): 10 s at 60 Hz. "
          "Costs a log of the entities destroyed in them, at most "
          "--max_pending");
ABSL_FLAG(double, history_seconds, 10,
          "How far back each world keeps where each entity was (stamped "
          "local poses and parents, for LookupTransform and Read at a "
          "stamp): from each entity's newest sample, as tf2's cache; 0: "
          "none (docs/time.md)");
ABSL_FLAG(uint64_t, history_mb, 256,
          "MiB one world's history may hold; past it the world's window "
          "shrinks (GetWorld says to what); 0: no bound");
ABSL_FLAG(double, max_stamp_ahead_seconds, 60,
          "How far past a world's newest stamp a batch's stamp_nanos may be "
          "before it is refused OUT_OF_RANGE");
ABSL_FLAG(uint32_t, max_lookup_wait_ms, 10'000,
          "The longest a LookupTransform waits for data newer than its world "
          "holds (its timeout_ms is cut to this)");
ABSL_FLAG(uint64_t, max_waiting_lookups, 1024,
          "Lookups that may wait for data on one world at once; more are "
          "refused RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_name_bytes, 256,
          "The longest entity name (CreateCommand.name, RenameCommand), 1 to "
          "65536 bytes; longer is refused INVALID_ARGUMENT");
ABSL_FLAG(uint64_t, max_lookup_sources, 4096,
          "Sources one LookupTransform may name");
ABSL_FLAG(uint64_t, max_lookup_links, 10'000,
          "Links one lookup may walk up a chain (it holds its world's reader "
          "lock meanwhile, about 0.1 us a link); past it RESOURCE_EXHAUSTED");
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
ABSL_FLAG(std::string, cluster, "",
          "NATS servers (nats://host:port, comma-separated, any of the "
          "cluster's) whose JetStream keeps every world's log instead of "
          "--data_dir: worlds survive the loss of this machine "
          "(docs/cluster.md). Empty: a single node");
ABSL_FLAG(std::string, node_name, "",
          "This node's name in the cluster, unique among its nodes, as "
          "ListNodes and NATS show it (default: the host name)");
ABSL_FLAG(std::string, advertise_address, "",
          "Where clients reach this node, as redirects and ListNodes name it "
          "(default: --listen's address, or for a wildcard one the host "
          "name, with the port it listens on)");
ABSL_FLAG(int, cluster_lease_ms, 2'000,
          "How long a world's writer holds it without renewing its lease "
          "(renewed four times as often): a writer lost is replaced after "
          "about this long");
ABSL_FLAG(std::string, cluster_cert_file, "",
          "This node's certificate (PEM) for NATS servers that verify their "
          "clients (with --cluster_key_file)");
ABSL_FLAG(std::string, cluster_key_file, "",
          "The private key (PEM) of --cluster_cert_file");
ABSL_FLAG(std::string, cluster_creds_file, "",
          "A NATS credentials file (a user's JWT and NKey seed) for NATS "
          "servers run with decentralized authentication");
ABSL_FLAG(int, cluster_replicas, 3,
          "NATS servers each world's streams are kept on: 3 survives the "
          "loss of any one; 1 for a single NATS server");
ABSL_FLAG(int, cluster_write_timeout_ms, 30'000,
          "How long a world's record may go unacknowledged by JetStream, "
          "sent again meanwhile (a NATS leader's failover), before the "
          "world's writes are refused UNAVAILABLE");
ABSL_FLAG(std::string, cluster_ca_file, "",
          "TLS to the NATS servers, trusting this CA certificate (PEM). "
          "Empty: TLS only as the URLs ask (tls://, the system's CAs)");
ABSL_FLAG(std::string, cluster_token_file, "",
          "File holding the NATS servers' authorization token. Empty: none");
ABSL_FLAG(int, cluster_connect_timeout_ms, 60'000,
          "How long xformd waits at start for JetStream to answer before it "
          "gives up, naming why");
ABSL_FLAG(int, cluster_window, 256,
          "Records (messages) a world has in flight to JetStream at most");
ABSL_FLAG(std::string, recover, "strict",
          "A corrupt journal record at start: strict refuses to start, "
          "naming the file and offset; truncate drops it and the rest of "
          "that world's journal, logging what it dropped");
ABSL_FLAG(bool, demo, false,
          "Create and drive worlds for trying the server out: 'demo' (a "
          "10,000-entity scene moving 1% a tick) and 'solar' (a solar "
          "system of 3,000+ entities whose parents move, for xform-web) "
          "and 'city' (--demo_city_entities over 1 km x 1 km, for region "
          "views)");
ABSL_FLAG(uint64_t, demo_city_entities, 100'000,
          "--demo: the city's entities (4,000 blocks and buildings, drones "
          "for the rest, a fiftieth of them flying, at most 10,000); 0: no "
          "city");

namespace xform::server {
namespace {

// Collects what is wrong with the flags.
class Problems {
 public:
  void Unless(bool ok, absl::string_view problem) {
    if (!ok) list_.emplace_back(problem);
  }
  void Unless(const absl::Status& status) {
    if (!status.ok()) list_.emplace_back(status.message());
  }
  absl::Status status() const {
    return list_.empty()
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrJoin(list_, "\n"));
  }

 private:
  std::vector<std::string> list_;
};

// The time flags (docs/time.md) into `limits`.
void TimeLimitsFromFlags(Problems& problems, Limits& limits) {
  const double window = absl::GetFlag(FLAGS_history_seconds);
  problems.Unless(window >= 0 && window <= 86'400,
                  "--history_seconds must be in [0, 86400]");
  const double ahead = absl::GetFlag(FLAGS_max_stamp_ahead_seconds);
  problems.Unless(ahead > 0 && ahead <= 1e9,
                  "--max_stamp_ahead_seconds must be in (0, 1e9]");
  problems.Unless(absl::GetFlag(FLAGS_history_mb) <= (uint64_t{1} << 20),
                  "--history_mb must be at most 1048576 (1 TiB)");
  problems.Unless(absl::GetFlag(FLAGS_max_lookup_sources) > 0,
                  "--max_lookup_sources must be at least 1");
  problems.Unless(absl::GetFlag(FLAGS_max_name_bytes) >= 1 &&
                      absl::GetFlag(FLAGS_max_name_bytes) <= 65536,
                  "--max_name_bytes must be 1 to 65536");
  problems.Unless(absl::GetFlag(FLAGS_max_lookup_links) > 0,
                  "--max_lookup_links must be at least 1");
  limits.history.window_nanos = static_cast<Stamp>(window * 1e9);
  limits.history.max_bytes = absl::GetFlag(FLAGS_history_mb) << 20;
  limits.history.max_ahead_nanos = static_cast<Stamp>(ahead * 1e9);
  limits.max_lookup_wait_ms = absl::GetFlag(FLAGS_max_lookup_wait_ms);
  limits.max_waiting_lookups = absl::GetFlag(FLAGS_max_waiting_lookups);
  limits.max_lookup_sources = absl::GetFlag(FLAGS_max_lookup_sources);
  limits.max_name_bytes = absl::GetFlag(FLAGS_max_name_bytes);
  limits.history.max_links = absl::GetFlag(FLAGS_max_lookup_links);
}

Limits LimitsFromFlags(Problems& problems) {
  for (const auto& [value, name] :
       {std::pair{absl::GetFlag(FLAGS_max_worlds), "--max_worlds"},
        {absl::GetFlag(FLAGS_max_entities), "--max_entities"},
        {absl::GetFlag(FLAGS_max_batch), "--max_batch"},
        {absl::GetFlag(FLAGS_max_commands), "--max_commands"},
        {absl::GetFlag(FLAGS_max_ancestor_walk), "--max_ancestor_walk"},
        {absl::GetFlag(FLAGS_max_subscribers), "--max_subscribers"},
        {absl::GetFlag(FLAGS_max_filter_ids), "--max_filter_ids"},
        {absl::GetFlag(FLAGS_max_pending), "--max_pending"},
        {absl::GetFlag(FLAGS_snapshot_burst_mb), "--snapshot_burst_mb"}}) {
    problems.Unless(value > 0, absl::StrCat(name, " must be at least 1"));
  }
  problems.Unless(absl::GetFlag(FLAGS_snapshot_burst_mb) <= (uint64_t{1} << 20),
                  "--snapshot_burst_mb must be at most 1048576 (1 TiB)");
  const uint64_t max_message = absl::GetFlag(FLAGS_max_message_bytes);
  problems.Unless(max_message >= 4096 && max_message <= (uint64_t{1} << 30),
                  "--max_message_bytes must be in [4096, 1 GiB]");
  problems.Unless(absl::GetFlag(FLAGS_max_entities) < (uint64_t{1} << 31),
                  "--max_entities must be below 2^31");
  const double cell = absl::GetFlag(FLAGS_region_cell_size);
  problems.Unless(std::isfinite(cell) && cell >= 1e-3 && cell <= 1e9,
                  "--region_cell_size must be in [0.001, 1e9]");
  const double moves_hz = absl::GetFlag(FLAGS_max_region_moves_hz);
  problems.Unless(moves_hz >= 0 && moves_hz <= 1e6,
                  "--max_region_moves_hz must be in [0, 1e6]");
  const double move_entities =
      absl::GetFlag(FLAGS_max_region_move_entities_per_second);
  problems.Unless(move_entities >= 0 && move_entities <= 1e12,
                  "--max_region_move_entities_per_second must be in [0, 1e12]");
  problems.Unless(absl::GetFlag(FLAGS_max_region_cells) > 0,
                  "--max_region_cells must be at least 1");
  Limits limits;
  limits.region_cell_size = static_cast<float>(cell);
  limits.max_region_cells = absl::GetFlag(FLAGS_max_region_cells);
  limits.max_region_moves_hz = moves_hz;
  limits.max_region_move_entities_per_second = move_entities;
  limits.max_worlds = absl::GetFlag(FLAGS_max_worlds);
  limits.max_entities_per_world = absl::GetFlag(FLAGS_max_entities);
  limits.max_batch = absl::GetFlag(FLAGS_max_batch);
  limits.max_commands = absl::GetFlag(FLAGS_max_commands);
  limits.max_ancestor_walk = absl::GetFlag(FLAGS_max_ancestor_walk);
  limits.max_subscribers = absl::GetFlag(FLAGS_max_subscribers);
  limits.max_filter_ids = absl::GetFlag(FLAGS_max_filter_ids);
  limits.max_pending = absl::GetFlag(FLAGS_max_pending);
  limits.resume_frames = absl::GetFlag(FLAGS_resume_frames);
  limits.snapshot_burst_bytes = absl::GetFlag(FLAGS_snapshot_burst_mb) << 20;
  limits.max_message_bytes = max_message;
  TimeLimitsFromFlags(problems, limits);
  return limits;
}

std::optional<StorageOptions> StorageFromFlags(Problems& problems) {
  const std::string fsync = absl::GetFlag(FLAGS_fsync);
  problems.Unless(fsync == "always" || fsync == "everysec" || fsync == "no",
                  "--fsync must be always, everysec or no");
  const std::string recover = absl::GetFlag(FLAGS_recover);
  problems.Unless(recover == "strict" || recover == "truncate",
                  "--recover must be strict or truncate");
  StorageOptions storage;
  problems.Unless(
      ParseSnapshotEvery(absl::GetFlag(FLAGS_snapshot_every), &storage));
  storage.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (storage.data_dir.empty()) return std::nullopt;
  storage.fsync = fsync == "always" ? FsyncPolicy::kAlways
                  : fsync == "no"   ? FsyncPolicy::kNo
                                    : FsyncPolicy::kEverySecond;
  storage.truncate_corrupt = recover == "truncate";
  return storage;
}

// How a node reaches the NATS servers: TLS, certificates, credentials.
void ClusterCredentialsFromFlags(ClusterOptions& cluster, Problems& problems) {
  cluster.ca_file = absl::GetFlag(FLAGS_cluster_ca_file);
  cluster.cert_file = absl::GetFlag(FLAGS_cluster_cert_file);
  cluster.key_file = absl::GetFlag(FLAGS_cluster_key_file);
  problems.Unless(cluster.cert_file.empty() == cluster.key_file.empty(),
                  "--cluster_cert_file and --cluster_key_file go together");
  cluster.creds_file = absl::GetFlag(FLAGS_cluster_creds_file);
  if (const std::string file = absl::GetFlag(FLAGS_cluster_token_file);
      !file.empty()) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    cluster.token = std::string(absl::StripAsciiWhitespace(text.str()));
    problems.Unless(in.is_open() && !cluster.token.empty(),
                    "--cluster_token_file must name a file holding a token");
  }
}

std::optional<ClusterOptions> ClusterFromFlags(Problems& problems) {
  const std::string servers = absl::GetFlag(FLAGS_cluster);
  if (servers.empty()) return std::nullopt;
  ClusterOptions cluster;
  for (absl::string_view server : absl::StrSplit(servers, ',')) {
    server = absl::StripAsciiWhitespace(server);
    problems.Unless(absl::StartsWith(server, "nats://") ||
                        absl::StartsWith(server, "tls://"),
                    "--cluster must name nats://host:port servers");
    cluster.servers.emplace_back(server);
  }
  problems.Unless(absl::GetFlag(FLAGS_data_dir).empty(),
                  "--cluster and --data_dir are one or the other: the "
                  "cluster keeps the worlds' logs");
  cluster.node = absl::GetFlag(FLAGS_node_name);
  if (cluster.node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    cluster.node = host;
  }
  cluster.replicas = absl::GetFlag(FLAGS_cluster_replicas);
  problems.Unless(cluster.replicas >= 1 && cluster.replicas <= 5,
                  "--cluster_replicas must be 1 to 5");
  const int timeout = absl::GetFlag(FLAGS_cluster_write_timeout_ms);
  problems.Unless(timeout >= 1'000,
                  "--cluster_write_timeout_ms must be at least 1000");
  cluster.write_timeout = absl::Milliseconds(timeout);
  const int window = absl::GetFlag(FLAGS_cluster_window);
  problems.Unless(window >= 1 && window <= 65'536,
                  "--cluster_window must be 1 to 65536");
  cluster.window = static_cast<size_t>(window);
  ClusterCredentialsFromFlags(cluster, problems);
  cluster.address = absl::GetFlag(FLAGS_advertise_address);
  const int lease = absl::GetFlag(FLAGS_cluster_lease_ms);
  problems.Unless(lease >= 200 && lease <= 600'000,
                  "--cluster_lease_ms must be 200 to 600000");
  cluster.lease = absl::Milliseconds(lease);
  const int connect = absl::GetFlag(FLAGS_cluster_connect_timeout_ms);
  problems.Unless(connect >= 100,
                  "--cluster_connect_timeout_ms must be at least 100");
  cluster.connect_timeout = absl::Milliseconds(connect);
  StorageOptions snapshots;
  if (ParseSnapshotEvery(absl::GetFlag(FLAGS_snapshot_every), &snapshots)
          .ok()) {
    cluster.snapshot_every_bytes = snapshots.snapshot_every_bytes;
  }
  return cluster;
}

// The edge and the transport: connections, guards, TLS, keepalives.
void NetworkFromFlags(XformdConfig& config, Problems& problems) {
  for (const auto& [value, name] :
       {std::pair{absl::GetFlag(FLAGS_keepalive_ms), "--keepalive_ms"},
        {absl::GetFlag(FLAGS_min_client_ping_interval_ms),
         "--min_client_ping_interval_ms"},
        {absl::GetFlag(FLAGS_max_connection_idle_ms),
         "--max_connection_idle_ms"},
        {absl::GetFlag(FLAGS_max_connection_age_ms), "--max_connection_age_ms"},
        {absl::GetFlag(FLAGS_max_connections), "--max_connections"},
        {absl::GetFlag(FLAGS_max_connections_per_address),
         "--max_connections_per_address"},
        {absl::GetFlag(FLAGS_max_cancels_per_connection_per_second),
         "--max_cancels_per_connection_per_second"},
        {absl::GetFlag(FLAGS_max_queued_stream_resets),
         "--max_queued_stream_resets"},
        {absl::GetFlag(FLAGS_cut_off_penalty_ms), "--cut_off_penalty_ms"}}) {
    problems.Unless(value >= 0, absl::StrCat(name, " must not be negative"));
  }
  problems.Unless(absl::GetFlag(FLAGS_max_streams_per_connection) > 0,
                  "--max_streams_per_connection must be at least 1");
  problems.Unless(absl::GetFlag(FLAGS_memory_quota_mb) > 0,
                  "--memory_quota_mb must be at least 1");
  config.edge = {
      .listen = config.listen,
      .admission = {.max_connections = absl::GetFlag(FLAGS_max_connections),
                    .max_connections_per_address =
                        absl::GetFlag(FLAGS_max_connections_per_address),
                    .cut_off_penalty = absl::Milliseconds(
                        absl::GetFlag(FLAGS_cut_off_penalty_ms))},
      .max_cancels_per_connection_per_second =
          absl::GetFlag(FLAGS_max_cancels_per_connection_per_second),
      .max_queued_stream_resets =
          absl::GetFlag(FLAGS_max_queued_stream_resets)};
  TransportOptions& transport = config.transport;
  transport.max_message_bytes = config.limits.max_message_bytes;
  transport.memory_quota_bytes = absl::GetFlag(FLAGS_memory_quota_mb) << 20;
  transport.keepalive_ms = absl::GetFlag(FLAGS_keepalive_ms);
  transport.min_client_ping_interval_ms =
      absl::GetFlag(FLAGS_min_client_ping_interval_ms);
  transport.max_connection_idle_ms =
      absl::GetFlag(FLAGS_max_connection_idle_ms);
  transport.max_connection_age_ms = absl::GetFlag(FLAGS_max_connection_age_ms);
  transport.max_streams_per_connection =
      absl::GetFlag(FLAGS_max_streams_per_connection);
}

// TLS, access control, reflection, health, refused callers.
void SecurityFromFlags(XformdConfig& config, Problems& problems) {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  problems.Unless(cert.empty() == absl::GetFlag(FLAGS_tls_key).empty(),
                  "--tls_cert and --tls_key go together");
  problems.Unless(client_ca.empty() || !cert.empty(),
                  "--tls_client_ca needs --tls_cert and --tls_key");
  if (!cert.empty()) {
    config.tls = TlsFiles{.certificate_chain = cert,
                          .private_key = absl::GetFlag(FLAGS_tls_key),
                          .client_ca = client_ca};
  }
  config.auth_file = absl::GetFlag(FLAGS_auth_file);
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  problems.Unless(
      reflection == "auto" || reflection == "on" || reflection == "off",
      "--reflection must be on, off or auto");
  config.reflection =
      reflection == "on" || (reflection == "auto" && config.auth_file.empty());
  config.health = {.max_watches_per_connection =
                       absl::GetFlag(FLAGS_max_health_watches_per_connection),
                   .max_watches_per_address =
                       absl::GetFlag(FLAGS_max_health_watches_per_address)};
  problems.Unless(config.health.max_watches_per_connection > 0,
                  "--max_health_watches_per_connection must be at least 1");
  problems.Unless(config.health.max_watches_per_address > 0,
                  "--max_health_watches_per_address must be at least 1");
  const int refused_mb = absl::GetFlag(FLAGS_max_refused_mb_per_second);
  problems.Unless(refused_mb >= 0,
                  "--max_refused_mb_per_second must not be negative");
  config.refusals.refused_bytes_per_second = refused_mb * double{1 << 20};
}

// Threads, the write watchdog, shutdown.
void ServingFromFlags(XformdConfig& config, Problems& problems) {
  const int fanout = absl::GetFlag(FLAGS_fanout_threads);
  problems.Unless(fanout >= 0 && fanout <= 64,
                  "--fanout_threads must be 0 to 64");
  config.fanout_threads =
      fanout > 0
          ? fanout
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int build = absl::GetFlag(FLAGS_build_threads);
  problems.Unless(build >= 1 && build <= 64, "--build_threads must be 1 to 64");
  config.service.build_threads = build;
  const int write_timeout = absl::GetFlag(FLAGS_write_timeout_ms);
  problems.Unless(write_timeout > 0, "--write_timeout_ms must be at least 1");
  config.service.write_timeout = absl::Milliseconds(write_timeout);
  const int grace = absl::GetFlag(FLAGS_shutdown_grace_ms);
  problems.Unless(grace >= 0, "--shutdown_grace_ms must not be negative");
  config.shutdown_grace = absl::Milliseconds(grace);
}

}  // namespace

bool IsLoopback(absl::string_view listen) {
  absl::string_view host = listen.substr(0, listen.rfind(':'));
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<XformdConfig> XformdConfig::FromFlags() {
  Problems problems;
  XformdConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  problems.Unless(!config.listen.empty(), "--listen must name HOST:PORT");
  config.tick_hz = absl::GetFlag(FLAGS_tick_hz);
  problems.Unless(config.tick_hz >= kMinTickHz && config.tick_hz <= kMaxTickHz,
                  "--tick_hz must be in [0.01, 1000]");
  config.limits = LimitsFromFlags(problems);
  config.storage = StorageFromFlags(problems);
  config.cluster = ClusterFromFlags(problems);
  NetworkFromFlags(config, problems);
  SecurityFromFlags(config, problems);
  ServingFromFlags(config, problems);
  config.demo = absl::GetFlag(FLAGS_demo);
  config.demo_city_entities = absl::GetFlag(FLAGS_demo_city_entities);
  // A demo's flags matter only where the demo runs.
  problems.Unless(!config.demo || config.demo_city_entities <=
                                      config.limits.max_entities_per_world,
                  "--demo_city_entities must be at most --max_entities");
  if (absl::Status status = problems.status(); !status.ok()) return status;
  return config;
}

}  // namespace xform::server
