// Copyright 2026 The xform Authors.

#include "server/replicator.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <utility>

#include "absl/types/span.h"
#include "xform/v1/frame_update.h"

namespace xform::server {
namespace {

// A streamed snapshot's parts are at most this big (or the subscription's
// message limit, if smaller): about 14k entities, a millisecond or so under
// the lock each.
constexpr size_t kSnapshotPartBytes = 1 << 20;
constexpr size_t kIdBytes = v1::FrameUpdateWriter::kIdBytes;
constexpr size_t kEntryBytes = v1::FrameUpdateWriter::kEntryBytes;

// A writer's parts, each to be shared by the streams that send it.
std::vector<std::shared_ptr<const Outgoing>> Share(
    std::vector<v1::FrameUpdate> parts) {
  std::vector<std::shared_ptr<const Outgoing>> out;
  out.reserve(parts.size());
  for (v1::FrameUpdate& part : parts) {
    out.push_back(std::make_shared<const Outgoing>(std::move(part)));
  }
  return out;
}

}  // namespace

bool Replicator::SlotBits::set(size_t slot) {
  if (slot >= size_) {
    size_ = slot + 1;
    words_.resize((size_ + 63) / 64);
  }
  uint64_t& word = words_[slot / 64];
  const uint64_t bit = uint64_t{1} << (slot % 64);
  const bool changed = !(word & bit);
  word |= bit;
  return changed;
}

bool Replicator::SlotBits::reset(size_t slot) {
  if (slot >= size_) return false;
  uint64_t& word = words_[slot / 64];
  const uint64_t bit = uint64_t{1} << (slot % 64);
  const bool changed = word & bit;
  word &= ~bit;
  return changed;
}

void Replicator::SlotBits::SetAll(size_t size) {
  size_ = size;
  words_.assign((size + 63) / 64, ~uint64_t{0});
  if (size % 64 != 0) words_.back() = (uint64_t{1} << (size % 64)) - 1;
}

size_t Replicator::SlotBits::Find(size_t from) const {
  for (size_t w = from / 64; w < words_.size(); ++w) {
    uint64_t word = words_[w];
    if (w == from / 64) word &= ~uint64_t{0} << (from % 64);
    if (word != 0) return w * 64 + std::countr_zero(word);
  }
  return size_;
}

uint32_t Replicator::NewSlot(EntityId e) {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    slot_entity_[slot] = e;
    return slot;
  }
  slot_entity_.push_back(e);
  return static_cast<uint32_t>(slot_entity_.size() - 1);
}

void Replicator::Note(Subscription& s, EntityId e, NetChange change) const {
  s.noted = true;
  if (s.snapshot) {
    NoteInSnapshot(*s.snapshot, e, change);
    return;
  }
  if (s.resync) return;  // It gets its view whole.
  s.pending.Note(e, change);
}

void Replicator::NoteInSnapshot(StreamedSnapshot& snap, EntityId e,
                                NetChange change) const {
  // The entity's slot: a destroyed one's is free now, and not reused before
  // the next frame (see TakeIn), so its bits are still its own.
  uint32_t slot;
  if (auto it = state_.find(e); it != state_.end()) {
    slot = it->second.slot;
  } else if (auto freed = freed_slot_of_.find(e);
             freed != freed_slot_of_.end()) {
    slot = freed->second;
  } else {
    return;
  }
  if (change == kDestroyed) {
    if (snap.known.reset(slot)) snap.gone.push_back(e);
    if (snap.stale.reset(slot)) --snap.stale_count;
  } else if (snap.stale.set(slot)) {
    ++snap.stale_count;
  }
}

