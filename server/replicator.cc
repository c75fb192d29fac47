// Copyright 2026 The xform Authors.

#include "server/replicator.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "absl/types/span.h"
#include "xform/v1/frame_update.h"

namespace xform::server {

void Replicator::Note(Subscription& s, EntityId e, NetChange change, Slot slot,
                      const std::optional<Matrix3x4>& before) const {
  s.noted = true;
  // It will be sent e as published (or that e is gone): as every message
  // is made, from the published state.
  if (!s.lagging.empty() && change != kReparented) s.lagging.erase(e);
  if (s.snapshot) {
    NoteInSnapshot(*s.snapshot, e, change, slot);
    return;
  }
  if (s.resync) return;  // It gets its view whole.
  s.pending.Note(e, change);
  // At e's first note since the last message, the subscriber holds what was
  // published before this frame (everything else it was sent is current):
  // `before`, for a move. Later notes keep it, whatever they are: an entity
  // destroyed and created again, unseen, is still what it was to it.
  if (TracksHeld(s)) {
    s.held.try_emplace(e, change == kMoved ? before : std::nullopt);
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
    // A compact part knows what its receivers held before it.
    const std::vector<std::optional<Matrix3x4>>& before = part->previous();
    for (int k = 0; k < u.moved_size(); ++k) {
      const size_t at = static_cast<size_t>(k);
      Note(s, u.moved(k), kMoved, PublishedState::kNoSlot,
           at < before.size() ? before[at] : std::nullopt);
    }
  }
  s.noted = noted;
  s.frames_with_changes += s.ready_frames;
  s.ready.clear();
  s.ready_frames = 0;
  s.ready_entities = 0;
}

uint64_t Replicator::OwedAfter(const Subscription& s, uint64_t frame) {
  // It was last sent the frame before its first kept one; keeping none
  // (and with nothing pending), what this frame changes on.
  return s.ready.empty() ? frame - 1 : s.ready.front()->header().frame - 1;
}

bool Replicator::StartCatchingUpFromState(Subscription& s, uint64_t frame) {
  const uint64_t after = OwedAfter(s, frame);
  if (after < state_.destroyed_log_after()) return false;
  s.frames_with_changes += s.ready_frames;
  s.changed_entities = s.ready_entities;
  s.ready.clear();
  s.ready_frames = 0;
  s.ready_entities = 0;
  s.changed_after = after;
  return true;
}

bool Replicator::StopNoting(Subscription& s) {
  if (!MayCatchUpFromState(s) || s.snapshot || !s.pending_after ||
      *s.pending_after < state_.destroyed_log_after()) {
    return false;
  }
  s.changed_after = s.pending_after;
  s.changed_entities = s.pending.size();
  s.pending.Release();
  s.pending_after.reset();
  s.ReleaseHeld();  // Its entries are then sent whole.
  s.overdue_entities = 0;
  return true;
}

bool Replicator::CatchUpFromState(Subscription& s, absl::Time now) {
  const uint64_t after = *s.changed_after;
  // The entities the frames since listed, repeats counted: at least as many
  // as will be sent, so their list is sized once (up to the bound).
  const size_t listed = std::min(s.changed_entities, max_pending_ + 1);
  s.changed_after.reset();
  s.changed_entities = 0;
  if (after < state_.destroyed_log_after()) {
    s.Resync();  // Its destructions were dropped from the log.
    return false;
  }
  // What it lacks is the entity as published now: created (with its parent
  // and matrix), or re-parented, moved; past max_pending, no further. Its
  // `pending` is empty (see Subscription::changed_after): the slots are
  // listed as found, with no table. Each entity comes once: the walk finds
  // each slot once, and the log holds at most one destruction of what it
  // had (a later one is of an entity created since).
  OwedSlots owed;
  // Its entities destroyed and created again: to it, re-parented and moved.
  absl::flat_hash_set<Slot> again;
  state_.DestroyedSince(after, owed.destroyed, again);
  size_t entities = owed.destroyed.size();
  bool within = entities <= max_pending_;
  if (within) {
    owed.moved.reserve(listed);
    state_.ForEachChangedSince(after, [&](Slot slot) {
      const PublishedState::Stamps stamps = state_.stamps(slot);
      const bool created_again = !again.empty() && again.contains(slot);
      if (stamps.created > after && !created_again) {
        owed.entered.push_back(slot);
      } else {
        if (stamps.parented > after || created_again) {
          owed.reparented.push_back(slot);
        }
        if (stamps.moved > after || created_again) owed.moved.push_back(slot);
      }
      within = ++entities <= max_pending_;
      return within;
    });
  }
  if (!within) {
    // Owed more than a laggard may be: what changed, streamed, if it keeps
    // its view through a snapshot (the entities it had that are gone are
    // all known: at most the log's max_pending), once found; meanwhile it
    // is owed from `after` still. Else its view whole.
    if (s.options.accepts_kept_view_snapshots) {
      s.changed_after = after;
      s.changed_entities = entities;
      s.kept_view_scan = std::make_unique<KeptViewScan>(KeptViewScan{
          .after = after, .began = frame_, .end_block = state_.blocks()});
    } else {
      s.Resync();
    }
    return false;
  }
  SortByDepth(owed.entered);
  SortByDepth(owed.reparented);
  MakeParts(s, now, owed);
  return true;
}

void Replicator::LogDestroyed(const FrameChanges& changes) {
  // What the subscribers that may catch up from the state could still
  // need: destructions after the frame each was last sent.
  bool any = false;
  uint64_t needed_after = changes.frame;
  for (const auto& [id, s] : subs_) {
    if (!MayCatchUpFromState(*s)) continue;
    any = true;
    // Owed from the state, or noting, after a frame; else it may start
    // catching up at this one (StartCatchingUpFromState), owed what changed
    // after the frame before its kept ones or this one: so this frame's
    // destructions on, added below. (Not after this frame: then one not
    // served it, partway through an earlier message, could not start, and
    // noted frames until resent whole.)
    const uint64_t after = s->changed_after   ? *s->changed_after
                           : s->pending_after ? *s->pending_after
                                              : OwedAfter(*s, changes.frame);
    needed_after = std::min(needed_after, after);
  }
  if (!any) {
    state_.ClearDestroyedLog(changes.frame);
    return;
  }
  // A laggard is owed at most max_pending: one that would be owed more of
  // these resyncs (CatchUpFromState).
  state_.LogDestroyed(changes, needed_after, max_pending_);
}

bool Replicator::InView(const Subscription& s, Slot slot) const {
  return s.in_subtree.test(slot) ||
         (!s.listed.empty() && s.listed.contains(state_.entity(slot)));
}

bool Replicator::InView(const Subscription& s, EntityId e) const {
  const Slot slot = state_.Find(e);
  return slot != PublishedState::kNoSlot && InView(s, slot);
}

absl::flat_hash_set<EntityId> Replicator::EchoesOf(
    const std::string& client, const FrameWriters& writers) const {
  // Everything below an entity another writer set moved because of it: mark
  // those subtrees, each slot once (a walk stops at what an earlier one
  // marked), so this is O(moved).
  SlotBits foreign;
  for (const auto& [e, writer] : writers) {
    if (writer == client) continue;
    const Slot slot = state_.Find(e);
    if (slot == PublishedState::kNoSlot) continue;
    state_.VisitSubtree(slot, [&](Slot d) { return foreign.set(d); });
  }
  absl::flat_hash_set<EntityId> echoes;
  for (const auto& [e, writer] : writers) {
    if (writer != client) continue;
    // Destroyed since (no slot): nothing of it is sent, echo or not.
    const Slot slot = state_.Find(e);
    if (slot == PublishedState::kNoSlot || !foreign.test(slot)) {
      echoes.insert(e);
    }
  }
  return echoes;
}

void Replicator::Publish(const FrameChanges& changes, absl::Time time,
                         const FrameWriters& writers) {
  std::vector<std::shared_ptr<UpdateSink>> wake;
  absl::flat_hash_set<SubscriptionId> served;
  const WritingClients writing = WritingClientsOf(writers);
  if (!changes.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    served = ServeCaughtUp(changes, time, writing, wake);
  }
  WakeAll(std::move(wake));
  wake.clear();

  {
    std::lock_guard<std::mutex> lock(mu_);
    ViewsBefore views = RecordViewsBefore(changes);
    const std::vector<std::optional<Matrix3x4>> moved_before =
        MovedBefore(changes, served);
    state_.TakeIn(changes);
    frame_ = changes.frame;
    frame_time_ = time;
    // Folds end at the frame published last. (Not clear(): GCC 12 sees a
    // null dereference in its inlined shared_ptr destructors.)
    shared_folds_.erase(shared_folds_.begin(), shared_folds_.end());
    const Echoes echoes = FindEchoes(writers, writing);
    if (!changes.empty()) {
      LogDestroyed(changes);
      FoldIntoWholeWorld(changes, served, echoes, moved_before);
    }
    UpdateFilteredViews(changes, views, echoes, moved_before);
    CloseFrame(served, wake);
  }
  WakeAll(std::move(wake));
}

void Replicator::WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks) {
  if (fanout_ != nullptr) {
    fanout_->WakeAll(std::move(sinks));
    return;
  }
  for (auto& sink : sinks) sink->Wake();
}

