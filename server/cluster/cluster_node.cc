// Copyright 2026 The xform Authors.

#include "server/cluster/cluster_node.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/cluster/log_records.h"
#include "server/storage/snapshot_file.h"

namespace xform::server {
namespace {

constexpr absl::Duration kKeepEvery = absl::Milliseconds(250);

// Whether `key` is in `bucket` (an error reads as present: asked again).
bool InBucket(kvStore* bucket, const std::string& key) {
  kvEntry* entry = nullptr;
  const natsStatus s = kvStore_Get(&entry, bucket, key.c_str());
  if (s == NATS_OK) kvEntry_Destroy(entry);
  return s != NATS_NOT_FOUND;
}
// How long a writer stepping down waits for its log to acknowledge what it
// took before it reloads the world instead.
constexpr absl::Duration kStepDownWait = absl::Seconds(5);

std::string RandomId() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8));
}

std::string LeaseBytes(const ClusterOptions& options, uint64_t epoch) {
  config::OwnerLease lease;
  lease.set_node(options.node);
  lease.set_address(options.address);
  lease.set_epoch(epoch);
  return lease.SerializeAsString();
}

absl::Status NoWriter(absl::string_view world) {
  return TryAgainShortly(
      absl::StrCat("world ", Quoted(world),
                   " has no writer at the moment (its writer was lost or is "
                   "moving)"));
}

absl::Status Moving(absl::string_view world) {
  return TryAgainShortly(
      absl::StrCat("world ", Quoted(world), " is moving to another node"));
}

// The MsgId of a world's first record (its creation).
std::string CreatedId(absl::string_view key) {
  return absl::StrCat("created:", key);
}

std::string WritesOf(absl::string_view world) {
  return absl::StrCat("world ", Quoted(world), "'s writes");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterNode>> ClusterNode::Connect(
    ClusterOptions options, const Clock& clock) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("--cluster names no NATS server");
  }
  absl::StatusOr<std::shared_ptr<NatsLink>> link = NatsLink::Connect(options);
  if (!link.ok()) return link.status();
  return std::unique_ptr<ClusterNode>(
      new ClusterNode(std::move(options), clock, *std::move(link)));
}

ClusterNode::ClusterNode(ClusterOptions options, const Clock& clock,
                         std::shared_ptr<NatsLink> link)
    : options_(std::move(options)),
      clock_(clock),
      link_(std::move(link)),
      started_(clock_.Now()) {}

ClusterNode::~ClusterNode() {
  stopping_.store(true);
  loop_.reset();
  if (watcher_.joinable()) watcher_.join();
  keeper_.reset();
  absl::MutexLock lock(&ops_mu_);
  for (auto& [name, held] : held_) {
    held->follower.reset();
    held->log.reset();
  }
  held_.clear();
  pending_.clear();
}

std::shared_ptr<JetStreamWorldLog> ClusterNode::MakeLog(
    const std::string& name, std::string stored_world, uint64_t last_seq,
    std::string last_msg_id) {
  auto log = std::make_shared<JetStreamWorldLog>(
      link_, name, std::move(stored_world), last_seq, std::move(last_msg_id),
      options_, clock_);
  absl::MutexLock lock(&keep_mu_);
  logs_[name] = log;
  return log;
}

// --- The log seam.

