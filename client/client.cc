// Copyright 2026 The xform Authors.

#include "xform/client.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client_internal.h"
#include "xform/v1/wire.h"

namespace xform {
namespace client_internal {

std::string SubscribeMethod() {
  return absl::StrCat("/", v1::Xform::service_full_name(), "/Subscribe");
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

void Prepare(const ClientOptions& options, bool with_deadline,
             grpc::ClientContext* context, absl::Duration wait) {
  if (!options.token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options.token));
  }
  if (with_deadline) {
    context->set_deadline(
        absl::ToChronoTime(absl::Now() + options.deadline + wait));
  }
}

std::string RedirectOf(const grpc::ClientContext& context,
                       const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return "";
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find("xform-owner-address");
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

bool SaysTryAgain(const grpc::ClientContext& context) {
  return context.GetServerTrailingMetadata().count("xform-try-again") > 0;
}

// ApplyOptions::names as the batch's last command.
void AppendNames(const std::vector<std::pair<EntityId, std::string>>& names,
                 v1::ApplyRequest* request) {
  if (names.empty()) return;
  v1::RenameCommand& rename = *request->add_commands()->mutable_rename();
  for (const auto& [entity, name] : names) {
    rename.add_entity(entity);
    rename.add_name(name);
  }
}

bool WorthRetrying(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

namespace {

std::unique_ptr<Channel> MakeChannel(const ClientOptions& options,
                                     const std::string& address) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments args;
  if (options.tls || !options.tls_root_certificates_pem.empty() ||
      !options.tls_certificate_chain_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certificates_pem;
    ssl.pem_cert_chain = options.tls_certificate_chain_pem;
    ssl.pem_private_key = options.tls_private_key_pem;
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, options.max_frame_bytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
              options.stream_window_bytes);
  // Reconnect quickly after a server restart: mirrors depend on it.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (options.own_connection) {
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  }
  auto channel = std::make_unique<Channel>();
  channel->address = address;
  channel->channel = grpc::CreateCustomChannel(address, credentials, args);
  channel->stub = v1::Xform::NewStub(channel->channel);
  channel->subscribe_bytes = std::make_unique<
      grpc::TemplatedGenericStub<v1::SubscribeRequest, grpc::ByteBuffer>>(
      channel->channel);
  return channel;
}

std::string RandomWritePrefix() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8), ":");
}

}  // namespace

Nodes::Nodes(const ClientOptions& options)
    : options_(options), write_prefix_(RandomWritePrefix()) {
  for (absl::string_view address :
       absl::StrSplit(options.address, ',', absl::SkipWhitespace())) {
    addresses_.emplace_back(absl::StripAsciiWhitespace(address));
  }
  if (addresses_.empty()) addresses_.push_back(options.address);
  given_ = addresses_.size();
  channels_.resize(given_);
}

Channel& Nodes::At(size_t index) {
  absl::MutexLock lock(&mu_);
  if (channels_[index] == nullptr) {
    channels_[index] = MakeChannel(options_, addresses_[index]);
  }
  return *channels_[index];
}

size_t Nodes::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

size_t Nodes::FailOver(size_t index) {
  absl::MutexLock lock(&mu_);
  // From a redirect's address, or the one current: the next one given.
  const size_t from = index < given_ ? index : current_;
  const size_t next = (from + 1) % given_;
  if (index == current_ || index >= given_) current_ = next;
  for (auto it = writers_.begin(); it != writers_.end();) {
    if (it->second == index) {
      writers_.erase(it++);
    } else {
      ++it;
    }
  }
  return next;
}