void Replicator::Fold(Subscription& s) const {
  if (s.ready.empty()) return;
  // The folded frame counts once, apart from the frame being published.
  const bool noted = s.noted;
  for (const auto& part : s.ready) {
    const v1::FrameUpdate& u = part->message();
    for (EntityId e : u.destroyed()) Note(s, e, kDestroyed);
    for (EntityId e : u.created()) Note(s, e, kCreated);
    for (EntityId e : u.reparented()) Note(s, e, kReparented);
    for (EntityId e : u.moved()) Note(s, e, kMoved);
  }
  s.noted = noted;
  s.frames_with_changes += s.ready_frames;
  s.ready.clear();
  s.ready_frames = 0;
  s.ready_entities = 0;
}

void Replicator::RemoveChild(EntityId parent, EntityId child) {
  auto it = children_.find(parent);
  if (it == children_.end()) return;
  std::vector<EntityId>& siblings = it->second;
  auto pos = std::find(siblings.begin(), siblings.end(), child);
  if (pos != siblings.end()) {
    *pos = siblings.back();
    siblings.pop_back();
  }
  if (siblings.empty()) children_.erase(it);
}

template <typename F>
void Replicator::ForEachInSubtree(EntityId e, F&& f) const {
  std::vector<EntityId> stack = {e};
  while (!stack.empty()) {
    const EntityId top = stack.back();
    stack.pop_back();
    f(top);
    if (auto it = children_.find(top); it != children_.end()) {
      // Reversed so the walk is pre-order in the stored child order.
      stack.insert(stack.end(), it->second.rbegin(), it->second.rend());
    }
  }
}

bool Replicator::InView(const Subscription& s, EntityId e) const {
  return s.in_subtree.contains(e) ||
         (s.listed.contains(e) && state_.contains(e));
}

absl::flat_hash_set<EntityId> Replicator::Echoes(
    const std::string& client, const FrameWriters& writers) const {
  // Everything below an entity another writer set moved because of it: mark
  // those subtrees once each (they all moved, so this is O(moved)).
  absl::flat_hash_set<EntityId> foreign;
  for (const auto& [e, writer] : writers) {
    if (writer == client || foreign.contains(e) || !state_.contains(e)) {
      continue;
    }
    ForEachInSubtree(e, [&](EntityId d) { foreign.insert(d); });
  }
  absl::flat_hash_set<EntityId> echoes;
  for (const auto& [e, writer] : writers) {
    if (writer == client && !foreign.contains(e)) echoes.insert(e);
  }
  return echoes;
}

void Replicator::TakeIn(const FrameChanges& changes) {
  // In the order FrameChanges gives: destroyed, created (parents first),
  // re-parented (parents first), then the matrices.
  if (!changes.destroyed.empty() || !changes.reparented.empty()) {
    ++structure_epoch_;
  }
  freed_slot_of_.clear();
  for (EntityId e : changes.destroyed) {
    auto it = state_.find(e);
    if (it == state_.end()) continue;
    const uint32_t slot = it->second.slot;
    freed_slot_of_[e] = slot;
    slot_entity_[slot] = kNoEntity;
    RemoveChild(it->second.parent, e);
    state_.erase(it);
    children_.erase(e);
  }
  for (size_t k = 0; k < changes.created.size(); ++k) {
    const EntityId parent = changes.created_parent[k];
    Published& p = state_[changes.created[k]];
    p.parent = parent;
    p.depth = parent == kNoEntity ? 0 : state_.at(parent).depth + 1;
    p.slot = NewSlot(changes.created[k]);
    children_[parent].push_back(changes.created[k]);
  }
  // Freed slots are taken from the next frame on: a subscriber's streamed
  // snapshot still reads a destroyed entity's bits at its slot this frame.
  for (const auto& [e, slot] : freed_slot_of_) free_slots_.push_back(slot);
  for (size_t k = 0; k < changes.reparented.size(); ++k) {
    Published& p = state_[changes.reparented[k]];
    RemoveChild(p.parent, changes.reparented[k]);
    p.parent = changes.reparented_parent[k];
    children_[p.parent].push_back(changes.reparented[k]);
  }
  // A re-parented subtree's depths follow its root's. Parents first, and a
  // subtree already renumbered is not walked again: O(entities moved).
  absl::flat_hash_set<EntityId> renumbered;
  for (EntityId root : changes.reparented) {
    if (renumbered.contains(root)) continue;
    ForEachInSubtree(root, [&](EntityId e) {
      Published& p = state_.at(e);
      p.depth = p.parent == kNoEntity ? 0 : state_.at(p.parent).depth + 1;
      renumbered.insert(e);
    });
  }
  for (size_t k = 0; k < changes.moved.size(); ++k) {
    // As scattered over the world as the writes were: overlap the misses.
    constexpr size_t kAhead = internal::kPrefetchAhead;
    if (k + kAhead < changes.moved.size()) {
      state_.prefetch(changes.moved[k + kAhead]);
    }
    state_[changes.moved[k]].world = changes.MovedWorld(k);
  }
}

