// Copyright 2026 The xform Authors.
//
// NatsLink: one xformd's connection to its cluster's NATS servers
// (--cluster), shared by everything the node keeps there: the worlds'
// streams (log_records.h), their writers (jetstream_log.h) and followers
// (world_follower.h), and the key-value buckets of ownership and membership
// (cluster_node.h). It connects with NATS's own authentication and TLS,
// reconnects for as long as it lives, and knows which cluster it joined:
// the identity the cluster's first node left in the bucket XFORM_CLUSTER,
// which every record a node writes carries, so that a node that finds
// itself on another cluster's servers (a reconnect to a NATS server of
// another deployment) refuses their records and stops, rather than mix
// two clusters' worlds.
//
// Thread-safe: NATS's calls are; the link's own state is atomic.

#ifndef XFORM_SERVER_CLUSTER_NATS_LINK_H_
#define XFORM_SERVER_CLUSTER_NATS_LINK_H_

#include <nats/nats.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace xform::server {

struct ClusterOptions {
  // --cluster: the NATS servers, "nats://host:port", any of the cluster's.
  std::vector<std::string> servers;
  // --node_name: this xformd among the cluster's, unique (as NATS shows its
  // connection, and ListNodes names it).
  std::string node = "xformd";
  // --advertise_address: where clients reach this node (redirects and
  // ListNodes name it).
  std::string address;
  // --cluster_ca_file: TLS to the NATS servers, trusting this CA (PEM);
  // empty: as the URLs say (tls:// asks for TLS with the system's CAs).
  std::string ca_file;
  // --cluster_cert_file, --cluster_key_file: this node's certificate and
  // key (PEM), for NATS servers that verify their clients.
  std::string cert_file;
  std::string key_file;
  // --cluster_creds_file: a NATS credentials file (a user's JWT and NKey
  // seed), for servers run with NATS's decentralized authentication.
  std::string creds_file;
  // --cluster_token_file: the NATS servers' authorization token, read from
  // this file (never the command line); empty: none.
  std::string token;
  // --cluster_replicas: the NATS servers each stream and bucket is kept on
  // (3: any one may be lost; 1 for a single NATS server).
  int replicas = 3;
  // --cluster_write_timeout: how long a record may go unacknowledged
  // (retried meanwhile) before the world's log breaks. A leader's failover
  // took 4-5 s when measured.
  absl::Duration write_timeout = absl::Seconds(30);
  // --cluster_window: messages a world has in flight at most.
  size_t window = 256;
  // --cluster_connect_timeout_ms: how long recovery waits for JetStream to
  // answer at all, the first connection included (servers starting, a
  // cluster electing its leaders).
  absl::Duration connect_timeout = absl::Seconds(60);
  // --cluster_lease_ms: how long a world's writer holds it without renewing
  // (renewed four times as often): a writer lost is replaced after about
  // this long.
  absl::Duration lease = absl::Seconds(2);
  // A world is snapshotted once its log holds this many bytes since the
  // last snapshot (0: never).
  uint64_t snapshot_every_bytes = uint64_t{64} << 20;
};

// "3 NATS replicas via nats://a:4222,nats://b:4222 as node n1": the store
// as xformd's log states it.
std::string DescribeCluster(const ClusterOptions& options);

// What NATS said, for a status: its text, the last error's detail and
// JetStream's code (UNAVAILABLE).
absl::Status NatsError(absl::string_view what, natsStatus status,
                       jsErrCode code = static_cast<jsErrCode>(0));

// A stream's extent: its first and last sequences, and messages.
struct StreamExtent {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t messages = 0;
};

class NatsLink {
 public:
  // Connects (trying until options.connect_timeout, naming what refuses
  // it: a wrong token, a certificate), makes the buckets if this is the
  // cluster's first node, and reads the cluster's identity.
  static absl::StatusOr<std::shared_ptr<NatsLink>> Connect(
      const ClusterOptions& options);
  ~NatsLink();
  NatsLink(const NatsLink&) = delete;
  NatsLink& operator=(const NatsLink&) = delete;

