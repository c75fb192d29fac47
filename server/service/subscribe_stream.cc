// Copyright 2026 The xform Authors.

#include "server/service/subscribe_stream.h"

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
#include "server/base/log.h"
#include "server/cluster/view/redirect.h"
#include "server/edge/peer_address.h"
#include "server/replication/region_filter.h"
#include "server/service/call_support.h"
#include "server/service/refusal_guard.h"
#include "server/service/request_reader.h"
#include "server/service/service.h"
#include "xform/subscriber_info.h"
#include "xform/v1/wire.h"

namespace xform::server {
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

// A reactor that only finishes, for a stream refused at the start.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

void StartSubscribeStream(grpc::CallbackServerContext* context,
                          std::shared_ptr<HostedWorld> world,
                          SubscriptionOptions options, WriteWatchdog& watchdog,
                          BuildPool& pool, std::atomic<int>& calls,
                          const Caller& caller,
                          grpc::ServerWriteReactor<grpc::ByteBuffer>** out) {
  SubscribeReactor::Start(context, std::move(world), std::move(options),
                          watchdog, pool, calls, caller, out);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RefusedSubscribeStream(
    const absl::Status& status) {
  return new RefusedStream(status);
}

}  // namespace xform::server
