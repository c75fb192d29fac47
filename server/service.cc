// Copyright 2026 The xform Authors.

#include "server/service.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/log.h"

namespace xform::server {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// ---------------------------------------------------------------------------
// ApplyStream: batches in order, one in flight; the first error ends it.

class ApplyStreamReactor final
    : public grpc::ServerBidiReactor<v1::ApplyRequest, v1::ApplyResponse> {
 public:
  explicit ApplyStreamReactor(WorldHost& host) : host_(host) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client closed its side: every batch was answered.
      Finish(grpc::Status::OK);
      return;
    }
    absl::StatusOr<std::shared_ptr<HostedWorld>> world =
        host_.Get(request_.world());
    absl::StatusOr<uint64_t> frame =
        world.ok() ? (*world)->Apply(request_, host_.limits())
                   : absl::StatusOr<uint64_t>(world.status());
    if (!frame.ok()) {
      Finish(ToGrpc(frame.status()));
      return;
    }
    response_.set_frame(*frame);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  WorldHost& host_;
  v1::ApplyRequest request_;
  v1::ApplyResponse response_;
};

// ---------------------------------------------------------------------------
// Subscribe: one write in flight; the next message is pulled from the
// replicator when the write completes or when the replicator wakes the sink.
//
// gRPC may run a reaction (OnWriteDone, OnCancel, even OnDone) inline in the
// thread that calls StartWrite, Finish or TryCancel, so those calls are made
// with no lock held, and the reactor keeps itself alive with a shared_ptr it
// drops in OnDone: a sink that reached it through a weak_ptr keeps it alive
// until its call returns.

class SubscribeReactor;

class StreamSink final : public UpdateSink {
 public:
  explicit StreamSink(std::weak_ptr<SubscribeReactor> reactor)
      : reactor_(std::move(reactor)) {}
  void Wake() override;
  void Poll(absl::Time now) override;
  void End(const absl::Status& status) override;

 private:
  const std::weak_ptr<SubscribeReactor> reactor_;
};

// Frees the reference a shared encoding's slice holds.
void ReleaseOutgoing(void* keep) {
  delete static_cast<std::shared_ptr<const Outgoing>*>(keep);
}

class SubscribeReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Starts the stream; the reactor owns itself until OnDone().
  static void Start(grpc::CallbackServerContext* context,
                    std::shared_ptr<HostedWorld> world,
                    SubscriptionOptions options, absl::Duration write_timeout,
                    grpc::ServerWriteReactor<grpc::ByteBuffer>** out) {
    auto reactor = std::shared_ptr<SubscribeReactor>(
        new SubscribeReactor(context, std::move(world), write_timeout));
    reactor->self_ = reactor;
    *out = reactor.get();
    reactor->id_ = reactor->world_->replicator().Subscribe(
        std::move(options), std::make_shared<StreamSink>(reactor));
    Log('I', "world '", reactor->world_->name(), "': subscriber ", reactor->id_,
        " joined from ", context->peer());
    reactor->TrySend(absl::Now());
  }

  // Starts the next write if none is in flight and a message is due.
  void TrySend(absl::Time now) {
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finishing_ || id_ == 0) return;
      update_ = world_->replicator().Next(id_, now);
      if (update_ == nullptr) return;
      writing_ = true;
      write_started_ = now;
      if (update_->message().frames_skipped() > 0 && !warned_slow_) {
        warned_slow_ = true;  // Once per stream: a slow link is not news twice.
        Log('W', "world '", world_->name(), "': subscriber ", id_,
            " is slow, skipped ", update_->message().frames_skipped(),
            " frame(s)");
      }
    }
    // The slice references the shared encoding and keeps it alive for as long
    // as gRPC holds the bytes, which may outlast this write.
    const std::string& bytes = update_->encoded();
    grpc::Slice slice(const_cast<char*>(bytes.data()), bytes.size(),
                      &ReleaseOutgoing,
                      new std::shared_ptr<const Outgoing>(update_));
    buffer_ = grpc::ByteBuffer(&slice, 1);
    StartWrite(&buffer_);  // buffer_ is not touched again until OnWriteDone.
  }

  // A write stuck past the deadline cancels the stream.
  void CheckStuck(absl::Time now) {
    {
      absl::MutexLock lock(&mu_);
      if (!writing_ || cancelled_ || now - write_started_ <= write_timeout_)
        return;
      cancelled_ = true;
      Log('W', "world '", world_->name(), "': subscriber ", id_,
          " write stuck for ", absl::FormatDuration(now - write_started_),
          ", cancelling");
    }
    context_->TryCancel();
  }

  // Finishes with `status` as soon as no write is outstanding.
  void RequestFinish(const grpc::Status& status) {
    grpc::Status finish;
    {
      absl::MutexLock lock(&mu_);
      if (!finishing_) {
        finishing_ = true;
        finish_status_ = status;  // The first reason to finish is the one told.
      }
      if (writing_ || finished_) return;
      finished_ = true;
      finish = finish_status_;
    }
    Finish(finish);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
    }
    if (!ok) {
      RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
      return;
    }
    bool finishing;
    {
      absl::MutexLock lock(&mu_);
      finishing = finishing_;
    }
    if (finishing) {
      RequestFinish(grpc::Status::OK);  // Completes the finish already asked.
      return;
    }
    TrySend(absl::Now());
  }

  void OnCancel() override {
    RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    world_->replicator().Unsubscribe(id_);
    Log('I', "world '", world_->name(), "': subscriber ", id_, " left");
    self_.reset();  // May delete this: the last statement.
  }

 private:
  SubscribeReactor(grpc::CallbackServerContext* context,
                   std::shared_ptr<HostedWorld> world,
                   absl::Duration write_timeout)
      : context_(context),
        world_(std::move(world)),
        write_timeout_(write_timeout) {}

  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<HostedWorld> world_;
  const absl::Duration write_timeout_;
  std::shared_ptr<SubscribeReactor> self_;
  Replicator::SubscriptionId id_ =
      0;  // Set once, before any other thread sees it.

  absl::Mutex mu_;
  // The message of the write in flight (perhaps shared with other streams),
  // and the buffer that carries its encoding.
  std::shared_ptr<const Outgoing> update_;
  grpc::ByteBuffer buffer_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_slow_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
};

