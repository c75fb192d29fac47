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
#include "server/cluster/cluster_node_internal.h"
#include "server/cluster/log_records.h"
#include "server/storage/snapshot_file.h"

namespace xform::server {

using cluster_internal::CreatedId;
using cluster_internal::InBucket;
using cluster_internal::kKeepEvery;
using cluster_internal::LeaseBytes;
using cluster_internal::RandomId;

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

ClusterNode::Held* ClusterNode::Find(absl::string_view name) {
  const auto it = held_.find(name);
  return it == held_.end() ? nullptr : it->second.get();
}

}  // namespace xform::server
