// Copyright 2026 The xform Authors.

#include "server/host/world_host.h"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <random>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/base/memory_policy.h"
#include "server/cluster/view/redirect.h"
#include "server/host/frame_digest.h"

namespace xform::server {
namespace {

// How often the poller polls subscribers (rate limits).
constexpr absl::Duration kPollInterval = absl::Milliseconds(5);
// How long after a delete the poller trims the heap again.
constexpr absl::Duration kTrimDelay = absl::Seconds(1);

// A history no other world or start shares (Replicator::set_history).
uint64_t RandomHistory() {
  static absl::Mutex mu(absl::kConstInit);
  static std::mt19937_64* random = nullptr;
  absl::MutexLock lock(&mu);
  if (random == nullptr) {
    std::random_device device;
    random = new std::mt19937_64((uint64_t{device()} << 32) | device());
  }
  uint64_t history = 0;
  while (history == 0) history = (*random)();
  return history;
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           c == '-' || c == '.';
  });
}

}  // namespace

// ---------------------------------------------------------------------------

HostedWorld::HostedWorld(std::string name, v1::FrameMode mode, double tick_hz,
                         size_t max_pending,
                         std::shared_ptr<BurstBudget> burst_budget,
                         std::string owner, std::shared_ptr<Fanout> fanout,
                         uint64_t resume_frames)
    : name_(std::move(name)),
      owner_(std::move(owner)),
      mode_(mode),
      tick_hz_(tick_hz),
      tick_(mode == v1::FRAME_MODE_TICK ? absl::Seconds(1.0 / tick_hz)
                                        : absl::InfiniteDuration()),
      replicator_(max_pending, std::move(burst_budget), std::move(fanout),
                  resume_frames) {
  replicator_.set_history(RandomHistory());
}

HostedWorld::MemoryReturn::~MemoryReturn() { ReturnFreeHeap(); }

absl::StatusOr<std::vector<Command>> HostedWorld::Validated(
    const v1::ApplyRequest& request, const Limits& limits) {
  if (absl::Status id = v1::CheckClientId(request.client_id(), "client_id");
      !id.ok()) {
    return id;
  }
  if (absl::Status id = v1::CheckWriteId(request.write_id()); !id.ok()) {
    return id;
  }
  if (!request.history_only().empty()) {
    return absl::InvalidArgumentError(
        "history_only is the server's, in its journal; a client sends sets "
        "with a stamp instead");
  }
  return v1::ToCommands(request, limits.max_batch);
}

absl::StatusOr<uint64_t> HostedWorld::Apply(const v1::ApplyRequest& request,
                                            const Limits& limits) {
  absl::StatusOr<std::vector<Command>> commands = Validated(request, limits);
  if (!commands.ok()) return commands.status();
  const size_t creates =
      static_cast<size_t>(absl::c_count_if(*commands, [](const Command& c) {
        return std::holds_alternative<CreateOp>(c);
      }));
  // Encoded before the lock: a record is the request as the client sent it
  // (its write id with it, for whoever replays it).
  std::string journaled;
  if (request.commands_size() > 0 && logged_.load(std::memory_order_acquire)) {
    request.SerializeToString(&journaled);
  }
  Applied applied;
  std::optional<WorldLog::Acknowledgement> frame_end;
  if (request.end_frame() && mode_ == v1::FRAME_MODE_DRIVEN) {
    // Closes its frame and publishes it, after the publication before it;
    // the world is held only to apply and close.
    absl::MutexLock publishing(&publish_mu_);
    bool closed = false;
    {
      absl::MutexLock lock(&mu_);
      ApplyHeld(request, *commands, creates, journaled, limits, applied);
      // Logged even with nothing in it: its client ended a frame, so every
      // node numbers it.
      if (applied.frame.ok()) {
        closed = CloseFrameLocked(frame_end, /*ended_by_client=*/true).ok();
      }
    }
    if (closed) PublishClosed(std::move(frame_end));
  } else {
    // Published with its frame, later (a tick world's even with end_frame:
    // its tick publishes).
    absl::MutexLock lock(&mu_);
    ApplyHeld(request, *commands, creates, journaled, limits, applied);
  }
  if (applied.frame.ok()) AnswerWaitingLookups();
  if (applied.repeated) return Repeated(*std::move(applied.repeated));
  if (!applied.frame.ok()) return applied.frame.status();
  if (applied.acknowledgement) {
    absl::Status status =
        AwaitLogged(*std::move(applied.acknowledgement), applied.outcome.get());
    if (!status.ok()) return status;
  }
  return applied.frame;
}