void Replicator::PublishWhole(const World& world, uint64_t frame,
                              absl::Time time) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.TakeInWhole(world, frame);
  frame_ = frame;
  frame_time_ = time;
}

absl::flat_hash_set<Replicator::SubscriptionId> Replicator::ServeCaughtUp(
    const FrameChanges& changes, absl::Time time, const WritingClients& writing,
    std::vector<std::shared_ptr<UpdateSink>>& wake) {
  // Caught-up whole-world subscribers share one message, made from the
  // frame's changes alone, so they are served first; the published state
  // takes the frame in afterwards. A subscriber joining in between gets the
  // previous frame's snapshot and this frame folded into its pending events,
  // so nothing is missed.
  absl::flat_hash_set<SubscriptionId> served;
  std::vector<std::shared_ptr<const Outgoing>> shared;
  // The compact encodings of `shared`, one per precision asked for, and the
  // matrices their deltas are coded against.
  CompactShared compact;
  std::vector<std::vector<std::optional<Matrix3x4>>> previous;
  const size_t entities = changes.moved.size() + changes.destroyed.size() +
                          changes.reparented.size();
  // The frame's moved entities, made once the first lagging subscriber
  // with fewer lagging entities than the frame has moves wants them.
  absl::flat_hash_set<EntityId> moved;
  const auto moves_any = [&](const absl::flat_hash_set<EntityId>& lagging) {
    if (lagging.size() >= changes.moved.size()) {
      return std::any_of(changes.moved.begin(), changes.moved.end(),
                         [&](EntityId e) { return lagging.contains(e); });
    }
    if (moved.empty()) moved.insert(changes.moved.begin(), changes.moved.end());
    return std::any_of(lagging.begin(), lagging.end(),
                       [&](EntityId e) { return moved.contains(e); });
  };
  for (auto& [id, s] : subs_) {
    // One that filters echoes has none in a frame its writer did not write.
    // A compact one's deltas must also be against what it holds: none of
    // the entities it lags on may move (O(min(lagging, moved))), and it must
    // know which they are.
    const std::string& client = s->options.no_echo_client_id;
    const bool no_echoes =
        client.empty() || (!writing.contains(client) && !s->lag_untracked &&
                           (s->lagging.empty() || !moves_any(s->lagging)));
    // Caught up, but perhaps for earlier frames' shared parts not taken.
    const bool caught_up = s->whole_world && !s->snapshot &&
                           s->pending.empty() && !s->changed_after &&
                           !s->resync && s->parts.empty() && no_echoes;
    if (!caught_up) continue;
    const bool rate_limited = s->options.max_rate_hz > 0;
    if (rate_limited && s->ready_frames > 0) {
      // Keeps the frames until its next message is due (then folded once,
      // and shared: TakeSharedFold): O(1) a frame, where noting each frame's
      // changes would be O(moved). Past what a laggard may be owed, or the
      // world, they are dropped, and it catches up from the published state
      // when due (FoldIntoWholeWorld, StartCatchingUpFromState).
      if (s->ready_entities + entities > std::min(max_pending_, state_.size()))
        continue;
    } else if (s->ready_frames > 0) {
      const bool past_pending = s->ready_entities + entities > max_pending_;
      const bool past_world = s->ready_entities + entities > state_.size();
      if (past_pending || past_world) {
        // Stopped reading, or reads slower than the world changes. Owed
        // what changed since its last message, found from the published
        // state when it reads again, if it may be (FoldIntoWholeWorld takes
        // this frame in): O(1) a frame meanwhile, and then a message of the
        // entities changed, however many frames listed them (or, past
        // max_pending of those, its view whole). A compact one past the
        // world alone folds its frames into pending events instead, which
        // the world bounds: its message is then coded as deltas, not whole.
        if (MayCatchUpFromState(*s) && (past_pending || !TracksHeld(*s)) &&
            StartCatchingUpFromState(*s, changes.frame)) {
          continue;
        }
        if (!past_pending) continue;  // Folds, as above.
        s->Resync();                  // Its view whole.
        s->noted = true;
        served.insert(id);
        continue;
      }
    }
    served.insert(id);
    if (shared.empty()) {
      shared = FrameParts(changes, time, s->options.part_budget_bytes);
    }
    const float precision = s->options.compact_precision;
    const std::vector<std::shared_ptr<const Outgoing>>& parts =
        precision == 0 ? shared
                       : CompactParts(shared, precision, compact, previous);
    s->ready.insert(s->ready.end(), parts.begin(), parts.end());
    ++s->ready_frames;
    s->ready_entities += entities;
    // Due with more than this frame kept, it folds them, which wants the
    // frame taken in: CloseFrame wakes it.
    if (time >= s->next_allowed && !(rate_limited && s->ready_frames > 1)) {
      wake.push_back(s->sink);
    }
  }
  return served;
}

