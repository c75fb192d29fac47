// Copyright 2026 The xform Authors.
//
// WorldHistory is a hosted world's time (docs/time.md): the stamp each batch
// carries, what the batch did recorded into the core's History, and the
// server's rules around it, which the core leaves to its user:
//   - A batch's stamp is its own (ApplyRequest.stamp_nanos) or the server's
//     Unix time at apply; one more than --max_stamp_ahead_seconds past the
//     world's newest stamp is refused OUT_OF_RANGE.
//   - A set older than its entity's newest sample is late: it goes into
//     history only, and the live world (what subscribers see) keeps the
//     newer pose. A late set-world is made local against the parent's world
//     at its stamp, from history.
//   - Creates, destroys and links are structure: they apply to the live
//     world whatever their stamp, and are recorded at the batch's stamp or
//     the entity's newest, whichever is later (history is not rewritten
//     under samples that came after it).
// The writer (Apply) and a cluster's replicas (ApplyLogged) go through the
// same steps with the same stamp (it travels in the journal), so every
// replica holds the same history, bit for bit.
//
// Costs: O(commands) a batch, plus O(subtree) for a destroy (the subtree is
// recorded destroyed), plus History::Record's. A world with a window of 0
// keeps none and pays one branch a batch.
//
// Thread safety: none; the world's lock guards it (world_host.h).

#ifndef XFORM_SERVER_HOST_WORLD_HISTORY_H_
#define XFORM_SERVER_HOST_WORLD_HISTORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "xform/history.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::server {

struct HistoryLimits {
  // Each entity's samples reach this far back from its newest
  // (--history_seconds); 0: the world keeps no history.
  Stamp window_nanos = 10'000'000'000;
  // A bound on one world's history (--history_mb); 0: none.
  size_t max_bytes = size_t{256} << 20;
  // How far past the world's newest stamp a batch may be
  // (--max_stamp_ahead_seconds).
  Stamp max_ahead_nanos = 60'000'000'000;
  // The most links one lookup walks up a chain (--max_lookup_links): a
  // lookup holds the world's reader lock for O(links).
  size_t max_links = 10'000;
  // The world's (CreateWorldRequest.time_model): an entity's newest sample
  // holds until the world's newest stamp, or, as tf2, only to itself.
  bool hold_to_newest = true;
};

class WorldHistory {
 public:
  explicit WorldHistory(HistoryLimits limits = {});

  bool enabled() const { return history_ != nullptr; }
  // The stamp a batch asking for `requested` carries (0: `now`), or
  // OUT_OF_RANGE past the horizon.
  absl::StatusOr<Stamp> StampOf(int64_t requested, absl::Time now) const;

  // What a batch must know of the world before it applies: the entities its
  // destroys will take (their subtrees, or their children that stay).
  struct Prepared {
    std::vector<Command> late;  // For history only.
    std::vector<EntityId> destroyed;
    std::vector<EntityId> kept_children;
  };
  // The writer's: moves the late sets out of `commands` into
  // `prepared.late` (see above); the rest apply to the live world. (A
  // replica takes them from the writer's record instead: it may not hold
  // the history that made them late.)
  void TakeLateSets(std::vector<Command>& commands, Stamp stamp,
                    Prepared& prepared) const;
  // Fills the rest of `prepared` from `world` as it is before the batch.
  // Nothing is recorded until Record: a refused batch leaves no trace.
  void Prepare(absl::Span<const Command> commands, const World& world,
               Prepared& prepared) const;
  // Records what the batch did, with `world` in its state after.
  void Record(absl::Span<const Command> commands, Stamp stamp,
              const World& world, const Prepared& prepared);

  // A world restored (from --data_dir, or a cluster's log): every entity
  // enters history as it is, created at `stamp` (or 1 ns, the earliest,
  // when the records held none). Its history before is not kept, and that
  // sample holds until the entity's next: it was there at the newest stamp
  // the records held. O(entities).
  void Restart(const World& world, Stamp stamp);

  // The newest stamp of any batch applied (0: none yet).
  Stamp newest() const { return newest_; }
  // Grows with every batch recorded: waiting lookups wait for it to move.
  uint64_t version() const { return version_; }
  const History* history() const { return history_.get(); }
  void Fill(v1::WorldHistory* info) const;

 private:
  void RecordLateSet(const Command& command, Stamp stamp);

  HistoryLimits limits_;
  std::unique_ptr<History> history_;  // Null: no history kept.
  Stamp newest_ = 0;
  uint64_t version_ = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_HOST_WORLD_HISTORY_H_