std::optional<size_t> Nodes::TrustedIndexOf(const std::string& address,
                                            size_t asked) {
  const auto known = [&]() -> std::optional<size_t> {
    absl::MutexLock lock(&mu_);
    const auto it = std::find(addresses_.begin(), addresses_.end(), address);
    if (it == addresses_.end()) return std::nullopt;
    return static_cast<size_t>(it - addresses_.begin());
  };
  if (std::optional<size_t> index = known()) return index;
  // A node this client trusts (every address it holds is one) is asked
  // which nodes its cluster has; the redirect is followed only to one of
  // them, so that a token is never sent to an address a redirect alone
  // named.
  grpc::ClientContext context;
  Prepare(options_, /*with_deadline=*/true, &context);
  v1::ListNodesResponse listed;
  if (!At(asked)
           .stub->ListNodes(&context, v1::ListNodesRequest(), &listed)
           .ok()) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  for (const v1::NodeInfo& node : listed.nodes()) {
    if (node.address() != address) continue;
    const auto it = std::find(addresses_.begin(), addresses_.end(), address);
    if (it != addresses_.end()) {
      return static_cast<size_t>(it - addresses_.begin());
    }
    addresses_.push_back(address);
    channels_.emplace_back();
    return addresses_.size() - 1;
  }
  return std::nullopt;
}

size_t Nodes::WriterOf(absl::string_view world) const {
  absl::MutexLock lock(&mu_);
  const auto it = writers_.find(world);
  return it != writers_.end() ? it->second : current_;
}

void Nodes::SetWriter(absl::string_view world, size_t index) {
  absl::MutexLock lock(&mu_);
  writers_[world] = index;
}

std::string Nodes::NextWriteId() {
  return absl::StrCat(write_prefix_, writes_.fetch_add(1) + 1);
}

}  // namespace client_internal

namespace {

using client_internal::Channel;
using client_internal::FromGrpc;
using client_internal::Nodes;
using client_internal::Prepare;
using client_internal::RedirectOf;
using client_internal::WorthRetrying;

// Redirects followed at most for one call: more is a loop (nodes that
// disagree on who writes a world, for a moment), tried again later.
constexpr int kMaxRedirects = 4;
// The retry pace docs/wire.md states ("The retry pace"): after a try-again
// or a node that did not answer, the n-th wait is drawn from [b/2, b] with
// b = min(25 ms x 2^(n-1), 500 ms), as gRPC's retry policy jitters its
// backoff, so that the clients of a failover do not come back in step.
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(25);
constexpr absl::Duration kLastBackoff = absl::Milliseconds(500);

absl::Duration Jittered(absl::Duration backoff) {
  thread_local std::mt19937_64 random{std::random_device()()};
  return backoff * std::uniform_real_distribution<double>(0.5, 1.0)(random);
}

// How a call is tried, node after node, until it is answered, refused for
// good, or its time is up.
class Attempts {
 public:
  Attempts(const ClientOptions& options, Nodes& nodes, size_t first)
      : nodes_(nodes),
        index_(first),
        give_up_(absl::Now() + options.failover_timeout),
        several_(nodes.several()) {}

  size_t index() const { return index_; }
  Channel& channel() { return nodes_.At(index_); }

  // After a try that failed with `status` (its `context`): whether to try
  // again, at index() (a redirect: at once; a node lost or busy: the next
  // one, after a backoff).
  bool Again(const grpc::ClientContext& context, const grpc::Status& status) {
    if (const std::string to = RedirectOf(context, status);
        !to.empty() && redirects_ < kMaxRedirects) {
      const std::optional<size_t> trusted = nodes_.TrustedIndexOf(to, index_);
      if (!trusted) {
        refused_ = absl::FailedPreconditionError(absl::StrCat(
            status.error_message(), " (not followed: ", to,
            " is neither an address this client was given nor a node its "
            "nodes list)"));
        return false;
      }
      ++redirects_;
      index_ = *trusted;
      return true;
    }
    // A node that answered to wait (its world's writer is being replaced)
    // is asked again; with several nodes, one that did not answer, or went
    // on redirecting, gives way to the next.
    const bool wait = client_internal::SaysTryAgain(context);
    const bool elsewhere = several_ && (WorthRetrying(status) ||
                                        !RedirectOf(context, status).empty());
    if (!wait && !elsewhere) return false;
    if (absl::Now() + backoff_ > give_up_) return false;
    if (!wait) index_ = nodes_.FailOver(index_);
    redirects_ = 0;
    absl::SleepFor(Jittered(backoff_));
    backoff_ = std::min(2 * backoff_, kLastBackoff);
    return true;
  }

  // What the call ends with after Again() said no: `status`, unless the
  // client refused to follow it.
  absl::Status Final(const grpc::Status& status) const {
    return refused_.ok() ? FromGrpc(status) : refused_;
  }

