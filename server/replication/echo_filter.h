// Copyright 2026 The xform Authors.
//
// EchoFilter: echo suppression for a writer that subscribes to its own world
// (SubscriptionOptions::no_echo_client_id): moves of entities that batches
// with that client id set directly in a frame are not sent, unless another
// writer also set the entity or one of its ancestors in that frame.
// Structural changes (created, destroyed, re-parented) are always sent.
//
// Echoes are found once a frame for each client that wrote in it and has
// such a subscriber (FindEchoes), O(entities moved). A compact subscriber's
// view then lags the published state where its own writes were not sent,
// so the shared frames, coded against what was published, fit it only when
// they move none of those: it keeps them (Lagged, Sent) and shares a frame
// only when that holds (MayShare). Past max_pending of them it stops
// keeping them and shares no frame until its view goes whole again
// (Forget).
//
// Not thread-safe: the Replicator's lock guards it.

#ifndef XFORM_SERVER_REPLICATION_ECHO_FILTER_H_
#define XFORM_SERVER_REPLICATION_ECHO_FILTER_H_

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "server/replication/published_state.h"
#include "xform/net_changes.h"
#include "xform/world.h"

namespace xform::server {

// Who set which entities directly in a frame, for echo suppression: the
// writer's client id, or "" when several (or anonymous) writers set it.
using FrameWriters = absl::flat_hash_map<EntityId, std::string>;

class EchoFilter {
 public:
  // By client id, the entities whose move in a frame was only that
  // client's own direct write.
  using Echoes =
      absl::flat_hash_map<std::string, absl::flat_hash_set<EntityId>>;
  // The clients that wrote in a frame (views of FrameWriters' strings).
  using WritingClients = absl::flat_hash_set<absl::string_view>;

  static WritingClients WritingClientsOf(const FrameWriters& writers);
  // The echoes of `client` in a frame: the entities it set, and no other
  // writer set, nor above them. O(entities moved), whatever the depth.
  static absl::flat_hash_set<EntityId> EchoesOf(const std::string& client,
                                                const FrameWriters& writers,
                                                const PublishedState& state);

  // `compact`: the subscriber is sent poses coded against what it holds.
  EchoFilter(std::string client, bool compact)
      : client_(std::move(client)), compact_(compact) {}

  const std::string& client() const { return client_; }
  // Whether the frame's move of `e` is this subscriber's echo.
  bool IsEcho(const Echoes& echoes, EntityId e) const {
    return echoes.at(client_).contains(e);
  }
  // Whether a frame's shared parts fit the subscriber: its writer did not
  // write in it, and (compact) it moves none of the entities it lags on
  // (`moves_any` tells, given them).
  bool MayShare(const WritingClients& writing,
                absl::FunctionRef<bool(const absl::flat_hash_set<EntityId>&)>
                    moves_any) const;
  // Its echo of `e` was not sent: what it holds of `e` lags (compact),
  // tracked up to `max` entities.
  void Lagged(EntityId e, size_t max);
  // It is sent `e` as published (a change other than a re-parenting).
  void Sent(EntityId e, NetChange change) {
    if (!lagging_.empty() && change != kReparented) lagging_.erase(e);
  }
  // Its view goes whole: nothing lags, and what was untracked is known.
  void Forget();

 private:
  const std::string client_;
  const bool compact_;
  absl::flat_hash_set<EntityId> lagging_;
  bool untracked_ = false;  // Past max: lags on what it does not know.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_ECHO_FILTER_H_
