// Copyright 2026 The xform Authors.
//
// Replicator's streamed snapshots (StreamedSnapshot in subscription.h): how
// one starts, how frames mark it, and how each next part is made.

#include <algorithm>
#include <memory>
#include <vector>

#include "server/replication/replicator_impl.h"
#include "xform/v1/frame_update.h"

namespace xform::server {
namespace {

// A streamed snapshot's parts are at most this big (or the subscription's
// message limit, if smaller): about 14k entities, a millisecond or so under
// the lock each.
constexpr size_t kSnapshotPartBytes = 1 << 20;
constexpr size_t kIdBytes = v1::FrameUpdateWriter::kIdBytes;
constexpr size_t kEntryBytes = v1::FrameUpdateWriter::kEntryBytes;
// What a burst's entity holds until sent (BurstCopy's columns).
constexpr size_t kBurstEntryBytes =
    2 * sizeof(EntityId) + sizeof(Matrix3x4) + 1;

// A snapshot that keeps the view finds what changed this many blocks of
// slots (65,536 slots) at a time, the lock released between: a quarter of
// a millisecond or so each, where changes are dense.
constexpr size_t kKeptViewScanBlocks = 8192;

// A snapshot's parts, marked with the history its frames belong to, and
// if it keeps the subscriber's view.
std::vector<v1::FrameUpdate> Marked(std::vector<v1::FrameUpdate> parts,
                                    bool keeps_view, uint64_t history) {
  for (v1::FrameUpdate& part : parts) {
    part.set_keeps_view(keeps_view);
    part.set_history(history);
  }
  return parts;
}

void WriteEntry(SnapshotEntry kind, EntityId e, EntityId parent,
                const Matrix3x4& world, v1::FrameUpdateWriter& writer) {
  switch (kind) {
    case SnapshotEntry::kCreated:
      writer.Created(e, parent, world);
      return;
    case SnapshotEntry::kReparentedAndMoved:
      writer.Reparented(e, parent);
      writer.Moved(e, world);
      return;
    case SnapshotEntry::kMoved:
      writer.Moved(e, world);
      return;
  }
}

}  // namespace

// A burst's entries as of the frame it was taken at, copied out of the
// published state; its parts are made from it outside the lock.
struct BurstCopy {
  uint64_t frame = 0;
  absl::Time time;
  int64_t stamp = 0;
  uint32_t first_part = 0;
  uint64_t frames_skipped = 0;
  bool keeps_view = false;
  uint64_t history = 0;
  size_t entries_a_part = 0;
  // By entry: created to the subscriber, or re-sent (re-parented and
  // moved, or moved alone: SnapshotEntry).
  // Sized (and so their pages touched) ahead, and cut to `size` once full.
  size_t size = 0;
  std::vector<EntityId> entity;
  std::vector<EntityId> parent;
  std::vector<Matrix3x4> world;
  std::vector<SnapshotEntry> kind;
  std::shared_ptr<const void> claim;

  explicit BurstCopy(size_t room)
      : entity(room), parent(room), world(room), kind(room) {}
  size_t room() const { return entity.size() - size; }
  void Add(EntityId e, EntityId p, const Matrix3x4& m, SnapshotEntry k) {
    if (room() == 0) {  // Grown here only if the world outgrew the slack.
      const size_t more = std::max<size_t>(1024, entity.size() / 2);
      entity.resize(entity.size() + more);
      parent.resize(entity.size());
      world.resize(entity.size());
      kind.resize(entity.size());
    }
    entity[size] = e;
    parent[size] = p;
    world[size] = m;
    kind[size] = k;
    ++size;
  }
  void Cut() {
    entity.resize(size);
    parent.resize(size);
    world.resize(size);
    kind.resize(size);
  }