 private:
  Nodes& nodes_;
  size_t index_;
  const absl::Time give_up_;
  const bool several_;
  absl::Duration backoff_ = kFirstBackoff;
  int redirects_ = 0;
  absl::Status refused_;
};

// One unary call, dressed with the client's options, tried as Attempts
// say: at the node that writes `world` for a write (nullptr: any node).
template <typename Request, typename Response>
absl::Status Call(const ClientOptions& options, Nodes& nodes,
                  grpc::Status (v1::Xform::Stub::*method)(grpc::ClientContext*,
                                                          const Request&,
                                                          Response*),
                  const Request& request, Response* response,
                  const std::string* world = nullptr,
                  absl::Duration wait = absl::ZeroDuration()) {
  Attempts attempts(
      options, nodes,
      world != nullptr ? nodes.WriterOf(*world) : nodes.current());
  for (;;) {
    grpc::ClientContext context;
    Prepare(options, /*with_deadline=*/true, &context, wait);
    const grpc::Status status =
        (attempts.channel().stub.get()->*method)(&context, request, response);
    if (status.ok()) {
      if (world != nullptr) nodes.SetWriter(*world, attempts.index());
      return absl::OkStatus();
    }
    if (!attempts.Again(context, status)) return attempts.Final(status);
  }
}

v1::FrameMode ToWire(FrameMode mode) {
  switch (mode) {
    case FrameMode::kTick:
      return v1::FRAME_MODE_TICK;
    case FrameMode::kDriven:
      return v1::FRAME_MODE_DRIVEN;
    case FrameMode::kServerDefault:
      break;
  }
  return v1::FRAME_MODE_UNSPECIFIED;
}

FrameMode FromWire(v1::FrameMode mode) {
  switch (mode) {
    case v1::FRAME_MODE_TICK:
      return FrameMode::kTick;
    case v1::FRAME_MODE_DRIVEN:
      return FrameMode::kDriven;
    default:
      return FrameMode::kServerDefault;
  }
}

WorldInfo FromWire(const v1::WorldInfo& info) {
  WorldInfo out;
  out.name = info.name();
  out.mode = FromWire(info.mode());
  out.tick_hz = info.tick_hz();
  out.entities = info.entities();
  out.frame = info.frame();
  out.subscribers = info.subscribers();
  out.stream = v1::StreamStatsFromWire(info.stream());
  const v1::WorldHistory& history = info.history();
  out.history = {.window = absl::Nanoseconds(history.window_nanos()),
                 .newest_stamp = history.newest_stamp_nanos(),
                 .samples = history.samples(),
                 .bytes = history.bytes(),
                 .refused_old = history.refused_old(),
                 .waiting_lookups = history.waiting_lookups(),
                 .time_model = history.time_model() == v1::TIME_MODEL_TF2
                                   ? TimeModel::kTf2
                                   : TimeModel::kHold};
  if (info.has_placement()) {
    const v1::WorldPlacement& placement = info.placement();
    out.writer_node = placement.owner_node();
    out.writer_address = placement.owner_address();
    out.serving_nodes.assign(placement.serving_nodes().begin(),
                             placement.serving_nodes().end());
    out.answered_by = placement.answered_by();
    out.unconfirmed = absl::Milliseconds(placement.unconfirmed_ms());
    out.wedged = placement.wedged();
    out.wedged_record = placement.wedged_record();
  }
  return out;
}

absl::StatusOr<std::vector<EntityState>> ReadWith(
    const ClientOptions& options, Nodes& nodes,
    const v1::ReadRequest& request) {
  v1::ReadResponse response;
  if (absl::Status s =
          Call(options, nodes, &v1::Xform::Stub::Read, request, &response);
      !s.ok()) {
    return s;
  }
  return v1::EntityStatesFromWire(response);
}

// ApplyStream, at the node that writes the world: a batch refused with a
// redirect, or whose stream broke where another node may take it (several
// addresses), is sent again on a new stream there, with its write id, so
// it applies once.
class StreamBatchWriter final : public BatchWriter {
 public:
  StreamBatchWriter(const ClientOptions& options, Nodes& nodes,
                    absl::string_view world)
      : options_(options), nodes_(nodes), world_(world) {}
  ~StreamBatchWriter() override { Close().IgnoreError(); }