void HostedWorld::ApplyHeld(const v1::ApplyRequest& request,
                            std::vector<Command>& commands, size_t creates,
                            std::string& journaled, const Limits& limits,
                            Applied& applied) {
  if (!refusal_.ok()) {
    applied.frame = refusal_;
    return;
  }
  if (const RecentWrites::Write* seen =
          recent_writes_.Find(request.write_id())) {
    applied.repeated = *seen;
    return;
  }
  absl::StatusOr<Stamp> stamp =
      history_.StampOf(request.stamp_nanos(), absl::Now());
  if (!stamp.ok()) {
    applied.frame = stamp.status();
    return;
  }
  // (A log taken or dropped since it was encoded: as the log is now.)
  if (log_ == nullptr) {
    journaled.clear();
  } else if (journaled.empty() && request.commands_size() > 0) {
    request.SerializeToString(&journaled);
  }
  // The record carries the stamp the batch was given, so that every
  // replica records the same history.
  if (!journaled.empty() && request.stamp_nanos() == 0) {
    v1::AppendStampNanos(*stamp, &journaled);
  }
  absl::StatusOr<WorldNames::Prepared> names =
      names_.Prepare(request, world_, limits.max_name_bytes);
  if (!names.ok()) {
    applied.frame = names.status();
    return;
  }
  applied.frame = ApplyLocked(commands, *stamp, request.client_id(), creates,
                              journaled, limits, applied.acknowledgement);
  if (applied.frame.ok()) names_.Commit(*names, world_);
  if (applied.frame.ok() && !request.write_id().empty()) {
    applied.outcome = applied.acknowledgement ? std::make_shared<WriteOutcome>()
                                              : WriteOutcome::Settled();
    recent_writes_.Add(request.write_id(), {*applied.frame, applied.outcome});
  }
}

absl::Status HostedWorld::AwaitLogged(WorldLog::Acknowledgement acknowledgement,
                                      WriteOutcome* outcome) {
  // Waited for without the lock, so that the batches behind this one share
  // the wait (one fsync, one round trip).
  absl::Status status = std::move(acknowledgement)();
  if (outcome != nullptr) outcome->Settle(status);
  if (!status.ok()) {
    // The world holds a batch its log lost: no more are taken, until the
    // world is loaded again from its log (a cluster's) or restarted.
    absl::MutexLock lock(&mu_);
    if (refusal_.ok()) refusal_ = status;
  }
  return status;
}

absl::StatusOr<uint64_t> HostedWorld::Repeated(
    const RecentWrites::Write& write) {
  if (absl::Status status = write.outcome->Wait(); !status.ok()) {
    return status;
  }
  return write.frame;
}

namespace {

// The record of a batch that had late sets: its live commands, and the late
// ones apart (ApplyRequest.history_only), so that a replica or a recovery
// applies what the writer applied live without knowing what made them late.
// Only for such batches: the record is otherwise the request as sent.
std::string JournaledWithLateSets(const std::string& journaled,
                                  absl::Span<const Command> live,
                                  absl::Span<const Command> late) {
  v1::ApplyRequest record;
  record.ParseFromString(journaled);
  record.clear_commands();
  v1::AppendCommands(live, &record);
  v1::ApplyRequest late_sets;
  v1::AppendCommands(late, &late_sets);
  record.mutable_history_only()->Swap(late_sets.mutable_commands());
  return record.SerializeAsString();
}

}  // namespace