Replicator::ViewsBefore Replicator::RecordViewsBefore(
    const FrameChanges& changes) const {
  // Filtered views depend on membership before and after the frame; the
  // subtree of a re-parented entity may enter or leave a view with it.
  ViewsBefore views;
  for (const auto& [id, s] : subs_) {
    if (!s->whole_world) views.filtered.push_back(s.get());
  }
  views.moves_only = changes.created.empty() && changes.destroyed.empty() &&
                     changes.reparented.empty();
  // Only moves: no view changes, none needs recording.
  if (views.filtered.empty() || views.moves_only) return views;
  std::vector<EntityId>& touched = views.touched;
  for (const auto* list :
       {&changes.moved, &changes.created, &changes.destroyed}) {
    touched.insert(touched.end(), list->begin(), list->end());
  }
  // Each slot once: a walk stops at a subtree an earlier one took.
  SlotBits walked;
  for (EntityId e : changes.reparented) {
    const Slot slot = state_.Find(e);
    if (slot == PublishedState::kNoSlot) continue;
    state_.VisitSubtree(slot, [&](Slot d) {
      if (!walked.set(d)) return false;
      touched.push_back(state_.entity(d));
      return true;
    });
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (const Subscription* s : views.filtered) {
    std::vector<bool>& in = views.in_view.emplace_back(touched.size());
    for (size_t k = 0; k < touched.size(); ++k) in[k] = InView(*s, touched[k]);
  }
  return views;
}

std::vector<std::optional<Matrix3x4>> Replicator::MovedBefore(
    const FrameChanges& changes,
    const absl::flat_hash_set<SubscriptionId>& served) const {
  std::vector<std::optional<Matrix3x4>> before;
  const bool wanted =
      std::any_of(subs_.begin(), subs_.end(), [&](const auto& entry) {
        const Subscription& s = *entry.second;
        return TracksHeld(s) && !s.snapshot && !s.resync &&
               !served.contains(entry.first);
      });
  if (!wanted) return before;
  // A created entity's is not wanted (its first note this frame is its
  // creation, or, re-using an id destroyed this frame, the destruction).
  before.reserve(changes.moved.size());
  for (EntityId e : changes.moved) {
    const Slot slot = state_.Find(e);
    before.push_back(slot == PublishedState::kNoSlot
                         ? std::nullopt
                         : std::optional<Matrix3x4>(state_.world(slot)));
  }
  return before;
}

Replicator::WritingClients Replicator::WritingClientsOf(
    const FrameWriters& writers) {
  WritingClients clients;
  absl::string_view last;
  for (const auto& [e, client] : writers) {
    // Mostly one or a few writers: a compare, not a hash, an entity.
    if (client == last && !clients.empty()) continue;
    clients.insert(client);
    last = client;
  }
  return clients;
}

Replicator::Echoes Replicator::FindEchoes(const FrameWriters& writers,
                                          const WritingClients& writing) const {
  // Once per writer, however many of its subscriptions filter echoes; none
  // for one that did not write.
  Echoes echoes;
  for (const auto& [id, s] : subs_) {
    const std::string& client = s->options.no_echo_client_id;
    if (!client.empty() && !echoes.contains(client)) {
      echoes.emplace(client, writing.contains(client)
                                 ? EchoesOf(client, writers)
                                 : absl::flat_hash_set<EntityId>());
    }
  }
  return echoes;
}

bool Replicator::IsEcho(const Echoes& echoes, const std::string& client,
                        EntityId e) {
  return !client.empty() && echoes.at(client).contains(e);
}

void Replicator::FoldIntoWholeWorld(
    const FrameChanges& changes,
    const absl::flat_hash_set<SubscriptionId>& served, const Echoes& echoes,
    const std::vector<std::optional<Matrix3x4>>& moved_before) {
  // Streaming snapshots mark changes by slot: each entity's looked up once
  // for them all, not once per joining subscriber.
  const bool snapshots = std::any_of(subs_.begin(), subs_.end(), [](auto& s) {
    return s.second->whole_world && s.second->snapshot;
  });
  const auto slots_of = [&](const std::vector<EntityId>& entities) {
    std::vector<Slot> slots(entities.size(), PublishedState::kNoSlot);
    if (snapshots) {
      for (size_t k = 0; k < entities.size(); ++k) {
        slots[k] = state_.FindThisFrame(entities[k]);
      }
    }
    return slots;
  };
  const std::vector<Slot> destroyed = slots_of(changes.destroyed);
  const std::vector<Slot> created = slots_of(changes.created);
  const std::vector<Slot> reparented = slots_of(changes.reparented);
  const std::vector<Slot> moved = slots_of(changes.moved);
  const size_t entities = changes.moved.size() + changes.destroyed.size() +
                          changes.reparented.size();
  for (auto& [id, s] : subs_) {
    if (!s->whole_world || served.contains(id)) continue;
    if (s->resync) {
      // Fell too far behind: it gets its view whole, nothing to note but
      // that the frame changed it.
      s->noted = true;
      continue;
    }
    // (Not one with events pending from before: it notes frames until its
    // next message sends them.)
    if (MayCatchUpFromState(*s) && !s->snapshot &&
        (s->changed_after || (CatchesUpFromState(*s) && s->pending.empty() &&
                              StartCatchingUpFromState(*s, changes.frame)))) {
      // What the frame changed is found from the state when it is due.
      s->noted = true;
      s->changed_entities += entities;
      continue;
    }
    if (s->pending.empty() && !s->snapshot) {
      s->pending_after = OwedAfter(*s, changes.frame);
    }
    Fold(*s);
    // (A streaming snapshot's bits count nothing: a pass may take longer.)
    if (!s->snapshot && frame_time_ >= s->next_allowed) {
      s->overdue_entities += entities;
    }
    const std::string& client = s->options.no_echo_client_id;
    for (size_t k = 0; k < destroyed.size(); ++k) {
      Note(*s, changes.destroyed[k], kDestroyed, destroyed[k]);
    }
    for (size_t k = 0; k < created.size(); ++k) {
      Note(*s, changes.created[k], kCreated, created[k]);
    }
    for (size_t k = 0; k < reparented.size(); ++k) {
      Note(*s, changes.reparented[k], kReparented, reparented[k]);
    }
    for (size_t k = 0; k < moved.size(); ++k) {
      const EntityId e = changes.moved[k];
      if (IsEcho(echoes, client, e)) {
        if (LagsOnEchoes(*s) && !s->lag_untracked) {
          s->lagging.insert(e);
          if (s->lagging.size() > max_pending_) {
            absl::flat_hash_set<EntityId>().swap(s->lagging);
            s->lag_untracked = true;
          }
        }
        continue;
      }
      Note(*s, e, kMoved, moved[k],
           k < moved_before.size() ? moved_before[k] : std::nullopt);
    }
  }
}

void Replicator::UpdateFilteredViews(
    const FrameChanges& changes, ViewsBefore& before, const Echoes& echoes,
    const std::vector<std::optional<Matrix3x4>>& moved_before) {
  if (before.filtered.empty()) return;
  if (before.moves_only) {
    NoteMovesInViews(changes, before.filtered, echoes, moved_before);
    return;
  }
  BreakMembershipWalks(changes, before.filtered);
  const std::vector<EntityId>& touched = before.touched;
  // Each moved entity's index in changes.moved.
  absl::flat_hash_map<EntityId, size_t> moved;
  moved.reserve(changes.moved.size());
  for (size_t k = 0; k < changes.moved.size(); ++k) {
    moved.emplace(changes.moved[k], k);
  }
  const absl::flat_hash_set<EntityId> reparented(changes.reparented.begin(),
                                                 changes.reparented.end());
  // Parents first, so that an entity's membership can follow its parent's,
  // already updated, or unchanged when the parent was not touched. The
  // destroyed (absent now) sort anywhere.
  std::vector<std::pair<uint32_t, size_t>> by_depth(touched.size());
  std::vector<Slot> slots(touched.size());
  for (size_t k = 0; k < touched.size(); ++k) {
    slots[k] = state_.Find(touched[k]);
    by_depth[k] = {
        slots[k] == PublishedState::kNoSlot ? 0u : state_.depth(slots[k]), k};
  }
  std::sort(by_depth.begin(), by_depth.end());
  for (size_t f = 0; f < before.filtered.size(); ++f) {
    Subscription& s = *before.filtered[f];
    const std::string& client = s.options.no_echo_client_id;
    for (const auto& [depth, k] : by_depth) {
      const EntityId e = touched[k];
      const Slot slot = slots[k];
      const bool was = before.in_view[f][k];
      const bool alive = slot != PublishedState::kNoSlot;
      const bool under_root =
          alive && (s.roots.contains(e) ||
                    (state_.parent(slot) != PublishedState::kNoSlot &&
                     s.in_subtree.test(state_.parent(slot))));
      if (under_root) {
        s.in_subtree.set(slot);
      } else if (alive) {
        s.in_subtree.reset(slot);
      } else if (const Slot freed = state_.FindThisFrame(e);
                 freed != PublishedState::kNoSlot) {
        s.in_subtree.reset(freed);  // Before the slot is reused.
      }
      const bool is = under_root || (alive && s.listed.contains(e));
      if (!was && is) {
        Note(s, e, kCreated, slot);
      } else if (was && !is) {
        Note(s, e, kDestroyed, slot);
      } else if (was && is) {
        if (reparented.contains(e)) Note(s, e, kReparented, slot);
        const auto at = moved.find(e);
        if (at != moved.end() && !IsEcho(echoes, client, e)) {
          Note(s, e, kMoved, slot,
               at->second < moved_before.size() ? moved_before[at->second]
                                                : std::nullopt);
        }
      }
    }
  }
}

void Replicator::NoteMovesInViews(
    const FrameChanges& changes, const std::vector<Subscription*>& filtered,
    const Echoes& echoes,
    const std::vector<std::optional<Matrix3x4>>& moved_before) {
  const std::vector<EntityId>& moved = changes.moved;
  std::vector<Slot> slots(moved.size());
  for (size_t k = 0; k < moved.size(); ++k) slots[k] = state_.Find(moved[k]);
  // Each moved entity's index in `moved`, made once the first short list
  // wants it.
  absl::flat_hash_map<EntityId, size_t> index;
  // Subtree views whose bits are fewer words than the frame has moves.
  // Their bits are walked against the moved slots', marked first, when
  // there are enough of them to repay the marking (three writes a moved
  // entity, against a bit test each that each of them saves).
  const auto narrow = [&moved](const Subscription& s) {
    return !s.roots.empty() && s.in_subtree.words() < moved.size();
  };
  constexpr size_t kNarrowViewsToMark = 4;
  const bool mark = static_cast<size_t>(std::count_if(
                        filtered.begin(), filtered.end(),
                        [&](const Subscription* s) { return narrow(*s); })) >=
                    kNarrowViewsToMark;
  if (mark) {
    for (size_t k = 0; k < moved.size(); ++k) {
      if (slots[k] == PublishedState::kNoSlot) continue;
      moved_slots_.set(slots[k]);
      if (moved_index_by_slot_.size() <= slots[k]) {
        moved_index_by_slot_.resize(slots[k] + 1);
      }
      moved_index_by_slot_[slots[k]] = static_cast<uint32_t>(k);
    }
  }
  for (Subscription* s : filtered) {
    const std::string& client = s->options.no_echo_client_id;
    const auto note = [&](size_t k) {
      if (IsEcho(echoes, client, moved[k])) return;
      Note(*s, moved[k], kMoved, slots[k],
           k < moved_before.size() ? moved_before[k] : std::nullopt);
    };
    if (mark && narrow(*s)) {
      s->in_subtree.ForEachInBoth(
          moved_slots_, [&](size_t slot) { note(moved_index_by_slot_[slot]); });
    } else if (!s->roots.empty()) {
      for (size_t k = 0; k < moved.size(); ++k) {
        if (s->in_subtree.test(slots[k])) note(k);
      }
    }
    if (s->listed.empty()) continue;
    // A list: whichever of it and the moved is shorter is walked, the
    // other looked up in. What its subtrees noted is not noted twice.
    if (s->listed.size() < moved.size()) {
      if (index.empty()) {
        index.reserve(moved.size());
        for (size_t k = 0; k < moved.size(); ++k) index.emplace(moved[k], k);
      }
      for (EntityId e : s->listed) {
        const auto at = index.find(e);
        if (at != index.end() && !s->in_subtree.test(slots[at->second])) {
          note(at->second);
        }
      }
    } else {
      for (size_t k = 0; k < moved.size(); ++k) {
        if (!s->in_subtree.test(slots[k]) && s->listed.contains(moved[k])) {
          note(k);
        }
      }
    }
  }
  if (mark) {
    for (Slot slot : slots) moved_slots_.reset(slot);
  }
}

void Replicator::CloseFrame(const absl::flat_hash_set<SubscriptionId>& served,
                            std::vector<std::shared_ptr<UpdateSink>>& wake) {
  for (auto& [id, s] : subs_) {
    if (s->noted) {
      ++s->frames_with_changes;
      s->noted = false;
    }
    if ((s->pending.size() > max_pending_ ||
         s->overdue_entities > max_pending_) &&
        !StopNoting(*s)) {
      s->Resync();  // Its kept frames were folded, or frames noted, past it.
    }
    if (s->resync) {
      wake.push_back(s->sink);
      continue;
    }
    // A streaming snapshot is not woken: its stream asks for each next part
    // as the last is written, and waking it would make the part here, on the
    // publishing thread (for tick worlds, the world's ticker).
    if (s->snapshot) continue;
    // A rate-limited subscriber not due yet is polled when it is (Flush).
    if (frame_time_ < s->next_allowed) continue;
    if (served.contains(id)) {
      if (s->ready_frames > 1) wake.push_back(s->sink);  // See Next().
      continue;
    }
    if (!s->pending.empty() || !s->ready.empty() || s->changed_after) {
      wake.push_back(s->sink);
    }
  }
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

const std::vector<std::shared_ptr<const Outgoing>>& Replicator::CompactParts(
    const std::vector<std::shared_ptr<const Outgoing>>& raw, float precision,
    CompactShared& compact,
    std::vector<std::vector<std::optional<Matrix3x4>>>& previous) const {
  auto [it, added] = compact.try_emplace(precision);
  if (!added) return it->second;
  if (previous.empty()) {
    // What a caught-up subscriber holds of each moved entity: its matrix as
    // last published, which the state has until it takes this frame in. A
    // created entity (even one re-using a destroyed one's id) is new to it.
    for (const auto& part : raw) {
      const v1::FrameUpdate& u = part->message();
      const absl::flat_hash_set<EntityId> created(u.created().begin(),
                                                  u.created().end());
      std::vector<std::optional<Matrix3x4>>& held = previous.emplace_back();
      held.reserve(u.moved_size());
      for (EntityId e : u.moved()) {
        const Slot slot =
            created.contains(e) ? PublishedState::kNoSlot : state_.Find(e);
        held.push_back(slot == PublishedState::kNoSlot
                           ? std::nullopt
                           : std::optional<Matrix3x4>(state_.world(slot)));
      }
    }
  }
  for (size_t k = 0; k < raw.size(); ++k) {
    it->second.push_back(Outgoing::Compact(raw[k], precision, previous[k]));
  }
  return it->second;
}

std::vector<std::shared_ptr<const Outgoing>> Replicator::Share(
    std::vector<v1::FrameUpdate> parts,
    const std::shared_ptr<const void>& hold) {
  std::vector<std::shared_ptr<const Outgoing>> out;
  out.reserve(parts.size());
  for (v1::FrameUpdate& part : parts) {
    out.push_back(std::make_shared<const Outgoing>(std::move(part), hold));
  }
  return out;
}

void Replicator::CommitFirstReadyFrame(Subscription& s) {
  size_t end = 0;
  while (end < s.ready.size() && !s.ready[end]->header().last_part) ++end;
  end = std::min(end + 1, s.ready.size());
  for (size_t k = 0; k < end; ++k) {
    const v1::FrameUpdate& u = s.ready[k]->message();
    s.ready_entities -=
        std::min<size_t>(s.ready_entities, u.moved_size() + u.destroyed_size() +
                                               u.reparented_size());
    s.parts.push_back(std::move(s.ready[k]));
  }
  s.ready.erase(s.ready.begin(), s.ready.begin() + end);
  --s.ready_frames;
}

std::shared_ptr<const Outgoing> Replicator::TakePart(Subscription& s) {
  std::shared_ptr<const Outgoing> part = std::move(s.parts.front());
  s.parts.pop_front();
  // A compact subscriber's snapshot, and an echo-filtering one's folded
  // frames, are coded whole here: what it holds is not known for them.
  if (s.options.compact_precision > 0 && part->compact_precision() == 0) {
    part = Outgoing::Compact(std::move(part), s.options.compact_precision);
  }
  if (part->header().last_part) s.last_frame_sent = part->header().frame;
  s.overdue_entities = 0;
  Count(s, &Subscription::messages, &StreamStats::messages);
  Count(s, &Subscription::frames_folded,
        s.options.max_rate_hz > 0 ? &StreamStats::frames_folded_by_rate_limit
                                  : &StreamStats::frames_folded,
        part->header().frames_skipped);
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
  s->subscribed = absl::Now();
  SubscriptionId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    BuildSnapshot(*s);
    id = next_id_++;
    if (!s->options.no_echo_client_id.empty()) ++echo_filtered_;
    subs_.emplace(id, std::move(s));
  }
  return id;
}

std::vector<Replicator::Slot> Replicator::SlotsByDepth(
    absl::Span<const EntityId> entities) const {
  std::vector<Slot> slots;
  slots.reserve(entities.size());
  for (EntityId e : entities) {
    const Slot slot = state_.Find(e);
    if (slot != PublishedState::kNoSlot) slots.push_back(slot);
  }
  SortByDepth(slots);
  return slots;
}

void Replicator::SortByDepth(std::vector<Slot>& slots) const {
  // Depths looked up once each, not once per comparison.
  std::vector<std::pair<uint32_t, Slot>> by_depth;
  by_depth.reserve(slots.size());
  for (Slot slot : slots) by_depth.emplace_back(state_.depth(slot), slot);
  std::stable_sort(
      by_depth.begin(), by_depth.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < slots.size(); ++k) slots[k] = by_depth[k].second;
}

void Replicator::Unsubscribe(SubscriptionId id) {
  std::unique_ptr<Subscription> gone;  // Freed after the lock is released.
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = subs_.find(id);
    if (it == subs_.end()) return;
    gone = std::move(it->second);
    subs_.erase(it);
    if (!gone->options.no_echo_client_id.empty()) --echo_filtered_;
  }
}

