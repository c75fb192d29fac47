// Copyright 2026 The xform Authors.
//
// What a world's subscription streams were sent, and where its subscribers
// stand: the server's counts (server/replication/replicator.h keeps them), as
// `Client::GetWorld` and `ListWorlds` report them (`WorldInfo::stream`;
// on the wire, `xform.v1.StreamStats`). Enough for an operator to tell a
// healthy fan-out from one whose subscribers fall behind, resync or stall.
//
// The counts run from when xformd created or loaded the world: a restart
// counts from 0 again.

#ifndef XFORM_STREAM_STATS_H_
#define XFORM_STREAM_STATS_H_

#include <cstdint>

namespace xform {

struct StreamStats {
  uint64_t messages = 0;  // Sent; each part of a split message counts.
  uint64_t bytes = 0;     // Their encodings, as handed to the transport.
  // FrameUpdate.frames_skipped, summed: frames folded into later messages
  // by subscribers that read slower than frames came (or were held to a
  // principal's bytes_out_per_second), and apart, by those whose
  // max_rate_hz asked for it (a 1 Hz dashboard folds 59 a second).
  uint64_t frames_folded = 0;
  uint64_t frames_folded_by_rate_limit = 0;
  // Snapshots to subscribers that already had a view (owed more than
  // xformd's --max_pending entities): their view resent whole, or a
  // snapshot that kept it (FrameUpdate.keeps_view). Joining snapshots are
  // not counted.
  uint64_t views_resent_whole = 0;
  uint64_t kept_view_snapshots = 0;
  // Streams cancelled for a write stuck past xformd's --write_timeout_ms.
  uint64_t streams_cut_off = 0;
  // Now: subscribers being sent a snapshot (joining, resent or kept).
  uint32_t subscribers_in_snapshot = 0;
};

}  // namespace xform

#endif  // XFORM_STREAM_STATS_H_
