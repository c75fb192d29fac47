// Copyright 2026 The xform Authors.
//
// Replicator's streamed snapshots (StreamedSnapshot in replicator.h): how one
// starts, how frames mark it, and how each next part is made.

#include <algorithm>
#include <memory>
#include <vector>

#include "server/replicator.h"
#include "xform/v1/frame_update.h"

namespace xform::server {
namespace {

// A streamed snapshot's parts are at most this big (or the subscription's
// message limit, if smaller): about 14k entities, a millisecond or so under
// the lock each.
constexpr size_t kSnapshotPartBytes = 1 << 20;
constexpr size_t kIdBytes = v1::FrameUpdateWriter::kIdBytes;
constexpr size_t kEntryBytes = v1::FrameUpdateWriter::kEntryBytes;
// What a burst's entity holds until sent: as a message, then encoded too.
constexpr size_t kBurstEntryBytes = 2 * kEntryBytes;

}  // namespace

void Replicator::NoteInSnapshot(StreamedSnapshot& snap, EntityId e,
                                NetChange change, Slot slot) const {
  // A destroyed entity's slot is free now, but not reused before the next
  // frame, so its bits are still its own.
  if (slot == PublishedState::kNoSlot) slot = state_.FindThisFrame(e);
  if (slot == PublishedState::kNoSlot) return;
  if (change == kDestroyed) {
    if (snap.known.reset(slot)) snap.gone.push_back(e);
    if (snap.stale.reset(slot)) --snap.stale_count;
  } else if (snap.stale.set(slot)) {
    ++snap.stale_count;
  }
}

void Replicator::BuildSnapshot(Subscription& s) {
  auto snap = std::make_unique<StreamedSnapshot>();
  snap->skipped_before =
      s.frames_with_changes > 0 ? s.frames_with_changes - 1 : 0;
  s.frames_with_changes = 0;
  if (s.whole_world) {
    // Every live slot stale, none known: O(slots / 64) and the free list.
    snap->stale = state_.LiveSlots();
    snap->stale_count = state_.size();
  } else {
    // The view's members, stale: the subtrees' (membership rebuilt here, in
    // O(view): shallowest roots first, so a root inside another's subtree is
    // covered by it) and the listed entities alive.
    s.in_subtree.clear();
    std::vector<EntityId> roots(s.options.subtrees.begin(),
                                s.options.subtrees.end());
    for (Slot root : SlotsByDepth(roots)) {
      if (s.in_subtree.test(root)) continue;
      state_.ForEachInSubtree(root, [&](Slot slot) {
        s.in_subtree.set(slot);
        if (snap->stale.set(slot)) ++snap->stale_count;
      });
    }
    for (EntityId e : s.listed) {
      const Slot slot = state_.Find(e);
      if (slot != PublishedState::kNoSlot && snap->stale.set(slot)) {
        ++snap->stale_count;
      }
    }
  }
  s.snapshot = std::move(snap);
}

std::shared_ptr<const Outgoing> Replicator::NextSnapshotPart(Subscription& s) {
  StreamedSnapshot& snap = *s.snapshot;
  if (snap.chain_epoch != state_.structure_epoch()) snap.chain.clear();
  // A pass over the slots is done. What changed behind it is sent in another
  // pass, a part at a time, unless it is at most max_pending entities, or
  // the burst budget grants it room: then all of it now, under this one
  // lock, so the last part leaves the copy at one frame. So a subscriber
  // makes at most max_pending entities' parts ahead of its stream, and
  // bursts bigger than that (a world changing faster than the stream
  // carries: the burst is what changed behind the scan) hold at most the
  // budget between them, server-wide, and take turns.
  bool all_now = false;
  std::shared_ptr<const void> claim;
  if (snap.chain.empty() && snap.stale_count > 0 &&
      snap.stale.Find(snap.cursor) == snap.stale.size()) {
    all_now = snap.stale_count <= max_pending_;
    if (!all_now && burst_budget_ != nullptr) {
      claim = burst_budget_->TryClaim(snap.stale_count * kBurstEntryBytes);
      all_now = claim != nullptr;
    }
    snap.cursor = 0;
  }
  v1::FrameUpdateWriter writer(
      frame_, frame_time_,
      std::min(s.options.part_budget_bytes, kSnapshotPartBytes),
      /*snapshot=*/true, snap.part);
  // What the subscriber had and is gone, first, as the proto orders a part.
  const size_t gone =
      all_now ? snap.gone.size()
              : std::min(snap.gone.size(), writer.room() / kIdBytes);
  writer.Destroyed({snap.gone.data() + snap.gone.size() - gone, gone});
  snap.gone.resize(snap.gone.size() - gone);
  if (snap.gone.empty()) writer.Reserve(snap.stale_count);
  // Then stale entities in slot order, each after its parent chain.
  while (snap.gone.empty() && (all_now || writer.Fits(kEntryBytes))) {
    if (snap.chain.empty()) {
      if (snap.stale_count == 0) break;
      const size_t slot = snap.stale.Find(snap.cursor);
      if (slot == snap.stale.size()) break;  // The pass is done.
      // Past it: if it changes again, it waits for the next pass.
      snap.cursor = slot + 1;
      // The slot, and its ancestors the subscriber lacks, the root-most last.
      snap.chain.push_back(static_cast<Slot>(slot));
      for (Slot p = state_.parent(static_cast<Slot>(slot));
           p != PublishedState::kNoSlot && !snap.known.test(p) &&
           (s.whole_world || InView(s, p));
           p = state_.parent(p)) {
        snap.chain.push_back(p);
      }
      snap.chain_epoch = state_.structure_epoch();
    }
    const Slot slot = snap.chain.back();
    snap.chain.pop_back();
    const EntityId e = state_.entity(slot);
    if (snap.known.set(slot)) {
      writer.Created(e, state_.parent_entity(slot), state_.world(slot));
    } else {
      writer.Reparented(e, state_.parent_entity(slot));
      writer.Moved(e, state_.world(slot));
    }
    if (snap.stale.reset(slot)) --snap.stale_count;
  }
  const bool done = snap.stale_count == 0 && snap.gone.empty();
  // Frames published while it streamed are in it, not skipped.
  const uint64_t skipped = snap.skipped_before;
  auto parts = Share(writer.Finish(skipped, /*last=*/done), claim);
  snap.part += static_cast<uint32_t>(parts.size());
  if (done) {
    s.frames_skipped += skipped;
    s.frames_with_changes = 0;
    s.snapshot.reset();
  }
  for (auto& part : parts) s.parts.push_back(std::move(part));
  return TakePart(s);
}

}  // namespace xform::server
