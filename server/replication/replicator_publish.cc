// Copyright 2026 The xform Authors.
//
// Replicator::Publish, in six named steps (replicator_impl.h), and how a
// frame's events are noted for a subscriber.

#include <algorithm>
#include <utility>

#include "server/replication/replicator_impl.h"
#include "xform/v1/frame_update.h"

namespace xform::server {
namespace {

// Views whose bits are fewer words than the frame has moves are walked
// against the moved slots' bits, marked first, when there are enough of
// them to repay the marking (three writes a moved entity, against a bit
// test each that each of them saves).
constexpr size_t kNarrowViewsToMark = 4;

}  // namespace

void Replicator::Impl::Publish(const FrameChanges& changes, absl::Time time,
                               const FrameWriters& writers) {
  FrameContext frame{.changes = changes,
                     .time = time,
                     .writing = EchoFilter::WritingClientsOf(writers)};
  std::vector<std::shared_ptr<UpdateSink>> wake;
  if (!changes.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    ServeCaughtUp(frame, wake);
  }
  WakeAll(std::move(wake));
  wake.clear();
  std::unique_ptr<SpatialIndex> idle_index;  // Freed after the lock.
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_index = DropIdleIndex();
    ViewsBefore views = RecordViewsBefore(changes);
    frame.moved_before = MovedBefore(frame);
    UnplaceDestroyed(changes);
    state_.TakeIn(changes);
    PlaceMoved(changes);
    frame_ = changes.frame;
    frame_time_ = time;
    frame_stamp_ = changes.stamp;
    // Folds end at the frame published last. (Not clear(): GCC 12 sees a
    // null dereference in its inlined shared_ptr destructors.)
    shared_folds_.erase(shared_folds_.begin(), shared_folds_.end());
    frame.echoes = FindEchoes(writers, frame.writing);
    if (!changes.empty()) {
      LogDestroyed(changes);
      FoldIntoWholeWorld(frame);
    }
    UpdateFilteredViews(frame, views);
    CloseFrame(frame.served, wake);
  }
  WakeAll(std::move(wake));
}

void Replicator::Impl::WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks) {
  if (fanout_ != nullptr) {
    fanout_->WakeAll(std::move(sinks));
    return;
  }
  for (auto& sink : sinks) sink->Wake();
}

// A subscriber noting with nothing pending is caught up (what it held goes).
static CaughtUp* CaughtUpOf(Subscription& s) {
  if (Noting* noting = s.as<Noting>();
      noting != nullptr && noting->pending.empty()) {
    return &s.ToCaughtUp();
  }
  return s.as<CaughtUp>();
}

void Replicator::Impl::ServeCaughtUp(
    FrameContext& frame, std::vector<std::shared_ptr<UpdateSink>>& wake) {
  // Caught-up whole-world subscribers share one message, made from the
  // frame's changes alone, so they are served first; the published state
  // takes the frame in afterwards. A subscriber joining in between gets the
  // previous frame's snapshot and this frame folded into its pending events,
  // so nothing is missed.
  const FrameChanges& changes = frame.changes;
  SharedFrame shared;
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
    // One that filters echoes has none in a frame its writer did not write;
    // a compact one's deltas must also be against what it holds.
    if (!s->whole_world() || !s->parts.empty() ||
        (s->echo && !s->echo->MayShare(frame.writing, moves_any))) {
      continue;
    }
    CaughtUp* caught_up = CaughtUpOf(*s);
    if (caught_up == nullptr) continue;
    if (!KeepsSharedParts(*s, entities, changes.frame)) {
      if (s->as<Resyncing>() != nullptr) frame.served.insert(id);
      continue;
    }
    frame.served.insert(id);
    const auto& parts = SharedParts(shared, changes, frame.time, *s);
    caught_up->kept.insert(caught_up->kept.end(), parts.begin(), parts.end());
    ++caught_up->frames;
    caught_up->entities += entities;
    // Due with more than this frame kept, it folds them, which wants the
    // frame taken in: CloseFrame wakes it.
    const bool rate_limited = s->options.max_rate_hz > 0;
    if (frame.time >= s->next_allowed &&
        !(rate_limited && caught_up->frames > 1)) {
      wake.push_back(s->sink);
    }
  }
}