absl::StatusOr<uint64_t> HostedWorld::ApplyLocked(
    std::vector<Command>& commands, Stamp stamp, const std::string& client_id,
    size_t creates, std::string& journaled, const Limits& limits,
    std::optional<WorldLog::Acknowledgement>& acknowledgement) {
  if (world_.size() + creates > limits.max_entities_per_world) {
    return absl::ResourceExhaustedError(
        absl::StrCat("world ", Quoted(name_), " would exceed ",
                     limits.max_entities_per_world, " entities"));
  }
  // Journaled once applied and before it is visible: a batch the journal
  // cannot take is taken back.
  const uint64_t open_frame = world_.frame();
  WorldLog* const log = log_.get();
  const auto journal = [&]() -> absl::Status {
    if (journaled.empty()) return absl::OkStatus();
    absl::StatusOr<WorldLog::Acknowledgement> appended =
        log->Append(open_frame, journaled);
    if (!appended.ok()) return appended.status();
    acknowledgement = *std::move(appended);
    return absl::OkStatus();
  };
  world_.set_max_ancestor_walk(limits.max_ancestor_walk);
  WorldHistory::Prepared prepared;
  history_.TakeLateSets(commands, stamp, prepared);
  if (!prepared.late.empty() && !journaled.empty()) {
    journaled = JournaledWithLateSets(journaled, commands, prepared.late);
  }
  history_.Prepare(commands, world_, prepared);
  if (absl::Status s = world_.Apply(commands, journal); !s.ok()) return s;
  history_.Record(commands, stamp, world_, prepared);
  if (!journaled.empty()) open_frame_logged_ = true;
  // Remember who set what, for subscribers that want no echo. Tracked only
  // once such a subscriber exists; anonymous writes ("") block suppression.
  if (replicator_.echo_filtered_subscribers() > 0) {
    for (const Command& c : commands) {
      EntityId e = kNoEntity;
      if (const auto* set = std::get_if<SetLocalOp>(&c)) e = set->entity;
      if (const auto* set = std::get_if<SetWorldOp>(&c)) e = set->entity;
      if (e == kNoEntity) continue;
      auto [it, inserted] = writers_.try_emplace(e, client_id);
      if (!inserted && it->second != client_id) it->second.clear();
    }
  }
  return world_.frame();
}

absl::Status HostedWorld::Read(const v1::ReadRequest& request,
                               const Limits& limits,
                               v1::ReadResponse* response) const {
  absl::MutexLock lock(&mu_);
  std::vector<EntityId> entities(request.entity().begin(),
                                 request.entity().end());
  if (request.subtree() != kNoEntity) {
    absl::StatusOr<std::vector<EntityId>> subtree =
        world_.Subtree(request.subtree());
    if (!subtree.ok()) return subtree.status();
    entities.insert(entities.end(), subtree->begin(), subtree->end());
  }
  if (entities.empty()) {
    return absl::InvalidArgumentError("name entities or a subtree to read");
  }
  if (request.at_stamp_nanos() != 0 && request.subtree() != kNoEntity) {
    return absl::InvalidArgumentError(
        "at_stamp_nanos reads listed entities, not a subtree");
  }
  if (entities.size() * v1::kReadBytesPerEntity > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("reading ", entities.size(),
                     " entities exceeds the message size limit"));
  }
  const History* history = history_.history();
  if (request.at_stamp_nanos() != 0 && history == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "world ", Quoted(name_), " keeps no history (--history_seconds=0)"));
  }
  for (EntityId e : entities) {
    absl::StatusOr<Transform> local = world_.Local(e);
    if (!local.ok()) return local.status();
    Matrix3x4 world = *world_.WorldMatrix(e);
    if (request.at_stamp_nanos() != 0) {
      absl::StatusOr<TimedPose> then =
          history->Lookup(kNoEntity, e, request.at_stamp_nanos());
      if (!then.ok()) return then.status();
      world = then->pose;
    }
    v1::AppendEntityState({.entity = e,
                           .parent = *world_.Parent(e),
                           .local = *local,
                           .world = world},
                          response);
    response->add_stamp_nanos(history == nullptr ? 0 : history->NewestOf(e));
    response->add_name(names_.NameOf(e));
  }
  return absl::OkStatus();
}

void HostedWorld::Publish() {
  absl::MutexLock publishing(&publish_mu_);
  std::optional<WorldLog::Acknowledgement> acknowledgement;
  {
    absl::MutexLock lock(&mu_);
    // A world not written here closes its frames where its log says: one
    // whose writes stopped since its tick began must not close a frame
    // whose end the next writer logs (it would be a frame ahead of it).
    if (!refusal_.ok()) return;
    // A frame with nothing in it is numbered only where a client ends it:
    // its end is not logged, so a replica would not number it.
    if (log_ != nullptr && log_->RecordsFrames() && !open_frame_logged_) {
      return;
    }
    if (!CloseFrameLocked(acknowledgement).ok()) return;
  }
  PublishClosed(std::move(acknowledgement));
}

