// Copyright 2026 The xform Authors.

#include "server/service/service.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/edge/peer_address.h"
#include "server/base/log.h"
#include "server/cluster/view/redirect.h"
#include "server/service/refusal_guard.h"
#include "server/service/request_reader.h"
#include "server/replication/region_filter.h"
#include "xform/subscriber_info.h"
#include "xform/v1/wire.h"

namespace xform::server {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

namespace {

// Counts a call in progress for as long as it lives, so that shutdown can
// tell when calls have drained.
class CallHold {
 public:
  explicit CallHold(std::atomic<int>& count) : count_(&count) {
    count_->fetch_add(1);
  }
  CallHold(const CallHold&) = delete;
  CallHold& operator=(const CallHold&) = delete;
  ~CallHold() { count_->fetch_sub(1); }

 private:
  std::atomic<int>* count_;
};

// Who is calling, once the server is ready: UNAVAILABLE while --data_dir's
// worlds are being recovered (health says NOT_SERVING then too).
absl::StatusOr<Caller> Admit(const WorldHost& host, Gatekeeper& gatekeeper,
                             const grpc::CallbackServerContext& context,
                             absl::string_view method) {
  if (!host.ready()) {
    return absl::UnavailableError(
        "the server is recovering its worlds from disk; try again shortly");
  }
  return gatekeeper.Authenticate(context, method);
}

// The world `name` for a caller with `role` on it: PERMISSION_DENIED before
// the look-up, so that a refusal says nothing of whether the world exists;
// then NOT_FOUND.
absl::StatusOr<std::shared_ptr<HostedWorld>> WorldFor(
    const WorldHost& host, const Caller& caller, Role role,
    absl::string_view name, absl::string_view method) {
  if (absl::Status allowed = caller.Require(role, name, method);
      !allowed.ok()) {
    return allowed;
  }
  return host.Get(name);
}

// A refusal that names where to go instead, or says to wait (redirect.h):
// said in the trailing metadata too, for clients to follow without parsing
// text.
void AddRedirect(grpc::CallbackServerContext& context,
                 const absl::Status& status) {
  if (const std::optional<Redirect> to = RedirectOf(status)) {
    context.AddTrailingMetadata(kOwnerNodeMetadata, to->node);
    context.AddTrailingMetadata(kOwnerAddressMetadata, to->address);
  } else if (SaysTryAgain(status)) {
    context.AddTrailingMetadata(kTryAgainMetadata, "1");
  }
}

// What a caller is told of a world: its info, and in a cluster where it is
// written and served.
v1::WorldInfo InfoOf(const WorldHost& host, const HostedWorld& world) {
  v1::WorldInfo info = world.Info();
  if (const ClusterView* cluster = host.cluster()) {
    const PlacementView placement = cluster->Placement(world.name());
    v1::WorldPlacement& out = *info.mutable_placement();
    out.set_owner_node(placement.owner_node);
    out.set_owner_address(placement.owner_address);
    for (const std::string& node : placement.serving_nodes) {
      out.add_serving_nodes(node);
    }
    out.set_answered_by(cluster->node_name());
    out.set_unconfirmed_ms(static_cast<uint64_t>(
        absl::ToInt64Milliseconds(placement.unconfirmed)));
    out.set_wedged(placement.wedged);
    out.set_wedged_record(placement.wedged_record);
  }
  return info;
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const absl::Status& status) {
  AddRedirect(*context, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// Counts a call that ended with `status` against its caller (`caller`, or
// null before it was known) when it was refused (see refusal_guard.h).
void NoteRefusal(RefusalGuard* refusals,
                 const grpc::CallbackServerContext& context,
                 const absl::Status& status, const Caller* caller,
                 size_t request_bytes) {
  // A redirect (a write sent to a node that does not write the world) is
  // no fault of an honest client's.
  if (refusals == nullptr || !RefusalGuard::IsRefusal(status.code()) ||
      RedirectOf(status).has_value()) {
    return;
  }
  const bool credited =
      caller != nullptr && caller->credential->kind != Credential::Kind::kNone;
  refusals->Refused(credited ? absl::string_view(caller->name()) : "",
                    context.peer(), request_bytes, absl::Now());
}

// Done, once the refusal (if it is one) is counted.
grpc::ServerUnaryReactor* Done(RefusalGuard* refusals,
                               grpc::CallbackServerContext* context,
                               const absl::Status& status, const Caller* caller,
                               size_t request_bytes) {
  NoteRefusal(refusals, *context, status, caller, request_bytes);
  return Done(context, status);
}

// A unary call: parse (or refuse) the request, handle it, answer.
// The handler runs inline, so the call is counted until it has answered.
// The caller is authenticated first; the handler checks its role.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* Serve(std::atomic<int>& calls, const WorldHost& host,
                                Gatekeeper& gatekeeper, RefusalGuard* refusals,
                                absl::string_view method,
                                grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* bytes,
                                grpc::ByteBuffer* response_bytes,
                                Handler&& handle) {
  const CallHold hold(calls);
  const size_t request_bytes = bytes->Length();
  absl::StatusOr<Caller> caller = Admit(host, gatekeeper, *context, method);
  if (!caller.ok()) {
    return Done(refusals, context, caller.status(), nullptr, request_bytes);
  }
  Request request;
  if (absl::Status parsed = ParseRequest(*bytes, &request); !parsed.ok()) {
    return Done(refusals, context, parsed, &*caller, request_bytes);
  }
  Response response;
  const absl::Status status = handle(*caller, request, &response);
  if (status.ok()) SerializeResponse(response, response_bytes);
  return Done(refusals, context, status, &*caller, request_bytes);
}

// One write batch, Apply's or ApplyStream's, by `caller`: the frame it
// lands in. Refused before anything applies when the caller lacks the write
// role on its world or is over a write quota.
// The world's name goes to `world`, once the request parses.
absl::StatusOr<uint64_t> ApplyBatch(WorldHost& host, const Caller& caller,
                                    const grpc::ByteBuffer& bytes,
                                    std::string* world_name = nullptr) {
  v1::ApplyRequest request;
  if (absl::Status parsed =
          ParseApplyRequest(bytes, host.limits().max_commands, &request);
      !parsed.ok()) {
    return parsed;
  }
  if (world_name != nullptr) *world_name = request.world();
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      WorldFor(host, caller, kWrite, request.world(), "Apply");
  if (!world.ok()) return world.status();
  Limits limits = host.limits();
  if (caller.quotas().has_max_entities_per_world()) {
    limits.max_entities_per_world =
        std::min<size_t>(limits.max_entities_per_world,
                         caller.quotas().max_entities_per_world());
  }
  if (absl::Status rate =
          caller.usage->TakeWrite(caller.quotas(), v1::EntitiesNamed(request),
                                  caller.usage->clock().Now());
      !rate.ok()) {
    return rate;
  }
  return (*world)->Apply(request, limits);
}

}  // namespace

// ---------------------------------------------------------------------------
// ApplyStream: batches in order, one in flight; the first error ends it. Every
// status it ends with says which batches applied.

class ApplyStreamReactor;

// The open ApplyStreams, so that shutdown can end them.
class WriterRegistry {
 public:
  void Add(const std::shared_ptr<ApplyStreamReactor>& writer) {
    absl::MutexLock lock(&mu_);
    writers_.emplace(writer.get(), writer);
  }
  void Remove(ApplyStreamReactor* writer) {
    absl::MutexLock lock(&mu_);
    writers_.erase(writer);
  }
  void EndAll(const absl::Status& status);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<ApplyStreamReactor*, std::weak_ptr<ApplyStreamReactor>>
      writers_ ABSL_GUARDED_BY(mu_);
};

class ApplyStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Starts the stream; the reactor owns itself until OnDone().
  static grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Start(
      grpc::CallbackServerContext* context, WorldHost& host,
      WriterRegistry& registry, RefusalGuard* refusals, std::atomic<int>& calls,
      const Caller& caller) {
    auto reactor = std::shared_ptr<ApplyStreamReactor>(new ApplyStreamReactor(
        context, host, registry, refusals, calls, caller));
    // Counted against the principal's writers; rechecked at each reload.
    absl::StatusOr<std::unique_ptr<Usage::Ticket>> ticket =
        caller.usage->Open(Usage::Stream::kWriter, caller,
                           [weak = std::weak_ptr<ApplyStreamReactor>(reactor)](
                               absl::StatusOr<Caller> now) {
                             if (auto writer = weak.lock())
                               writer->Recheck(std::move(now));
                           });
    reactor->self_ = reactor;
    if (!ticket.ok()) {
      reactor->FinishWith(ToGrpc(ticket.status()));
      return reactor.get();
    }
    reactor->ticket_ = *std::move(ticket);
    registry.Add(reactor);
    reactor->StartRead(&reactor->request_bytes_);
    return reactor.get();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client closed its side: every batch was answered.
      FinishWith(grpc::Status::OK);
      return;
    }
    bool apply;
    Caller caller;
    {
      absl::MutexLock lock(&mu_);
      // Shutdown may have come while the batch was read.
      apply = state_ == State::kReading;
      if (apply) state_ = State::kApplying;
      caller = caller_;
    }
    if (!apply) {
      FinishWith(grpc::Status::OK);
      return;
    }
    const uint64_t index = batches_;
    std::string world;
    const absl::StatusOr<uint64_t> frame =
        ApplyBatch(host_, caller, request_bytes_, &world);
    if (!frame.ok()) {
      NoteRefusal(refusals_, *context_, frame.status(), &caller,
                  request_bytes_.Length());
      AddRedirect(*context_, frame.status());
      FinishWith(ToGrpc(absl::Status(
          frame.status().code(),
          absl::StrCat("batch ", index, " not applied (the ", index,
                       " before it applied): ", frame.status().message()))));
      return;
    }
    ++batches_;
    {
      absl::MutexLock lock(&mu_);
      worlds_written_.insert(std::move(world));
    }
    v1::ApplyResponse response;
    response.set_frame(*frame);
    SerializeResponse(response, &response_bytes_);
    StartWrite(&response_bytes_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishWith(grpc::Status(
          grpc::StatusCode::CANCELLED,
          absl::StrCat("stream broken: ", batches_.load(),
                       " batches applied, the last one's answer unsent")));
      return;
    }
    bool ending;
    {
      absl::MutexLock lock(&mu_);
      ending = state_ != State::kApplying;
      if (!ending) state_ = State::kReading;
    }
    if (ending) {
      FinishWith(grpc::Status::OK);
      return;
    }
    // Should End() come before the read is started, Finish() has ended the
    // call and the read completes with ok = false.
    StartRead(&request_bytes_);
  }