absl::Status ClusterNode::Recover(
    absl::FunctionRef<absl::Status(RecoveredWorld)> take) {
  // JetStream may still be electing the bucket's leader (a NATS server
  // restarted with this node): asked until the deadline.
  const absl::Time deadline = clock_.Now() + options_.connect_timeout;
  kvKeysList keys;
  for (natsStatus s;
       (s = kvStore_Keys(&keys, link_->worlds(), nullptr)) != NATS_OK &&
       s != NATS_NOT_FOUND;
       absl::SleepFor(absl::Milliseconds(200))) {
    if (clock_.Now() >= deadline) {
      return NatsError("cannot list the cluster's worlds", s);
    }
    Log('W', "recovery: ", NatsError("cannot list the worlds", s).message(),
        "; asking again");
  }
  std::vector<std::string> world_keys(keys.Keys, keys.Keys + keys.Count);
  kvKeysList_Destroy(&keys);
  for (const std::string& key : world_keys) {
    // A stream whose leader is being elected answers late: its world is
    // read again, whole, until the deadline.
    // A world in the catalog has a snapshot (its creation stored one before
    // the entry): one not found is not there yet where it was read (a NATS
    // server catching up), and read again too.
    absl::StatusOr<LoadedWorld> loaded = LoadWorld(*link_, key, clock_);
    while ((absl::IsUnavailable(loaded.status()) ||
            absl::IsNotFound(loaded.status())) &&
           clock_.Now() < deadline && InBucket(link_->worlds(), key)) {
      Log('W', "recovery: ", LogStream(key), ": ", loaded.status().message(),
          "; reading it again");
      absl::SleepFor(absl::Milliseconds(200));
      loaded = LoadWorld(*link_, key, clock_);
    }
    if (absl::IsNotFound(loaded.status()) && !InBucket(link_->worlds(), key)) {
      continue;  // Deleted meanwhile.
    }
    if (!loaded.ok()) return loaded.status();
    RecoveredWorld& recovered = loaded->recovered;
    const std::string name = recovered.stored.create().name();
    {
      absl::MutexLock lock(&ops_mu_);
      pending_[name] = {.key = key,
                        .stored = recovered.stored.SerializeAsString(),
                        .last_seq = loaded->last_seq,
                        .epoch = loaded->epoch};
    }
    recovered.log = nullptr;  // A replica, until a lease says otherwise.
    if (absl::Status s = take(std::move(recovered)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ClusterNode::StartStreams(
    const std::string& key, const std::string& stored_bytes) {
  if (absl::Status s =
          link_->AddStream(LogStream(key), LogSubject(key), options_.replicas);
      !s.ok()) {
    return s;
  }
  const auto undo = [&](absl::Status why) {
    DropStreams(key);
    return why;
  };
  if (absl::Status s = link_->AddStream(SnapStream(key), SnapSubject(key),
                                        options_.replicas);
      !s.ok()) {
    return undo(s);
  }
  // The log's first record marks the world's creation, so that every
  // record has one before it to expect.
  absl::StatusOr<uint64_t> created = link_->PublishSync(
      MakeMessage(
          LogSubject(key), "",
          {{kClusterHeader, link_->cluster()}, {"Xform-World", "created"}}),
      CreatedId(key), "cannot log the world's creation");
  if (!created.ok()) return undo(created.status());
  // The empty world's snapshot, which loading requires.
  WorldImage empty;
  empty.frame = 1;
  if (absl::Status s =
          link_
              ->PublishSync(
                  MakeMessage(SnapSubject(key),
                              EncodeSnapshot(stored_bytes, empty),
                              {{kClusterHeader, link_->cluster()},
                               {"Xform-Snapshot", "created"},
                               {"Xform-Chunk", "0"},
                               {"Xform-Chunks", "1"},
                               {"Xform-After", absl::StrCat(*created)}}),
                  absl::StrCat("created-snap:", key),
                  "cannot store the world's first snapshot")
              .status();
      !s.ok()) {
    return undo(s);
  }
  return created;
}

void ClusterNode::DropStreams(const std::string& key) {
  link_->DeleteStream(LogStream(key)).IgnoreError();
  link_->DeleteStream(SnapStream(key)).IgnoreError();
}

absl::StatusOr<std::shared_ptr<WorldLog>> ClusterNode::CreateWorld(
    const config::StoredWorld& stored) {
  const std::string& name = stored.create().name();
  const std::string key = StreamKey(name);
  const std::string stored_bytes = stored.SerializeAsString();
  absl::StatusOr<uint64_t> created = StartStreams(key, stored_bytes);
  if (!created.ok()) return created.status();
  const auto undo = [&](absl::Status why) {
    DropStreams(key);
    return why;
  };
  // This node writes it, from its first epoch.
  uint64_t revision = 0;
  const std::string lease = LeaseBytes(options_, 1);
  if (natsStatus s =
          kvStore_Create(&revision, link_->owners(), key.c_str(), lease.data(),
                         static_cast<int>(lease.size()));
      s != NATS_OK) {
    return undo(NatsError("cannot take the new world's lease", s));
  }
  // Last: the other nodes learn of it (created means durable).
  if (natsStatus s = kvStore_Create(nullptr, link_->worlds(), key.c_str(),
                                    stored_bytes.data(),
                                    static_cast<int>(stored_bytes.size()));
      s != NATS_OK) {
    kvStore_Delete(link_->owners(), key.c_str());
    return undo(NatsError("cannot enter the world in XFORM_WORLDS", s));
  }
  std::shared_ptr<JetStreamWorldLog> log =
      MakeLog(name, stored_bytes, *created, CreatedId(key));
  if (absl::Status s = log->FenceSnapshots(); !s.ok()) {
    kvStore_Delete(link_->worlds(), key.c_str());
    kvStore_Delete(link_->owners(), key.c_str());
    return undo(s);
  }
  absl::MutexLock lock(&ops_mu_);
  pending_[name] = {.key = key,
                    .stored = stored_bytes,
                    .last_seq = *created,
                    .epoch = 1,
                    .log = log,
                    .lease_revision = revision};
  // Written here from now: said so at once, not a step later.
  absl::MutexLock view(&view_mu_);
  placements_[name] = {options_.node, options_.address, clock_.Now()};
  return log;
}

absl::Status ClusterNode::DeleteWorld(absl::string_view name) {
  const std::string key = StreamKey(name);
  // Gone from the catalog first: every node forgets it.
  if (natsStatus s = kvStore_Delete(link_->worlds(), key.c_str());
      s != NATS_OK) {
    return NatsError(absl::StrCat("cannot delete world ", Quoted(name)), s);
  }
  {
    absl::MutexLock lock(&ops_mu_);
    pending_.erase(std::string(name));
    if (auto it = held_.find(name); it != held_.end()) {
      it->second->follower.reset();
      it->second->log.reset();
      held_.erase(it);
    }
  }
  {
    absl::MutexLock lock(&view_mu_);
    placements_.erase(std::string(name));
  }
  kvStore_Delete(link_->owners(), key.c_str());
  if (absl::Status s = link_->DeleteStream(LogStream(key)); !s.ok()) return s;
  return link_->DeleteStream(SnapStream(key));
}

void ClusterNode::StartKeeping(WorldOf world_of) {
  {
    absl::MutexLock lock(&keep_mu_);
    world_of_ = std::move(world_of);
  }
  keeper_ =
      std::make_unique<PeriodicThread>("xform-jskeep", clock_.Now(), [this] {
        absl::MutexLock lock(&keep_mu_);
        for (auto& [name, log] : LiveLogs(logs_)) {
          if (!log->SnapshotDue()) continue;
          std::shared_ptr<SnapshotSource> source = world_of_(name);
          if (source == nullptr) continue;
          if (absl::Status s = log->Snapshot(*source); !s.ok()) {
            Log('E', "world '", EscapeForLog(name),
                "': snapshot failed: ", s.message());
          }
        }
        return clock_.Now() + kKeepEvery;
      });
}

void ClusterNode::SnapshotAll() {
  keeper_.reset();
  absl::MutexLock lock(&keep_mu_);
  if (!world_of_) return;
  for (auto& [name, log] : LiveLogs(logs_)) {
    if (!log->Logged() || !log->broken().ok()) continue;
    if (std::shared_ptr<SnapshotSource> source = world_of_(name)) {
      if (absl::Status s = log->Snapshot(*source); !s.ok()) {
        Log('E', "world '", EscapeForLog(name),
            "': snapshot failed: ", s.message());
      }
    }
  }
}

// --- Serving.

absl::Status ClusterNode::Serve(WorldHost& host) {
  // Another node of this name that still renews its entry is running: two
  // nodes of one name would take each other's leases.
  kvEntry* entry = nullptr;
  if (kvStore_Get(&entry, link_->nodes(), options_.node.c_str()) == NATS_OK) {
    config::NodeRecord before;
    before.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
    kvEntry_Destroy(entry);
    absl::SleepFor(options_.lease / 2 + absl::Milliseconds(200));
    if (kvStore_Get(&entry, link_->nodes(), options_.node.c_str()) == NATS_OK) {
      config::NodeRecord after;
      after.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
      kvEntry_Destroy(entry);
      if (after.renewed_unix_nanos() != before.renewed_unix_nanos() &&
          after.started_unix_nanos() != absl::ToUnixNanos(started_)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "another running node is named ", Quoted(options_.node), " (at ",
            after.address(), "): --node_name must be unique"));
      }
    }
  }
  {
    absl::MutexLock lock(&ops_mu_);
    host_ = &host;
    for (const std::shared_ptr<HostedWorld>& world : host.List()) {
      auto pending = pending_.find(world->name());
      if (pending == pending_.end()) continue;
      auto held = std::make_unique<Held>();
      held->name = world->name();
      held->key = pending->second.key;
      held->stored = pending->second.stored;
      held->world = world;
      held->epoch = pending->second.epoch;
      held->confirmed = clock_.Now();
      Follow(*held, pending->second.last_seq + 1);
      Publish(*held);
      held_[world->name()] = std::move(held);
      pending_.erase(pending);
    }
  }
  KeepEntry();
  Log('I', "cluster: node ", Quoted(options_.node), " serves at ",
      options_.address, ", holding ", host.List().size(), " world(s)");
  loop_ = std::make_unique<PeriodicThread>("xform-cluster", clock_.Now(),
                                           [this] { return Step(); });
  watcher_ = std::thread([this] { WatchWorlds(); });
  return absl::OkStatus();
}

void ClusterNode::Leave() {
  {
    absl::MutexLock lock(&ops_mu_);
    leaving_ = true;
    draining_ = true;
    const uint32_t moved = HandOffAll();
    if (moved > 0) {
      Log('I', "cluster: leaving: ", moved, " world(s) handed to other nodes");
    }
  }
  kvStore_Delete(link_->nodes(), options_.node.c_str());
}

absl::Time ClusterNode::Step() {
  const absl::Time next = clock_.Now() + options_.lease / 8;
  if (stopping_.load()) return next;
  if (link_->TakeReconnected()) {
    if (absl::Status same = link_->CheckIdentity();
        absl::IsFailedPrecondition(same)) {
      // Refused, not mixed: another deployment's worlds share these names.
      Log('E', "cluster: ", same.message(), "; stopping");
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }
  }
  bool entry_due = false;
  {
    absl::MutexLock lock(&view_mu_);
    entry_due = clock_.Now() - entry_kept_ >= options_.lease / 2;
    if (entry_due) entry_kept_ = clock_.Now();
  }
  if (entry_due) KeepEntry();
  absl::MutexLock lock(&ops_mu_);
  if (host_ == nullptr) return next;
  TakeInCreated();
  for (auto& [name, held] : held_) {
    StepWorld(*held);
    Publish(*held);
  }
  return next;
}

void ClusterNode::TakeInCreated() {
  // Worlds this node created since the last step: written here.
  for (auto it = pending_.begin(); it != pending_.end();) {
    absl::StatusOr<std::shared_ptr<HostedWorld>> world = host_->Get(it->first);
    if (!world.ok() || it->second.log == nullptr) {
      ++it;
      continue;
    }
    auto held = std::make_unique<Held>();
    held->name = it->first;
    held->key = it->second.key;
    held->stored = it->second.stored;
    held->world = *world;
    held->role = Role::kWriting;  // Created here: written here from the start.
    held->log = it->second.log;
    held->lease_revision = it->second.lease_revision;
    held->renewed = held->confirmed = clock_.Now();
    held->epoch = 1;
    held->writer = {options_.node, options_.address};
    held_[it->first] = std::move(held);
    pending_.erase(it++);
  }
}

absl::string_view ClusterNode::RoleName(Role role) {
  switch (role) {
    case Role::kLoading:
      return "loading";
    case Role::kWedged:
      return "wedged";
    case Role::kFollowing:
      return "following";
    case Role::kTaking:
      return "taking";
    case Role::kWriting:
      return "writing";
  }
  return "?";
}

void ClusterNode::Become(Held& held, Role role) {
  const Role from = held.role;
  bool drawn = false;  // Whether the diagram in cluster_node.h has it.
  switch (role) {
    case Role::kLoading:  // Reload() starts from anywhere but a take.
      drawn = from != Role::kTaking;
      break;
    case Role::kWedged:
      drawn = from == Role::kLoading || from == Role::kWedged;
      break;
    case Role::kFollowing:
      drawn = from == Role::kLoading || from == Role::kTaking ||
              from == Role::kWriting;
      break;
    case Role::kTaking:
      drawn = from == Role::kFollowing;
      break;
    case Role::kWriting:
      drawn = from == Role::kTaking;
      break;
  }
  if (!drawn) {
    Log('E', "world '", EscapeForLog(held.name), "': its role went from ",
        RoleName(from), " to ", RoleName(role),
        ", which cluster_node.h's diagram does not have");
  }
  held.role = role;
}

void ClusterNode::StepWorld(Held& held) {
  const absl::Time now = clock_.Now();
  switch (held.role) {
    case Role::kWriting:
      StepWriter(held, now);
      return;
    case Role::kTaking:  // Only within Promote().
      return;
    case Role::kFollowing:
      if (now - held.checked >= options_.lease) {
        held.checked = now;
        held.follower->CheckFallenBehind(options_.lease).IgnoreError();
      }
      if (!held.follower->failed().ok()) Become(held, Role::kLoading);
      break;
    case Role::kLoading:
    case Role::kWedged:
      break;
  }
  if (held.role != Role::kFollowing && now >= held.reload_after) {
    Reload(held);
  }
  // Its writes stay refused, saying why, until an operator skips the
  // record (SkipRecord): no node can take a world it cannot load.
  if (held.role == Role::kWedged) return;
  absl::StatusOr<std::optional<config::OwnerLease>> lease =
      ReadLease(held.key, &held.lease_seen);
  if (!lease.ok()) return;  // Cut off: it serves what it has, unconfirmed.
  held.confirmed = now;
  // Writes are told to try again rather than sent to a writer likely lost.
  RefuseWrites(held, Unrenewed(held.lease_seen)
                         ? std::optional<config::OwnerLease>()
                         : *lease);
  if (lease->has_value() || draining_ || leaving_) return;
  // Only a follower takes a world: what it applied is the log's.
  if (held.role == Role::kFollowing) TryToTake(held, now);
}

void ClusterNode::StepWriter(Held& held, absl::Time now) {
  if (absl::Status broken = held.log->broken(); !broken.ok()) {
    StepDown(held, broken.message(), /*release=*/true);
    return;
  }
  if (draining_) {
    StepDown(held, "this node drains", /*release=*/true);
    return;
  }
  if (now - held.renewed >= options_.lease / 4) RenewLease(held, now);
}

void ClusterNode::TryToTake(Held& held, absl::Time now) {
  const uint64_t epoch = std::max(held.epoch, held.follower->epoch()) + 1;
  const std::string bytes = LeaseBytes(options_, epoch);
  uint64_t revision = 0;
  if (kvStore_Create(&revision, link_->owners(), held.key.c_str(), bytes.data(),
                     static_cast<int>(bytes.size())) != NATS_OK) {
    return;  // Another node was first.
  }
  held.lease_revision = revision;
  held.renewed = now;
  held.epoch = epoch;
  if (!Promote(held)) {
    ReleaseLease(held);
    held.lease_revision = 0;
  }
}

void ClusterNode::RenewLease(Held& held, absl::Time now) {
  uint64_t revision = 0;
  const std::string lease = LeaseBytes(options_, held.epoch);
  const natsStatus s =
      kvStore_Update(&revision, link_->owners(), held.key.c_str(), lease.data(),
                     static_cast<int>(lease.size()), held.lease_revision);
  if (s == NATS_OK) {
    held.lease_revision = revision;
    held.renewed = held.confirmed = now;
  } else if (s == NATS_ERR) {
    // JetStream answered: the lease expired (this node paused, or the
    // bucket's NATS leader was lost for longer than a lease), and perhaps
    // another took it. Where none did, this node takes it again and
    // writes on: its appends expect the log's end, so a node that took
    // the world meanwhile and began an epoch fences it all the same.
    if (kvStore_Create(&revision, link_->owners(), held.key.c_str(),
                       lease.data(),
                       static_cast<int>(lease.size())) == NATS_OK) {
      held.lease_revision = revision;
      held.renewed = held.confirmed = now;
      Log('W', "world '", EscapeForLog(held.name),
          "': its lease expired before it was renewed, and was taken "
          "again");
    } else {
      StepDown(held, "its lease was lost", /*release=*/false);
    }
  }
  // Otherwise NATS did not answer: the log fences this node if another
  // takes the world meanwhile.
}

absl::StatusOr<std::optional<config::OwnerLease>> ClusterNode::ReadLease(
    const std::string& key, LeaseSeen* seen) {
  kvEntry* entry = nullptr;
  const natsStatus s = kvStore_Get(&entry, link_->owners(), key.c_str());
  if (s == NATS_NOT_FOUND) {
    if (seen != nullptr) *seen = {};
    return std::nullopt;
  }
  if (s != NATS_OK) return NatsError("cannot read a lease", s);
  config::OwnerLease lease;
  const bool parsed =
      lease.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry));
  const uint64_t revision = kvEntry_Revision(entry);
  kvEntry_Destroy(entry);
  if (!parsed) return absl::DataLossError("a lease that does not parse");
  if (seen != nullptr && revision != seen->revision) {
    *seen = {revision, clock_.Now()};
  }
  return lease;
}