  absl::StatusOr<uint64_t> Write(absl::Span<const Command> batch,
                                 ApplyOptions options) override {
    if (!status_.ok()) return status_;
    if (closed_) return absl::FailedPreconditionError("the writer is closed");
    v1::ApplyRequest request;
    request.set_world(world_);
    request.set_end_frame(options.end_frame);
    request.set_stamp_nanos(options.stamp);
    request.set_stamp_nanos(options.stamp);
    request.set_client_id(options_.client_id);
    request.set_write_id(nodes_.NextWriteId());
    v1::AppendCommands(batch, &request);
    client_internal::AppendNames(options.names, &request);
    Attempts attempts(options_, nodes_, nodes_.WriterOf(world_));
    for (;;) {
      if (stream_ == nullptr) Open(attempts.index());
      v1::ApplyResponse response;
      if (stream_->Write(request) && stream_->Read(&response)) {
        nodes_.SetWriter(world_, attempts.index());
        return response.frame();
      }
      // The server ended the stream: its status says why.
      grpc::Status ended = stream_->Finish();
      if (ended.ok()) {
        ended = grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended");
      }
      std::unique_ptr<grpc::ClientContext> context = std::move(context_);
      stream_.reset();
      if (!attempts.Again(*context, ended)) {
        closed_ = true;
        status_ = attempts.Final(ended);
        return status_;
      }
    }
  }

  absl::Status Close() override {
    if (closed_) return status_;
    closed_ = true;
    if (stream_ == nullptr) return status_;
    stream_->WritesDone();
    status_ = FromGrpc(stream_->Finish());
    return status_;
  }

 private:
  void Open(size_t index) {
    context_ = std::make_unique<grpc::ClientContext>();
    Prepare(options_, /*with_deadline=*/false, context_.get());
    stream_ = nodes_.At(index).stub->ApplyStream(context_.get());
  }

  const ClientOptions& options_;
  Nodes& nodes_;
  const std::string world_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ApplyRequest, v1::ApplyResponse>>
      stream_;
  bool closed_ = false;
  absl::Status status_;
};
}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  auto nodes = std::make_unique<Nodes>(options);
  if (options.connect_timeout > absl::ZeroDuration()) {
    // Any of its addresses will do.
    const absl::Time deadline = absl::Now() + options.connect_timeout;
    bool reached = false;
    for (size_t index = nodes->current(); !reached && absl::Now() < deadline;) {
      const absl::Time wait_until = std::min(
          deadline,
          nodes->several() ? absl::Now() + absl::Milliseconds(500) : deadline);
      reached = nodes->At(index).channel->WaitForConnected(
          absl::ToChronoTime(wait_until));
      if (!reached && nodes->several()) index = nodes->FailOver(index);
    }
    if (!reached) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach xformd at ", options.address, " within ",
                       absl::FormatDuration(options.connect_timeout)));
    }
  }
  return std::unique_ptr<Client>(new Client(options, std::move(nodes)));
}

Client::Client(const ClientOptions& options,
               std::unique_ptr<client_internal::Nodes> nodes)
    : options_(options), nodes_(std::move(nodes)) {}

Client::~Client() = default;

absl::StatusOr<WorldInfo> Client::CreateWorld(absl::string_view name,
                                              const WorldOptions& options) {
  v1::CreateWorldRequest request;
  request.set_name(std::string(name));
  request.set_mode(ToWire(options.mode));
  request.set_tick_hz(options.tick_hz);
  request.set_time_model(options.time_model == TimeModel::kTf2
                             ? v1::TIME_MODEL_TF2
                             : v1::TIME_MODEL_HOLD);
  v1::WorldInfo response;
  if (absl::Status s = Call(options_, *nodes_, &v1::Xform::Stub::CreateWorld,
                            request, &response);
      !s.ok()) {
    return s;
  }
  // The node that made it writes it.
  nodes_->SetWriter(name, nodes_->current());
  return FromWire(response);
}

