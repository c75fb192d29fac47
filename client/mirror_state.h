// Copyright 2026 The xform Authors.
//
// MirrorState is what a Mirror knows of its world and how each FrameUpdate
// changes it: a copy of each entity's parent and world matrix, a snapshot
// being built aside, a frame's parts held until its last, and the net
// changes since the caller last asked. The Mirror feeds it its stream's
// messages; it knows nothing of streams or threads, so it can be driven (and
// fuzzed) with messages alone. Lenient, as a client must be with a peer it
// does not control: an entry naming what it does not have is skipped.
//
// Not thread-safe: the Mirror guards it.

#ifndef XFORM_CLIENT_MIRROR_STATE_H_
#define XFORM_CLIENT_MIRROR_STATE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "xform/net_changes.h"
#include "xform/transform.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/wire.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::client_internal {

// Each entity's parent and world matrix, structure-of-arrays, with removal by
// swapping the last entry in: the mirror has no order to keep, only lookups
// and whole-copy reads to serve.
class Copy {
 public:
  static constexpr uint32_t kAbsent = ~uint32_t{0};

  size_t size() const { return ids_.size(); }
  uint32_t Find(EntityId e) const {
    auto it = index_.find(e);
    return it == index_.end() ? kAbsent : it->second;
  }
  // Starts loading what Find(e) reads, for a Find soon after.
  void Prefetch(EntityId e) const { index_.prefetch(e); }
  // Starts loading world(i), to be written soon after.
  void PrefetchWorld(uint32_t i) const {
    __builtin_prefetch(&worlds_[i], /*rw=*/1);
  }
  EntityId id(uint32_t i) const { return ids_[i]; }
  EntityId parent(uint32_t i) const { return parents_[i]; }
  const Matrix3x4& world(uint32_t i) const { return worlds_[i]; }
  const std::vector<EntityId>& ids() const { return ids_; }
  const std::vector<Matrix3x4>& worlds() const { return worlds_; }

  // Adds `e`, or re-parents it when present (a replayed create).
  uint32_t Add(EntityId e, EntityId parent) {
    auto [it, inserted] = index_.try_emplace(e, ids_.size());
    if (inserted) {
      ids_.push_back(e);
      parents_.push_back(parent);
      worlds_.emplace_back();
    } else {
      parents_[it->second] = parent;
    }
    return it->second;
  }
  void Remove(EntityId e) {
    auto it = index_.find(e);
    if (it == index_.end()) return;
    const uint32_t i = it->second;
    index_.erase(it);
    if (i + 1 != ids_.size()) {
      ids_[i] = ids_.back();
      parents_[i] = parents_.back();
      worlds_[i] = worlds_.back();
      index_[ids_[i]] = i;
    }
    ids_.pop_back();
    parents_.pop_back();
    worlds_.pop_back();
  }
  void SetParent(uint32_t i, EntityId parent) { parents_[i] = parent; }
  void SetWorld(uint32_t i, const float* m) {
    worlds_[i] = v1::MatrixFromWire(m);
  }
  void Clear() {
    index_.clear();
    ids_.clear();
    parents_.clear();
    worlds_.clear();
  }

 private:
  absl::flat_hash_map<EntityId, uint32_t> index_;
  std::vector<EntityId> ids_;
  std::vector<EntityId> parents_;
  std::vector<Matrix3x4> worlds_;
};

class MirrorState {
 public:
  // One message of the stream, in order.
  void Apply(const v1::FrameUpdate& u);

  const Copy& copy() const { return copy_; }
  // A snapshot was applied whole, and none is being received.
  bool have_snapshot() const { return have_snapshot_; }
  bool in_snapshot() const { return in_snapshot_; }
  uint64_t frame() const { return frame_; }  // 0 before a snapshot.
  int resyncs() const { return resyncs_; }
  // The net changes since the last call, and whether a resync came since.
  NetChanges::Map TakeChanges(bool* resynced);

 private:
  void Note(EntityId e, NetChange change) { pending_.Note(e, change); }
  void ApplyDelta(const v1::FrameUpdate& u);
  void ApplyMoved(const v1::FrameUpdateReader& r, Copy& copy, bool note);
  void ApplySnapshotPart(const v1::FrameUpdate& u);

  Copy copy_;
  Copy staging_;
  bool in_snapshot_ = false;
  // The parts so far of a frame that comes in several.
  std::vector<v1::FrameUpdate> frame_parts_;
  bool have_snapshot_ = false;
  uint64_t frame_ = 0;
  int resyncs_ = 0;
  NetChanges pending_;  // Since the caller last asked.
  bool resynced_since_asked_ = false;
};

}  // namespace xform::client_internal

#endif  // XFORM_CLIENT_MIRROR_STATE_H_