bool ClusterNode::Unrenewed(const LeaseSeen& seen) const {
  // Its writer renews it every quarter lease: one unrenewed for half a
  // lease names a writer that is likely lost (a node killed, cut off or
  // paused). Counted on this node's clock alone, so the nodes' clocks need
  // not agree.
  return seen.revision != 0 && clock_.Now() - seen.changed > options_.lease / 2;
}

void ClusterNode::RefuseWrites(Held& held,
                               const std::optional<config::OwnerLease>& lease) {
  const xform::server::Redirect writer =
      lease ? xform::server::Redirect{lease->node(), lease->address()}
            : xform::server::Redirect{};
  if (writer.node == held.writer.node &&
      writer.address == held.writer.address) {
    return;
  }
  held.writer = writer;
  held.world->StopWriting(lease && lease->node() != options_.node
                              ? RedirectTo(WritesOf(held.name), writer)
                              : NoWriter(held.name));
}

void ClusterNode::Follow(Held& held, uint64_t next_seq) {
  held.follower = std::make_unique<WorldFollower>(link_, held.world, held.key);
  if (absl::Status s = held.follower->Start(next_seq, held.epoch); !s.ok()) {
    Log('W', "world '", EscapeForLog(held.name), "': ", s.message(),
        "; trying again");
    held.follower.reset();  // The next step reloads it.
    Become(held, Role::kLoading);
    return;
  }
  Become(held, Role::kFollowing);
}