  // Shutdown: ends the stream with `status` once the batch in flight, if any,
  // is answered; at once when the stream is waiting for the next batch.
  void End(const absl::Status& status) {
    bool now;
    {
      absl::MutexLock lock(&mu_);
      if (state_ == State::kEnding || state_ == State::kDone) return;
      shutdown_ = status;
      now = state_ == State::kReading;
      if (!now) state_ = State::kEnding;
    }
    if (now) FinishWith(grpc::Status::OK);
  }

  // A reload: ends the stream as End() does when its credentials are no
  // longer taken, or its principal lost the write role on a world it wrote
  // to; otherwise its later batches are checked against `caller`.
  void Recheck(absl::StatusOr<Caller> caller) {
    if (!caller.ok()) {
      End(caller.status());
      return;
    }
    absl::Status allowed;
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& world : worlds_written_) {
        allowed = caller->Require(kWrite, world, "ApplyStream");
        if (!allowed.ok()) break;
      }
      caller_ = *std::move(caller);
    }
    if (!allowed.ok()) End(allowed);
  }

  void OnDone() override {
    registry_.Remove(this);
    self_.reset();  // May delete this: the last statement.
  }

 private:
  ApplyStreamReactor(grpc::CallbackServerContext* context, WorldHost& host,
                     WriterRegistry& registry, RefusalGuard* refusals,
                     std::atomic<int>& calls, Caller caller)
      : context_(context),
        host_(host),
        registry_(registry),
        refusals_(refusals),
        hold_(calls),
        caller_(std::move(caller)) {}

  // Finishes once: with End()'s status when shutdown asked first. gRPC may run
  // OnDone inline, so nothing follows the Finish().
  void FinishWith(const grpc::Status& status) {
    grpc::Status finish;
    {
      absl::MutexLock lock(&mu_);
      if (state_ == State::kDone) return;
      state_ = State::kDone;
      // The batch count is read here, once the last batch has been answered.
      finish =
          shutdown_.ok()
              ? status
              : ToGrpc(absl::Status(
                    shutdown_.code(),
                    absl::StrCat(shutdown_.message(), "; ", batches_.load(),
                                 " batches applied, none after")));
    }
    Finish(finish);
  }

  grpc::CallbackServerContext* const context_;
  WorldHost& host_;
  WriterRegistry& registry_;
  RefusalGuard* const refusals_;
  const CallHold hold_;
  std::unique_ptr<Usage::Ticket> ticket_;
  std::shared_ptr<ApplyStreamReactor> self_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
  // Batches applied. Written by the stream's reactions (one at a time), read
  // when finishing, which shutdown may do from its own thread.
  std::atomic<uint64_t> batches_ = 0;

  // The stream's state: one batch in flight at most.
  //   kReading --batch read--> kApplying --answered--> kReading
  //   kApplying --End()--> kEnding --answered--> kDone
  //   kReading --End(), or the client done--> kDone;  any --error--> kDone
  enum class State {
    kReading,   // Waiting for the next batch.
    kApplying,  // A batch read and not yet answered.
    kEnding,    // End() came while applying: finish once it is answered.
    kDone,      // Finish() called.
  };
  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kReading;
  // Who the stream's batches are checked as: swapped by a reload.
  Caller caller_ ABSL_GUARDED_BY(mu_);
  // The worlds it has written to, for a reload to recheck.
  absl::flat_hash_set<std::string> worlds_written_ ABSL_GUARDED_BY(mu_);
  absl::Status shutdown_ ABSL_GUARDED_BY(mu_);  // Set by End().
};