bool Replicator::Impl::KeepsSharedParts(Subscription& s, size_t entities,
                                        uint64_t frame) {
  const CaughtUp& caught_up = s.in<CaughtUp>();
  if (caught_up.frames == 0) return true;
  const size_t owed = caught_up.entities + entities;
  if (s.options.max_rate_hz > 0) {
    // Keeps the frames until its next message is due (then folded once,
    // and shared: TakeSharedFold): O(1) a frame, where noting each frame's
    // changes would be O(moved). Past what a laggard may be owed, or the
    // world, it catches up from the published state when due
    // (FoldIntoWholeWorld).
    return owed <= std::min(max_pending_, state_.size());
  }
  const bool past_pending = owed > max_pending_;
  const bool past_world = owed > state_.size();
  if (!past_pending && !past_world) return true;
  // Stopped reading, or reads slower than the world changes. Owed what
  // changed since its last message, found from the published state when it
  // reads again, if it may be (FoldIntoWholeWorld takes this frame in):
  // O(1) a frame meanwhile. A compact one past the world alone folds its
  // frames into pending events instead, which the world bounds: its
  // message is then coded as deltas, not whole.
  if (MayCatchUpFromState(s) && (past_pending || !s.TracksHeld()) &&
      StartCatchingUpFromState(s, frame)) {
    return false;
  }
  if (!past_pending) return false;  // Folds, as above.
  s.ToResyncing();                  // Its view whole.
  s.noted = true;
  return false;
}

const std::vector<std::shared_ptr<const Outgoing>>&
Replicator::Impl::SharedParts(SharedFrame& shared, const FrameChanges& changes,
                              absl::Time time, const Subscription& s) const {
  if (shared.raw.empty()) {
    shared.raw = FrameParts(changes, time, s.options.part_budget_bytes);
  }
  const float precision = s.options.compact_precision;
  return precision == 0 ? shared.raw : CompactParts(shared, precision);
}

Replicator::Impl::ViewsBefore Replicator::Impl::RecordViewsBefore(
    const FrameChanges& changes) const {
  // Filtered views depend on membership before and after the frame; the
  // subtree of a re-parented entity may enter or leave a view with it.
  ViewsBefore views;
  for (const auto& [id, s] : subs_) {
    if (!s->whole_world()) views.filtered.push_back(s.get());
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
    for (size_t k = 0; k < touched.size(); ++k) {
      in[k] = s->view->Contains(touched[k]);
    }
  }
  return views;
}

std::vector<std::optional<Matrix3x4>> Replicator::Impl::MovedBefore(
    const FrameContext& frame) const {
  std::vector<std::optional<Matrix3x4>> before;
  const bool wanted =
      std::any_of(subs_.begin(), subs_.end(), [&](const auto& entry) {
        const Subscription& s = *entry.second;
        return s.TracksHeld() && s.as<Snapshotting>() == nullptr &&
               s.as<Resyncing>() == nullptr &&
               !frame.served.contains(entry.first);
      });
  if (!wanted) return before;
  // A created entity's is not wanted (its first note this frame is its
  // creation, or, re-using an id destroyed this frame, the destruction).
  before.reserve(frame.changes.moved.size());
  for (EntityId e : frame.changes.moved) {
    const Slot slot = state_.Find(e);
    before.push_back(slot == PublishedState::kNoSlot
                         ? std::nullopt
                         : std::optional<Matrix3x4>(state_.world(slot)));
  }
  return before;
}

EchoFilter::Echoes Replicator::Impl::FindEchoes(
    const FrameWriters& writers,
    const EchoFilter::WritingClients& writing) const {
  // Once per writer, however many of its subscriptions filter echoes; none
  // for one that did not write.
  EchoFilter::Echoes echoes;
  for (const auto& [id, s] : subs_) {
    if (!s->echo) continue;
    const std::string& client = s->echo->client();
    if (!echoes.contains(client)) {
      echoes.emplace(client, writing.contains(client)
                                 ? EchoFilter::EchoesOf(client, writers, state_)
                                 : absl::flat_hash_set<EntityId>());
    }
  }
  return echoes;
}

