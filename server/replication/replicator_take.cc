// Copyright 2026 The xform Authors.
//
// A subscriber's next message (Replicator::Next, NextIfMade), by what it is
// owed (subscription.h's states), and how that message is made.

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "server/replication/replicator_impl.h"
#include "xform/internal/math_kernels.h"
#include "xform/v1/frame_update.h"

namespace xform::server {

std::shared_ptr<const Outgoing> Replicator::Impl::Take(SubscriptionId id,
                                                       absl::Time now,
                                                       bool make,
                                                       bool* must_make) {
  std::unique_lock<std::mutex> lock(mu_);
  Subscription* s = Find(id);
  if (s == nullptr) return nullptr;
  if (CaughtUp* caught_up = s->as<CaughtUp>();
      s->parts.empty() && caught_up != nullptr && !caught_up->kept.empty() &&
      !TakeKept(*s, now, make, must_make)) {
    return nullptr;
  }
  if (!s->parts.empty()) {
    // A part made later is made by whoever encodes it: not gRPC's threads.
    if (!make && s->parts.front()->made_later()) {
      *must_make = true;
      return nullptr;
    }
    return TakePart(*s);
  }
  const Noting* noting = s->as<Noting>();
  const OwedFromState* from_state = s->as<OwedFromState>();
  // Owed from a frame not published yet (one resuming here from another
  // node's): nothing until a frame after it is.
  const bool owed = s->as<Resyncing>() != nullptr ||
                    (noting != nullptr && !noting->pending.empty()) ||
                    (from_state != nullptr && from_state->after < frame_);
  const bool due =
      s->as<Snapshotting>() != nullptr || (owed && now >= s->next_allowed);
  if (!due) return nullptr;
  if (!make) {
    *must_make = true;
    return nullptr;
  }
  return TakeOwed(lock, id, now);
}

bool Replicator::Impl::TakeKept(Subscription& s, absl::Time now, bool make,
                                bool* must_make) {
  CaughtUp& caught_up = s.in<CaughtUp>();
  // Rate-limited: the frames wait until its next message is due.
  if (now < s.next_allowed) return false;
  if (caught_up.frames == 1) {
    // The shared parts of the frame, committed to once the first is taken.
    s.parts.assign(caught_up.kept.begin(), caught_up.kept.end());
    s.ToCaughtUp();
    s.frames_with_changes = 0;
    HoldBack(s, now);
  } else if (s.options.compact_precision > 0 && s.options.max_rate_hz == 0) {
    // A compact subscriber a few frames behind takes the kept frames in
    // turn: each is encoded already, shared, and a delta on the frame
    // before, where a fold would be encoded for it alone, whole. It folds
    // only once they hold more than the world (ServeCaughtUp).
    CommitFirstKeptFrame(s, caught_up);
  } else if (caught_up.kept.back()->header().frame > frame_) {
    // The last frame is not in the published state yet (Publish serves
    // shared parts first): it is woken again once it is.
    return false;
  } else if (!TakeSharedFold(s, now)) {
    if (!make) {
      *must_make = true;
      return false;
    }
    // Several frames: one message with the latest of each, shared with
    // whoever keeps the same frames.
    const FoldKey key = KeyOf(s);
    Fold(s, std::nullopt);
    MakePendingParts(s, now);
    shared_folds_.try_emplace(key, s.parts.begin(), s.parts.end());
  }
  return true;
}

std::shared_ptr<const Outgoing> Replicator::Impl::TakeOwed(
    std::unique_lock<std::mutex>& lock, SubscriptionId id, absl::Time now) {
  Subscription* s = Find(id);
  if (OwedFromState* owed = s->as<OwedFromState>();
      owed != nullptr && owed->scan == nullptr) {
    // Owed what changed after a frame: the same message as any other
    // subscriber owed those frames.
    if (TakeSharedFold(*s, now)) return TakePart(*s);
    const FoldKey key = KeyOf(*s);
    if (CatchUpFromState(*s, now)) {
      shared_folds_.try_emplace(key, s->parts.begin(), s->parts.end());
      return TakePart(*s);
    }
  }
  if (OwedFromState* owed = s->as<OwedFromState>(); owed != nullptr) {
    // Found a chunk at a time (frames published meanwhile are found again
    // at the end).
    const KeptViewScan* const started = owed->scan.get();
    s = InChunks(
        lock, id,
        [&](Subscription& current) {
          return ScanForKeptView(*current.in<OwedFromState>().scan);
        },
        [started](Subscription& current) {
          const auto* now_owed = current.as<OwedFromState>();
          return now_owed != nullptr && now_owed->scan.get() == started;
        });
    if (s == nullptr) return nullptr;
    FinishKeptViewSnapshot(*s);
  }
  if (s->as<Noting>() != nullptr) {
    MakePendingParts(*s, now);
    return TakePart(*s);
  }
  if (s->as<Resyncing>() != nullptr) {
    BuildSnapshot(*s);
    Count(*s, &Subscription::views_resent_whole,
          &StreamStats::views_resent_whole);
  }
  if (const ViewFilter::Finding* const started =
          s->in<Snapshotting>().finding.get();
      started != nullptr) {
    s = InChunks(
        lock, id,
        [](Subscription& current) {
          Snapshotting& snap = current.in<Snapshotting>();
          return current.view->FindMore(*snap.finding, snap.snapshot->stale);
        },
        [started](Subscription& current) {
          const auto* now_snapshotting = current.as<Snapshotting>();
          return now_snapshotting != nullptr &&
                 now_snapshotting->finding.get() == started;
        });
    if (s == nullptr) return nullptr;
    s->in<Snapshotting>().finding.reset();
  }
  return TakeSnapshotPart(lock, id);
}

Subscription* Replicator::Impl::InChunks(
    std::unique_lock<std::mutex>& lock, SubscriptionId id,
    absl::FunctionRef<bool(Subscription&)> step,
    absl::FunctionRef<bool(Subscription&)> still) {
  Subscription* s = Find(id);
  while (!step(*s)) {
    lock.unlock();
    if (unlocked_for_testing) unlocked_for_testing();
    // Off the lock long enough for a waiter to take it: std::mutex hands
    // it to none, and one unlocked and locked again at once is mostly
    // kept.
    std::this_thread::sleep_for(std::chrono::microseconds(1));
    lock.lock();
    s = Find(id);
    if (s == nullptr || !still(*s)) return nullptr;
  }
  return s;
}

std::shared_ptr<const Outgoing> Replicator::Impl::TakeSnapshotPart(
    std::unique_lock<std::mutex>& lock, SubscriptionId id) {
  // A burst's copy is made outside the lock; the world may outgrow it
  // meanwhile, so a second is offered, and then it grows under the lock.
  Subscription* s = Find(id);
  for (int round = 0;; ++round) {
    size_t copy_wanted = 0;
    auto part = NextSnapshotPart(*s, round < 2 ? &copy_wanted : nullptr);
    if (copy_wanted == 0) return part;
    lock.unlock();
    if (unlocked_for_testing) unlocked_for_testing();
    std::shared_ptr<BurstCopy> copy = MakeBurstCopy(copy_wanted);
    lock.lock();
    s = Find(id);
    if (s == nullptr || s->as<Snapshotting>() == nullptr) return nullptr;
    s->in<Snapshotting>().snapshot->burst_copy = std::move(copy);
  }
}

std::shared_ptr<const Outgoing> Replicator::Impl::TakePart(Subscription& s) {
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

void Replicator::Impl::CommitFirstKeptFrame(Subscription& s,
                                            CaughtUp& caught_up) {
  std::vector<std::shared_ptr<const Outgoing>>& kept = caught_up.kept;
  size_t end = 0;
  while (end < kept.size() && !kept[end]->header().last_part) ++end;
  end = std::min(end + 1, kept.size());
  for (size_t k = 0; k < end; ++k) {
    const v1::FrameUpdate& u = kept[k]->message();
    caught_up.entities -= std::min<size_t>(
        caught_up.entities,
        u.moved_size() + u.destroyed_size() + u.reparented_size());
    s.parts.push_back(std::move(kept[k]));
  }
  kept.erase(kept.begin(), kept.begin() + end);
  --caught_up.frames;
}

void Replicator::Impl::MakePendingParts(Subscription& s, absl::Time now) {
  // Everything pending, from the latest published state; it is caught up.
  Noting noting = std::move(s.in<Noting>());
  s.ToCaughtUp();
  std::vector<EntityId> destroyed, entered, reparented, moved;
  for (const auto& [e, flags] : noting.pending) {
    if (flags & kDestroyed) {
      destroyed.push_back(e);
    } else if (flags & kCreated) {
      entered.push_back(e);
    } else {
      if (flags & kReparented) reparented.push_back(e);
      if (flags & kMoved) moved.push_back(e);
    }
  }
  OwedSlots owed;
  owed.destroyed = std::move(destroyed);
  owed.entered = state_.SlotsByDepth(entered);
  owed.reparented = state_.SlotsByDepth(reparented);
  owed.moved.reserve(moved.size());
  for (EntityId e : moved) {
    const Slot slot = state_.Find(e);
    if (slot != PublishedState::kNoSlot) owed.moved.push_back(slot);
  }
  MakeParts(s, now, owed, &noting.held);
}

void Replicator::Impl::MakeParts(
    Subscription& s, absl::Time now, const OwedSlots& owed,
    const absl::flat_hash_map<EntityId, std::optional<Matrix3x4>>* held) {
  // In the order the proto promises across parts.
  v1::FrameUpdateWriter writer(frame_, frame_time_, frame_stamp_,
                               s.options.part_budget_bytes,
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
    if (s.TracksHeld()) {
      // Coded against what it holds (caught up from the state: none known).
      // An entity new to it holds none: its first note was its creation.
      std::vector<std::optional<Matrix3x4>> previous;
      previous.reserve(part->message().moved_size());
      for (EntityId e : part->message().moved()) {
        std::optional<Matrix3x4>& before = previous.emplace_back();
        if (held == nullptr) continue;
        if (const auto it = held->find(e); it != held->end()) {
          before = it->second;
        }
      }
      part = Outgoing::Compact(std::move(part), s.options.compact_precision,
                               std::move(previous));
    }
    s.parts.push_back(std::move(part));
  }
  HoldBack(s, now);
}

void Replicator::Impl::HoldBack(Subscription& s, absl::Time now) {
  if (s.options.max_rate_hz > 0) {
    s.next_allowed = now + absl::Seconds(1.0 / s.options.max_rate_hz);
  }
}

uint64_t Replicator::Impl::OwedAfter(const CaughtUp& caught_up,
                                     uint64_t frame) {
  // It was last sent the frame before its first kept one; keeping none
  // (and with nothing pending), what this frame changes on.
  return caught_up.kept.empty() ? frame - 1
                                : caught_up.kept.front()->header().frame - 1;
}

uint64_t Replicator::Impl::OwedAfter(const Subscription& s, uint64_t frame) {
  const CaughtUp* caught_up = s.as<CaughtUp>();
  return caught_up != nullptr ? OwedAfter(*caught_up, frame) : frame - 1;
}

bool Replicator::Impl::StartCatchingUpFromState(Subscription& s,
                                                uint64_t frame) {
  const CaughtUp& caught_up = s.in<CaughtUp>();
  const uint64_t after = OwedAfter(caught_up, frame);
  if (after < state_.destroyed_log_after()) return false;
  s.frames_with_changes += caught_up.frames;
  const size_t entities = caught_up.entities;
  s.ToOwedFromState(after, entities);
  return true;
}

bool Replicator::Impl::StopNoting(Subscription& s) {
  const Noting* noting = s.as<Noting>();
  if (!MayCatchUpFromState(s) || noting == nullptr || !noting->after ||
      *noting->after < state_.destroyed_log_after()) {
    return false;
  }
  // Its entries are then sent whole: what it held goes.
  const uint64_t after = *noting->after;
  const size_t entities = noting->pending.size();
  s.ToOwedFromState(after, entities);
  s.overdue_entities = 0;
  return true;
}

Replicator::Impl::OwedSlots Replicator::Impl::OwedSince(
    uint64_t after, size_t listed, size_t* entities) const {
  // What it lacks is the entity as published now: created (with its parent
  // and matrix), or re-parented, moved; past max_pending, no further. Each
  // entity comes once: the walk finds each slot once, and the log holds at
  // most one destruction of what it had (a later one is of an entity
  // created since).
  OwedSlots owed;
  // Its entities destroyed and created again: to it, re-parented and moved.
  absl::flat_hash_set<Slot> again;
  state_.DestroyedSince(after, owed.destroyed, again);
  *entities = owed.destroyed.size();
  if (*entities > max_pending_) return owed;
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
    return ++*entities <= max_pending_;
  });
  return owed;
}