std::shared_ptr<const Outgoing> Replicator::Next(SubscriptionId id,
                                                 absl::Time now) {
  bool must_make = false;
  return Take(id, now, /*make=*/true, &must_make);
}

std::shared_ptr<const Outgoing> Replicator::NextIfMade(SubscriptionId id,
                                                       absl::Time now,
                                                       bool* must_make) {
  *must_make = false;
  return Take(id, now, /*make=*/false, must_make);
}

std::shared_ptr<const Outgoing> Replicator::Take(SubscriptionId id,
                                                 absl::Time now, bool make,
                                                 bool* must_make) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = subs_.find(id);
  if (it == subs_.end()) return nullptr;
  Subscription& s = *it->second;
  if (s.parts.empty() && !s.ready.empty()) {
    // Rate-limited: the frames wait until its next message is due.
    if (now < s.next_allowed) return nullptr;
    if (s.ready_frames == 1) {
      // The shared parts of the frame, committed to once the first is taken.
      s.parts.assign(s.ready.begin(), s.ready.end());
      s.ready.clear();
      s.ready_frames = 0;
      s.ready_entities = 0;
      s.frames_with_changes = 0;
      HoldBack(s, now);
    } else if (s.options.compact_precision > 0 && s.options.max_rate_hz == 0) {
      // A compact subscriber a few frames behind takes the kept frames in
      // turn: each is encoded already, shared, and a delta on the frame
      // before, where a fold would be encoded for it alone, whole. It
      // folds only once they hold more than the world (ServeCaughtUp).
      CommitFirstReadyFrame(s);
    } else if (s.ready.back()->header().frame > frame_) {
      // The last frame is not in the published state yet (Publish serves
      // shared parts first): it is woken again once it is.
      return nullptr;
    } else if (!TakeSharedFold(s, now)) {
      if (!make) {
        *must_make = true;
        return nullptr;
      }
      // Several frames: one message with the latest of each, shared with
      // whoever keeps the same frames.
      const FoldKey key = KeyOf(s);
      Fold(s);
      MakePendingParts(s, now);
      shared_folds_.try_emplace(key, s.parts.begin(), s.parts.end());
    }
  }
  if (!s.parts.empty()) {
    // A part made later is made by whoever encodes it: not gRPC's threads.
    if (!make && s.parts.front()->made_later()) {
      *must_make = true;
      return nullptr;
    }
    return TakePart(s);
  }
  const bool due = s.snapshot != nullptr ||
                   ((s.resync || !s.pending.empty() || s.changed_after) &&
                    now >= s.next_allowed);
  if (!due) return nullptr;
  if (!make) {
    *must_make = true;
    return nullptr;
  }
  if (!s.snapshot && !s.resync && s.changed_after && !s.kept_view_scan) {
    // Owed what changed after a frame: the same message as any other
    // subscriber owed those frames.
    if (TakeSharedFold(s, now)) return TakePart(s);
    const FoldKey key = KeyOf(s);
    if (CatchUpFromState(s, now)) {
      shared_folds_.try_emplace(key, s.parts.begin(), s.parts.end());
      return TakePart(s);
    }
  }
  Subscription* sub = &s;
  // Runs a scan or walk, `step` (true once done), a chunk at a time: a
  // waiter (a publication, another stream) may take the lock between
  // chunks. False if meanwhile the subscription went, or its `work` (the
  // member holding the scan or walk) was replaced: resynced, or taken on by
  // another call.
  const auto in_chunks = [&](auto work, auto step) {
    const auto* const started = (sub->*work).get();
    while (!step(*sub)) {
      lock.unlock();
      if (unlocked_for_testing_) unlocked_for_testing_();
      // Off the lock long enough for a waiter to take it: std::mutex hands
      // it to none, and one unlocked and locked again at once is mostly
      // kept.
      std::this_thread::sleep_for(std::chrono::microseconds(1));
      lock.lock();
      it = subs_.find(id);
      if (it == subs_.end() || ((*it->second).*work).get() != started) {
        return false;
      }
      sub = it->second.get();
    }
    return true;
  };
  if (sub->kept_view_scan) {
    // Found a chunk at a time (frames published meanwhile are found again
    // at the end).
    if (!in_chunks(&Subscription::kept_view_scan, [&](Subscription& current) {
          return ScanForKeptView(*current.kept_view_scan);
        })) {
      return nullptr;
    }
    FinishKeptViewSnapshot(*sub);
  }
  if (!sub->snapshot && !sub->resync) {
    MakePendingParts(*sub, now);
    return TakePart(*sub);
  }
  if (sub->resync) {
    sub->resync = false;
    BuildSnapshot(*sub);
    Count(*sub, &Subscription::views_resent_whole,
          &StreamStats::views_resent_whole);
  }
  if (sub->membership_walk) {
    if (!in_chunks(&Subscription::membership_walk, [&](Subscription& current) {
          return WalkMembership(current);
        })) {
      return nullptr;
    }
    sub->membership_walk.reset();
  }
  // A burst's copy is made outside the lock; the world may outgrow it
  // meanwhile, so a second is offered, and then it grows under the lock.
  for (int round = 0;; ++round) {
    size_t copy_wanted = 0;
    auto part = NextSnapshotPart(*sub, round < 2 ? &copy_wanted : nullptr);
    if (copy_wanted == 0) return part;
    lock.unlock();
    if (unlocked_for_testing_) unlocked_for_testing_();
    std::shared_ptr<BurstCopy> copy = MakeBurstCopy(copy_wanted);
    lock.lock();
    it = subs_.find(id);
    if (it == subs_.end() || it->second->snapshot == nullptr) return nullptr;
    sub = it->second.get();
    sub->snapshot->burst_copy = std::move(copy);
  }
}