std::optional<uint64_t> ClusterNode::ReadToEnd(Held& held) {
  absl::StatusOr<StreamExtent> extent = link_->Extent(LogStream(held.key));
  if (!extent.ok()) {
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take it: ", extent.status().message());
    return std::nullopt;
  }
  // At most a lease: the wait holds ops_mu_, and a node that waited ten
  // seconds let every other lease it held expire meanwhile (the crash loop
  // saw it). One that cannot catch up by then gives the world up for now.
  if (held.follower == nullptr ||
      !held.follower->WaitConsumed(extent->last, options_.lease)) {
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take it: its log was not read to its end (", extent->last,
        ")");
    return std::nullopt;
  }
  return extent->last;
}

bool ClusterNode::Promote(Held& held) {
  Become(held, Role::kTaking);
  // Everything up to the log's end, applied.
  const std::optional<uint64_t> end = ReadToEnd(held);
  if (!end) {
    Become(held,
           held.follower->failed().ok() ? Role::kFollowing : Role::kLoading);
    return false;
  }
  held.follower->Stop();
  held.epoch = std::max(held.epoch, held.follower->epoch() + 1);
  // The epoch expects the log's end: a writer that appended since (one
  // thought lost, but paused) fences this node instead.
  // An id of its own: epochs are numbered from what a node read, and a
  // number seen twice must not be taken as a duplicate.
  const std::string epoch_id =
      absl::StrCat("epoch:", options_.node, ":", RandomId());
  absl::StatusOr<uint64_t> epoch_seq =
      link_->PublishSync(MakeMessage(LogSubject(held.key), "",
                                     {{kClusterHeader, link_->cluster()},
                                      {"Xform-Epoch", absl::StrCat(held.epoch)},
                                      {"Xform-Node", options_.node}}),
                         epoch_id, "cannot begin an epoch", *end);
  if (!epoch_seq.ok()) {
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take it: ", epoch_seq.status().message());
    Follow(held, held.follower->applied_seq() + 1);
    return false;
  }
  held.follower.reset();
  // Its snapshots say in which epoch they were taken.
  config::StoredWorld stored;
  stored.ParseFromString(held.stored);
  stored.set_epoch(held.epoch);
  held.log =
      MakeLog(held.name, stored.SerializeAsString(), *epoch_seq, epoch_id);
  if (absl::Status s = held.log->FenceSnapshots(); !s.ok()) {
    // Its snapshots could be another's: not written here until they are
    // its own (the next step tries again).
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot take its snapshots: ", s.message());
    held.log.reset();
    Follow(held, *epoch_seq + 1);
    return false;
  }
  held.writer = {options_.node, options_.address};
  Become(held, Role::kWriting);
  held.world->StartWriting(held.log);
  Log('I', "world '", EscapeForLog(held.name), "': written here from epoch ",
      held.epoch, " (its log at ", *epoch_seq, ")");
  return true;
}