bool Replicator::Impl::CatchUpFromState(Subscription& s, absl::Time now) {
  const OwedFromState& owed_from_state = s.in<OwedFromState>();
  const uint64_t after = owed_from_state.after;
  // The entities the frames since listed, repeats counted: at least as many
  // as will be sent, so their list is sized once (up to the bound).
  const size_t listed = std::min(owed_from_state.entities, max_pending_ + 1);
  if (after < state_.destroyed_log_after()) {
    s.ToResyncing();  // Its destructions were dropped from the log.
    return false;
  }
  size_t entities = 0;
  OwedSlots owed = OwedSince(after, listed, &entities);
  if (entities > max_pending_) {
    // Owed more than a laggard may be: what changed, streamed, if it keeps
    // its view through a snapshot (the entities it had that are gone are
    // all known: at most the log's max_pending), once found; meanwhile it
    // is owed from `after` still. Else its view whole.
    if (!s.options.accepts_kept_view_snapshots) {
      s.ToResyncing();
      return false;
    }
    s.ToOwedFromState(after, entities).scan =
        std::make_unique<KeptViewScan>(KeptViewScan{
            .after = after, .began = frame_, .end_block = state_.blocks()});
    return false;
  }
  s.ToCaughtUp();
  state_.SortByDepth(owed.entered);
  state_.SortByDepth(owed.reparented);
  MakeParts(s, now, owed);
  return true;
}

Replicator::Impl::FoldKey Replicator::Impl::KeyOf(const Subscription& s) const {
  FoldKey key = {.from_state = false,
                 .frames_with_changes = s.frames_with_changes,
                 .precision = s.options.compact_precision,
                 .part_budget_bytes = s.options.part_budget_bytes};
  if (const OwedFromState* owed = s.as<OwedFromState>(); owed != nullptr) {
    // Owed the frames after `after`.
    key.first_frame = owed->after + 1;
    key.frames = frame_ - owed->after;
    key.from_state = true;
  } else {
    // The kept ones.
    const CaughtUp& caught_up = s.in<CaughtUp>();
    key.first_frame = caught_up.kept.front()->header().frame;
    key.frames = caught_up.frames;
  }
  return key;
}

bool Replicator::Impl::TakeSharedFold(Subscription& s, absl::Time now) {
  const auto it = shared_folds_.find(KeyOf(s));
  if (it == shared_folds_.end()) return false;
  // What Fold() and MakePendingParts(), or CatchUpFromState(), would have
  // done, but the message.
  s.frames_with_changes = 0;
  s.ToCaughtUp();
  s.parts.assign(it->second.begin(), it->second.end());
  HoldBack(s, now);
  return true;
}

}  // namespace xform::server