void HostedWorld::Tick() {
  if (writable()) Publish();
}

absl::Status HostedWorld::CloseFrameLocked(
    std::optional<WorldLog::Acknowledgement>& acknowledgement,
    bool ended_by_client) {
  const bool partial = open_frame_partial_;
  const bool logged = open_frame_logged_;
  world_.EndFrame(&changes_);
  changes_.stamp = history_.newest();
  closed_at_ = absl::Now();
  closed_writers_.clear();
  closed_writers_.swap(writers_);
  open_frame_logged_ = open_frame_partial_ = false;
  if (!(logged || ended_by_client) || !refusal_.ok() || log_ == nullptr ||
      !log_->RecordsFrames()) {
    return absl::OkStatus();
  }
  absl::StatusOr<WorldLog::Acknowledgement> ended = log_->EndFrame(
      changes_.frame,
      partial ? std::nullopt : std::optional<uint64_t>(FrameDigest(changes_)),
      closed_at_, FrameCounts(changes_));
  if (!ended.ok()) {
    refusal_ = ended.status();
    return ended.status();
  }
  acknowledgement = *std::move(ended);
  return absl::OkStatus();
}

void HostedWorld::PublishClosed(
    std::optional<WorldLog::Acknowledgement> acknowledgement) {
  if (acknowledgement) {
    // Only a frame the log holds is published, so that every node that
    // publishes the world's frames publishes the same ones.
    if (absl::Status s = (*std::move(acknowledgement))(); !s.ok()) {
      absl::MutexLock lock(&mu_);
      if (refusal_.ok()) refusal_ = s;
      return;
    }
  }
  replicator_.Publish(changes_, closed_at_, closed_writers_);
}

v1::WorldInfo HostedWorld::Info() const {
  v1::WorldInfo info;
  info.set_name(name_);
  info.set_mode(mode_);
  info.set_tick_hz(mode_ == v1::FRAME_MODE_TICK ? tick_hz_ : 0);
  {
    absl::MutexLock lock(&mu_);
    info.set_entities(world_.size());
    history_.Fill(info.mutable_history());
  }
  info.mutable_history()->set_waiting_lookups(
      static_cast<uint32_t>(waiting_count_.load(std::memory_order_acquire)));
  info.set_frame(replicator_.frame());
  info.set_subscribers(static_cast<uint32_t>(replicator_.subscribers()));
  v1::StreamStatsToWire(replicator_.stream_stats(), info.mutable_stream());
  return info;
}

// ---------------------------------------------------------------------------

namespace {

// A tick world's own thread, publishing it every tick. Its publication waits
// for what holds that world (a big batch, a snapshot burst under its
// replicator's lock) and for nothing else; a tick that falls behind is
// dropped, not replayed in a burst.
std::unique_ptr<PeriodicThread> StartTicker(
    std::shared_ptr<HostedWorld> world) {
  const absl::Time first = absl::Now() + world->tick();
  return std::make_unique<PeriodicThread>(
      "xform-tick", first, [world = std::move(world), next = first]() mutable {
        world->Tick();
        next = std::max(next + world->tick(), absl::Now());
        return next;
      });
}

}  // namespace

WorldHost::WorldHost(Limits limits, double default_tick_hz,
                     std::unique_ptr<WorldLogStore> logs, int fanout_threads)
    : limits_(limits),
      burst_budget_(std::make_shared<BurstBudget>(limits.snapshot_burst_bytes)),
      fanout_(fanout_threads > 1 ? std::make_shared<FanoutPool>(fanout_threads)
                                 : nullptr),
      default_tick_hz_(default_tick_hz),
      logs_(std::move(logs)),
      ready_(logs_ == nullptr) {
  poller_ = std::make_unique<PeriodicThread>("xform-poller", absl::Now(),
                                             [this] { return PollOnce(); });
}