void ClusterNode::ReleaseLease(const Held& held) {
  // A delete that expects the lease's revision, as KV's own delete is made
  // (a KV-Operation header): another node's lease is never removed.
  natsMsg* msg = MakeMessage(absl::StrCat("$KV.XFORM_OWNERS.", held.key), "",
                             {{"KV-Operation", "DEL"}});
  if (msg == nullptr) return;
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.ExpectLastSubjectSeq = held.lease_revision;
  jsErrCode code = static_cast<jsErrCode>(0);
  js_PublishMsg(nullptr, link_->js(), msg, &options, &code);
  natsMsg_Destroy(msg);
}

void ClusterNode::StepDown(Held& held, absl::string_view why, bool release) {
  held.world->StopWriting(Moving(held.name));
  absl::StatusOr<uint64_t> stored = held.log->WaitStored(kStepDownWait);
  held.log.reset();
  if (release) ReleaseLease(held);
  held.lease_revision = 0;
  held.writer = {};
  Log('I', "world '", EscapeForLog(held.name), "': no longer written here (",
      why, ")");
  if (stored.ok()) {
    // Its world holds what its log holds: it follows on from there.
    Follow(held, *stored + 1);
  } else {
    Reload(held);
  }
}

void ClusterNode::Reload(Held& held) {
  held.follower.reset();
  if (held.role != Role::kWedged) Become(held, Role::kLoading);
  absl::StatusOr<LoadedWorld> loaded = LoadWorld(*link_, held.key, clock_);
  if (!loaded.ok()) {
    if (const std::optional<uint64_t> record = BadRecordOf(loaded.status())) {
      // Wedged: every load stops at this record. Said to its writers
      // (DATA_LOSS, not "try again"), in GetWorld, and in the node's
      // health, and tried again every few seconds (an operator may have
      // skipped it at another node).
      if (held.wedged.ok()) {
        Log('E', "world '", EscapeForLog(held.name),
            "' is wedged: ", loaded.status().message(),
            "; serving what it holds. To skip "
            "the record (losing what it held): xformctl worlds skip-record ",
            EscapeForLog(held.name), " ", *record);
      }
      held.wedged = loaded.status();
      Become(held, Role::kWedged);
      held.reload_after = clock_.Now() + 4 * options_.lease;
      held.writer = {};
      held.world->StopWriting(absl::DataLossError(
          absl::StrCat("world ", Quoted(held.name),
                       " is wedged: ", loaded.status().message(),
                       "; its writes are refused until an "
                       "operator skips record ",
                       *record,
                       " (docs/cluster.md, \"A wedged "
                       "world\")")));
      TellWedged();
      return;
    }
    Log('W', "world '", EscapeForLog(held.name),
        "': cannot reload it: ", loaded.status().message(),
        "; serving what it holds");
    return;  // Tried again at the next step.
  }
  if (!held.wedged.ok()) {
    Become(held, Role::kLoading);
    Log('I', "world '", EscapeForLog(held.name), "' is no longer wedged");
    held.wedged = absl::OkStatus();
    held.world->StopWriting(NoWriter(held.name));  // Until its lease is read.
    TellWedged();
  }
  held.world->Reset(loaded->recovered);
  held.epoch = loaded->epoch;
  Log('I', "world '", EscapeForLog(held.name), "': reloaded (frame ",
      loaded->recovered.last_frame, ", its log at ", loaded->last_seq, ")");
  Follow(held, loaded->last_seq + 1);
}