  natsConnection* nc() const { return nc_; }
  jsCtx* js() const { return js_; }
  // The cluster this node joined (ClusterIdentity.uid), carried by every
  // record as the header Xform-Cluster.
  const std::string& cluster() const { return cluster_; }
  // The buckets: who writes each world (TTL: the lease), the nodes (TTL:
  // three leases), the worlds (no TTL).
  kvStore* owners() const { return owners_; }
  kvStore* nodes() const { return nodes_; }
  kvStore* worlds() const { return worlds_; }

  // The most one message may carry of a record (the servers' max_payload,
  // less room for headers).
  size_t chunk_bytes() const;

  // Whether the connection came back since the last call (and the
  // identity must be checked again).
  bool TakeReconnected() { return reconnected_.exchange(false); }
  // The identity the servers hold now: FAILED_PRECONDITION if another
  // cluster's, UNAVAILABLE if it cannot be read.
  absl::Status CheckIdentity();

  // Publishes `msg` (destroyed) with MsgId `id` and, if given, the stream
  // sequence it expects to follow, and waits for JetStream's
  // acknowledgement: the sequence it was stored at. A refusal because
  // another appended first (JetStream error 10071) is FAILED_PRECONDITION.
  absl::StatusOr<uint64_t> PublishSync(
      natsMsg* msg, const std::string& id, absl::string_view what,
      std::optional<uint64_t> expect_last = std::nullopt);

  absl::StatusOr<StreamExtent> Extent(const std::string& stream);
  // Removes the messages of `stream` before `seq`, one by one. Not a purge
  // up to a sequence: nats-server 2.9.10 replays one, on a server that
  // restarts, as a purge of everything up to the stream's last message then
  // (nats-server#4196, fixed in 2.9.18), which took the newest snapshot
  // with it in our crash loop. O(messages removed) round trips.
  absl::Status DeleteBefore(const std::string& stream, uint64_t seq);
  // Calls `visit` with each message of `stream` from `start` (or its
  // first) to its last as of the call, in order, through an ordered
  // consumer. Its last sequence (0: none ever stored).
  absl::StatusOr<uint64_t> Read(
      const std::string& stream, const std::string& subject, uint64_t start,
      absl::FunctionRef<absl::Status(natsMsg* msg)> visit);
  // The same, each message asked of the stream's leader by its sequence
  // (JetStream's direct API, not a consumer: a consumer may be placed on a
  // replica that is still catching up). For short streams: a round trip a
  // message.
  absl::Status ReadFromLeader(
      const std::string& stream,
      absl::FunctionRef<absl::Status(natsMsg* msg)> visit);
  // Makes `stream` of file storage on `replicas` servers, holding
  // `subject`; ALREADY_EXISTS if it is there.
  absl::Status AddStream(const std::string& stream, const std::string& subject,
                         int replicas);
  // Removes `stream`; none there is no error.
  absl::Status DeleteStream(const std::string& stream);

 private:
  NatsLink() = default;
  absl::Status MakeBuckets(const ClusterOptions& options);
  absl::StatusOr<kvStore*> Bucket(const char* name, absl::Duration ttl,
                                  int replicas);
  absl::Status JoinIdentity(const ClusterOptions& options);
  static void OnReconnected(natsConnection* nc, void* closure);

  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  kvStore* owners_ = nullptr;
  kvStore* nodes_ = nullptr;
  kvStore* worlds_ = nullptr;
  kvStore* identity_ = nullptr;
  std::string cluster_;
  std::atomic<bool> reconnected_{false};
};

// Headers and payloads of NATS messages.
absl::string_view Header(natsMsg* msg, const char* key);
uint64_t HeaderNumber(natsMsg* msg, const char* key, uint64_t otherwise);
absl::string_view Data(natsMsg* msg);
// The message's stream sequence (0: not a JetStream message).
uint64_t StreamSequence(natsMsg* msg);
// A message to `subject` holding `data`, with `headers`; null if NATS
// could not make one.
natsMsg* MakeMessage(
    const std::string& subject, absl::string_view data,
    std::initializer_list<std::pair<const char*, std::string>> headers);

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_NATS_LINK_H_
