// Copyright 2026 The xform Authors.
//
// A typed, synchronous client of xformd. Every call returns absl::Status (or
// StatusOr) carrying the server's own code and message, so a caller tells
// NOT_FOUND (no such world or entity) from FAILED_PRECONDITION (a cycle, an
// existing id) from UNAVAILABLE (no server) without parsing text. Writes take
// the core's command types (xform/world.h), so code that builds batches for a
// local World builds them for a remote one unchanged.
//
// A Client is thread-safe: calls from several threads share one channel.
//
//   xform::ClientOptions options;
//   options.address = "127.0.0.1:50051";
//   auto client = xform::Client::Connect(options);
//   if (!client.ok()) return client.status();
//   (*client)->CreateWorld("scene", {});
//   (*client)->Apply("scene", {xform::CreateOp{1, 0, {}}});

#ifndef XFORM_CLIENT_H_
#define XFORM_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "xform/history.h"
#include "xform/message_size.h"
#include "xform/stream_stats.h"
#include "xform/subscriber_info.h"
#include "xform/transform.h"
#include "xform/world.h"

namespace xform {
namespace client_internal {
class Nodes;  // client/client_internal.h
}  // namespace client_internal

struct ClientOptions {
  // host:port of xformd (any gRPC target string works: dns:, unix:, ...),
  // or several, comma-separated: a cluster's nodes (docs/cluster.md).
  // Calls go to one and move on to the next when it does not answer; a
  // write goes to the node that writes its world, which a node that does
  // not redirects it to (any address given or not).
  std::string address = "127.0.0.1:50051";
  // PEM root certificates to verify a TLS server with. Empty: plaintext,
  // unless `tls` is set, in which case the system roots are used.
  std::string tls_root_certificates_pem;
  bool tls = false;
  // For mutual TLS (xformd's --tls_client_ca): this client's certificate
  // chain and private key, PEM. Either implies `tls`.
  std::string tls_certificate_chain_pem;
  std::string tls_private_key_pem;
  // The name the server's certificate must carry when it is not the
  // address's host (an IP address, a name only a private CA uses).
  std::string tls_server_name;
  // Sent as "authorization: Bearer <token>" on every call when not empty
  // (xformd's --token).
  std::string token;
  // Each unary call's deadline. Streams have none: they live until closed.
  absl::Duration deadline = absl::Seconds(10);
  // The largest message either side may send: a snapshot chunk, a big read.
  int max_message_bytes = kDefaultMaxMessageBytes;
  // How many bytes of a stream the transport may hold for this client before
  // the server has to wait. Small enough that a subscriber that stops
  // reading holds back the server soon, so the server folds the frames it
  // misses into one instead of queueing seconds of stale ones; large enough
  // for full speed on a LAN. (gRPC would otherwise grow it to many MB.)
  int stream_window_bytes = 1 << 20;
  // The largest HTTP/2 frame the server may send this client. HTTP/2's
  // default, 16 KB, cuts a 280 KB frame update into 18 frames, and cost
  // xformd about a third more CPU a frame streaming to 64 subscribers than
  // 256 KB (docs/benchmarks.md). A bigger frame holds back the connection's
  // other streams for as long as it takes on the wire: 256 KB is 2 ms at 1
  // Gb/s. gRPC takes 16 KB to 16 MB.
  int max_frame_bytes = 256 << 10;
  // How long Connect() waits for the server to be reachable. Zero: Connect()
  // does not wait, and calls fail UNAVAILABLE until the server is up.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Names this client to the server's echo suppression: its batches carry
  // it, and a Mirror subscribing with no_echo set is not sent them back.
  std::string client_id;
  // A TCP connection of its own. Otherwise gRPC shares one between the
  // Clients of a process with the same address and options, and their calls
  // queue on it together.
  bool own_connection = false;
  // How long a call goes on trying, backing off from 25 ms to 1 s, before
  // it fails with the last status: with several addresses, at the next node
  // when one does not answer; at any, while the server says to try again
  // (a world whose writer is being replaced). Every batch carries a write
  // id, so one tried again applies once, wherever it lands. Redirects are
  // always followed.
  absl::Duration failover_timeout = absl::Seconds(15);
};

enum class FrameMode {
  kServerDefault,  // The server's own tick rate.
  kTick,           // Publishes on a fixed tick.
  kDriven,         // Publishes when a batch says end_frame.
};

// How far a world's history knows an entity that has not moved lately
// (docs/time.md).
enum class TimeModel {
  kHold,  // Until the world's newest stamp: writers send what moved.
  kTf2,   // Only to its own newest sample, as tf2: links sent at a rate.
};

struct WorldOptions {
  FrameMode mode = FrameMode::kServerDefault;
  double tick_hz = 0;  // kTick only; 0 takes the server's default.
  TimeModel time_model = TimeModel::kHold;
};

// How far back a world's history reaches (docs/time.md).
struct WorldHistoryInfo {
  // Each entity's samples span this (0: the world keeps no history); less
  // than --history_seconds once the world's --history_mb bites.
  absl::Duration window;
  Stamp newest_stamp = 0;  // The newest stamp applied.
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint64_t refused_old = 0;  // Samples older than their entity's window.
  uint32_t waiting_lookups = 0;
  TimeModel time_model = TimeModel::kHold;
};

struct WorldInfo {
  std::string name;
  FrameMode mode = FrameMode::kServerDefault;
  double tick_hz = 0;
  uint64_t entities = 0;
  uint64_t frame = 0;  // The last published frame.
  uint32_t subscribers = 0;
  StreamStats stream;  // What its streams were sent, its subscribers now.
  // In a cluster (empty otherwise): the node that writes it (none while it
  // is being taken over), the nodes that serve it, the node that answered,
  // and how long that node has not heard from the world's log: what it
  // serves may be that stale.
  std::string writer_node;
  std::string writer_address;
  std::vector<std::string> serving_nodes;
  std::string answered_by;
  absl::Duration unconfirmed;
  // Why the answering node cannot load it from its log, and the record
  // (empty, 0: it can): its writes are refused DATA_LOSS until an operator
  // skips that record (Client::SkipRecord).
  std::string wedged;
  uint64_t wedged_record = 0;
  WorldHistoryInfo history;
};

// A node of a cluster (Client::ListNodes).
struct NodeInfo {
  std::string name;
  std::string address;  // Where clients reach it.
  bool draining = false;
  uint32_t worlds_owned = 0;
  uint32_t worlds_served = 0;
  absl::Time started;
  absl::Duration last_seen;  // Since it last renewed its entry.
};

struct ApplyOptions {
  // Publishes a frame once the batch applies (driven worlds).
  bool end_frame = false;
  // When the batch's poses were true, on the clock the world's writers
  // agree on (docs/time.md); 0: the server's Unix time at apply.
  Stamp stamp = 0;
  // Names given after the batch's commands (a RenameCommand at its end,
  // docs/wire.md's "Named frames"): entities it creates, or others; ""
  // takes a name away. Checked with the batch, refused with it.
  std::vector<std::pair<EntityId, std::string>> names;
};

// A lookup in a world's history (Client::LookupTransform, docs/time.md).
struct LookupOptions {
  // The stamp to look up at; 0: the latest at which every link between
  // target and source is known (tf2's rule).
  Stamp stamp = 0;
  // How long the server may wait for data newer than it holds before it
  // answers DEADLINE_EXCEEDED (at most its --max_lookup_wait_ms).
  absl::Duration timeout = absl::ZeroDuration();
  // tf2's advanced lookup: the sources at `stamp`, in the target's frame at
  // `target_stamp`, through `fixed` (which did not move between).
  std::optional<EntityId> fixed;
  Stamp target_stamp = 0;
};

// A stream of batches for a writer that sends one every frame (a physics
// step): no per-call setup, answers in order. The first refused batch ends
// the stream; Write() then returns that batch's status, and so does every
// later call. Not thread-safe: one writer, one thread.
class BatchWriter {
 public:
  virtual ~BatchWriter() = default;