  size_t parts() const {  // At least one, to carry snapshot_done.
    return std::max<size_t>(1, (size + entries_a_part - 1) / entries_a_part);
  }
  // Part k: entries_a_part entries (the last, what is left), in one message.
  v1::FrameUpdate MakePart(size_t k) const {
    const size_t begin = k * entries_a_part;
    const size_t end = std::min(size, begin + entries_a_part);
    v1::FrameUpdateWriter writer(
        frame, time, stamp, entries_a_part * kEntryBytes,
        /*snapshot=*/true, first_part + static_cast<uint32_t>(k));
    writer.Reserve(end - begin);
    for (size_t i = begin; i < end; ++i) {
      WriteEntry(kind[i], entity[i], parent[i], world[i], writer);
    }
    std::vector<v1::FrameUpdate> parts =
        Marked(writer.Finish(frames_skipped, /*last=*/k + 1 == this->parts()),
               keeps_view, history);
    return std::move(parts.front());  // Sized to be one.
  }
};

std::shared_ptr<BurstCopy> Replicator::Impl::MakeBurstCopy(size_t room) {
  return std::make_shared<BurstCopy>(room);
}

void Replicator::Impl::NoteInSnapshot(StreamedSnapshot& snap, EntityId e,
                                      NetChange change, Slot slot) const {
  // A destroyed entity's slot is free now, but not reused before the next
  // frame, so its bits are still its own.
  if (slot == PublishedState::kNoSlot) slot = state_.FindThisFrame(e);
  if (slot == PublishedState::kNoSlot) return;
  if (change == kDestroyed) {
    if (snap.known.reset(slot)) snap.gone.push_back(e);
    snap.stale.reset(slot);
  } else {
    snap.stale.set(slot);
  }
}

std::unique_ptr<StreamedSnapshot> Replicator::Impl::StartSnapshot(
    Subscription& s) {
  auto snap = std::make_unique<StreamedSnapshot>();
  snap->skipped_before =
      s.frames_with_changes > 0 ? s.frames_with_changes - 1 : 0;
  s.frames_with_changes = 0;
  return snap;
}

bool Replicator::Impl::NoteChanged(KeptViewScan& scan, Slot slot) const {
  scan.changed.set(slot);
  if (state_.stamps(slot).created > scan.after) scan.created.set(slot);
  return true;
}

bool Replicator::Impl::ScanForKeptView(KeptViewScan& scan) const {
  const size_t end =
      std::min(scan.end_block, scan.next_block + kKeptViewScanBlocks);
  state_.ForEachChangedSinceIn(
      scan.after, scan.next_block, end,
      [&](Slot slot) { return NoteChanged(scan, slot); });
  scan.next_block = end;
  return end == scan.end_block;
}

void Replicator::Impl::FinishKeptViewSnapshot(Subscription& s) {
  KeptViewScan scan = std::move(*s.in<OwedFromState>().scan);
  if (scan.after < state_.destroyed_log_after()) {
    s.ToResyncing();  // Destructions it is owed were dropped from the log.
    return;
  }
  auto snap = StartSnapshot(s);
  snap->kept_view_after = scan.after;
  absl::flat_hash_set<Slot> again;
  state_.DestroyedSince(scan.after, snap->gone, again);
  // What changed since the scan began, wherever the scan was (those slots'
  // rows alone), and what it found, of the slots still live: stale. The
  // subscriber holds every live entity not created since, but for ids it
  // had, destroyed and created again. Word by word, but what changed
  // during the scan: O(slots / 64 + that).
  state_.ForEachChangedSince(
      scan.began, [&](Slot slot) { return NoteChanged(scan, slot); });
  const SlotBits live = state_.LiveSlots();
  scan.changed.And(live);
  snap->stale.Assign(std::move(scan.changed));
  snap->known = live;
  snap->known.AndNot(scan.created);
  for (Slot slot : again) snap->known.set(slot);
  s.ToSnapshotting(std::move(snap));
  Count(s, &Subscription::kept_view_snapshots,
        &StreamStats::kept_view_snapshots);
}

void Replicator::Impl::BuildSnapshot(Subscription& s) {
  // Its view comes whole: what it held is replaced.
  auto snap = StartSnapshot(s);
  if (s.whole_world()) {
    // Every live slot stale, none known: O(slots / 64) and the free list.
    snap->stale.bits = state_.LiveSlots();
    snap->stale.count = state_.size();
    s.ToSnapshotting(std::move(snap));
    return;
  }
  auto finding = s.view->StartSnapshot(snap->stale);
  s.ToSnapshotting(std::move(snap), std::move(finding));
}

Replicator::Impl::Slot Replicator::Impl::NextStale(
    const Subscription& s, StreamedSnapshot& snap) const {
  if (snap.chain.empty()) {
    if (snap.stale.count == 0) return PublishedState::kNoSlot;
    const size_t slot = snap.stale.bits.Find(snap.cursor);
    if (slot == snap.stale.bits.size()) return PublishedState::kNoSlot;
    // Past it: if it changes again, it waits for the next pass.
    snap.cursor = slot + 1;
    // The slot, and its ancestors the subscriber lacks, the root-most last.
    snap.chain.push_back(static_cast<Slot>(slot));
    for (Slot p = state_.parent(static_cast<Slot>(slot));
         p != PublishedState::kNoSlot && !snap.known.test(p) &&
         (s.whole_world() || s.view->Contains(p));
         p = state_.parent(p)) {
      snap.chain.push_back(p);
    }
    snap.chain_epoch = state_.structure_epoch();
  }
  const Slot slot = snap.chain.back();
  snap.chain.pop_back();
  snap.stale.reset(slot);
  return slot;
}

SnapshotEntry Replicator::Impl::EntryFor(StreamedSnapshot& snap,
                                         Slot slot) const {
  if (snap.known.set(slot)) return SnapshotEntry::kCreated;
  if (snap.kept_view_after) {
    // Held, and created since: an id it had, destroyed and created again,
    // which to it is re-parented.
    const PublishedState::Stamps stamps = state_.stamps(slot);
    if (std::max(stamps.created, stamps.parented) <= *snap.kept_view_after) {
      return SnapshotEntry::kMoved;
    }
  }
  return SnapshotEntry::kReparentedAndMoved;
}

bool Replicator::Impl::BurstDue(StreamedSnapshot& snap) const {
  // A pass over the slots is done. What changed behind it is sent in another
  // pass, a part at a time, unless it is at most max_pending entities, or
  // the burst budget grants it room: then all of it now, so the last part
  // leaves the copy at one frame. So a subscriber makes at most max_pending
  // entities' parts ahead of its stream, and bursts bigger than that (a
  // world changing faster than the stream carries: the burst is what changed
  // behind the scan) hold at most the budget between them, server-wide, and
  // take turns.
  if (!snap.burst_due && snap.chain.empty() && snap.stale.count > 0 &&
      snap.stale.bits.Find(snap.cursor) == snap.stale.bits.size()) {
    snap.cursor = 0;
    snap.burst_due = snap.stale.count <= max_pending_;
    if (!snap.burst_due && burst_budget_ != nullptr) {
      snap.burst_claim =
          burst_budget_->TryClaim(snap.stale.count * kBurstEntryBytes);
      snap.burst_due = snap.burst_claim != nullptr;
    }
  }
  return snap.burst_due;
}

std::shared_ptr<const Outgoing> Replicator::Impl::NextSnapshotPart(
    Subscription& s, size_t* copy_wanted) {
  StreamedSnapshot& snap = *s.in<Snapshotting>().snapshot;
  if (snap.chain_epoch != state_.structure_epoch()) snap.chain.clear();
  const size_t part_bytes =
      std::min(s.options.part_budget_bytes, kSnapshotPartBytes);
  if (BurstDue(snap)) {
    // Its copy's memory is touched first, outside the lock (see Take): on
    // some machines, faulting in tens of MB costs more than copying them.
    if (copy_wanted != nullptr &&
        (snap.burst_copy == nullptr ||
         snap.burst_copy->room() < snap.stale.count)) {
      *copy_wanted = snap.stale.count + snap.stale.count / 4 + 1024;
      return nullptr;
    }
    return Burst(s, part_bytes);
  }
  v1::FrameUpdateWriter writer(frame_, frame_time_, frame_stamp_, part_bytes,
                               /*snapshot=*/true, snap.part);
  // What the subscriber had and is gone, first, as the proto orders a part.
  const size_t gone = std::min(snap.gone.size(), writer.room() / kIdBytes);
  writer.Destroyed({snap.gone.data() + snap.gone.size() - gone, gone});
  snap.gone.resize(snap.gone.size() - gone);
  if (snap.gone.empty()) writer.Reserve(snap.stale.count);
  // Then stale entities in slot order, each after its parent chain.
  while (snap.gone.empty() && writer.Fits(kEntryBytes)) {
    const Slot slot = NextStale(s, snap);
    if (slot == PublishedState::kNoSlot) break;  // The pass is done.
    WriteEntry(EntryFor(snap, slot), state_.entity(slot),
               state_.parent_entity(slot), state_.world(slot), writer);
  }
  const bool done = snap.stale.count == 0 && snap.gone.empty();
  for (auto& part :
       Share(Marked(writer.Finish(snap.skipped_before, /*last=*/done),
                    snap.kept_view_after.has_value(), history))) {
    s.parts.push_back(std::move(part));
    ++snap.part;
  }
  if (done) EndSnapshot(s);
  return TakePart(s);
}

std::shared_ptr<const Outgoing> Replicator::Impl::Burst(Subscription& s,
                                                        size_t part_bytes) {
  StreamedSnapshot& snap = *s.in<Snapshotting>().snapshot;
  // What is gone, first, made now: ids only, and rare.
  if (!snap.gone.empty()) {
    v1::FrameUpdateWriter writer(frame_, frame_time_, frame_stamp_, part_bytes,
                                 /*snapshot=*/true, snap.part);
    writer.Destroyed(snap.gone);
    snap.gone.clear();
    for (auto& part :
         Share(Marked(writer.Finish(0, /*last=*/false),
                      snap.kept_view_after.has_value(), history))) {
      s.parts.push_back(std::move(part));
      ++snap.part;
    }
  }
  // The rest, copied: a pass over the stale slots, as NextSnapshotPart's.
  std::shared_ptr<BurstCopy> copy = std::move(snap.burst_copy);
  if (copy == nullptr) copy = MakeBurstCopy(snap.stale.count);
  copy->frame = frame_;
  copy->time = frame_time_;
  copy->stamp = frame_stamp_;
  copy->first_part = snap.part;
  copy->frames_skipped = snap.skipped_before;
  copy->keeps_view = snap.kept_view_after.has_value();
  copy->history = history;
  copy->entries_a_part = std::max<size_t>(1, part_bytes / kEntryBytes);
  copy->claim = std::move(snap.burst_claim);
  for (Slot slot = NextStale(s, snap); slot != PublishedState::kNoSlot;
       slot = NextStale(s, snap)) {
    copy->Add(state_.entity(slot), state_.parent_entity(slot),
              state_.world(slot), EntryFor(snap, slot));
  }
  copy->Cut();
  const size_t parts = copy->parts();
  for (size_t k = 0; k < parts; ++k) {
    const Outgoing::Header header = {
        .frame = frame_,
        .frames_skipped = k + 1 == parts ? snap.skipped_before : 0,
        .last_part = k + 1 == parts};
    std::shared_ptr<const BurstCopy> from = copy;
    s.parts.push_back(std::make_shared<const Outgoing>(
        header, [from, k] { return from->MakePart(k); }));
  }
  snap.part += static_cast<uint32_t>(parts);
  EndSnapshot(s);
  return TakePart(s);
}

void Replicator::Impl::EndSnapshot(Subscription& s) {
  // Frames published while it streamed are in it, not skipped.
  s.frames_with_changes = 0;
  s.ToCaughtUp();
}

}  // namespace xform::server