absl::StatusOr<std::vector<WorldInfo>> Client::ListWorlds() {
  v1::ListWorldsResponse response;
  if (absl::Status s = Call(options_, *nodes_, &v1::Xform::Stub::ListWorlds,
                            v1::ListWorldsRequest(), &response);
      !s.ok()) {
    return s;
  }
  std::vector<WorldInfo> worlds;
  for (const v1::WorldInfo& info : response.worlds()) {
    worlds.push_back(FromWire(info));
  }
  return worlds;
}

absl::StatusOr<std::vector<SubscriberInfo>> Client::ListSubscribers(
    absl::string_view world) {
  std::vector<SubscriberInfo> subscribers;
  v1::ListSubscribersRequest request;
  request.set_world(std::string(world));
  do {
    v1::ListSubscribersResponse page;
    if (absl::Status s =
            Call(options_, *nodes_, &v1::Xform::Stub::ListSubscribers, request,
                 &page);
        !s.ok()) {
      return s;
    }
    for (const v1::SubscriberInfo& info : page.subscribers()) {
      subscribers.push_back(v1::SubscriberInfoFromWire(info));
    }
    request.set_after_id(page.next_after_id());
  } while (request.after_id() != 0);
  return subscribers;
}

absl::StatusOr<WorldInfo> Client::GetWorld(absl::string_view name) {
  v1::GetWorldRequest request;
  request.set_name(std::string(name));
  v1::WorldInfo response;
  if (absl::Status s = Call(options_, *nodes_, &v1::Xform::Stub::GetWorld,
                            request, &response);
      !s.ok()) {
    return s;
  }
  return FromWire(response);
}

absl::Status Client::DeleteWorld(absl::string_view name) {
  v1::DeleteWorldRequest request;
  request.set_name(std::string(name));
  v1::DeleteWorldResponse response;
  return Call(options_, *nodes_, &v1::Xform::Stub::DeleteWorld, request,
              &response);
}

absl::StatusOr<uint64_t> Client::Apply(absl::string_view world,
                                       absl::Span<const Command> batch,
                                       const ApplyOptions& options) {
  v1::ApplyRequest request;
  const std::string name(world);
  request.set_world(name);
  request.set_end_frame(options.end_frame);
  request.set_stamp_nanos(options.stamp);
  request.set_client_id(options_.client_id);
  // The same on every try: the batch applies once.
  request.set_write_id(nodes_->NextWriteId());
  v1::AppendCommands(batch, &request);
  client_internal::AppendNames(options.names, &request);
  v1::ApplyResponse response;
  if (absl::Status s = Call(options_, *nodes_, &v1::Xform::Stub::Apply, request,
                            &response, &name);
      !s.ok()) {
    return s;
  }
  return response.frame();
}

absl::StatusOr<uint64_t> Client::EndFrame(absl::string_view world) {
  return Apply(world, {}, ApplyOptions{.end_frame = true});
}

absl::StatusOr<std::unique_ptr<BatchWriter>> Client::OpenWriter(
    absl::string_view world) {
  return std::make_unique<StreamBatchWriter>(options_, *nodes_, world);
}

absl::StatusOr<std::vector<EntityState>> Client::Read(
    absl::string_view world, absl::Span<const EntityId> entities) {
  v1::ReadRequest request;
  request.set_world(std::string(world));
  request.mutable_entity()->Add(entities.begin(), entities.end());
  return ReadWith(options_, *nodes_, request);
}

absl::StatusOr<std::vector<EntityState>> Client::ReadSubtree(
    absl::string_view world, EntityId root) {
  v1::ReadRequest request;
  request.set_world(std::string(world));
  request.set_subtree(root);
  return ReadWith(options_, *nodes_, request);
}

absl::StatusOr<std::vector<NodeInfo>> Client::ListNodes() {
  v1::ListNodesResponse response;
  if (absl::Status s = Call(options_, *nodes_, &v1::Xform::Stub::ListNodes,
                            v1::ListNodesRequest(), &response);
      !s.ok()) {
    return s;
  }
  std::vector<NodeInfo> nodes;
  for (const v1::NodeInfo& node : response.nodes()) {
    nodes.push_back({.name = node.name(),
                     .address = node.address(),
                     .draining = node.draining(),
                     .worlds_owned = node.worlds_owned(),
                     .worlds_served = node.worlds_served(),
                     .started = absl::FromUnixNanos(node.started_unix_nanos()),
                     .last_seen = absl::Milliseconds(node.last_seen_ms())});
  }
  return nodes;
}