void WriterRegistry::EndAll(const absl::Status& status) {
  std::vector<std::shared_ptr<ApplyStreamReactor>> writers;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [raw, weak] : writers_) {
      if (auto writer = weak.lock()) writers.push_back(std::move(writer));
    }
  }
  for (const auto& writer : writers) writer->End(status);
}

namespace {

// ---------------------------------------------------------------------------
// Subscribe: one write in flight; the next message is pulled from the
// replicator when the write completes or when the replicator wakes the sink.
// A message made already is written at once, from whichever thread that is;
// one that must be made is made on the BuildPool, never on gRPC's threads
// or a world's ticker.
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
  void Describe(absl::Time now, SubscriberInfo& info) const override;

 private:
  const std::weak_ptr<SubscribeReactor> reactor_;
};

// Frees the reference a shared encoding's slice holds.
void ReleaseOutgoing(void* keep) {
  delete static_cast<std::shared_ptr<const Outgoing>*>(keep);
}

class SubscribeReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
      public WriteWatchdog::Stream,
      public std::enable_shared_from_this<SubscribeReactor> {
 public:
  // Starts the stream; the reactor owns itself until OnDone().
  static void Start(grpc::CallbackServerContext* context,
                    std::shared_ptr<HostedWorld> world,
                    SubscriptionOptions options, WriteWatchdog& watchdog,
                    BuildPool& pool, std::atomic<int>& calls,
                    const Caller& caller,
                    grpc::ServerWriteReactor<grpc::ByteBuffer>** out) {
    // Folds by its own choice, or its principal's: not worth a warning.
    const bool folds_by_choice =
        options.max_rate_hz > 0 || caller.quotas().has_bytes_out_per_second();
    auto reactor = std::shared_ptr<SubscribeReactor>(new SubscribeReactor(
        context, std::move(world), pool, calls, caller, folds_by_choice));
    reactor->self_ = reactor;
    *out = reactor.get();
    // Counted against the principal's subscriptions; rechecked at each
    // reload.
    absl::StatusOr<std::unique_ptr<Usage::Ticket>> ticket =
        caller.usage->Open(Usage::Stream::kSubscription, caller,
                           [weak = std::weak_ptr<SubscribeReactor>(reactor)](
                               absl::StatusOr<Caller> now) {
                             if (auto stream = weak.lock()) {
                               stream->Recheck(std::move(now));
                             }
                           });
    if (!ticket.ok()) {
      reactor->RequestFinish(ToGrpc(ticket.status()));
      return;
    }
    reactor->ticket_ = *std::move(ticket);
    watchdog.Watch(reactor);
    reactor->Join(std::move(options));
  }

  // One delivery (see replicator.h): starts the next write if none is in
  // flight and a message is due, or has the pool make it (`made`: the
  // pool's own call, which makes it).
  void TrySend(absl::Time now, bool made = false) {
    std::shared_ptr<const Principal> charged;  // Whose quota it is sent on.
    {
      absl::MutexLock lock(&mu_);
      if (made) Advance(Event::kMade);
      if (state_ != State::kIdle) return;
      // Over its principal's bytes_out_per_second: the replicator folds
      // frames meanwhile, and the world's poller calls again within 5 ms.
      if (!caller_.usage->MaySend(caller_.quotas(),
                                  caller_.usage->clock().Now())) {
        return;
      }
      if (caller_.quotas().has_bytes_out_per_second()) {
        charged = caller_.principal;
      }
      bool must_make = false;
      update_ = made ? world_->replicator().Next(id_, now)
                     : world_->replicator().NextIfMade(id_, now, &must_make);
      if (update_ == nullptr) {
        if (must_make) {
          Advance(Event::kMustMake);
          pool_.Post([self = shared_from_this()] {
            self->TrySend(absl::Now(), /*made=*/true);
          });
        }
        return;
      }
      Advance(Event::kWrite);
      write_started_ = now;
      WarnIfSlowLocked();
    }
    // The slice references the shared encoding and keeps it alive for as long
    // as gRPC holds the bytes, which may outlast this write.
    const absl::string_view bytes = update_->encoded();
    if (charged != nullptr) {
      usage_->ChargeSent(charged->quotas, bytes.size(), usage_->clock().Now());
    }
    world_->replicator().CountWritten(bytes.size());
    bytes_written_.fetch_add(bytes.size(), std::memory_order_relaxed);
    grpc::Slice slice(const_cast<char*>(bytes.data()), bytes.size(),
                      &ReleaseOutgoing,
                      new std::shared_ptr<const Outgoing>(update_));
    buffer_ = grpc::ByteBuffer(&slice, 1);
    StartWrite(&buffer_);  // buffer_ is not touched again until OnWriteDone.
  }

  void CancelIfStuck(absl::Time now, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      if (state_ != State::kWriting || now - write_started_ <= timeout) return;
      Advance(Event::kStuck);
      Log('W', "world '", world_->name(), "': subscriber ", id_,
          " write stuck for ", absl::FormatDuration(now - write_started_),
          ", cancelling");
    }
    world_->replicator().CountCutOff();
    context_->TryCancel();
  }

  // Finishes with `status`, unless another reason came first, as soon as no
  // write is outstanding.
  void RequestFinish(const grpc::Status& status) {
    grpc::Status finish;
    {
      absl::MutexLock lock(&mu_);
      if (!finish_status_) finish_status_ = status;
      if (!Advance(Event::kEnd)) return;
      finish = *finish_status_;
    }
    Finish(finish);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!ok && !finish_status_) {
        finish_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
      }
      if (Advance(ok ? Event::kWritten : Event::kBroken)) {
        finish = *finish_status_;
      }
    }
    if (finish) {
      Finish(*finish);
      return;
    }
    TrySend(absl::Now());
  }

  // A reload: ends the stream when its credentials are no longer taken or
  // its principal lost the read role on the world; otherwise it is sent on
  // `caller`'s quotas from now on.
  void Recheck(absl::StatusOr<Caller> caller) {
    if (!caller.ok()) {
      RequestFinish(ToGrpc(caller.status()));
      return;
    }
    if (absl::Status allowed =
            caller->Require(kRead, world_->name(), "Subscribe");
        !allowed.ok()) {
      RequestFinish(ToGrpc(allowed));
      return;
    }
    absl::MutexLock lock(&mu_);
    caller_ = *std::move(caller);
  }

  // Its stream's part of ListSubscribers' entry (StreamSink::Describe).
  void Describe(absl::Time now, SubscriberInfo& info) {
    info.peer = peer_;
    info.bytes = bytes_written_.load(std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    info.principal = caller_.name();
    if (state_ == State::kWriting || state_ == State::kStuck ||
        state_ == State::kEnding) {
      info.write_outstanding = now - write_started_;
    }
  }

  void OnCancel() override {
    RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    Replicator::SubscriptionId id;
    {
      absl::MutexLock lock(&mu_);
      id = id_;
      gone_ = true;  // A Join still under way unsubscribes itself.
    }
    if (id != 0) world_->replicator().Unsubscribe(id);
    Log('I', "world '", world_->name(), "': subscriber ", id, " left");
    self_.reset();  // May delete this: the last statement.
  }

 private:
  // The stream's state: at most one write in flight, and Finish() called
  // once, when none is. Advance() is the one place it changes.
  //
  //   kJoining --joined--> kIdle --must make--> kMaking --made--> kIdle
  //   kIdle --write--> kWriting --written--> kIdle
  //   kWriting --stuck (the watchdog cancels)--> kStuck
  //   kWriting, kStuck --end--> kEnding --written or broken--> kDone
  //   kJoining, kIdle, kMaking --end--> kDone;  kWriting, kStuck --broken-->
  //   kDone
  enum class State {
    kJoining,  // Not subscribed yet: nothing to send.
    kIdle,     // Nothing in flight: TrySend may start a write, or a make.
    kMaking,   // The pool makes the next message (TrySend(made = true)).
    kWriting,  // A write in flight.
    kStuck,    // A write in flight past --write_timeout_ms, cancelled.
    kEnding,   // A finish asked for waits for the write in flight.
    kDone,     // Finish() called.
  };
  enum class Event {
    kJoined,
    kMustMake,
    kMade,
    kWrite,
    kWritten,
    kBroken,
    kStuck,
    kEnd,
  };
  // Moves to the state after `event` (an event the state does not take
  // changes nothing). True when that is kDone, just now: the caller then
  // calls Finish(), without the lock (gRPC may run OnDone inline).
  bool Advance(Event event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const State before = state_;
    switch (event) {
      case Event::kJoined:
        if (state_ == State::kJoining) state_ = State::kIdle;
        break;
      case Event::kMustMake:
        if (state_ == State::kIdle) state_ = State::kMaking;
        break;
      case Event::kMade:
        if (state_ == State::kMaking) state_ = State::kIdle;
        break;
      case Event::kWrite:
        if (state_ == State::kIdle) state_ = State::kWriting;
        break;
      case Event::kStuck:
        if (state_ == State::kWriting) state_ = State::kStuck;
        break;
      case Event::kWritten:
        if (state_ == State::kWriting || state_ == State::kStuck) {
          state_ = State::kIdle;
        } else if (state_ == State::kEnding) {
          state_ = State::kDone;
        }
        break;
      case Event::kBroken:
        if (state_ == State::kWriting || state_ == State::kStuck ||
            state_ == State::kEnding) {
          state_ = State::kDone;
        }
        break;
      case Event::kEnd:
        if (state_ == State::kWriting || state_ == State::kStuck) {
          state_ = State::kEnding;
        } else if (state_ != State::kEnding) {
          state_ = State::kDone;
        }
        break;
    }
    return state_ == State::kDone && before != State::kDone;
  }

  SubscribeReactor(grpc::CallbackServerContext* context,
                   std::shared_ptr<HostedWorld> world, BuildPool& pool,
                   std::atomic<int>& calls, const Caller& caller,
                   bool folds_by_choice)
      : context_(context),
        peer_(PeerAddress(context->peer())),
        world_(std::move(world)),
        pool_(pool),
        hold_(calls),
        usage_(caller.usage),
        folds_by_choice_(folds_by_choice),
        caller_(caller) {}

  // Subscribes, then sends what is due.
  void Join(SubscriptionOptions options) {
    const Replicator::SubscriptionId id = world_->replicator().Subscribe(
        std::move(options), std::make_shared<StreamSink>(shared_from_this()));
    // Before the first write sends the initial metadata: the id
    // UpdateSubscription names.
    context_->AddInitialMetadata(v1::kSubscriptionIdMetadata, absl::StrCat(id));
    bool gone;
    {
      absl::MutexLock lock(&mu_);
      id_ = id;
      gone = gone_;
      Advance(Event::kJoined);
    }
    if (gone) {  // Cancelled meanwhile, and OnDone has run.
      world_->replicator().Unsubscribe(id);
      return;
    }
    Log('I', "world '", world_->name(), "': subscriber ", id, " joined from ",
        peer_);
    TrySend(absl::Now());
  }

  // A message folding frames the subscriber did not choose to fold: logged
  // once per stream (a slow link is not news twice).
  void WarnIfSlowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (update_->header().frames_skipped == 0 || folds_by_choice_ ||
        warned_slow_) {
      return;
    }
    warned_slow_ = true;
    Log('W', "world '", world_->name(), "': subscriber ", id_,
        " is slow, skipped ", update_->header().frames_skipped, " frame(s)");
  }

  grpc::CallbackServerContext* const context_;
  const std::string peer_;
  const std::shared_ptr<HostedWorld> world_;
  BuildPool& pool_;
  const CallHold hold_;
  // Its principal's: the same through reloads (a principal by name).
  const std::shared_ptr<Usage> usage_;
  const bool folds_by_choice_;
  std::unique_ptr<Usage::Ticket> ticket_;  // Set once, before it subscribes.
  std::shared_ptr<SubscribeReactor> self_;

  std::atomic<uint64_t> bytes_written_ = 0;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kJoining;
  Replicator::SubscriptionId id_ ABSL_GUARDED_BY(mu_) = 0;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;  // OnDone has run.
  // Whose bytes_out_per_second its messages take: swapped by a reload.
  Caller caller_ ABSL_GUARDED_BY(mu_);
  // The message of the write in flight (perhaps shared with other streams),
  // and the buffer that carries its encoding.
  std::shared_ptr<const Outgoing> update_;
  grpc::ByteBuffer buffer_;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  bool warned_slow_ ABSL_GUARDED_BY(mu_) = false;
};