void Replicator::Publish(const FrameChanges& changes, absl::Time time,
                         const FrameWriters& writers) {
  // Caught-up whole-world subscribers share one message, made from the
  // frame's changes alone, so they are served first; the published state (a
  // map as big as the world) takes the frame in afterwards. A subscriber
  // joining in between gets the previous frame's snapshot and this frame
  // folded into its pending events below, so nothing is missed.
  std::vector<std::shared_ptr<UpdateSink>> wake;
  absl::flat_hash_set<SubscriptionId> served;
  if (!changes.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<const Outgoing>> shared;
    const size_t entities = changes.moved.size() + changes.destroyed.size() +
                            changes.reparented.size();
    for (auto& [id, s] : subs_) {
      // Caught up, but perhaps for earlier frames' shared parts not taken.
      const bool caught_up = s->whole_world && !s->snapshot &&
                             s->pending.empty() && !s->resync &&
                             s->parts.empty() && s->options.max_rate_hz == 0 &&
                             s->options.no_echo_client_id.empty();
      if (!caught_up) continue;
      if (s->ready_frames > 0) {
        if (s->ready_entities + entities > max_pending_) {
          // Stopped reading: its view whole when it reads again.
          std::vector<std::shared_ptr<const Outgoing>>().swap(s->ready);
          s->ready_frames = 0;
          s->ready_entities = 0;
          s->resync = true;
          s->noted = true;
          served.insert(id);
          continue;
        }
        // Kept frames never hold more than the world: past that, they fold
        // into pending events below, which the world's size bounds.
        if (s->ready_entities + entities > state_.size()) continue;
      }
      served.insert(id);
      if (shared.empty()) {
        shared = FrameParts(changes, time, s->options.part_budget_bytes);
      }
      s->ready.insert(s->ready.end(), shared.begin(), shared.end());
      ++s->ready_frames;
      s->ready_entities += entities;
      wake.push_back(s->sink);
    }
  }
  for (auto& sink : wake) sink->Wake();
  wake.clear();

  {
    std::lock_guard<std::mutex> lock(mu_);
    // Filtered views depend on membership before and after the frame; the
    // subtree of a re-parented entity may enter or leave a view with it.
    std::vector<Subscription*> filtered;
    for (auto& [id, s] : subs_) {
      if (!s->whole_world) filtered.push_back(s.get());
    }
    std::vector<EntityId> touched;
    std::vector<std::vector<bool>> before;
    if (!filtered.empty()) {
      for (const auto* list :
           {&changes.moved, &changes.created, &changes.destroyed}) {
        touched.insert(touched.end(), list->begin(), list->end());
      }
      for (EntityId e : changes.reparented) {
        if (state_.contains(e)) {
          ForEachInSubtree(e, [&](EntityId d) { touched.push_back(d); });
        }
      }
      std::sort(touched.begin(), touched.end());
      touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
      for (Subscription* s : filtered) {
        std::vector<bool>& in = before.emplace_back(touched.size());
        for (size_t k = 0; k < touched.size(); ++k)
          in[k] = InView(*s, touched[k]);
      }
    }

    TakeIn(changes);
    frame_ = changes.frame;
    frame_time_ = time;

    // What each echo-filtered subscriber's own writes were, once per writer.
    absl::flat_hash_map<std::string, absl::flat_hash_set<EntityId>> echoes;
    for (auto& [id, s] : subs_) {
      const std::string& client = s->options.no_echo_client_id;
      if (!client.empty() && !echoes.contains(client)) {
        echoes.emplace(client, Echoes(client, writers));
      }
    }
    const auto is_echo = [&](const Subscription& s, EntityId e) {
      const std::string& client = s.options.no_echo_client_id;
      return !client.empty() && echoes.at(client).contains(e);
    };

    // The other whole-world subscribers fold the frame into their pending
    // events.
    for (auto& [id, s] : subs_) {
      if (!s->whole_world || served.contains(id) || changes.empty()) continue;
      if (s->resync) {
        // Fell too far behind: it gets its view whole, nothing to note but
        // that the frame changed it.
        s->noted = !changes.empty();
        continue;
      }
      Fold(*s);
      for (EntityId e : changes.destroyed) Note(*s, e, kDestroyed);
      for (EntityId e : changes.created) Note(*s, e, kCreated);
      for (EntityId e : changes.reparented) Note(*s, e, kReparented);
      for (EntityId e : changes.moved) {
        if (!is_echo(*s, e)) Note(*s, e, kMoved);
      }
    }
    if (!filtered.empty()) {
      const absl::flat_hash_set<EntityId> moved(changes.moved.begin(),
                                                changes.moved.end());
      const absl::flat_hash_set<EntityId> reparented(changes.reparented.begin(),
                                                     changes.reparented.end());
      // Parents first, so that an entity's membership can follow its
      // parent's, already updated, or unchanged when the parent was not
      // touched. The destroyed (absent now) sort anywhere.
      // Depths looked up once each, not once per comparison.
      std::vector<std::pair<uint32_t, size_t>> by_depth(touched.size());
      for (size_t k = 0; k < touched.size(); ++k) {
        auto it = state_.find(touched[k]);
        by_depth[k] = {it == state_.end() ? 0u : it->second.depth, k};
      }
      std::sort(by_depth.begin(), by_depth.end());
      std::vector<size_t> order(touched.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = by_depth[k].second;
      for (size_t f = 0; f < filtered.size(); ++f) {
        Subscription& s = *filtered[f];
        for (size_t k : order) {
          const EntityId e = touched[k];
          const bool was = before[f][k];
          auto it = state_.find(e);
          const bool alive = it != state_.end();
          const bool under_root =
              alive && (s.roots.contains(e) ||
                        (it->second.parent != kNoEntity &&
                         s.in_subtree.contains(it->second.parent)));
          if (under_root) {
            s.in_subtree.insert(e);
          } else {
            s.in_subtree.erase(e);
          }
          const bool is = under_root || (alive && s.listed.contains(e));
          if (!was && is) {
            Note(s, e, kCreated);
          } else if (was && !is) {
            Note(s, e, kDestroyed);
          } else if (was && is) {
            if (reparented.contains(e)) Note(s, e, kReparented);
            if (moved.contains(e) && !is_echo(s, e)) Note(s, e, kMoved);
          }
        }
      }
    }
    for (auto& [id, s] : subs_) {
      if (s->noted) {
        ++s->frames_with_changes;
        s->noted = false;
      }
      if (s->pending.size() > max_pending_) {
        s->pending.Release();
        s->resync = true;
      }
      if (s->resync) {
        wake.push_back(s->sink);
        continue;
      }
      // A streaming snapshot is not woken: its stream asks for each next
      // part as the last is written, and waking it would make the part here,
      // on the publishing thread (for tick worlds, the one ticker).
      if (s->snapshot) continue;
      if (served.contains(id)) {
        if (s->ready_frames > 1) wake.push_back(s->sink);  // See Next().
        continue;
      }
      if (!s->pending.empty() || !s->ready.empty()) wake.push_back(s->sink);
    }
  }
  for (auto& sink : wake) sink->Wake();
}

std::vector<std::shared_ptr<const Outgoing>> Replicator::FrameParts(
    const FrameChanges& changes, absl::Time time, size_t max_bytes) {
  v1::FrameUpdateWriter writer(changes.frame, time, max_bytes,
                               /*snapshot=*/false);
  writer.Destroyed(changes.destroyed);
  // Created entities are among the moved too, with their matrix: find it, so
  // a creation and its matrix travel in one part.
  absl::flat_hash_map<EntityId, size_t> created_at;
  if (!changes.created.empty()) {
    const absl::flat_hash_set<EntityId> created(changes.created.begin(),
                                                changes.created.end());
    for (size_t k = 0; k < changes.moved.size(); ++k) {
      if (created.contains(changes.moved[k])) {
        created_at[changes.moved[k]] = k;
      }
    }
    for (size_t k = 0; k < changes.created.size(); ++k) {
      writer.Created(changes.created[k], changes.created_parent[k],
                     changes.MovedWorld(created_at.at(changes.created[k])));
    }
  }
  for (size_t k = 0; k < changes.reparented.size(); ++k) {
    writer.Reparented(changes.reparented[k], changes.reparented_parent[k]);
  }
  if (created_at.empty()) {
    writer.Moved(changes.moved, changes.moved_world.data());
  } else {
    for (size_t k = 0; k < changes.moved.size(); ++k) {
      if (!created_at.contains(changes.moved[k])) {
        writer.Moved(changes.moved[k], changes.MovedWorld(k));
      }
    }
  }
  return Share(writer.Finish(/*frames_skipped=*/0));
}

std::shared_ptr<const Outgoing> Replicator::TakePart(Subscription& s) {
  std::shared_ptr<const Outgoing> part = std::move(s.parts.front());
  s.parts.pop_front();
  if (part->message().last_part()) s.last_frame_sent = part->message().frame();
  return part;
}

Replicator::SubscriptionId Replicator::Subscribe(
    SubscriptionOptions options, std::shared_ptr<UpdateSink> sink) {
  auto s = std::make_unique<Subscription>();
  s->whole_world = options.entities.empty() && options.subtrees.empty();
  s->listed.insert(options.entities.begin(), options.entities.end());
  s->roots.insert(options.subtrees.begin(), options.subtrees.end());
  s->options = std::move(options);
  s->sink = std::move(sink);
  SubscriptionId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    BuildSnapshot(*s);
    id = next_id_++;
    subs_.emplace(id, std::move(s));
  }
  return id;
}

