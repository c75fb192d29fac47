// Copyright 2026 The xform Authors.
//
// ClusterNode: worlds created and deleted at other nodes, as the bucket
// XFORM_WORLDS says, learned and forgotten here.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/cluster/cluster_node.h"
#include "server/cluster/cluster_node_internal.h"
#include "server/cluster/log_records.h"
#include "server/storage/snapshot_file.h"

namespace xform::server {

using cluster_internal::NoWriter;
using cluster_internal::WritesOf;

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

}  // namespace xform::server