Replicator::FoldKey Replicator::KeyOf(const Subscription& s) const {
  // Owed the frames after changed_after, or the kept ones.
  const bool from_state = s.changed_after.has_value();
  const uint64_t first =
      from_state ? *s.changed_after + 1 : s.ready.front()->header().frame;
  const size_t frames = from_state ? frame_ - *s.changed_after : s.ready_frames;
  return {first,
          frames,
          from_state,
          s.frames_with_changes,
          s.options.compact_precision,
          s.options.part_budget_bytes};
}

bool Replicator::TakeSharedFold(Subscription& s, absl::Time now) {
  const auto it = shared_folds_.find(KeyOf(s));
  if (it == shared_folds_.end()) return false;
  // What Fold() and MakePendingParts(), or CatchUpFromState(), would have
  // done, but the message.
  s.frames_with_changes = 0;
  s.ready.clear();
  s.ready_frames = 0;
  s.ready_entities = 0;
  s.changed_after.reset();
  s.changed_entities = 0;
  s.parts.assign(it->second.begin(), it->second.end());
  HoldBack(s, now);
  return true;
}

void Replicator::HoldBack(Subscription& s, absl::Time now) {
  if (s.options.max_rate_hz > 0) {
    s.next_allowed = now + absl::Seconds(1.0 / s.options.max_rate_hz);
  }
}