void StreamSink::Wake() {
  if (auto reactor = reactor_.lock()) reactor->TrySend(absl::Now());
}

void StreamSink::Poll(absl::Time now) {
  if (auto reactor = reactor_.lock()) reactor->TrySend(now);
}

void StreamSink::End(const absl::Status& status) {
  if (auto reactor = reactor_.lock()) reactor->RequestFinish(ToGrpc(status));
}

void StreamSink::Describe(absl::Time now, SubscriberInfo& info) const {
  if (auto reactor = reactor_.lock()) reactor->Describe(now, info);
}

// Reactors that only finish, for streams refused at the start.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};
class RefusedBidiStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedBidiStream(const absl::Status& status) {
    Finish(ToGrpc(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

XformService::XformService(WorldHost& host, ServiceOptions options)
    : host_(host),
      options_(std::move(options)),
      gatekeeper_(
          options_.gatekeeper != nullptr
              ? options_.gatekeeper
              : std::make_shared<Gatekeeper>(AccessPolicy::OpenToAll())),
      refusals_(options_.refusal_guard.get()),
      region_move_work_(host_.limits().max_region_move_entities_per_second,
                        "region moves' entities judged",
                        "--max_region_move_entities_per_second"),
      writers_(std::make_unique<WriterRegistry>()),
      watchdog_(std::make_unique<WriteWatchdog>(options_.write_timeout)),
      build_pool_(std::make_unique<BuildPool>(options_.build_threads)) {}

XformService::~XformService() = default;

void XformService::EndAllStreams(const absl::Status& status) {
  writers_->EndAll(status);
  host_.EndAllStreams(status);
}

grpc::ServerUnaryReactor* XformService::CreateWorld(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::CreateWorldRequest, v1::WorldInfo>(
      active_calls_, host_, *gatekeeper_, refusals_, "CreateWorld", context,
      request, response,
      [&](const Caller& caller, const v1::CreateWorldRequest& create,
          v1::WorldInfo* info) {
        if (absl::Status allowed =
                caller.Require(kAdmin, create.name(), "CreateWorld");
            !allowed.ok()) {
          return allowed;
        }
        absl::MutexLock lock(&create_mu_);
        if (caller.quotas().has_max_worlds_owned()) {
          size_t owned = 0;
          for (const auto& world : host_.List()) {
            owned += world->owner() == caller.name();
          }
          if (owned >= caller.quotas().max_worlds_owned()) {
            return caller.usage->Refused(
                "CreateWorld",
                absl::ResourceExhaustedError(absl::StrCat(
                    "principal '", caller.name(), "' owns its quota of ",
                    caller.quotas().max_worlds_owned(),
                    " worlds (max_worlds_owned)")));
          }
        }
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            host_.Create(create, caller.name());
        if (!world.ok()) return world.status();
        *info = InfoOf(host_, **world);
        Log('I', "world '", create.name(), "' created (",
            v1::FrameMode_Name(info->mode()), ", ", info->tick_hz(),
            " Hz) by principal '", caller.name(), "'");
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::ListWorlds(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ListWorldsRequest, v1::ListWorldsResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "ListWorlds", context,
      request, response,
      [&](const Caller& caller, const v1::ListWorldsRequest&,
          v1::ListWorldsResponse* list) {
        // Only what it may read: the rest it is not told exist.
        for (const auto& world : host_.List()) {
          if (caller.principal->Allows(kRead, world->name())) {
            *list->add_worlds() = InfoOf(host_, *world);
          }
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::GetWorld(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::GetWorldRequest, v1::WorldInfo>(
      active_calls_, host_, *gatekeeper_, refusals_, "GetWorld", context,
      request, response,
      [&](const Caller& caller, const v1::GetWorldRequest& get,
          v1::WorldInfo* info) {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            WorldFor(host_, caller, kRead, get.name(), "GetWorld");
        if (!world.ok()) return world.status();
        *info = InfoOf(host_, **world);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::DeleteWorld(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::DeleteWorldRequest, v1::DeleteWorldResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "DeleteWorld", context,
      request, response,
      [&](const Caller& caller, const v1::DeleteWorldRequest& del,
          v1::DeleteWorldResponse*) {
        if (absl::Status allowed =
                caller.Require(kAdmin, del.name(), "DeleteWorld");
            !allowed.ok()) {
          return allowed;
        }
        absl::Status status = host_.Delete(del.name());
        if (status.ok()) {
          Log('I', "world '", del.name(), "' deleted by principal '",
              caller.name(), "'");
        }
        return status;
      });
}

grpc::ServerUnaryReactor* XformService::ListSubscribers(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ListSubscribersRequest, v1::ListSubscribersResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "ListSubscribers", context,
      request, response,
      [&](const Caller& caller, const v1::ListSubscribersRequest& list,
          v1::ListSubscribersResponse* page) {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            WorldFor(host_, caller, kAdmin, list.world(), "ListSubscribers");
        if (!world.ok()) return world.status();
        const size_t page_size =
            list.page_size() == 0 || list.page_size() > kMaxSubscribersPerPage
                ? kMaxSubscribersPerPage
                : list.page_size();
        // One more than the page, to tell whether another follows.
        std::vector<SubscriberInfo> subscribers =
            (*world)->replicator().Subscribers(list.after_id(), page_size + 1);
        if (subscribers.size() > page_size) {
          subscribers.resize(page_size);
          page->set_next_after_id(subscribers.back().id);
        }
        for (const SubscriberInfo& info : subscribers) {
          v1::SubscriberInfoToWire(info, page->add_subscribers());
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::Apply(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes,
    grpc::ByteBuffer* response_bytes) {
  const CallHold hold(active_calls_);
  const size_t request_bytes = bytes->Length();
  absl::StatusOr<Caller> caller = Admit(host_, *gatekeeper_, *context, "Apply");
  if (!caller.ok()) {
    return Done(refusals_, context, caller.status(), nullptr, request_bytes);
  }
  // An Apply in progress is a writer, as an ApplyStream is.
  absl::StatusOr<std::unique_ptr<Usage::Ticket>> writing =
      caller->usage->Open(Usage::Stream::kWriter, *caller, nullptr);
  if (!writing.ok()) {
    return Done(refusals_, context, writing.status(), &*caller, request_bytes);
  }
  absl::StatusOr<uint64_t> frame = ApplyBatch(host_, *caller, *bytes);
  if (!frame.ok()) {
    return Done(refusals_, context, frame.status(), &*caller, request_bytes);
  }
  v1::ApplyResponse response;
  response.set_frame(*frame);
  SerializeResponse(response, response_bytes);
  return Done(context, absl::OkStatus());
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
XformService::ApplyStream(grpc::CallbackServerContext* context) {
  absl::StatusOr<Caller> caller =
      Admit(host_, *gatekeeper_, *context, "ApplyStream");
  if (!caller.ok()) {
    NoteRefusal(refusals_, *context, caller.status(), nullptr, 0);
    return new RefusedBidiStream(caller.status());
  }
  return ApplyStreamReactor::Start(context, host_, *writers_, refusals_,
                                   active_calls_, *std::move(caller));
}

grpc::ServerUnaryReactor* XformService::Read(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ReadRequest, v1::ReadResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "Read", context, request,
      response,
      [&](const Caller& caller, const v1::ReadRequest& read,
          v1::ReadResponse* out) {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            WorldFor(host_, caller, kRead, read.world(), "Read");
        if (!world.ok()) return world.status();
        if (absl::Status room = caller.usage->CheckSend(
                caller.quotas(), caller.usage->clock().Now());
            !room.ok()) {
          return room;
        }
        absl::Status status = (*world)->Read(read, host_.limits(), out);
        if (status.ok() && caller.quotas().has_bytes_out_per_second()) {
          caller.usage->ChargeSent(caller.quotas(), out->ByteSizeLong(),
                                   caller.usage->clock().Now());
        }
        return status;
      });
}

namespace {

// RESOURCE_EXHAUSTED for a region whose cells are past --max_region_cells.
absl::Status CheckRegionCells(const std::optional<Region>& region,
                              const Limits& limits) {
  if (!region) return absl::OkStatus();
  const uint64_t cells = CellsOfRegion(*region, limits.region_cell_size);
  if (cells <= limits.max_region_cells) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "region ", region->ToString(), " covers ", cells, " cells of ",
      limits.region_cell_size, " units, past the limit of ",
      limits.max_region_cells, " (--max_region_cells)"));
}

// A valid request's subscription, as the replicator takes it.
SubscriptionOptions SubscriptionOf(const v1::SubscribeRequest& request,
                                   const Limits& limits) {
  SubscriptionOptions options;
  options.entities.assign(request.entity().begin(), request.entity().end());
  options.subtrees.assign(request.subtree().begin(), request.subtree().end());
  options.max_rate_hz = request.max_rate_hz();
  options.no_echo_client_id = request.no_echo_client_id();
  options.compact_precision = v1::CompactPrecision(request);
  options.accepts_kept_view_snapshots = request.accepts_kept_view_snapshots();
  options.resume_from_frame = request.resume_from_frame();
  options.resume_history = request.resume_history();
  options.region = *v1::RegionFromWire(request);  // Checked.
  // Snapshot chunks and deltas stay a few MB whatever the limit, and under
  // half of it.
  options.part_budget_bytes =
      std::min<size_t>(limits.max_message_bytes / 2, kDefaultPartBudgetBytes);
  return options;
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* XformService::Subscribe(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  absl::StatusOr<Caller> caller =
      Admit(host_, *gatekeeper_, *context, "Subscribe");
  const auto refuse = [&](const absl::Status& status) {
    NoteRefusal(refusals_, *context, status, caller.ok() ? &*caller : nullptr,
                bytes->Length());
    return new RefusedStream(status);
  };
  if (!caller.ok()) return refuse(caller.status());
  v1::SubscribeRequest request;
  if (absl::Status parsed = ParseRequest(*bytes, &request); !parsed.ok()) {
    return refuse(parsed);
  }
  if (absl::Status allowed =
          caller->Require(kRead, request.world(), "Subscribe");
      !allowed.ok()) {
    return refuse(allowed);
  }
  const Limits& limits = host_.limits();
  if (absl::Status valid =
          v1::CheckSubscribeRequest(request, limits.max_filter_ids);
      !valid.ok()) {
    return refuse(valid);
  }
  if (absl::Status cells =
          CheckRegionCells(*v1::RegionFromWire(request), limits);
      !cells.ok()) {
    return refuse(cells);
  }
  const size_t filter_ids =
      static_cast<size_t>(request.entity_size()) + request.subtree_size();
  if (caller->quotas().has_max_filter_ids() &&
      filter_ids > caller->quotas().max_filter_ids()) {
    return refuse(caller->usage->Refused(
        "Subscribe",
        absl::ResourceExhaustedError(absl::StrCat(
            "principal '", caller->name(), "' may name at most ",
            caller->quotas().max_filter_ids(),
            " entities and subtrees in a filter (max_filter_ids)"))));
  }
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_.Get(request.world());
  if (!world.ok()) return refuse(world.status());
  if ((*world)->replicator().subscribers() >= limits.max_subscribers) {
    return refuse(absl::ResourceExhaustedError(
        absl::StrCat("world '", (*world)->name(), "' has its limit of ",
                     limits.max_subscribers, " subscribers")));
  }
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor = nullptr;
  SubscriptionOptions options = SubscriptionOf(request, limits);
  options.owner = caller->name();
  SubscribeReactor::Start(context, *std::move(world), std::move(options),
                          *watchdog_, *build_pool_, active_calls_, *caller,
                          &reactor);
  return reactor;
}

grpc::ServerUnaryReactor* XformService::UpdateSubscription(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::UpdateSubscriptionRequest, v1::UpdateSubscriptionResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "UpdateSubscription",
      context, request, response,
      [&](const Caller& caller, const v1::UpdateSubscriptionRequest& update,
          v1::UpdateSubscriptionResponse*) -> absl::Status {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world = WorldFor(
            host_, caller, kRead, update.world(), "UpdateSubscription");
        if (!world.ok()) return world.status();
        if (!update.has_region()) {
          return absl::InvalidArgumentError(
              "UpdateSubscription names no region");
        }
        absl::StatusOr<Region> region = v1::RegionFromWire(update.region());
        if (!region.ok()) return region.status();
        const Limits& limits = host_.limits();
        if (absl::Status cells = CheckRegionCells(*region, limits);
            !cells.ok()) {
          return cells;
        }
        const absl::Time now = caller.usage->clock().Now();
        const bool credited =
            caller.credential->kind != Credential::Kind::kNone;
        return (*world)->replicator().MoveRegion(
            update.subscription_id(), caller.name(), *region,
            limits.max_region_moves_hz, now, [&](size_t entities) {
              return region_move_work_.Take(
                  credited ? absl::string_view(caller.name()) : "",
                  context->peer(), static_cast<double>(entities), now);
            });
      });
}

grpc::ServerUnaryReactor* XformService::ListNodes(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ListNodesRequest, v1::ListNodesResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "ListNodes", context,
      request, response,
      [&](const Caller&, const v1::ListNodesRequest&,
          v1::ListNodesResponse* list) {
        const ClusterView* cluster = host_.cluster();
        if (cluster == nullptr) {
          // A single xformd: itself.
          char name[256] = {};
          gethostname(name, sizeof name - 1);
          v1::NodeInfo& self = *list->add_nodes();
          self.set_name(name);
          self.set_worlds_owned(static_cast<uint32_t>(host_.List().size()));
          self.set_worlds_served(self.worlds_owned());
          return absl::OkStatus();
        }
        absl::StatusOr<std::vector<NodeView>> nodes = cluster->Nodes();
        if (!nodes.ok()) return nodes.status();
        for (const NodeView& node : *nodes) {
          v1::NodeInfo& out = *list->add_nodes();
          out.set_name(node.name);
          out.set_address(node.address);
          out.set_draining(node.draining);
          out.set_worlds_owned(node.worlds_owned);
          out.set_worlds_served(node.worlds_served);
          out.set_started_unix_nanos(absl::ToUnixNanos(node.started));
          out.set_last_seen_ms(static_cast<uint64_t>(
              std::max<int64_t>(0, absl::ToInt64Milliseconds(node.last_seen))));
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::DrainNode(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::DrainNodeRequest, v1::DrainNodeResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "DrainNode", context,
      request, response,
      [&](const Caller& caller, const v1::DrainNodeRequest& drain,
          v1::DrainNodeResponse* out) {
        // It moves every world: the admin role on all of them.
        if (absl::Status allowed = caller.Require(kAdmin, "*", "DrainNode");
            !allowed.ok()) {
          return allowed;
        }
        ClusterView* cluster = host_.cluster();
        if (cluster == nullptr) {
          return absl::FailedPreconditionError(
              "this xformd is no node of a cluster (--cluster)");
        }
        absl::StatusOr<uint32_t> moved =
            cluster->Drain(drain.node(), !drain.undrain());
        if (!moved.ok()) return moved.status();
        out->set_worlds_moved(*moved);
        Log('I', "node '", EscapeForLog(drain.node()), "' ",
            drain.undrain() ? "undrained" : "drained", " by principal '",
            caller.name(), "'");
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::SkipRecord(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::SkipRecordRequest, v1::SkipRecordResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "SkipRecord", context,
      request, response,
      [&](const Caller& caller, const v1::SkipRecordRequest& skip,
          v1::SkipRecordResponse*) {
        if (absl::Status allowed =
                caller.Require(kAdmin, skip.world(), "SkipRecord");
            !allowed.ok()) {
          return allowed;
        }
        ClusterView* cluster = host_.cluster();
        if (cluster == nullptr) {
          return absl::FailedPreconditionError(
              "this xformd is no node of a cluster (--cluster): its worlds' "
              "journals are recovered with --recover=truncate");
        }
        absl::Status skipped = cluster->SkipRecord(skip.world(), skip.record());
        if (skipped.ok()) {
          Log('W', "world '", EscapeForLog(skip.world()), "': record ",
              skip.record(), " of its log skipped by principal '",
              caller.name(), "'");
        }
        return skipped;
      });
}

}  // namespace xform::server