uint32_t ClusterNode::HandOffAll() {
  // Those created here since the last step too (a drain right after a
  // create handed over all but the newest).
  TakeInCreated();
  uint32_t moved = 0;
  for (auto& [name, held] : held_) {
    if (held->role != Role::kWriting) continue;
    StepDown(*held, "handed to another node", /*release=*/true);
    Publish(*held);
    ++moved;
  }
  return moved;
}

absl::StatusOr<uint32_t> ClusterNode::Drain(absl::string_view node,
                                            bool drain) {
  if (node != options_.node) {
    absl::MutexLock lock(&view_mu_);
    for (const NodeView& other : nodes_) {
      if (other.name == node) {
        return RedirectTo(absl::StrCat("drains of node ", Quoted(node)),
                          {other.name, other.address});
      }
    }
    return absl::NotFoundError(absl::StrCat("no node ", Quoted(node)));
  }
  uint32_t moved = 0;
  {
    absl::MutexLock lock(&ops_mu_);
    draining_ = drain;
    if (drain) moved = HandOffAll();
  }
  Log('I', "cluster: this node ", drain ? "drains" : "takes worlds again",
      drain ? absl::StrCat(": ", moved, " world(s) handed to other nodes")
            : "");
  KeepEntry();
  return moved;
}

// --- Membership and placement.