void Replicator::MakePendingParts(Subscription& s, absl::Time now) {
  // Everything pending, from the latest published state.
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
  s.pending_after.reset();
  OwedSlots owed;
  owed.destroyed = std::move(destroyed);
  owed.entered = SlotsByDepth(entered);
  owed.reparented = SlotsByDepth(reparented);
  owed.moved.reserve(moved.size());
  for (EntityId e : moved) {
    const Slot slot = state_.Find(e);
    if (slot != PublishedState::kNoSlot) owed.moved.push_back(slot);
  }
  MakeParts(s, now, owed);
}

void Replicator::MakeParts(Subscription& s, absl::Time now,
                           const OwedSlots& owed) {
  // In the order the proto promises across parts.
  v1::FrameUpdateWriter writer(frame_, frame_time_, s.options.part_budget_bytes,
                               /*snapshot=*/false);
  writer.Destroyed(owed.destroyed);
  for (Slot slot : owed.entered) {
    writer.Created(state_.entity(slot), state_.parent_entity(slot),
                   state_.world(slot));
  }
  for (Slot slot : owed.reparented) {
    writer.Reparented(state_.entity(slot), state_.parent_entity(slot));
  }
  // The matrices may be scattered over the state (pending events come in
  // hash order): each row is fetched ahead of its copy.
  const std::vector<Slot>& moved = owed.moved;
  for (size_t k = 0; k < moved.size(); ++k) {
    constexpr size_t kAhead = internal::kPrefetchAhead;
    if (k + kAhead < moved.size()) {
      __builtin_prefetch(&state_.world(moved[k + kAhead]));
    }
    writer.Moved(state_.entity(moved[k]), state_.world(moved[k]));
  }
  const uint64_t skipped =
      s.frames_with_changes > 0 ? s.frames_with_changes - 1 : 0;
  s.frames_with_changes = 0;
  for (auto& part : Share(writer.Finish(skipped))) {
    if (TracksHeld(s)) {
      // Coded against what it holds. An entity new to it holds none: its
      // first note was its creation.
      std::vector<std::optional<Matrix3x4>> previous;
      previous.reserve(part->message().moved_size());
      for (EntityId e : part->message().moved()) {
        const auto it = s.held.find(e);
        previous.push_back(it != s.held.end() ? it->second : std::nullopt);
      }
      part = Outgoing::Compact(std::move(part), s.options.compact_precision,
                               std::move(previous));
    }
    s.parts.push_back(std::move(part));
  }
  s.held.clear();
  HoldBack(s, now);
}

