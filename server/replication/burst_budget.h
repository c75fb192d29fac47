// Copyright 2026 The xform Authors.
//
// BurstBudget: how much memory streamed snapshots may hold in messages made
// ahead of their stream, server-wide.
//
// A snapshot streams a part at a time, each made when the stream asks for it
// (Replicator::NextSnapshotPart). Its last pass, what changed behind the
// scan, must be made at once, under one lock, for the copy to end at one
// frame. When that is more than --max_pending entities (the world changes
// faster than the stream carries), it takes a claim here first; without one
// it makes another pass instead. So closing bursts, each O(what changed),
// hold at most the budget between them, and as their parts are written the
// budget goes to the next: every snapshot still ends.
//
// Thread-safe.

#ifndef XFORM_SERVER_REPLICATION_BURST_BUDGET_H_
#define XFORM_SERVER_REPLICATION_BURST_BUDGET_H_

#include <cstddef>
#include <memory>
#include <mutex>

namespace xform::server {

class BurstBudget : public std::enable_shared_from_this<BurstBudget> {
 public:
  // Make one with std::make_shared: claims keep it alive.
  explicit BurstBudget(size_t bytes) : bytes_(bytes) {}
  BurstBudget(const BurstBudget&) = delete;
  BurstBudget& operator=(const BurstBudget&) = delete;

  // A claim on `bytes`, returned when its last copy goes (the burst's parts
  // each hold one); null when it does not fit beside the claims held. When
  // none is held, any claim fits: a burst bigger than the whole budget goes
  // alone rather than never.
  std::shared_ptr<const void> TryClaim(size_t bytes);

  size_t claimed() const;

 private:
  class Claim;

  const size_t bytes_;
  // A std::mutex, as the Replicator's (its TSan build checks this too).
  mutable std::mutex mu_;
  size_t claimed_ = 0;  // Guarded by mu_, as is claims_.
  size_t claims_ = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_BURST_BUDGET_H_
