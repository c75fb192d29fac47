// Copyright 2026 The xform Authors.
//
// HostedWorld and its log (world_host.h): durability (a log to append to,
// a world restored from one) and a cluster's steps (writes stopped and
// taken, a replica applying and closing what its log says, a world
// reloaded).

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/host/frame_digest.h"
#include "server/host/world_host.h"
#include "xform/v1/wire.h"

namespace xform::server {

void HostedWorld::Persist(std::shared_ptr<WorldLog> log) {
  absl::MutexLock lock(&mu_);
  log_ = std::move(log);
  logged_.store(log_ != nullptr, std::memory_order_release);
}

bool HostedWorld::durable() const {
  absl::MutexLock lock(&mu_);
  return log_ != nullptr;
}

absl::Status HostedWorld::SaveSnapshot() {
  std::shared_ptr<WorldLog> log;
  {
    absl::MutexLock lock(&mu_);
    log = log_;
  }
  if (log == nullptr) return absl::FailedPreconditionError("no log");
  return log->Snapshot(*this);
}

namespace {

// What subscribers may resume from after `recovered` was published whole:
// its last frame, or, if it holds part of the frame after, that frame.
uint64_t ResumableFrom(const RecoveredWorld& recovered) {
  return recovered.partial_frame ? recovered.world.frame()
                                 : recovered.last_frame;
}

}  // namespace

void HostedWorld::Restore(RecoveredWorld& recovered) {
  const uint64_t resumable_from = ResumableFrom(recovered);
  absl::MutexLock publishing(&publish_mu_);
  absl::MutexLock lock(&mu_);
  world_ = std::move(recovered.world);
  history_.Restart(world_, recovered.newest_stamp);
  names_ = std::move(recovered.names);
  open_frame_logged_ = open_frame_partial_ = recovered.partial_frame;
  for (const auto& [id, frame] : recovered.write_ids) {
    recent_writes_.Add(id, {frame, WriteOutcome::Settled()});
  }
  if (recovered.history != 0) replicator_.set_history(recovered.history);
  replicator_.PublishWhole(world_, recovered.last_frame, absl::Now(),
                           resumable_from);
}

void HostedWorld::Reset(RecoveredWorld& reloaded) {
  const uint64_t resumable_from = ResumableFrom(reloaded);
  absl::MutexLock publishing(&publish_mu_);
  absl::MutexLock lock(&mu_);
  world_ = std::move(reloaded.world);
  history_.Restart(world_, reloaded.newest_stamp);
  names_ = std::move(reloaded.names);
  open_frame_logged_ = open_frame_partial_ = reloaded.partial_frame;
  writers_.clear();
  recent_writes_.Clear();
  for (const auto& [id, frame] : reloaded.write_ids) {
    recent_writes_.Add(id, {frame, WriteOutcome::Settled()});
  }
  replicator_.Reset(world_, reloaded.last_frame, absl::Now(), resumable_from);
}

bool HostedWorld::writable() const {
  absl::MutexLock lock(&mu_);
  return refusal_.ok();
}

std::shared_ptr<WorldLog> HostedWorld::StopWriting(absl::Status why) {
  absl::MutexLock lock(&mu_);
  refusal_ = std::move(why);
  logged_.store(false, std::memory_order_release);
  return std::exchange(log_, nullptr);
}

void HostedWorld::StartWriting(std::shared_ptr<WorldLog> log) {
  absl::MutexLock publishing(&publish_mu_);
  std::optional<WorldLog::Acknowledgement> end;
  bool closed = false;
  {
    absl::MutexLock lock(&mu_);
    log_ = std::move(log);
    logged_.store(log_ != nullptr, std::memory_order_release);
    refusal_ = absl::OkStatus();
    // The frame its last writer left open (lost before it logged the end)
    // ends here, before a batch is taken: its batches were acknowledged in
    // it, so it must be published, and the next batch is in a later frame.
    if (open_frame_logged_) closed = CloseFrameLocked(end).ok();
  }
  if (closed) PublishClosed(std::move(end));
}

void HostedWorld::OpenLoggedFrame(uint64_t frame) {
  std::optional<WorldLog::Acknowledgement> none;
  bool closed = false;
  {
    absl::MutexLock lock(&mu_);
    if (frame <= world_.frame()) return;
    if (open_frame_logged_) {
      // Its end was never logged (its writer was lost partway): it ends
      // where the next frame's first record begins.
      closed = CloseFrameLocked(none).ok();
    }
    if (frame > world_.frame()) world_.RestartFrames(frame);
  }
  if (closed) PublishClosed();
}

absl::Status HostedWorld::ApplyLogged(absl::string_view batch, uint64_t frame) {
  v1::ApplyRequest request;
  if (!request.ParseFromArray(batch.data(), static_cast<int>(batch.size()))) {
    return absl::DataLossError("a logged batch that does not parse");
  }
  absl::StatusOr<std::vector<Command>> commands =
      v1::ToCommands(request, std::numeric_limits<size_t>::max());
  if (!commands.ok()) return commands.status();
  {
    absl::MutexLock publishing(&publish_mu_);
    OpenLoggedFrame(frame);
    absl::MutexLock lock(&mu_);
    // The writer's stamp and late sets: its record carries them.
    const Stamp stamp = request.stamp_nanos();
    WorldHistory::Prepared prepared;
    absl::StatusOr<std::vector<Command>> late =
        v1::HistoryOnlyCommands(request);
    if (!late.ok()) return late.status();
    prepared.late = *std::move(late);
    absl::StatusOr<WorldNames::Prepared> names =
        names_.Prepare(request, world_, std::numeric_limits<size_t>::max());
    if (!names.ok()) {
      return absl::DataLossError(absl::StrCat(
          "a logged batch's names do not apply: ", names.status().message()));
    }
    history_.Prepare(*commands, world_, prepared);
    if (absl::Status applied = world_.Apply(*commands); !applied.ok()) {
      return absl::DataLossError(
          absl::StrCat("a logged batch does not apply: ", applied.message()));
    }
    names_.Commit(*names, world_);
    history_.Record(*commands, stamp, world_, prepared);
    open_frame_logged_ = true;
    recent_writes_.Add(request.write_id(), {frame, WriteOutcome::Settled()});
  }
  AnswerWaitingLookups();
  return absl::OkStatus();
}

absl::Status HostedWorld::EndLoggedFrame(uint64_t frame,
                                         std::optional<uint64_t> digest,
                                         absl::Time closed,
                                         absl::string_view writers_counts) {
  absl::MutexLock publishing(&publish_mu_);
  OpenLoggedFrame(frame);
  {
    absl::MutexLock lock(&mu_);
    // A frame it loaded past (its end is in what it loaded).
    if (frame < world_.frame()) return absl::OkStatus();
    if (open_frame_partial_) digest.reset();
    std::optional<WorldLog::Acknowledgement> none;
    if (absl::Status s = CloseFrameLocked(none); !s.ok()) return s;
    if (closed != absl::UnixEpoch()) closed_at_ = closed;
  }
  const uint64_t expected = digest.value_or(0);
  if (const uint64_t own = digest ? FrameDigest(changes_) : 0;
      own != expected) {
    return absl::DataLossError(absl::StrCat(
        "frame ", frame, " differs from its writer's (digest ", absl::Hex(own),
        ": ", FrameCounts(changes_), "; the writer's ", absl::Hex(expected),
        ": ", writers_counts, ")"));
  }
  PublishClosed();
  return absl::OkStatus();
}

}  // namespace xform::server