void ClusterNode::KeepEntry() {
  config::NodeRecord record;
  record.set_name(options_.node);
  record.set_address(options_.address);
  record.set_started_unix_nanos(absl::ToUnixNanos(started_));
  record.set_renewed_unix_nanos(absl::ToUnixNanos(clock_.Now()));
  {
    absl::MutexLock lock(&ops_mu_);
    if (leaving_) return;  // Its entry is removed.
    record.set_draining(draining_);
    uint32_t owned = 0;
    for (const auto& [name, held] : held_) {
      owned += held->role == Role::kWriting;
    }
    record.set_worlds_owned(owned);
    record.set_worlds_served(static_cast<uint32_t>(held_.size()));
  }
  const std::string bytes = record.SerializeAsString();
  kvStore_Put(nullptr, link_->nodes(), options_.node.c_str(), bytes.data(),
              static_cast<int>(bytes.size()));
  kvKeysList keys;
  if (kvStore_Keys(&keys, link_->nodes(), nullptr) != NATS_OK) return;
  std::vector<NodeView> nodes;
  for (int i = 0; i < keys.Count; ++i) {
    kvEntry* entry = nullptr;
    if (kvStore_Get(&entry, link_->nodes(), keys.Keys[i]) != NATS_OK) continue;
    config::NodeRecord node;
    if (node.ParseFromArray(kvEntry_Value(entry), kvEntry_ValueLen(entry))) {
      nodes.push_back(
          {.name = node.name(),
           .address = node.address(),
           .draining = node.draining(),
           .worlds_owned = node.worlds_owned(),
           .worlds_served = node.worlds_served(),
           .started = absl::FromUnixNanos(node.started_unix_nanos()),
           .last_seen =
               clock_.Now() - absl::FromUnixNanos(node.renewed_unix_nanos())});
    }
    kvEntry_Destroy(entry);
  }
  kvKeysList_Destroy(&keys);
  std::sort(
      nodes.begin(), nodes.end(),
      [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
  absl::MutexLock lock(&view_mu_);
  nodes_ = std::move(nodes);
}

void ClusterNode::Publish(const Held& held) {
  absl::MutexLock lock(&view_mu_);
  placements_[held.name] = {
      .writer_node = held.writer.node,
      .writer_address = held.writer.address,
      .confirmed = std::max(held.confirmed, held.follower != nullptr
                                                ? held.follower->last_record()
                                                : absl::InfinitePast()),
      .wedged = std::string(held.wedged.message()),
      .wedged_record = BadRecordOf(held.wedged).value_or(0)};
}

void ClusterNode::TellWedged() {
  std::vector<std::string> wedged;
  for (const auto& [name, held] : held_) {
    if (!held->wedged.ok()) wedged.push_back(name);
  }
  std::sort(wedged.begin(), wedged.end());
  if (wedged == told_wedged_) return;
  told_wedged_ = wedged;
  if (on_wedged_) on_wedged_(std::move(wedged));
}

absl::Status ClusterNode::SkipRecord(absl::string_view world, uint64_t record) {
  absl::MutexLock lock(&ops_mu_);
  Held* held = Find(world);
  if (held == nullptr) {
    return absl::NotFoundError(absl::StrCat("no world ", Quoted(world)));
  }
  const std::optional<uint64_t> bad = BadRecordOf(held->wedged);
  if (!bad) {
    return absl::FailedPreconditionError(absl::StrCat(
        "world ", Quoted(world), " is not wedged here: no record to skip"));
  }
  if (*bad != record) {
    return absl::FailedPreconditionError(absl::StrCat("world ", Quoted(world),
                                                      " is wedged on record ",
                                                      *bad, ", not ", record));
  }
  const std::string stream = LogStream(held->key);
  jsErrCode code = static_cast<jsErrCode>(0);
  if (natsStatus s =
          js_DeleteMsg(link_->js(), stream.c_str(), record, nullptr, &code);
      s != NATS_OK) {
    return NatsError(
        absl::StrCat("cannot delete record ", record, " of ", stream), s, code);
  }
  // A record after the hole, so that the log never ends in one (a node
  // taking the world reads to the log's last sequence).
  absl::StatusOr<uint64_t> marked =
      link_->PublishSync(MakeMessage(LogSubject(held->key), "",
                                     {{kClusterHeader, link_->cluster()},
                                      {"Xform-Skipped", absl::StrCat(record)},
                                      {"Xform-Node", options_.node}}),
                         absl::StrCat("skipped:", record, ":", RandomId()),
                         "cannot mark the skipped record");
  if (!marked.ok()) return marked.status();
  held->reload_after = absl::InfinitePast();
  Reload(*held);
  Publish(*held);
  return held->wedged.ok() ? absl::OkStatus()
                           : absl::FailedPreconditionError(absl::StrCat(
                                 "record ", record,
                                 " skipped, but the world is still "
                                 "wedged: ",
                                 held->wedged.message()));
}

absl::StatusOr<std::vector<NodeView>> ClusterNode::Nodes() const {
  absl::MutexLock lock(&view_mu_);
  return nodes_;
}

PlacementView ClusterNode::Placement(absl::string_view world) const {
  PlacementView view;
  absl::MutexLock lock(&view_mu_);
  for (const NodeView& node : nodes_) view.serving_nodes.push_back(node.name);
  const auto it = placements_.find(world);
  if (it == placements_.end()) return view;
  view.owner_node = it->second.writer_node;
  view.owner_address = it->second.writer_address;
  // Heard from within a step or two: in touch.
  const absl::Duration since = clock_.Now() - it->second.confirmed;
  view.unconfirmed = since <= options_.lease / 2 ? absl::ZeroDuration() : since;
  view.wedged = it->second.wedged;
  view.wedged_record = it->second.wedged_record;
  return view;
}

bool ClusterNode::Writes(absl::string_view world) const {
  absl::MutexLock lock(&view_mu_);
  const auto it = placements_.find(world);
  return it != placements_.end() && it->second.writer_node == options_.node;
}

// --- Worlds created and deleted at other nodes.

void ClusterNode::WatchWorlds() {
  kvWatcher* watcher = nullptr;
  while (!stopping_.load()) {
    if (watcher == nullptr) {
      kvWatchOptions options;
      kvWatchOptions_Init(&options);
      if (kvStore_WatchAll(&watcher, link_->worlds(), &options) != NATS_OK) {
        watcher = nullptr;
        absl::SleepFor(absl::Milliseconds(500));
        continue;
      }
    }
    kvEntry* entry = nullptr;
    const natsStatus s = kvWatcher_Next(&entry, watcher, 500);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      kvWatcher_Destroy(watcher);
      watcher = nullptr;
      continue;
    }
    if (entry == nullptr) continue;  // The bucket's values so far are in.
    const std::string key = kvEntry_Key(entry);
    if (kvEntry_Operation(entry) == kvOp_Put) {
      Learn(key, std::string(static_cast<const char*>(kvEntry_Value(entry)),
                             kvEntry_ValueLen(entry)));
    } else {
      Forget(key);
    }
    kvEntry_Destroy(entry);
  }
  if (watcher != nullptr) kvWatcher_Destroy(watcher);
}

void ClusterNode::Learn(const std::string& key,
                        const std::string& stored_bytes) {
  config::StoredWorld stored;
  if (!stored.ParseFromString(stored_bytes)) return;
  const std::string& name = stored.create().name();
  {
    absl::MutexLock lock(&ops_mu_);
    if (host_ == nullptr || held_.contains(name) || pending_.contains(name) ||
        host_->Get(name).ok()) {
      return;
    }
  }
  absl::StatusOr<LoadedWorld> loaded = LoadWorld(*link_, key, clock_);
  for (int tries = 0;
       absl::IsUnavailable(loaded.status()) && tries < 20 && !stopping_.load();
       ++tries) {
    absl::SleepFor(absl::Milliseconds(200));
    loaded = LoadWorld(*link_, key, clock_);
  }
  if (!loaded.ok()) {
    Log('W', "world '", EscapeForLog(name),
        "', made at another node, cannot be loaded: ",
        loaded.status().message());
    return;
  }
  // Its writer, known before it is served: a node that answers for the
  // world names its writer from the first call (a world just created
  // is written at once, by the node that created it).
  LeaseSeen lease_seen;
  absl::StatusOr<std::optional<config::OwnerLease>> lease =
      ReadLease(key, &lease_seen);
  Redirect writer;
  if (lease.ok() && lease->has_value()) {
    writer = {(*lease)->node(), (*lease)->address()};
  }
  absl::MutexLock lock(&ops_mu_);
  if (held_.contains(name)) return;
  loaded->recovered.log = nullptr;
  auto held = std::make_unique<Held>();
  held->name = name;
  held->key = key;
  held->stored = stored_bytes;
  held->epoch = loaded->epoch;
  held->confirmed = clock_.Now();
  held->lease_seen = lease_seen;
  held->writer = writer;
  Publish(*held);  // Its placement, before any call finds the world.
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_->Add(std::move(loaded->recovered),
                 writer.node.empty() || writer.node == options_.node
                     ? NoWriter(name)
                     : RedirectTo(WritesOf(name), writer));
  if (!world.ok()) return;
  held->world = *world;
  Follow(*held, loaded->last_seq + 1);
  Publish(*held);
  held_[name] = std::move(held);
}

void ClusterNode::Forget(const std::string& key) {
  std::string name;
  {
    absl::MutexLock lock(&ops_mu_);
    if (host_ == nullptr) return;
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (it->second->key != key) continue;
      name = it->first;
      it->second->follower.reset();
      it->second->log.reset();
      held_.erase(it);
      break;
    }
    if (name.empty()) return;
    host_->Remove(name, absl::NotFoundError(absl::StrCat("world ", Quoted(name),
                                                         " was deleted")));
  }
  absl::MutexLock lock(&view_mu_);
  placements_.erase(name);
}

ClusterNode::Held* ClusterNode::Find(absl::string_view name) {
  const auto it = held_.find(name);
  return it == held_.end() ? nullptr : it->second.get();
}

}  // namespace xform::server