void Replicator::Flush(absl::Time now) {
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    // One poller polls every world: one busy publishing a huge frame is
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

std::vector<SubscriberInfo> Replicator::Subscribers(uint64_t after_id,
                                                    size_t limit) const {
  std::vector<SubscriberInfo> out;
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<
        const std::pair<const SubscriptionId, std::unique_ptr<Subscription>>*>
        chosen;
    for (const auto& entry : subs_) {
      if (entry.first > after_id) chosen.push_back(&entry);
    }
    const auto by_id = [](const auto* a, const auto* b) {
      return a->first < b->first;
    };
    if (chosen.size() > limit) {
      std::nth_element(chosen.begin(), chosen.begin() + limit, chosen.end(),
                       by_id);
      chosen.resize(limit);
    }
    std::sort(chosen.begin(), chosen.end(), by_id);
    for (const auto* entry : chosen) {
      const Subscription& s = *entry->second;
      const size_t stale = s.snapshot ? s.snapshot->stale_count : 0;
      // Kept frames count beyond the first, the message it would send next.
      const size_t kept = s.ready_frames > 1 ? s.ready_entities : 0;
      // Owed from the state: what the frames listed, up to the live
      // entities (the destroyed it had are not counted: finding them is
      // O(log)).
      const size_t owed = std::min(s.changed_entities, state_.size());
      out.push_back({
          .id = entry->first,
          .subscribed = s.subscribed,
          .position_precision = s.options.compact_precision,
          .entities_listed = static_cast<uint32_t>(s.options.entities.size()),
          .subtrees_listed = static_cast<uint32_t>(s.options.subtrees.size()),
          .max_rate_hz = s.options.max_rate_hz,
          .no_echo_client_id = s.options.no_echo_client_id,
          .accepts_kept_view_snapshots = s.options.accepts_kept_view_snapshots,
          .last_frame_sent = s.last_frame_sent,
          .pending = s.pending.size() + kept + owed + stale,
          .in_snapshot = s.snapshot != nullptr || s.kept_view_scan != nullptr,
          .messages = s.messages,
          .frames_folded = s.frames_folded,
          .views_resent_whole = s.views_resent_whole,
          .kept_view_snapshots = s.kept_view_snapshots,
      });
      sinks.push_back(s.sink);
    }
  }
  const absl::Time now = absl::Now();
  for (size_t k = 0; k < out.size(); ++k) sinks[k]->Describe(now, out[k]);
  return out;
}

StreamStats Replicator::stream_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StreamStats stats = counted_;
  stats.bytes = bytes_written_.load(std::memory_order_relaxed);
  stats.streams_cut_off = cut_off_.load(std::memory_order_relaxed);
  for (const auto& [id, s] : subs_) {
    if (s->snapshot != nullptr || s->kept_view_scan != nullptr) {
      ++stats.subscribers_in_snapshot;
    }
  }
  return stats;
}

}  // namespace xform::server