void Replicator::BuildSnapshot(Subscription& s) {
  auto snap = std::make_unique<StreamedSnapshot>();
  snap->skipped_before =
      s.frames_with_changes > 0 ? s.frames_with_changes - 1 : 0;
  s.frames_with_changes = 0;
  if (s.whole_world) {
    // Every live slot stale, none known: O(slots / 64) and the free list.
    snap->stale.SetAll(slot_entity_.size());
    for (uint32_t slot : free_slots_) snap->stale.reset(slot);
    snap->stale_count = state_.size();
  } else {
    // The view's members, stale: the subtrees' (membership rebuilt here, in
    // O(view): shallowest roots first, so a root inside another's subtree is
    // covered by it) and the listed entities alive.
    const auto add = [&](EntityId e) {
      if (snap->stale.set(state_.at(e).slot)) ++snap->stale_count;
    };
    s.in_subtree.clear();
    std::vector<EntityId> roots;
    for (EntityId root : s.options.subtrees) {
      if (state_.contains(root)) roots.push_back(root);
    }
    SortByDepth(roots);
    for (EntityId root : roots) {
      if (s.in_subtree.contains(root)) continue;
      ForEachInSubtree(root, [&](EntityId e) {
        s.in_subtree.insert(e);
        add(e);
      });
    }
    for (EntityId e : s.listed) {
      if (state_.contains(e)) add(e);
    }
  }
  s.snapshot = std::move(snap);
}