absl::StatusOr<uint32_t> Client::DrainNode(absl::string_view node, bool drain) {
  v1::DrainNodeRequest request;
  request.set_node(std::string(node));
  request.set_undrain(!drain);
  v1::DrainNodeResponse response;
  if (absl::Status s = Call(options_, *nodes_, &v1::Xform::Stub::DrainNode,
                            request, &response);
      !s.ok()) {
    return s;
  }
  return response.worlds_moved();
}

absl::StatusOr<TimedPose> Client::LookupTransform(
    absl::string_view world, EntityId target, EntityId source,
    const LookupOptions& options) {
  absl::StatusOr<std::vector<TimedPose>> poses =
      LookupTransforms(world, target, {&source, 1}, options);
  if (!poses.ok()) return poses.status();
  if (poses->size() != 1) {
    return absl::InternalError("a lookup answered without its pose");
  }
  return poses->front();
}

namespace {

// A lookup's request with `options` and `world` set, sent.
absl::StatusOr<std::vector<TimedPose>> LookupWith(
    const ClientOptions& client, client_internal::Nodes& nodes,
    absl::string_view world, const LookupOptions& options,
    v1::LookupTransformRequest& request) {
  request.set_world(std::string(world));
  request.set_stamp_nanos(options.stamp);
  if (options.fixed) {
    request.set_fixed_frame(*options.fixed);
    request.set_use_fixed_frame(true);
    request.set_target_stamp_nanos(options.target_stamp);
  }
  request.set_timeout_ms(static_cast<uint32_t>(std::min<int64_t>(
      absl::ToInt64Milliseconds(options.timeout), UINT32_MAX)));
  v1::LookupTransformResponse response;
  if (absl::Status s =
          Call(client, nodes, &v1::Xform::Stub::LookupTransform, request,
               &response, /*world=*/nullptr, options.timeout);
      !s.ok()) {
    return s;
  }
  return v1::TimedPosesFromWire(response);
}

}  // namespace

absl::StatusOr<std::vector<TimedPose>> Client::LookupTransforms(
    absl::string_view world, EntityId target,
    absl::Span<const EntityId> sources, const LookupOptions& options) {
  v1::LookupTransformRequest request;
  request.set_target(target);
  request.mutable_source()->Add(sources.begin(), sources.end());
  return LookupWith(options_, *nodes_, world, options, request);
}

absl::StatusOr<std::vector<TimedPose>> Client::LookupNamedTransforms(
    absl::string_view world, absl::string_view target,
    absl::Span<const std::string> sources, const LookupOptions& options) {
  v1::LookupTransformRequest request;
  request.set_target_name(std::string(target));
  request.mutable_source_name()->Add(sources.begin(), sources.end());
  return LookupWith(options_, *nodes_, world, options, request);
}

absl::StatusOr<std::vector<std::string>> Client::Names(
    absl::string_view world, absl::Span<const EntityId> entities) {
  v1::ReadRequest request;
  request.set_world(std::string(world));
  request.mutable_entity()->Add(entities.begin(), entities.end());
  v1::ReadResponse response;
  if (absl::Status s =
          Call(options_, *nodes_, &v1::Xform::Stub::Read, request, &response);
      !s.ok()) {
    return s;
  }
  return std::vector<std::string>(response.name().begin(),
                                  response.name().end());
}

absl::StatusOr<std::vector<EntityState>> Client::ReadAt(
    absl::string_view world, absl::Span<const EntityId> entities, Stamp stamp) {
  v1::ReadRequest request;
  request.set_world(std::string(world));
  request.mutable_entity()->Add(entities.begin(), entities.end());
  request.set_at_stamp_nanos(stamp);
  return ReadWith(options_, *nodes_, request);
}

absl::Status Client::SkipRecord(absl::string_view world, uint64_t record) {
  v1::SkipRecordRequest request;
  request.set_world(std::string(world));
  request.set_record(record);
  v1::SkipRecordResponse response;
  return Call(options_, *nodes_, &v1::Xform::Stub::SkipRecord, request,
              &response);
}

}  // namespace xform