  // Sends a batch and waits for its answer: the frame it lands in.
  virtual absl::StatusOr<uint64_t> Write(absl::Span<const Command> batch,
                                         ApplyOptions options = {}) = 0;
  // Ends the stream and returns how it ended. Called by the destructor too.
  virtual absl::Status Close() = 0;
};

class Mirror;

class Client {
 public:
  // Makes a channel to `options.address` and, unless connect_timeout is
  // zero, waits for it: UNAVAILABLE if the server is not reachable by then.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Worlds.
  absl::StatusOr<WorldInfo> CreateWorld(absl::string_view name,
                                        const WorldOptions& options);
  absl::StatusOr<std::vector<WorldInfo>> ListWorlds();
  absl::StatusOr<WorldInfo> GetWorld(absl::string_view name);
  absl::Status DeleteWorld(absl::string_view name);
  // The world's subscribers, by id, every page of them (see
  // xform/subscriber_info.h). Needs the admin role on the world.
  absl::StatusOr<std::vector<SubscriberInfo>> ListSubscribers(
      absl::string_view world);

  // Writes a batch, validated whole and applied whole by the server; returns
  // the frame it is published in. A refused batch changes nothing.
  absl::StatusOr<uint64_t> Apply(absl::string_view world,
                                 absl::Span<const Command> batch,
                                 const ApplyOptions& options = {});
  // Closes a driven world's frame without writing.
  absl::StatusOr<uint64_t> EndFrame(absl::string_view world);
  absl::StatusOr<std::unique_ptr<BatchWriter>> OpenWriter(
      absl::string_view world);

