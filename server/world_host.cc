// Copyright 2026 The xform Authors.

#include "server/world_host.h"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log.h"
#include "server/memory_policy.h"

namespace xform::server {
namespace {

// How often the poller polls subscribers (rate limits).
constexpr absl::Duration kPollInterval = absl::Milliseconds(5);
// How long after a delete the poller trims the heap again.
constexpr absl::Duration kTrimDelay = absl::Seconds(1);

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
                         std::string owner, std::shared_ptr<Fanout> fanout)
    : name_(std::move(name)),
      owner_(std::move(owner)),
      mode_(mode),
      tick_hz_(tick_hz),
      tick_(mode == v1::FRAME_MODE_TICK ? absl::Seconds(1.0 / tick_hz)
                                        : absl::InfiniteDuration()),
      replicator_(max_pending, std::move(burst_budget), std::move(fanout)) {}

HostedWorld::MemoryReturn::~MemoryReturn() { ReturnFreeHeap(); }

absl::StatusOr<uint64_t> HostedWorld::Apply(const v1::ApplyRequest& request,
                                            const Limits& limits) {
  if (absl::Status id = v1::CheckClientId(request.client_id(), "client_id");
      !id.ok()) {
    return id;
  }
  absl::StatusOr<std::vector<Command>> commands =
      v1::ToCommands(request, limits.max_batch);
  if (!commands.ok()) return commands.status();
  size_t creates = 0;
  for (const Command& c : *commands)
    creates += std::holds_alternative<CreateOp>(c);

  // Encoded before the lock: a record is the request as the client sent it.
  std::string journaled;
  if (log_ != nullptr && !commands->empty()) {
    request.SerializeToString(&journaled);
  }
  std::optional<WorldLog::Acknowledgement> acknowledgement;
  absl::StatusOr<uint64_t> frame;
  if (request.end_frame() && mode_ == v1::FRAME_MODE_DRIVEN) {
    // Closes its frame and publishes it, after the publication before it;
    // the world is held only to apply and close.
    absl::MutexLock publishing(&publish_mu_);
    {
      absl::MutexLock lock(&mu_);
      frame = ApplyLocked(*commands, request.client_id(), creates, journaled,
                          limits, acknowledgement);
      if (frame.ok()) CloseFrameLocked();
    }
    if (frame.ok()) PublishClosed();
  } else {
    // Published with its frame, later (a tick world's even with end_frame:
    // its tick publishes).
    absl::MutexLock lock(&mu_);
    frame = ApplyLocked(*commands, request.client_id(), creates, journaled,
                        limits, acknowledgement);
  }
  if (!frame.ok()) return frame.status();
  // Acknowledged once the log says it is durable, waited for without the
  // lock, so that the batches behind this one share the wait (one fsync,
  // one round trip).
  if (acknowledgement) {
    if (absl::Status s = (*std::move(acknowledgement))(); !s.ok()) return s;
  }
  return frame;
}

absl::StatusOr<uint64_t> HostedWorld::ApplyLocked(
    absl::Span<const Command> commands, const std::string& client_id,
    size_t creates, const std::string& journaled, const Limits& limits,
    std::optional<WorldLog::Acknowledgement>& acknowledgement) {
  if (world_.size() + creates > limits.max_entities_per_world) {
    return absl::ResourceExhaustedError(
        absl::StrCat("world ", Quoted(name_), " would exceed ",
                     limits.max_entities_per_world, " entities"));
  }
  // Journaled once applied and before it is visible: a batch the journal
  // cannot take is taken back.
  const uint64_t open_frame = world_.frame();
  const auto journal = [&]() -> absl::Status {
    if (journaled.empty()) return absl::OkStatus();
    absl::StatusOr<WorldLog::Acknowledgement> appended =
        log_->Append(open_frame, journaled);
    if (!appended.ok()) return appended.status();
    acknowledgement = *std::move(appended);
    return absl::OkStatus();
  };
  world_.set_max_ancestor_walk(limits.max_ancestor_walk);
  if (absl::Status s = world_.Apply(commands, journal); !s.ok()) return s;
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

void HostedWorld::Persist(std::shared_ptr<WorldLog> log) {
  log_ = std::move(log);
}

void HostedWorld::Restore(World world, uint64_t last_frame) {
  absl::MutexLock publishing(&publish_mu_);
  absl::MutexLock lock(&mu_);
  world_ = std::move(world);
  replicator_.PublishWhole(world_, last_frame, absl::Now());
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
  if (entities.size() * v1::kReadBytesPerEntity > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("reading ", entities.size(),
                     " entities exceeds the message size limit"));
  }
  for (EntityId e : entities) {
    absl::StatusOr<Transform> local = world_.Local(e);
    if (!local.ok()) return local.status();
    v1::AppendEntityState({.entity = e,
                           .parent = *world_.Parent(e),
                           .local = *local,
                           .world = *world_.WorldMatrix(e)},
                          response);
  }
  return absl::OkStatus();
}

void HostedWorld::Publish() {
  absl::MutexLock publishing(&publish_mu_);
  {
    absl::MutexLock lock(&mu_);
    CloseFrameLocked();
  }
  PublishClosed();
}

void HostedWorld::CloseFrameLocked() {
  world_.EndFrame(&changes_);
  closed_writers_.clear();
  closed_writers_.swap(writers_);
}

void HostedWorld::PublishClosed() {
  replicator_.Publish(changes_, absl::Now(), closed_writers_);
}

v1::WorldInfo HostedWorld::Info() const {
  v1::WorldInfo info;
  info.set_name(name_);
  info.set_mode(mode_);
  info.set_tick_hz(mode_ == v1::FRAME_MODE_TICK ? tick_hz_ : 0);
  {
    absl::MutexLock lock(&mu_);
    info.set_entities(world_.size());
  }
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
        world->Publish();
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
  auto world = std::make_shared<HostedWorld>(request.name(), mode, tick_hz,
                                             limits_.max_pending, burst_budget_,
                                             owner, fanout_);
  if (logs_ != nullptr) {
    // Durable before it exists for anyone: created means durable.
    config::StoredWorld stored;
    v1::CreateWorldRequest& create = *stored.mutable_create();
    create.set_name(request.name());
    create.set_mode(mode);
    create.set_tick_hz(mode == v1::FRAME_MODE_TICK ? tick_hz : 0);
    stored.set_owner(owner);
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
    const v1::CreateWorldRequest& create = recovered.stored.create();
    auto world = std::make_shared<HostedWorld>(
        create.name(), create.mode(), create.tick_hz(), limits_.max_pending,
        burst_budget_, recovered.stored.owner(), fanout_);
    entities += recovered.world.size();
    const size_t size = recovered.world.size();
    const absl::Time published = absl::Now();
    world->Restore(std::move(recovered.world), recovered.last_frame);
    Log('I', "recovery: world ", Quoted(create.name()), ": ", size,
        " entities, frame ", recovered.last_frame, " (snapshot read in ",
        absl::FormatDuration(recovered.snapshot_time), ", ", recovered.replayed,
        " journaled batches replayed in ",
        absl::FormatDuration(recovered.replay_time), ", published in ",
        absl::FormatDuration(absl::Now() - published), ")");
    world->Persist(std::move(recovered.log));
    absl::MutexLock lock(&mu_);
    worlds_[create.name()] = world;
    StartTicking(world);
    return absl::OkStatus();
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
  std::shared_ptr<HostedWorld> world;
  std::unique_ptr<PeriodicThread> ticker;
  absl::MutexLock creating(&create_mu_);
  if (absl::StatusOr<std::shared_ptr<HostedWorld>> found = Get(name);
      !found.ok()) {
    return found.status();
  }
  if (logs_ != nullptr) {
    if (absl::Status s = logs_->DeleteWorld(name); !s.ok()) return s;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = worlds_.find(name);
    if (it == worlds_.end()) {
      return absl::NotFoundError(absl::StrCat("no world ", Quoted(name)));
    }
    world = std::move(it->second);
    worlds_.erase(it);
    if (auto t = tickers_.find(name); t != tickers_.end()) {
      ticker = std::move(t->second);
      tickers_.erase(t);
    }
    trim_due_ = absl::Now() + kTrimDelay;
  }
  ticker.reset();  // Stops its publishing (after a publish under way).
  world->replicator().EndAll(absl::NotFoundError(
      absl::StrCat("world ", Quoted(name), " was deleted")));
  return absl::OkStatus();
}

void WorldHost::EndAllStreams(const absl::Status& status) {
  for (const auto& world : List()) world->replicator().EndAll(status);
}

absl::Time WorldHost::PollOnce() {
  const absl::Time now = absl::Now();
  for (const auto& world : List()) world->replicator().Flush(now);
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
