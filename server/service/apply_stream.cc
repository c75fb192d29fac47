// Copyright 2026 The xform Authors.

#include "server/service/apply_stream.h"

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

ApplyStreamReactorBase* StartApplyStream(grpc::CallbackServerContext* context,
                                         WorldHost& host,
                                         WriterRegistry& registry,
                                         RefusalGuard* refusals,
                                         std::atomic<int>& calls,
                                         const Caller& caller) {
  return ApplyStreamReactor::Start(context, host, registry, refusals, calls,
                                   caller);
}

namespace {

class RefusedBidiStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedBidiStream(const absl::Status& status) {
    Finish(ToGrpc(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

ApplyStreamReactorBase* RefusedApplyStream(const absl::Status& status) {
  return new RefusedBidiStream(status);
}

}  // namespace xform::server
