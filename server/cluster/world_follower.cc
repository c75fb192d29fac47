// Copyright 2026 The xform Authors.

#include "server/cluster/world_follower.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace xform::server {

WorldFollower::WorldFollower(std::shared_ptr<NatsLink> link,
                             std::shared_ptr<HostedWorld> world,
                             std::string key)
    : link_(std::move(link)),
      world_(std::move(world)),
      key_(std::move(key)),
      assembler_(link_->cluster(), LogStream(key_)) {}

WorldFollower::~WorldFollower() { Stop(); }

absl::Status WorldFollower::Start(uint64_t next_seq, uint64_t epoch) {
  Stop();
  // A log purged past `next_seq` (a snapshot took in what it had not
  // read): nothing may come to show the gap, so it is looked for now.
  if (absl::Status behind = CheckNotBehind(next_seq - 1, /*quiet=*/false);
      !behind.ok()) {
    absl::MutexLock lock(&mu_);
    failed_ = behind;
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  const std::string stream = LogStream(key_);
  const std::string subject = LogSubject(key_);
  jsSubOptions options;
  jsSubOptions_Init(&options);
  options.Stream = stream.c_str();
  options.Ordered = true;
  options.Config.DeliverPolicy = js_DeliverByStartSequence;
  options.Config.OptStartSeq = next_seq;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsSubscription* sub = nullptr;
  assembler_ = RecordAssembler(link_->cluster(), LogStream(key_));
  expected_seq_ = next_seq;
  applied_seq_ = next_seq - 1;
  epoch_ = epoch;
  failed_ = absl::OkStatus();
  following_ = true;
  last_record_ = absl::Now();
  const natsStatus status =
      js_Subscribe(&sub, link_->js(), subject.c_str(),
                   &WorldFollower::OnMessage, this, nullptr, &options, &code);
  if (status != NATS_OK) {
    following_ = false;
    return NatsError(absl::StrCat("cannot follow ", stream), status, code);
  }
  // A burst of big records (a scene loaded) must not be dropped as a slow
  // consumer's: flow control bounds what the server sends ahead.
  natsSubscription_SetPendingLimits(sub, -1, -1);
  completed_ = std::make_unique<absl::Notification>();
  natsSubscription_SetOnCompleteCB(sub, &WorldFollower::OnComplete,
                                   completed_.get());
  sub_ = sub;
  return absl::OkStatus();
}

uint64_t WorldFollower::Stop() {
  natsSubscription* sub = nullptr;
  std::unique_ptr<absl::Notification> completed;
  {
    absl::MutexLock lock(&mu_);
    following_ = false;
    sub = std::exchange(sub_, nullptr);
    completed = std::move(completed_);
  }
  if (sub != nullptr) {
    natsSubscription_Unsubscribe(sub);
    // Its thread is done once it says so: no callback runs after.
    completed->WaitForNotification();
    natsSubscription_Destroy(sub);
  }
  absl::MutexLock lock(&mu_);
  return applied_seq_;
}

void WorldFollower::OnComplete(void* closure) {
  static_cast<absl::Notification*>(closure)->Notify();
}

void WorldFollower::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg,
                              void* closure) {
  static_cast<WorldFollower*>(closure)->Take(msg);
  natsMsg_Destroy(msg);
}

void WorldFollower::Take(natsMsg* msg) {
  const uint64_t seq = StreamSequence(msg);
  absl::MutexLock lock(&mu_);
  if (!following_ || !failed_.ok()) return;
  if (seq < expected_seq_) return;  // Sent again (a consumer reset).
  if (seq > expected_seq_) {
    failed_ = absl::DataLossError(absl::StrCat("the log skipped from ",
                                               expected_seq_, " to ", seq,
                                               " (purged behind a snapshot)"));
  } else {
    expected_seq_ = seq + 1;
    absl::StatusOr<std::optional<LogRecord>> record = assembler_.Take(msg, seq);
    if (!record.ok()) {
      failed_ = record.status();
    } else if (record->has_value()) {
      failed_ = Apply(**record);
      if (failed_.ok()) applied_seq_ = seq;
    }
  }
  last_record_ = absl::Now();
  if (!failed_.ok()) {
    Log('W', "world '", EscapeForLog(world_->name()),
        "': following its log stopped: ", failed_.message(), "; reloading it");
  }
}

absl::Status WorldFollower::Apply(const LogRecord& record) {
  switch (record.kind) {
    case LogRecord::Kind::kCreated:
    case LogRecord::Kind::kSkipped:
      return absl::OkStatus();
    case LogRecord::Kind::kEpoch:
      epoch_ = record.epoch;
      return absl::OkStatus();
    case LogRecord::Kind::kFrameEnd:
      if (absl::Status ended = world_->EndLoggedFrame(
              record.frame, record.digest, record.closed, record.counts);
          !ended.ok()) {
        return absl::Status(
            ended.code(),
            absl::StrCat(ended.message(), " (record ", record.seq,
                         ", by node '", EscapeForLog(record.node), "')"));
      }
      return absl::OkStatus();
    case LogRecord::Kind::kBatch:
      return world_->ApplyLogged(record.batch, record.frame);
  }
  return absl::OkStatus();
}

absl::Status WorldFollower::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

uint64_t WorldFollower::applied_seq() const {
  absl::MutexLock lock(&mu_);
  return applied_seq_;
}

absl::Status WorldFollower::CheckNotBehind(uint64_t consumed, bool quiet) {
  absl::StatusOr<StreamExtent> extent = link_->Extent(LogStream(key_));
  if (!extent.ok()) return absl::OkStatus();  // Unknown: later.
  if (extent->first > consumed + 1) {
    return absl::DataLossError(absl::StrCat(
        "its log was purged to ", extent->first, " behind a snapshot, past ",
        consumed, ", the last record this node read"));
  }
  if (quiet && extent->last > consumed) {
    // Records it was never sent: its consumer was lost with a NATS server
    // (the crash loop saw a replica sit 65 frames behind for good).
    return absl::UnavailableError(absl::StrCat(
        "its log went on to ", extent->last, " while nothing came past ",
        consumed, " (its consumer lost)"));
  }
  return absl::OkStatus();
}

absl::Status WorldFollower::CheckFallenBehind(absl::Duration quiet) {
  uint64_t consumed = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    if (absl::Now() - last_record_ < quiet) return absl::OkStatus();
    consumed = expected_seq_ - 1;
  }
  absl::Status behind = CheckNotBehind(consumed, /*quiet=*/true);
  if (!behind.ok()) {
    absl::MutexLock lock(&mu_);
    if (expected_seq_ - 1 == consumed && failed_.ok()) failed_ = behind;
  }
  return behind;
}

uint64_t WorldFollower::consumed_seq() const {
  absl::MutexLock lock(&mu_);
  return expected_seq_ - 1;
}

bool WorldFollower::WaitConsumed(uint64_t seq, absl::Duration timeout) const {
  // absl::Mutex evaluates the condition again whenever mu_ is released, so
  // the message handler that moves expected_seq_ on is what wakes this.
  const auto done = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failed_.ok() || expected_seq_ > seq;
  };
  mu_.LockWhenWithTimeout(absl::Condition(&done), timeout);
  const bool consumed = failed_.ok() && expected_seq_ > seq;
  mu_.Unlock();
  return consumed;
}

absl::Time WorldFollower::last_record() const {
  absl::MutexLock lock(&mu_);
  return last_record_;
}

uint64_t WorldFollower::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

}  // namespace xform::server
