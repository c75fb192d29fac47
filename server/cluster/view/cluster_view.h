// Copyright 2026 The xform Authors.
//
// ClusterView: what the service tells of the cluster a node belongs to
// (xformd --cluster; cluster/cluster_node.h is the one implementation),
// without knowing NATS: the nodes, where each world is written and served,
// and a node's drain. A single xformd has none.
//
// Thread-safe.

#ifndef XFORM_SERVER_CLUSTER_VIEW_CLUSTER_VIEW_H_
#define XFORM_SERVER_CLUSTER_VIEW_CLUSTER_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace xform::server {

struct NodeView {
  std::string name;
  std::string address;  // Where clients reach it.
  bool draining = false;
  uint32_t worlds_owned = 0;
  uint32_t worlds_served = 0;
  absl::Time started;
  absl::Duration last_seen;  // Since it last renewed its entry.
};

struct PlacementView {
  std::string owner_node;  // Empty while it has none.
  std::string owner_address;
  std::vector<std::string> serving_nodes;
  // Since this node last heard from the world's log (zero: in touch).
  absl::Duration unconfirmed;
  // Why this node cannot load it from its log, and the record (empty, 0:
  // it can).
  std::string wedged;
  uint64_t wedged_record = 0;
};

class ClusterView {
 public:
  virtual ~ClusterView() = default;
  virtual const std::string& node_name() const = 0;
  // The nodes with an entry now, by name; O(nodes) round trips to NATS at
  // most.
  virtual absl::StatusOr<std::vector<NodeView>> Nodes() const = 0;
  // Where `world` is written and served, as this node knows it.
  virtual PlacementView Placement(absl::string_view world) const = 0;
  // Drains this node (moves each world it writes to another node, and
  // takes none) or, with `drain` false, lets it write worlds again: the
  // worlds moved. Another node's name: FAILED_PRECONDITION redirecting
  // there (redirect.h); an unknown one: NOT_FOUND.
  virtual absl::StatusOr<uint32_t> Drain(absl::string_view node,
                                         bool drain) = 0;
  // Deletes record `record` from a wedged world's log, which this node
  // then loads again (the others within a few seconds). NOT_FOUND for no
  // such world; FAILED_PRECONDITION unless it is wedged on that record.
  virtual absl::Status SkipRecord(absl::string_view world, uint64_t record) = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_VIEW_CLUSTER_VIEW_H_