  // The current state of these entities (NOT_FOUND names the first unknown
  // one), or of `root` and every entity below it, parents first.
  absl::StatusOr<std::vector<EntityState>> Read(
      absl::string_view world, absl::Span<const EntityId> entities);
  absl::StatusOr<std::vector<EntityState>> ReadSubtree(absl::string_view world,
                                                       EntityId root);

  // `source`'s pose in `target`'s frame (kNoEntity: the world's origin) at
  // a stamp, interpolated from the world's history as tf2 does; or many
  // sources at once, all or nothing. Errors: NOT_FOUND (no history),
  // FAILED_PRECONDITION (not connected then), OUT_OF_RANGE (older than the
  // history), DEADLINE_EXCEEDED (newer than known, after options.timeout).
  absl::StatusOr<TimedPose> LookupTransform(absl::string_view world,
                                            EntityId target, EntityId source,
                                            const LookupOptions& options = {});
  absl::StatusOr<std::vector<TimedPose>> LookupTransforms(
      absl::string_view world, EntityId target,
      absl::Span<const EntityId> sources, const LookupOptions& options = {});
  // The same with frames named: an entity's name, "e<id>", or "world"
  // (options.fixed, when set, by id). NOT_FOUND for a name no entity has.
  absl::StatusOr<std::vector<TimedPose>> LookupNamedTransforms(
      absl::string_view world, absl::string_view target,
      absl::Span<const std::string> sources, const LookupOptions& options = {});
  // The names of these entities, "" for none (NOT_FOUND names the first
  // unknown one).
  absl::StatusOr<std::vector<std::string>> Names(
      absl::string_view world, absl::Span<const EntityId> entities);
  // World matrices at a stamp, from the world's history.
  absl::StatusOr<std::vector<EntityState>> ReadAt(
      absl::string_view world, absl::Span<const EntityId> entities,
      Stamp stamp);

  // A cluster's nodes, by name (a single xformd: itself).
  absl::StatusOr<std::vector<NodeInfo>> ListNodes();
  // Moves every world off `node` before maintenance, and keeps it from
  // taking any (or, with `drain` false, lets it again): the worlds it
  // handed over. Needs the admin role on every world.
  absl::StatusOr<uint32_t> DrainNode(absl::string_view node, bool drain = true);
  // Skips the record a cluster's wedged world cannot be loaded past
  // (WorldInfo::wedged_record), losing what it held: the world is loaded
  // again without it and written on. Needs the admin role on the world.
  absl::Status SkipRecord(absl::string_view world, uint64_t record);

  const ClientOptions& options() const { return options_; }

 private:
  friend class Mirror;

  Client(const ClientOptions& options,
         std::unique_ptr<client_internal::Nodes> nodes);

  const ClientOptions options_;
  const std::unique_ptr<client_internal::Nodes> nodes_;
};

}  // namespace xform

#endif  // XFORM_CLIENT_H_
