// Copyright 2026 The xform Authors.
//
// One of a world's subscription streams, as xformd sees it: who it is, what
// it asked for, where it stands and what it was sent. `Client::
// ListSubscribers` reports them (on the wire, `xform.v1.SubscriberInfo`);
// the server's replicator fills them (server/replication/replicator.h). So an
// operator who sees a world's folds or resends climb (xform/stream_stats.h) can
// tell which subscriber it is, and from where.
//
// A snapshot of moving values: each subscriber's fields are read together,
// different subscribers' a moment apart.

#ifndef XFORM_SUBSCRIBER_INFO_H_
#define XFORM_SUBSCRIBER_INFO_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace xform {

struct SubscriberInfo {
  uint64_t id = 0;  // xformd's, as its log names the subscriber.
  // gRPC's name for its connection ("ipv4:10.0.0.5:41234"), and the
  // principal it authenticated as ("anonymous" without --auth_file).
  std::string peer;
  std::string principal;
  absl::Time subscribed;

  // What it asked for (SubscribeRequest). The compact encoding's position
  // precision as served (a power of two), or 0 for the raw encoding.
  float position_precision = 0;
  uint32_t entities_listed = 0;  // Both 0: the whole world.
  uint32_t subtrees_listed = 0;
  double max_rate_hz = 0;  // 0: a message per published frame.
  std::string no_echo_client_id;
  bool accepts_kept_view_snapshots = false;

  // Where it stands. The last frame it was sent whole, entities with
  // changes not yet sent to it (where the server keeps frames, counted once
  // a frame; where it is owed from the world's state, up to the world's
  // entities), and whether it is being sent a snapshot.
  uint64_t last_frame_sent = 0;
  uint64_t pending = 0;
  bool in_snapshot = false;
  // How long the write in flight has been waiting for the transport; zero
  // when none is. A reader that stopped shows it growing, and is cut off
  // at xformd's --write_timeout_ms.
  absl::Duration write_outstanding = absl::ZeroDuration();

  // What it was sent, as StreamStats counts them for the world.
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t frames_folded = 0;  // Its rate limit's folds included.
  uint64_t views_resent_whole = 0;
  uint64_t kept_view_snapshots = 0;
};

}  // namespace xform

#endif  // XFORM_SUBSCRIBER_INFO_H_