void Replicator::Impl::LogDestroyed(const FrameChanges& changes) {
  // What the subscribers that may catch up from the state could still
  // need: destructions after the frame each was last sent. Owed from the
  // state, or noting, after a frame; else one may start catching up at this
  // one (StartCatchingUpFromState), owed what changed after the frame
  // before its kept ones or this one: so this frame's destructions on.
  // (Not after this frame: then one not served it, partway through an
  // earlier message, could not start, and noted frames until resent
  // whole.)
  // And, for the resume window, the last resume_frames_ frames' whatever
  // subscribes.
  bool any = resume_frames_ > 0;
  uint64_t needed_after =
      changes.frame - std::min(changes.frame, resume_frames_);
  for (const auto& [id, s] : subs_) {
    if (!MayCatchUpFromState(*s)) continue;
    any = true;
    const auto* owed = s->as<OwedFromState>();
    const auto* noting = s->as<Noting>();
    const uint64_t after = owed != nullptr ? owed->after
                           : noting != nullptr && noting->after
                               ? *noting->after
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

void Replicator::Impl::FoldIntoWholeWorld(const FrameContext& frame) {
  const FrameChanges& changes = frame.changes;
  // Streaming snapshots mark changes by slot: each entity's looked up once
  // for them all, not once per joining subscriber.
  const bool snapshots = std::any_of(subs_.begin(), subs_.end(), [](auto& s) {
    return s.second->whole_world() && s.second->template as<Snapshotting>();
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
    if (!s->whole_world() || frame.served.contains(id)) continue;
    if (s->as<Resyncing>() != nullptr) {
      // Fell too far behind: it gets its view whole, nothing to note but
      // that the frame changed it.
      s->noted = true;
      continue;
    }
    CaughtUp* caught_up = CaughtUpOf(*s);
    // (Not one with events pending from before: it notes frames until its
    // next message sends them.)
    if (MayCatchUpFromState(*s) &&
        (s->as<OwedFromState>() != nullptr ||
         (caught_up != nullptr && CatchesUpFromState(*s) &&
          StartCatchingUpFromState(*s, changes.frame)))) {
      // What the frame changed is found from the state when it is due.
      s->noted = true;
      s->in<OwedFromState>().entities += entities;
      continue;
    }
    if (caught_up != nullptr) Fold(*s, OwedAfter(*caught_up, changes.frame));
    // (A streaming snapshot's bits count nothing: a pass may take longer.)
    if (s->as<Snapshotting>() == nullptr && frame_time_ >= s->next_allowed) {
      s->overdue_entities += entities;
    }
    NoteFrame(*s, frame, destroyed, created, reparented, moved);
  }
}

void Replicator::Impl::NoteFrame(Subscription& s, const FrameContext& frame,
                                 absl::Span<const Slot> destroyed,
                                 absl::Span<const Slot> created,
                                 absl::Span<const Slot> reparented,
                                 absl::Span<const Slot> moved) {
  const FrameChanges& changes = frame.changes;
  for (size_t k = 0; k < destroyed.size(); ++k) {
    Note(s, changes.destroyed[k], kDestroyed, destroyed[k]);
  }
  for (size_t k = 0; k < created.size(); ++k) {
    Note(s, changes.created[k], kCreated, created[k]);
  }
  for (size_t k = 0; k < reparented.size(); ++k) {
    Note(s, changes.reparented[k], kReparented, reparented[k]);
  }
  const std::vector<std::optional<Matrix3x4>>& before = frame.moved_before;
  for (size_t k = 0; k < moved.size(); ++k) {
    const EntityId e = changes.moved[k];
    if (s.echo && s.echo->IsEcho(frame.echoes, e)) {
      s.echo->Lagged(e, max_pending_);
      continue;
    }
    Note(s, e, kMoved, moved[k], k < before.size() ? before[k] : std::nullopt);
  }
}

void Replicator::Impl::UpdateFilteredViews(const FrameContext& frame,
                                           ViewsBefore& before) {
  if (before.filtered.empty()) return;
  if (before.moves_only) {
    NoteMovesInViews(frame, before.filtered);
    return;
  }
  const FrameChanges& changes = frame.changes;
  for (Subscription* s : before.filtered) {
    Snapshotting* snapshotting = s->as<Snapshotting>();
    if (snapshotting != nullptr && snapshotting->finding != nullptr) {
      s->view->Interrupt(*snapshotting->finding, changes);
    }
  }
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
  const std::vector<std::optional<Matrix3x4>>& moved_before =
      frame.moved_before;
  for (size_t f = 0; f < before.filtered.size(); ++f) {
    Subscription& s = *before.filtered[f];
    for (const auto& [depth, k] : by_depth) {
      const EntityId e = touched[k];
      const bool was = before.in_view[f][k];
      const bool is = s.view->Follow(e, slots[k]);
      if (!was && is) {
        Note(s, e, kCreated, slots[k]);
      } else if (was && !is) {
        Note(s, e, kDestroyed, slots[k]);
      } else if (was && is) {
        if (reparented.contains(e)) Note(s, e, kReparented, slots[k]);
        const auto at = moved.find(e);
        if (at != moved.end() && !(s.echo && s.echo->IsEcho(frame.echoes, e))) {
          Note(s, e, kMoved, slots[k],
               at->second < moved_before.size() ? moved_before[at->second]
                                                : std::nullopt);
        }
      }
    }
  }
}

void Replicator::Impl::NoteMovesInViews(
    const FrameContext& frame, const std::vector<Subscription*>& filtered) {
  const std::vector<EntityId>& moved = frame.changes.moved;
  // Where the index is kept, PlaceMoved found the slots and positions.
  std::vector<Slot> found(index_ == nullptr ? moved.size() : 0);
  for (size_t k = 0; k < found.size(); ++k) found[k] = state_.Find(moved[k]);
  const absl::Span<const Slot> slots = index_ != nullptr
                                           ? absl::MakeConstSpan(frame_slots_)
                                           : absl::MakeConstSpan(found);
  ViewFilter::FrameMoves moves(moved, slots);
  if (index_ != nullptr) {
    moves.set_positions(moved_positions_);
    moves.set_by_cell(moves_by_cell_);
  }
  const bool mark =
      static_cast<size_t>(std::count_if(
          filtered.begin(), filtered.end(), [&](const Subscription* s) {
            return s->view->WantsMarkedMoves(moved.size());
          })) >= kNarrowViewsToMark;
  if (mark) moves.Mark(&moved_slots_, &moved_index_by_slot_);
  const std::vector<std::optional<Matrix3x4>>& before = frame.moved_before;
  for (Subscription* s : filtered) {
    if (s->view->MovesChangeMembership()) {
      // What entered comes as created, what left as destroyed.
      s->view->FollowMoves(moves, [&](size_t k, ViewFilter::Moved how) {
        if (how == ViewFilter::Moved::kEntered) {
          Note(*s, moved[k], kCreated, slots[k]);
        } else if (how == ViewFilter::Moved::kLeft) {
          Note(*s, moved[k], kDestroyed, slots[k]);
        } else if (!(s->echo && s->echo->IsEcho(frame.echoes, moved[k]))) {
          Note(*s, moved[k], kMoved, slots[k],
               k < before.size() ? before[k] : std::nullopt);
        }
      });
      continue;
    }
    s->view->ForEachMoved(moves, [&](size_t k) {
      if (s->echo && s->echo->IsEcho(frame.echoes, moved[k])) return;
      Note(*s, moved[k], kMoved, slots[k],
           k < before.size() ? before[k] : std::nullopt);
    });
  }
  if (mark) {
    for (Slot slot : slots) moved_slots_.reset(slot);
  }
}

void Replicator::Impl::CloseFrame(
    const absl::flat_hash_set<SubscriptionId>& served,
    std::vector<std::shared_ptr<UpdateSink>>& wake) {
  for (auto& [id, s] : subs_) {
    if (s->noted) {
      ++s->frames_with_changes;
      s->noted = false;
    }
    const Noting* noting = s->as<Noting>();
    if (((noting != nullptr && noting->pending.size() > max_pending_) ||
         s->overdue_entities > max_pending_) &&
        !StopNoting(*s)) {
      s->ToResyncing();  // Its kept frames were folded, or noted, past it.
    }
    if (s->as<Resyncing>() != nullptr) {
      wake.push_back(s->sink);
      continue;
    }
    // A streaming snapshot is not woken: its stream asks for each next part
    // as the last is written, and waking it would make the part here, on the
    // publishing thread (for tick worlds, the world's ticker).
    if (s->as<Snapshotting>() != nullptr) continue;
    // A rate-limited subscriber not due yet is polled when it is (Flush).
    if (frame_time_ < s->next_allowed) continue;
    const CaughtUp* caught_up = s->as<CaughtUp>();
    if (served.contains(id)) {
      if (caught_up != nullptr && caught_up->frames > 1) {
        wake.push_back(s->sink);  // See Take().
      }
      continue;
    }
    noting = s->as<Noting>();
    if ((noting != nullptr && !noting->pending.empty()) ||
        (caught_up != nullptr && !caught_up->kept.empty()) ||
        s->as<OwedFromState>() != nullptr) {
      wake.push_back(s->sink);
    }
  }
}

void Replicator::Impl::Note(Subscription& s, EntityId e, NetChange change,
                            Slot slot,
                            const std::optional<Matrix3x4>& before) const {
  s.noted = true;
  // It will be sent e as published (or that e is gone): as every message
  // is made, from the published state.
  if (s.echo) s.echo->Sent(e, change);
  if (Snapshotting* snapshotting = s.as<Snapshotting>()) {
    NoteInSnapshot(*snapshotting->snapshot, e, change, slot);
    return;
  }
  if (s.as<Resyncing>() != nullptr) return;  // It gets its view whole.
  Noting* noting = s.as<Noting>();
  // A filtered view starts noting here; one of the whole world was folded
  // (Fold) first.
  if (noting == nullptr) noting = &s.ToNoting(std::nullopt);
  noting->pending.Note(e, change);
  // At e's first note since the last message, the subscriber holds what was
  // published before this frame (everything else it was sent is current):
  // `before`, for a move. Later notes keep it, whatever they are: an entity
  // destroyed and created again, unseen, is still what it was to it.
  if (s.TracksHeld()) {
    noting->held.try_emplace(e, change == kMoved ? before : std::nullopt);
  }
}

Noting& Replicator::Impl::Fold(Subscription& s,
                               std::optional<uint64_t> after) const {
  CaughtUp caught_up = std::move(s.in<CaughtUp>());
  Noting& noting = s.ToNoting(after);
  // The folded frame counts once, apart from the frame being published.
  const bool noted = s.noted;
  for (const auto& part : caught_up.kept) {
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
  s.frames_with_changes += caught_up.frames;
  return noting;
}

std::vector<std::shared_ptr<const Outgoing>> Replicator::Impl::FrameParts(
    const FrameChanges& changes, absl::Time time, size_t max_bytes) {
  v1::FrameUpdateWriter writer(changes.frame, time, changes.stamp, max_bytes,
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

const std::vector<std::shared_ptr<const Outgoing>>&
Replicator::Impl::CompactParts(SharedFrame& shared, float precision) const {
  auto [it, added] = shared.compact.try_emplace(precision);
  if (!added) return it->second;
  if (shared.previous.empty()) {
    // What a caught-up subscriber holds of each moved entity: its matrix as
    // last published, which the state has until it takes this frame in. A
    // created entity (even one re-using a destroyed one's id) is new to it.
    for (const auto& part : shared.raw) {
      const v1::FrameUpdate& u = part->message();
      const absl::flat_hash_set<EntityId> created(u.created().begin(),
                                                  u.created().end());
      std::vector<std::optional<Matrix3x4>>& held =
          shared.previous.emplace_back();
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
  for (size_t k = 0; k < shared.raw.size(); ++k) {
    it->second.push_back(
        Outgoing::Compact(shared.raw[k], precision, shared.previous[k]));
  }
  return it->second;
}

std::vector<std::shared_ptr<const Outgoing>> Replicator::Impl::Share(
    std::vector<v1::FrameUpdate> parts,
    const std::shared_ptr<const void>& hold) {
  std::vector<std::shared_ptr<const Outgoing>> out;
  out.reserve(parts.size());
  for (v1::FrameUpdate& part : parts) {
    out.push_back(std::make_shared<const Outgoing>(std::move(part), hold));
  }
  return out;
}

}  // namespace xform::server
