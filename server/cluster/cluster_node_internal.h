// Copyright 2026 The xform Authors.
//
// What the parts of ClusterNode's implementation share (cluster_node.cc,
// cluster_node_roles.cc, cluster_node_catalog.cc): the statuses writes are
// refused with, lease bytes, record ids. Not for use outside them.

#ifndef XFORM_SERVER_CLUSTER_CLUSTER_NODE_INTERNAL_H_
#define XFORM_SERVER_CLUSTER_CLUSTER_NODE_INTERNAL_H_

#include <nats/nats.h>

#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/base/log.h"
#include "server/cluster/cluster_node.h"
#include "server/cluster/view/redirect.h"

namespace xform::server::cluster_internal {

inline constexpr absl::Duration kKeepEvery = absl::Milliseconds(250);

// Whether `key` is in `bucket` (an error reads as present: asked again).
inline bool InBucket(kvStore* bucket, const std::string& key) {
  kvEntry* entry = nullptr;
  const natsStatus s = kvStore_Get(&entry, bucket, key.c_str());
  if (s == NATS_OK) kvEntry_Destroy(entry);
  return s != NATS_NOT_FOUND;
}
// How long a writer stepping down waits for its log to acknowledge what it
// took before it reloads the world instead.
inline constexpr absl::Duration kStepDownWait = absl::Seconds(5);

inline std::string RandomId() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8));
}

inline std::string LeaseBytes(const ClusterOptions& options, uint64_t epoch) {
  config::OwnerLease lease;
  lease.set_node(options.node);
  lease.set_address(options.address);
  lease.set_epoch(epoch);
  return lease.SerializeAsString();
}

inline absl::Status NoWriter(absl::string_view world) {
  return TryAgainShortly(
      absl::StrCat("world ", Quoted(world),
                   " has no writer at the moment (its writer was lost or is "
                   "moving)"));
}

inline absl::Status Moving(absl::string_view world) {
  return TryAgainShortly(
      absl::StrCat("world ", Quoted(world), " is moving to another node"));
}

// The MsgId of a world's first record (its creation).
inline std::string CreatedId(absl::string_view key) {
  return absl::StrCat("created:", key);
}

inline std::string WritesOf(absl::string_view world) {
  return absl::StrCat("world ", Quoted(world), "'s writes");
}

}  // namespace xform::server::cluster_internal

#endif  // XFORM_SERVER_CLUSTER_CLUSTER_NODE_INTERNAL_H_
