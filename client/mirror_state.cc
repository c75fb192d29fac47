// Copyright 2026 The xform Authors.

#include "client/mirror_state.h"

#include <algorithm>
#include <utility>

namespace xform::client_internal {

void MirrorState::Apply(const v1::FrameUpdate& u) {
  if (u.snapshot()) {
    ApplySnapshotPart(u);
    return;
  }
  // The parts of a frame are taken in together, so the copy never shows
  // half a frame. Parts come in order, with no other message between.
  if (!u.last_part()) {
    frame_parts_.push_back(u);
    return;
  }
  for (const v1::FrameUpdate& part : frame_parts_) ApplyDelta(part);
  frame_parts_.clear();
  ApplyDelta(u);
}

void MirrorState::ApplyDelta(const v1::FrameUpdate& u) {
  const v1::FrameUpdateReader r(u);
  for (EntityId e : r.destroyed()) {
    if (copy_.Find(e) == Copy::kAbsent) continue;
    copy_.Remove(e);
    Note(e, kDestroyed);
  }
  for (int k = 0; k < r.created_size(); ++k) {
    copy_.Add(r.created(k), r.created_parent(k));
    Note(r.created(k), kCreated);
  }
  for (int k = 0; k < r.reparented_size(); ++k) {
    const uint32_t i = copy_.Find(r.reparented(k));
    if (i == Copy::kAbsent) continue;
    copy_.SetParent(i, r.reparented_parent(k));
    Note(r.reparented(k), kReparented);
  }
  ApplyMoved(r, copy_, /*note=*/true);
  frame_ = u.frame();
}

// A block at a time: every lookup of a block is started before any is
// used, so a copy of a big world waits for memory once a block rather than
// once an entity (each lookup misses the cache: about half the time a
// Mirror took for a frame before this).
void MirrorState::ApplyMoved(const v1::FrameUpdateReader& r, Copy& copy,
                             bool note) {
  constexpr int kBlock = 32;
  uint32_t slots[kBlock];
  for (int first = 0; first < r.moved_size(); first += kBlock) {
    const int n = std::min(kBlock, r.moved_size() - first);
    for (int k = 0; k < n; ++k) {
      copy.Prefetch(r.moved(first + k));
      if (note) pending_.Prefetch(r.moved(first + k));
    }
    for (int k = 0; k < n; ++k) {
      slots[k] = copy.Find(r.moved(first + k));
      if (slots[k] != Copy::kAbsent) copy.PrefetchWorld(slots[k]);
    }
    for (int k = 0; k < n; ++k) {
      if (slots[k] == Copy::kAbsent) continue;
      copy.SetWorld(slots[k], r.moved_world_data(first + k));
      if (note) Note(r.moved(first + k), kMoved);
    }
  }
}

// Snapshot messages build a fresh copy aside; the last one swaps it in and
// notes the difference from the copy it replaces, so a resync tells the
// caller exactly what changed while the stream was down.
void MirrorState::ApplySnapshotPart(const v1::FrameUpdate& u) {
  if (!in_snapshot_ || u.part() == 0) {
    staging_.Clear();
    frame_parts_.clear();  // Of a stream that broke mid-frame.
    in_snapshot_ = true;
  }
  // A snapshot streamed while the world changes: later parts may destroy,
  // re-parent or move what earlier ones created.
  const v1::FrameUpdateReader r(u);
  for (EntityId e : r.destroyed()) {
    if (staging_.Find(e) != Copy::kAbsent) staging_.Remove(e);
  }
  for (int k = 0; k < r.created_size(); ++k) {
    staging_.Add(r.created(k), r.created_parent(k));
  }
  for (int k = 0; k < r.reparented_size(); ++k) {
    const uint32_t i = staging_.Find(r.reparented(k));
    if (i == Copy::kAbsent) continue;
    staging_.SetParent(i, r.reparented_parent(k));
  }
  ApplyMoved(r, staging_, /*note=*/false);
  if (!u.snapshot_done()) return;

  for (EntityId e : copy_.ids()) {
    if (staging_.Find(e) == Copy::kAbsent) Note(e, kDestroyed);
  }
  for (uint32_t i = 0; i < staging_.size(); ++i) {
    const EntityId e = staging_.id(i);
    const uint32_t old = copy_.Find(e);
    if (old == Copy::kAbsent) {
      Note(e, kCreated);
      Note(e, kMoved);
      continue;
    }
    if (copy_.parent(old) != staging_.parent(i)) Note(e, kReparented);
    if (!(copy_.world(old) == staging_.world(i))) Note(e, kMoved);
  }
  std::swap(copy_, staging_);
  staging_.Clear();
  in_snapshot_ = false;
  if (have_snapshot_) {
    ++resyncs_;
    resynced_since_asked_ = true;
  }
  have_snapshot_ = true;
  frame_ = u.frame();
}

NetChanges::Map MirrorState::TakeChanges(bool* resynced) {
  *resynced = resynced_since_asked_;
  resynced_since_asked_ = false;
  return pending_.Take();
}

}  // namespace xform::client_internal
