// Copyright 2026 The xform Authors.

#include "xform/client.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
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
             grpc::ClientContext* context) {
  if (!options.token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options.token));
  }
  if (with_deadline) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + options.deadline));
  }
}

}  // namespace client_internal

namespace {

using client_internal::FromGrpc;
using client_internal::Prepare;

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
  return out;
}

// One unary call, dressed with the client's options.
template <typename Request, typename Response>
absl::Status Call(const ClientOptions& options, v1::Xform::Stub& stub,
                  grpc::Status (v1::Xform::Stub::*method)(grpc::ClientContext*,
                                                          const Request&,
                                                          Response*),
                  const Request& request, Response* response) {
  grpc::ClientContext context;
  Prepare(options, /*with_deadline=*/true, &context);
  return FromGrpc((stub.*method)(&context, request, response));
}

absl::StatusOr<std::vector<EntityState>> ReadWith(
    const ClientOptions& options, v1::Xform::Stub& stub,
    const v1::ReadRequest& request) {
  v1::ReadResponse response;
  if (absl::Status s =
          Call(options, stub, &v1::Xform::Stub::Read, request, &response);
      !s.ok()) {
    return s;
  }
  return v1::EntityStatesFromWire(response);
}

class StreamBatchWriter final : public BatchWriter {
 public:
  StreamBatchWriter(const ClientOptions& options, v1::Xform::Stub& stub,
                    absl::string_view world)
      : world_(world), client_id_(options.client_id) {
    Prepare(options, /*with_deadline=*/false, &context_);
    stream_ = stub.ApplyStream(&context_);
  }
  ~StreamBatchWriter() override { Close().IgnoreError(); }

  absl::StatusOr<uint64_t> Write(absl::Span<const Command> batch,
                                 ApplyOptions options) override {
    if (!status_.ok()) return status_;
    if (closed_) return absl::FailedPreconditionError("the writer is closed");
    v1::ApplyRequest request;
    request.set_world(world_);
    request.set_end_frame(options.end_frame);
    request.set_client_id(client_id_);
    v1::AppendCommands(batch, &request);
    v1::ApplyResponse response;
    if (!stream_->Write(request) || !stream_->Read(&response)) {
      // The server ended the stream: its status says why.
      closed_ = true;
      status_ = FromGrpc(stream_->Finish());
      if (status_.ok()) status_ = absl::UnavailableError("stream ended");
      return status_;
    }
    return response.frame();
  }

  absl::Status Close() override {
    if (closed_) return status_;
    closed_ = true;
    stream_->WritesDone();
    status_ = FromGrpc(stream_->Finish());
    return status_;
  }

 private:
  const std::string world_;
  const std::string client_id_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ApplyRequest, v1::ApplyResponse>>
      stream_;
  bool closed_ = false;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
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
  if (options.own_connection)
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = std::make_unique<Channel>();
  channel->channel =
      grpc::CreateCustomChannel(options.address, credentials, args);
  channel->stub = v1::Xform::NewStub(channel->channel);
  channel->subscribe_bytes = std::make_unique<
      grpc::TemplatedGenericStub<v1::SubscribeRequest, grpc::ByteBuffer>>(
      channel->channel);
  if (options.connect_timeout > absl::ZeroDuration() &&
      !channel->channel->WaitForConnected(
          absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach xformd at ", options.address, " within ",
                     absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(const ClientOptions& options, std::unique_ptr<Channel> channel)
    : options_(options), channel_(std::move(channel)) {}

Client::~Client() = default;

absl::StatusOr<WorldInfo> Client::CreateWorld(absl::string_view name,
                                              const WorldOptions& options) {
  v1::CreateWorldRequest request;
  request.set_name(std::string(name));
  request.set_mode(ToWire(options.mode));
  request.set_tick_hz(options.tick_hz);
  v1::WorldInfo response;
  if (absl::Status s = Call(options_, *channel_->stub,
                            &v1::Xform::Stub::CreateWorld, request, &response);
      !s.ok()) {
    return s;
  }
  return FromWire(response);
}

absl::StatusOr<std::vector<WorldInfo>> Client::ListWorlds() {
  v1::ListWorldsResponse response;
  if (absl::Status s =
          Call(options_, *channel_->stub, &v1::Xform::Stub::ListWorlds,
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
            Call(options_, *channel_->stub, &v1::Xform::Stub::ListSubscribers,
                 request, &page);
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
  if (absl::Status s = Call(options_, *channel_->stub,
                            &v1::Xform::Stub::GetWorld, request, &response);
      !s.ok()) {
    return s;
  }
  return FromWire(response);
}

absl::Status Client::DeleteWorld(absl::string_view name) {
  v1::DeleteWorldRequest request;
  request.set_name(std::string(name));
  v1::DeleteWorldResponse response;
  return Call(options_, *channel_->stub, &v1::Xform::Stub::DeleteWorld, request,
              &response);
}

absl::StatusOr<uint64_t> Client::Apply(absl::string_view world,
                                       absl::Span<const Command> batch,
                                       ApplyOptions options) {
  v1::ApplyRequest request;
  request.set_world(std::string(world));
  request.set_end_frame(options.end_frame);
  request.set_client_id(options_.client_id);
  v1::AppendCommands(batch, &request);
  v1::ApplyResponse response;
  if (absl::Status s = Call(options_, *channel_->stub, &v1::Xform::Stub::Apply,
                            request, &response);
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
  return std::make_unique<StreamBatchWriter>(options_, *channel_->stub, world);
}

absl::StatusOr<std::vector<EntityState>> Client::Read(
    absl::string_view world, absl::Span<const EntityId> entities) {
  v1::ReadRequest request;
  request.set_world(std::string(world));
  request.mutable_entity()->Add(entities.begin(), entities.end());
  return ReadWith(options_, *channel_->stub, request);
}

absl::StatusOr<std::vector<EntityState>> Client::ReadSubtree(
    absl::string_view world, EntityId root) {
  v1::ReadRequest request;
  request.set_world(std::string(world));
  request.set_subtree(root);
  return ReadWith(options_, *channel_->stub, request);
}

}  // namespace xform