WorldHost::~WorldHost() {
  logs_.reset();  // Stops its keeping, which finds worlds here.
  absl::flat_hash_map<std::string, std::unique_ptr<PeriodicThread>> tickers;
  {
    absl::MutexLock lock(&mu_);
    tickers.swap(tickers_);
  }
  tickers.clear();  // Joined outside the lock.
  poller_.reset();
}

absl::StatusOr<std::shared_ptr<HostedWorld>> WorldHost::Create(
    const v1::CreateWorldRequest& request, std::string owner) {
  if (!ValidName(request.name())) {
    return absl::InvalidArgumentError(
        "a world name is 1-128 characters of [A-Za-z0-9_.-]");
  }
  v1::FrameMode mode = request.mode();
  double tick_hz = request.tick_hz();
  if (mode == v1::FRAME_MODE_UNSPECIFIED) mode = v1::FRAME_MODE_TICK;
  if (mode != v1::FRAME_MODE_TICK && mode != v1::FRAME_MODE_DRIVEN) {
    return absl::InvalidArgumentError("unknown frame mode");
  }
  if (mode == v1::FRAME_MODE_TICK) {
    if (tick_hz == 0) tick_hz = default_tick_hz_;
    if (!(tick_hz >= kMinTickHz && tick_hz <= kMaxTickHz)) {
      return absl::InvalidArgumentError("tick_hz must be in [0.01, 1000]");
    }
  } else if (tick_hz != 0) {
    return absl::InvalidArgumentError("a driven world has no tick_hz");
  }
  if (!v1::TimeModel_IsValid(request.time_model())) {
    return absl::InvalidArgumentError("unknown time model");
  }
  absl::MutexLock creating(&create_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (worlds_.contains(request.name())) {
      return absl::AlreadyExistsError(
          absl::StrCat("world ", Quoted(request.name()), " exists"));
    }
    if (worlds_.size() >= limits_.max_worlds) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server holds its limit of ", limits_.max_worlds, " worlds"));
    }
  }
  auto world = std::make_shared<HostedWorld>(
      request.name(), mode, tick_hz, limits_.max_pending, burst_budget_, owner,
      fanout_, limits_.resume_frames);
  world->replicator().set_region_cell_size(limits_.region_cell_size);
  world->SetHistoryLimits(limits_.history, request.time_model());
  world->replicator().set_region_views_to_sort_moves(
      limits_.region_views_to_sort_moves);
  if (logs_ != nullptr) {
    // Durable before it exists for anyone: created means durable.
    config::StoredWorld stored;
    v1::CreateWorldRequest& create = *stored.mutable_create();
    create.set_name(request.name());
    create.set_mode(mode);
    create.set_tick_hz(mode == v1::FRAME_MODE_TICK ? tick_hz : 0);
    create.set_time_model(request.time_model());
    stored.set_owner(owner);
    stored.set_history(world->replicator().history());
    absl::StatusOr<std::shared_ptr<WorldLog>> log = logs_->CreateWorld(stored);
    if (!log.ok()) return log.status();
    world->Persist(*std::move(log));
  }
  absl::MutexLock lock(&mu_);
  worlds_[request.name()] = world;
  StartTicking(world);
  return world;
}

void WorldHost::StartTicking(const std::shared_ptr<HostedWorld>& world) {
  if (world->mode() == v1::FRAME_MODE_TICK) {
    tickers_[world->name()] = StartTicker(world);
  }
}