void StreamSink::Wake() {
  if (auto reactor = reactor_.lock()) reactor->TrySend(absl::Now());
}

void StreamSink::Poll(absl::Time now) {
  if (auto reactor = reactor_.lock()) {
    reactor->CheckStuck(now);
    reactor->TrySend(now);
  }
}

void StreamSink::End(const absl::Status& status) {
  if (auto reactor = reactor_.lock()) reactor->RequestFinish(ToGrpc(status));
}

// A reactor that only finishes, for streams refused at the start.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* XformService::CreateWorld(
    grpc::CallbackServerContext* context, const v1::CreateWorldRequest* request,
    v1::WorldInfo* response) {
  absl::StatusOr<std::shared_ptr<HostedWorld>> world = host_.Create(*request);
  if (world.ok()) {
    *response = (*world)->Info();
    Log('I', "world '", request->name(), "' created (",
        v1::FrameMode_Name(response->mode()), ", ", response->tick_hz(),
        " Hz)");
  }
  return Done(context, world.status());
}

grpc::ServerUnaryReactor* XformService::ListWorlds(
    grpc::CallbackServerContext* context, const v1::ListWorldsRequest*,
    v1::ListWorldsResponse* response) {
  for (const auto& world : host_.List())
    *response->add_worlds() = world->Info();
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* XformService::GetWorld(
    grpc::CallbackServerContext* context, const v1::GetWorldRequest* request,
    v1::WorldInfo* response) {
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_.Get(request->name());
  if (world.ok()) *response = (*world)->Info();
  return Done(context, world.status());
}

grpc::ServerUnaryReactor* XformService::DeleteWorld(
    grpc::CallbackServerContext* context, const v1::DeleteWorldRequest* request,
    v1::DeleteWorldResponse*) {
  const absl::Status status = host_.Delete(request->name());
  if (status.ok()) Log('I', "world '", request->name(), "' deleted");
  return Done(context, status);
}

grpc::ServerUnaryReactor* XformService::Apply(
    grpc::CallbackServerContext* context, const v1::ApplyRequest* request,
    v1::ApplyResponse* response) {
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_.Get(request->world());
  if (!world.ok()) return Done(context, world.status());
  absl::StatusOr<uint64_t> frame = (*world)->Apply(*request, host_.limits());
  if (frame.ok()) response->set_frame(*frame);
  return Done(context, frame.status());
}

grpc::ServerBidiReactor<v1::ApplyRequest, v1::ApplyResponse>*
XformService::ApplyStream(grpc::CallbackServerContext*) {
  return new ApplyStreamReactor(host_);
}

grpc::ServerUnaryReactor* XformService::Read(
    grpc::CallbackServerContext* context, const v1::ReadRequest* request,
    v1::ReadResponse* response) {
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_.Get(request->world());
  if (!world.ok()) return Done(context, world.status());
  return Done(context, (*world)->Read(*request, host_.limits(), response));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* XformService::Subscribe(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request) {
  v1::SubscribeRequest parsed;
  grpc::ByteBuffer copy(*raw_request);  // Deserialize takes a mutable buffer.
  if (!grpc::SerializationTraits<v1::SubscribeRequest>::Deserialize(&copy,
                                                                    &parsed)
           .ok()) {
    return new RefusedStream(
        absl::InvalidArgumentError("malformed SubscribeRequest"));
  }
  const v1::SubscribeRequest* request = &parsed;
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_.Get(request->world());
  if (!world.ok()) return new RefusedStream(world.status());
  if (!(request->max_rate_hz() >= 0) || request->max_rate_hz() > 1e6) {
    return new RefusedStream(
        absl::InvalidArgumentError("max_rate_hz must be in [0, 1e6]"));
  }
  for (const auto* ids : {&request->entity(), &request->subtree()}) {
    if (std::find(ids->begin(), ids->end(), kNoEntity) != ids->end()) {
      return new RefusedStream(
          absl::InvalidArgumentError("entity id 0 in a subscription filter"));
    }
  }
  if ((*world)->replicator().subscribers() >= host_.limits().max_subscribers) {
    return new RefusedStream(absl::ResourceExhaustedError(
        absl::StrCat("world '", request->world(), "' has its limit of ",
                     host_.limits().max_subscribers, " subscribers")));
  }
  SubscriptionOptions options;
  options.entities.assign(request->entity().begin(), request->entity().end());
  options.subtrees.assign(request->subtree().begin(), request->subtree().end());
  options.max_rate_hz = request->max_rate_hz();
  options.no_echo_client_id = request->no_echo_client_id();
  // Snapshot chunks and deltas stay a few MB whatever the limit: a single
  // huge write would hold the stream (and its write deadline) for seconds.
  options.max_message_bytes =
      std::min<size_t>(host_.limits().max_message_bytes / 2, 4 << 20);
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor = nullptr;
  SubscribeReactor::Start(context, *std::move(world), std::move(options),
                          options_.write_timeout, &reactor);
  return reactor;
}

}  // namespace xform::server