std::shared_ptr<const Outgoing> Replicator::NextSnapshotPart(Subscription& s) {
  StreamedSnapshot& snap = *s.snapshot;
  if (snap.chain_epoch != structure_epoch_) snap.chain.clear();
  // A pass over the slots is done. What changed behind it is sent in another
  // pass, unless that is little (max_pending at most) or not much less than
  // this pass sent: then all of it now, under this one lock. So a snapshot of
  // a world changing faster than the stream carries still ends, at a cost no
  // greater than what changed while it streamed.
  bool all_now = false;
  if (snap.chain.empty() && snap.stale_count > 0 &&
      snap.stale.Find(snap.cursor) == snap.stale.size()) {
    all_now = snap.stale_count <= max_pending_ ||
              2 * snap.stale_count > snap.pass_sent;
    snap.cursor = 0;
    snap.pass_sent = 0;
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
  // Then stale entities in slot order, each after its parent chain.
  const auto slot_of = [&](EntityId e) { return state_.at(e).slot; };
  while (snap.gone.empty() && (all_now || writer.Fits(kEntryBytes))) {
    if (snap.chain.empty()) {
      if (snap.stale_count == 0) break;
      const size_t slot = snap.stale.Find(snap.cursor);
      if (slot == snap.stale.size()) break;  // The pass is done.
      // Past it: if it changes again, it waits for the next pass.
      snap.cursor = slot + 1;
      // The slot, and its ancestors the subscriber lacks, the root-most last.
      snap.chain.push_back(static_cast<uint32_t>(slot));
      for (EntityId p = state_.at(slot_entity_[slot]).parent;
           p != kNoEntity && !snap.known.test(slot_of(p)) &&
           (s.whole_world || InView(s, p));
           p = state_.at(p).parent) {
        snap.chain.push_back(slot_of(p));
      }
      snap.chain_epoch = structure_epoch_;
    }
    const uint32_t slot = snap.chain.back();
    snap.chain.pop_back();
    const EntityId e = slot_entity_[slot];
    const Published& p = state_.at(e);
    if (snap.known.set(slot)) {
      writer.Created(e, p.parent, p.world);
    } else {
      writer.Reparented(e, p.parent);
      writer.Moved(e, p.world);
    }
    if (snap.stale.reset(slot)) --snap.stale_count;
    ++snap.pass_sent;
  }
  const bool done = snap.stale_count == 0 && snap.gone.empty();
  // Frames published while it streamed are in it, not skipped.
  const uint64_t skipped = snap.skipped_before;
  auto parts = Share(writer.Finish(skipped, /*last=*/done));
  snap.part += static_cast<uint32_t>(parts.size());
  if (done) {
    s.frames_skipped += skipped;
    s.frames_with_changes = 0;
    s.snapshot.reset();
  }
  for (auto& part : parts) s.parts.push_back(std::move(part));
  return TakePart(s);
}

void Replicator::SortByDepth(std::vector<EntityId>& entities) const {
  std::stable_sort(entities.begin(), entities.end(),
                   [&](EntityId a, EntityId b) {
                     return state_.at(a).depth < state_.at(b).depth;
                   });
}

void Replicator::Unsubscribe(SubscriptionId id) {
  std::unique_ptr<Subscription> gone;  // Freed after the lock is released.
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = subs_.find(id);
    if (it == subs_.end()) return;
    gone = std::move(it->second);
    subs_.erase(it);
  }
}