absl::Status WorldHost::Recover() {
  if (logs_ == nullptr) return absl::OkStatus();
  const absl::Time start = absl::Now();
  size_t entities = 0;
  absl::Status status = logs_->Recover([&](RecoveredWorld recovered) {
    entities += recovered.world.size();
    return Add(std::move(recovered)).status();
  });
  if (!status.ok()) return status;
  Log('I', "recovery: ", List().size(), " world(s), ", entities,
      " entities, in ", absl::FormatDuration(absl::Now() - start));
  logs_->StartKeeping(
      [this](absl::string_view name) -> std::shared_ptr<SnapshotSource> {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world = Get(name);
        return world.ok() ? *std::move(world) : nullptr;
      });
  ready_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostedWorld>> WorldHost::Add(
    RecoveredWorld recovered, absl::Status replica_refusal) {
  const v1::CreateWorldRequest& create = recovered.stored.create();
  auto world = std::make_shared<HostedWorld>(
      create.name(), create.mode(), create.tick_hz(), limits_.max_pending,
      burst_budget_, recovered.stored.owner(), fanout_, limits_.resume_frames);
  world->replicator().set_region_cell_size(limits_.region_cell_size);
  world->SetHistoryLimits(limits_.history, create.time_model());
  world->replicator().set_region_views_to_sort_moves(
      limits_.region_views_to_sort_moves);
  const size_t size = recovered.world.size();
  const absl::Time published = absl::Now();
  world->Restore(recovered);
  Log('I', "recovery: world ", Quoted(create.name()), ": ", size,
      " entities, frame ", recovered.last_frame, " (snapshot read in ",
      absl::FormatDuration(recovered.snapshot_time), ", ", recovered.replayed,
      " journaled batches replayed in ",
      absl::FormatDuration(recovered.replay_time), ", published in ",
      absl::FormatDuration(absl::Now() - published), ")");
  if (recovered.log != nullptr) {
    world->Persist(std::move(recovered.log));
  } else if (logs_ != nullptr) {
    // A cluster's replica: written at another node, until one takes it.
    world->StopWriting(
        !replica_refusal.ok()
            ? std::move(replica_refusal)
            : TryAgainShortly(absl::StrCat("world ", Quoted(create.name()),
                                           " has no writer at the moment")));
  }
  absl::MutexLock lock(&mu_);
  if (!worlds_.try_emplace(create.name(), world).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("world ", Quoted(create.name()), " exists"));
  }
  StartTicking(world);
  return world;
}

bool WorldHost::Remove(absl::string_view name, const absl::Status& status) {
  std::shared_ptr<HostedWorld> world;
  std::unique_ptr<PeriodicThread> ticker;
  {
    absl::MutexLock lock(&mu_);
    auto it = worlds_.find(name);
    if (it == worlds_.end()) return false;
    world = std::move(it->second);
    worlds_.erase(it);
    if (auto t = tickers_.find(name); t != tickers_.end()) {
      ticker = std::move(t->second);
      tickers_.erase(t);
    }
    trim_due_ = absl::Now() + kTrimDelay;
  }
  ticker.reset();
  world->replicator().EndAll(status);
  world->EndLookups(status);
  return true;
}

void WorldHost::SnapshotAll() {
  if (logs_ != nullptr) logs_->SnapshotAll();
}

absl::StatusOr<std::shared_ptr<HostedWorld>> WorldHost::Get(
    absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = worlds_.find(name);
  if (it == worlds_.end()) {
    return absl::NotFoundError(absl::StrCat("no world ", Quoted(name)));
  }
  return it->second;
}

std::vector<std::shared_ptr<HostedWorld>> WorldHost::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<HostedWorld>> out;
  for (const auto& [name, world] : worlds_) out.push_back(world);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a->name() < b->name(); });
  return out;
}

absl::Status WorldHost::Delete(absl::string_view name) {
  absl::MutexLock creating(&create_mu_);
  if (absl::StatusOr<std::shared_ptr<HostedWorld>> found = Get(name);
      !found.ok()) {
    return found.status();
  }
  if (logs_ != nullptr) {
    if (absl::Status s = logs_->DeleteWorld(name); !s.ok()) return s;
  }
  // Its ticker stops after a publication under way. (A cluster's node may
  // have removed it already, told of the delete by the cluster.)
  Remove(name, absl::NotFoundError(
                   absl::StrCat("world ", Quoted(name), " was deleted")));
  return absl::OkStatus();
}

void WorldHost::EndAllStreams(const absl::Status& status) {
  for (const auto& world : List()) {
    world->replicator().EndAll(status);
    world->EndLookups(status);
  }
}

absl::Time WorldHost::PollOnce() {
  const absl::Time now = absl::Now();
  for (const auto& world : List()) {
    world->replicator().Flush(now);
    world->ExpireLookups(now);
  }
  bool trim = false;
  {
    absl::MutexLock lock(&mu_);
    if (now >= trim_due_) {
      trim_due_ = absl::InfiniteFuture();
      trim = true;
    }
  }
  if (trim) ReturnFreeHeap();
  return now + kPollInterval;
}

}  // namespace xform::server