std::shared_ptr<const Outgoing> Replicator::Next(SubscriptionId id,
                                                 absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = subs_.find(id);
  if (it == subs_.end()) return nullptr;
  Subscription& s = *it->second;
  if (s.parts.empty() && !s.ready.empty()) {
    if (s.ready_frames == 1) {
      // The shared parts of the frame, committed to once the first is taken.
      s.parts.assign(s.ready.begin(), s.ready.end());
      s.ready.clear();
      s.ready_frames = 0;
      s.ready_entities = 0;
      s.frames_with_changes = 0;
    } else if (s.ready.back()->message().frame() <= frame_) {
      Fold(s);  // Several frames: one message with the latest of each.
    } else {
      // The last frame is not in the published state yet (Publish serves
      // shared parts first): it is woken again once it is.
      return nullptr;
    }
  }
  if (!s.parts.empty()) return TakePart(s);
  if (s.snapshot) return NextSnapshotPart(s);
  if (s.resync && now >= s.next_allowed) {
    s.resync = false;
    BuildSnapshot(s);
    return NextSnapshotPart(s);
  }
  if (s.pending.empty() || now < s.next_allowed) return nullptr;

  // Everything pending, from the latest published state, in the order the
  // proto promises across parts.
  std::vector<EntityId> destroyed, entered, reparented, moved;
  for (const auto& [e, flags] : s.pending) {
    if (flags & kDestroyed) {
      destroyed.push_back(e);
    } else if (flags & kCreated) {
      entered.push_back(e);
    } else {
      if (flags & kReparented) reparented.push_back(e);
      if (flags & kMoved) moved.push_back(e);
    }
  }
  s.pending.clear();
  SortByDepth(entered);
  SortByDepth(reparented);
  v1::FrameUpdateWriter writer(frame_, frame_time_, s.options.part_budget_bytes,
                               /*snapshot=*/false);
  writer.Destroyed(destroyed);
  for (EntityId e : entered) {
    const Published& p = state_.at(e);
    writer.Created(e, p.parent, p.world);
  }
  for (EntityId e : reparented) writer.Reparented(e, state_.at(e).parent);
  for (EntityId e : moved) writer.Moved(e, state_.at(e).world);
  const uint64_t skipped =
      s.frames_with_changes > 0 ? s.frames_with_changes - 1 : 0;
  s.frames_skipped += skipped;
  s.frames_with_changes = 0;
  for (auto& part : Share(writer.Finish(skipped))) {
    s.parts.push_back(std::move(part));
  }
  if (s.options.max_rate_hz > 0) {
    s.next_allowed = now + absl::Seconds(1.0 / s.options.max_rate_hz);
  }
  return TakePart(s);
}

void Replicator::Flush(absl::Time now) {
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    // The one ticker polls every world: one busy publishing a huge frame is
    // polled next time rather than holding up the others.
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    for (auto& [id, s] : subs_) sinks.push_back(s->sink);
  }
  for (auto& sink : sinks) sink->Poll(now);
}

void Replicator::EndAll(const absl::Status& status) {
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : subs_) sinks.push_back(s->sink);
  }
  for (auto& sink : sinks) sink->End(status);
}

uint64_t Replicator::frame() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frame_;
}

size_t Replicator::subscribers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return subs_.size();
}

size_t Replicator::echo_filtered_subscribers() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, s] : subs_) n += !s->options.no_echo_client_id.empty();
  return n;
}

std::vector<SubscriberStats> Replicator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SubscriberStats> out;
  for (const auto& [id, s] : subs_) {
    const size_t stale = s->snapshot ? s->snapshot->stale_count : 0;
    // Kept frames count beyond the first, the message it would send next.
    const size_t kept = s->ready_frames > 1 ? s->ready_entities : 0;
    out.push_back({id, s->pending.size() + kept + stale, s->last_frame_sent,
                   s->frames_skipped});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace xform::server
