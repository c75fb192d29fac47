// Copyright 2026 The xform Authors.
//
// Replicator's entry points, subscribing, and what it tells of its
// subscribers. Publish's steps: replicator_publish.cc; a subscriber's next
// message: replicator_take.cc; snapshots: replicator_snapshot.cc.

#include "server/replication/replicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/replication/region_filter.h"
#include "server/replication/replicator_impl.h"

namespace xform::server {

Replicator::Replicator(size_t max_pending,
                       std::shared_ptr<BurstBudget> burst_budget,
                       std::shared_ptr<Fanout> fanout, uint64_t resume_frames)
    : impl_(std::make_unique<Impl>(max_pending, std::move(burst_budget),
                                   std::move(fanout), resume_frames)) {}

Replicator::~Replicator() = default;

void Replicator::Publish(const FrameChanges& changes, absl::Time time,
                         const FrameWriters& writers) {
  impl_->Publish(changes, time, writers);
}

void Replicator::PublishWhole(const World& world, uint64_t frame,
                              absl::Time time, uint64_t resumable_from) {
  impl_->PublishWhole(world, frame, time, resumable_from);
}

void Replicator::Reset(const World& world, uint64_t frame, absl::Time time,
                       uint64_t resumable_from) {
  impl_->Reset(world, frame, time, resumable_from);
}

Replicator::SubscriptionId Replicator::Subscribe(
    SubscriptionOptions options, std::shared_ptr<UpdateSink> sink) {
  return impl_->Subscribe(std::move(options), std::move(sink));
}

void Replicator::Unsubscribe(SubscriptionId id) { impl_->Unsubscribe(id); }

std::shared_ptr<const Outgoing> Replicator::Next(SubscriptionId id,
                                                 absl::Time now) {
  bool must_make = false;
  return impl_->Take(id, now, /*make=*/true, &must_make);
}

std::shared_ptr<const Outgoing> Replicator::NextIfMade(SubscriptionId id,
                                                       absl::Time now,
                                                       bool* must_make) {
  *must_make = false;
  return impl_->Take(id, now, /*make=*/false, must_make);
}

void Replicator::Flush(absl::Time now) { impl_->Flush(now); }

void Replicator::EndAll(const absl::Status& status) { impl_->EndAll(status); }

uint64_t Replicator::frame() const { return impl_->frame(); }

uint64_t Replicator::resumable_from() const { return impl_->resumable_from(); }

size_t Replicator::subscribers() const { return impl_->subscribers(); }

size_t Replicator::echo_filtered_subscribers() const {
  return impl_->echo_filtered.load(std::memory_order_relaxed);
}

std::vector<SubscriberInfo> Replicator::Subscribers(uint64_t after_id,
                                                    size_t limit) const {
  return impl_->Subscribers(after_id, limit);
}

StreamStats Replicator::stream_stats() const { return impl_->stream_stats(); }

void Replicator::CountWritten(size_t bytes) {
  impl_->bytes_written.fetch_add(bytes, std::memory_order_relaxed);
}

void Replicator::CountCutOff() {
  impl_->cut_off.fetch_add(1, std::memory_order_relaxed);
}

void Replicator::set_history(uint64_t history) { impl_->history = history; }

uint64_t Replicator::history() const { return impl_->history; }

absl::Status Replicator::MoveRegion(SubscriptionId id, absl::string_view owner,
                                    const Region& region, double max_per_second,
                                    absl::Time now, AffordRegionMove afford) {
  return impl_->MoveRegion(id, owner, region, max_per_second, now, afford);
}

void Replicator::set_region_cell_size(float size) {
  impl_->region_cell_size = size;
}

bool Replicator::keeps_spatial_index() const {
  return impl_->keeps_spatial_index();
}

void Replicator::set_region_views_to_sort_moves(size_t views) {
  impl_->region_views_to_sort_moves = views;
}

void Replicator::set_membership_walk_chunk_for_testing(size_t slots) {
  impl_->membership_walk_chunk = slots;
}

void Replicator::set_unlocked_for_testing(std::function<void()> call) {
  impl_->unlocked_for_testing = std::move(call);
}

// ---------------------------------------------------------------------------

Subscription* Replicator::Impl::Find(SubscriptionId id) const {
  const auto it = subs_.find(id);
  return it == subs_.end() ? nullptr : it->second.get();
}

void Replicator::Impl::TakeInWholeLocked(const World& world, uint64_t frame,
                                         absl::Time time,
                                         uint64_t resumable_from) {
  state_.TakeInWhole(world, frame);
  RebuildIndex();
  state_.ClearDestroyedLog(frame);
  frame_ = frame;
  whole_frame_ = std::max(frame, resumable_from);
  frame_time_ = time;
}

void Replicator::Impl::PublishWhole(const World& world, uint64_t frame,
                                    absl::Time time, uint64_t resumable_from) {
  std::lock_guard<std::mutex> lock(mu_);
  TakeInWholeLocked(world, frame, time, resumable_from);
}

void Replicator::Impl::Reset(const World& world, uint64_t frame,
                             absl::Time time, uint64_t resumable_from) {
  std::vector<std::shared_ptr<UpdateSink>> wake;
  PublishedState gone;  // Freed after the lock is released.
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = std::exchange(state_, PublishedState());
    TakeInWholeLocked(world, frame, time, resumable_from);
    shared_folds_.erase(shared_folds_.begin(), shared_folds_.end());
    moved_slots_ = SlotBits();
    moved_index_by_slot_.clear();
    for (auto& [id, s] : subs_) {
      // What it tracked was by the old state's slots: its view is found
      // again, and sent whole after the messages it is committed to.
      if (!s->whole_world()) s->view = MakeView(s->options);
      s->ToResyncing();
      ++s->views_resent_whole;
      ++counted_.views_resent_whole;
      wake.push_back(s->sink);
    }
  }
  WakeAll(std::move(wake));
}

Replicator::SubscriptionId Replicator::Impl::Subscribe(
    SubscriptionOptions options, std::shared_ptr<UpdateSink> sink) {
  auto s = std::make_unique<Subscription>();
  if (!options.no_echo_client_id.empty()) {
    s->echo.emplace(options.no_echo_client_id, options.compact_precision > 0);
  }
  if (options.region) BuildIndexInParts();
  s->options = std::move(options);
  s->sink = std::move(sink);
  s->subscribed = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  s->view = MakeView(s->options);
  if (s->options.region) ++region_views_;
  if (Resumes(*s)) {
    // Owed what changed after the frame it holds, as a laggard is: its
    // first message is due once a frame after it is published.
    s->ToOwedFromState(s->options.resume_from_frame, 0);
    s->last_frame_sent = s->options.resume_from_frame;
  } else {
    BuildSnapshot(*s);
  }
  // Unguessable: the id names the stream to UpdateSubscription, which
  // anyone of the same principal (every anonymous caller alike) may call.
  // Under 2^53, so that a JavaScript number holds it exactly.
  SubscriptionId id = 0;
  while (id == 0 || subs_.contains(id)) {
    id = ids_() & ((uint64_t{1} << 53) - 1);
  }
  if (s->echo) ++echo_filtered;
  subs_.emplace(id, std::move(s));
  return id;
}

bool Replicator::Impl::Resumes(const Subscription& s) const {
  const uint64_t from = s.options.resume_from_frame;
  return from != 0 && s.options.resume_history == history &&
         MayCatchUpFromState(s) && s.options.accepts_kept_view_snapshots &&
         from >= ResumableFrom();
}

uint64_t Replicator::Impl::resumable_from() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ResumableFrom();
}

void Replicator::Impl::Unsubscribe(SubscriptionId id) {
  // Freed after the lock is released.
  std::unique_ptr<Subscription> gone;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  gone = std::move(it->second);
  subs_.erase(it);
  if (gone->echo) --echo_filtered;
  // The index outlives the last region view by kIndexIdleFrames (Publish
  // drops it): a subscriber that comes and goes does not make each
  // comer build it again.
  if (gone->options.region && --region_views_ == 0) index_idle_frames_ = 0;
}

void Replicator::Impl::RebuildIndex() {
  if (index_ == nullptr) return;
  if (region_views_ > 0) {
    BuildIndex();
  } else {
    index_.reset();  // Kept for views that may come; none has.
  }
}

bool Replicator::Impl::keeps_spatial_index() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_ != nullptr;
}

std::unique_ptr<SpatialIndex> Replicator::Impl::DropIdleIndex() {
  if (index_ == nullptr || region_views_ > 0 ||
      ++index_idle_frames_ < kIndexIdleFrames ||
      index_built_to_ < state_.slot_end()) {  // Being built for a comer.
    return nullptr;
  }
  return std::move(index_);
}

std::unique_ptr<ViewFilter> Replicator::Impl::MakeView(
    const SubscriptionOptions& options) {
  std::unique_ptr<ViewFilter> view;
  if (!options.entities.empty() || !options.subtrees.empty()) {
    view = MakeEntityFilter(state_, options.entities, options.subtrees,
                            membership_walk_chunk);
  }
  if (!options.region) return view;
  if (index_ == nullptr) {
    BuildIndex();
  } else {
    PlaceUnbuilt(state_.slot_end());  // What BuildIndexInParts left, if any.
  }
  return MakeRegionFilter(state_, *index_, *options.region, std::move(view),
                          membership_walk_chunk);
}

void Replicator::Impl::BuildIndex() {
  index_ = std::make_unique<SpatialIndex>(region_cell_size);
  index_built_to_ = 0;
  index_idle_frames_ = 0;
  PlaceUnbuilt(state_.slot_end());
}

void Replicator::Impl::PlaceUnbuilt(Slot end) {
  for (Slot slot = index_built_to_; slot < end; ++slot) {
    if (state_.entity(slot) != kNoEntity) {
      index_->Place(slot, state_.world(slot).translation());
    }
  }
  index_built_to_ = std::max(index_built_to_, end);
}

void Replicator::Impl::BuildIndexInParts() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (index_ == nullptr) {
        // Frames place what they move and create from now on (PlaceMoved);
        // the parts place the rest, each under the lock, frames between.
        index_ = std::make_unique<SpatialIndex>(region_cell_size);
        index_built_to_ = 0;
        index_idle_frames_ = 0;
      }
      const Slot end = state_.slot_end();
      if (index_built_to_ >= end) return;
      PlaceUnbuilt(static_cast<Slot>(
          std::min<uint64_t>(end, uint64_t{index_built_to_} + kIndexPart)));
    }
    if (unlocked_for_testing) unlocked_for_testing();
  }
}

void Replicator::Impl::UnplaceDestroyed(const FrameChanges& changes) {
  if (index_ == nullptr) return;
  for (EntityId e : changes.destroyed) {
    const Slot slot = state_.Find(e);
    if (slot != PublishedState::kNoSlot) index_->Remove(slot);
  }
}

void Replicator::Impl::PlaceMoved(const FrameChanges& changes) {
  moves_by_cell_ = false;
  if (index_ == nullptr) return;
  const size_t moves = changes.moved.size();
  moved_positions_.resize(moves);
  frame_slots_.resize(moves);
  for (size_t k = 0; k < moves; ++k) {
    moved_positions_[k] = changes.MovedWorld(k).translation();
    frame_slots_[k] = state_.Find(changes.moved[k]);
  }
  if (region_views_ >= region_views_to_sort_moves) {
    index_->PlaceMoves(frame_slots_, moved_positions_);
    moves_by_cell_ = true;
    return;
  }
  for (size_t k = 0; k < moves; ++k) {
    if (frame_slots_[k] != PublishedState::kNoSlot) {
      index_->Place(frame_slots_[k], moved_positions_[k]);
    }
  }
}

absl::Status Replicator::Impl::MoveRegion(SubscriptionId id,
                                          absl::string_view owner,
                                          const Region& region,
                                          double max_per_second, absl::Time now,
                                          AffordRegionMove afford) {
  std::vector<std::shared_ptr<UpdateSink>> wake;
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(mu_);
    Subscription* s = Find(id);
    if (s == nullptr || s->options.owner != owner) {
      return absl::NotFoundError(
          absl::StrCat("no subscription ", id, " of yours"));
    }
    if (!s->options.region) {
      return absl::FailedPreconditionError(absl::StrCat(
          "subscription ", id,
          " has no region to move: subscribe with one (SubscribeRequest."
          "region)"));
    }
    if (max_per_second > 0 &&
        !s->region_moves.TryTake(max_per_second, 1, now)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a subscription's region moves at most ", max_per_second,
                       " times a second (--max_region_moves_hz)"));
    }
    // Another call's move of this view, still under way: finished first.
    while (s != nullptr && s->view->RegionMoveUnderWay() &&
           MoveRegionPart(lock, id, s, wake)) {
    }
    if (s == nullptr) {
      status = absl::NotFoundError(
          absl::StrCat("subscription ", id, " ended while it moved"));
    } else if (*s->options.region != region) {
      const size_t work = s->view->StartRegionMove(region);
      status = afford(work);
      if (!status.ok()) {
        s->view->AbandonRegionMove();
      } else {
        s->options.region = region;
        while (MoveRegionPart(lock, id, s, wake)) {
        }
      }
    }
  }
  // Nothing entered or left: nothing to send before the next frame.
  WakeAll(std::move(wake));
  return status;
}

bool Replicator::Impl::MoveRegionPart(
    std::unique_lock<std::mutex>& lock, SubscriptionId id, Subscription*& s,
    std::vector<std::shared_ptr<UpdateSink>>& wake) {
  ViewFilter* const view = s->view.get();
  bool noted = false;
  const bool done = view->MoveRegionMore(
      membership_walk_chunk, [&](Slot slot, ViewFilter::Moved how) {
        Note(*s, state_.entity(slot),
             how == ViewFilter::Moved::kEntered ? kCreated : kDestroyed, slot);
        noted = true;
        // Past what a laggard may be owed, its view is sent whole (as a
        // frame would decide), not noted entity by entity: a move onto a
        // whole world costs its bits, not a table of its entities.
        if (const Noting* noting = s->as<Noting>();
            noting != nullptr && noting->pending.size() > max_pending_ &&
            !StopNoting(*s)) {
          s->ToResyncing();
        }
      });
  if (noted) wake.push_back(s->sink);
  if (done) return false;
  // Frames, readers and other calls go on between the parts; what this
  // one noted is sent meanwhile.
  lock.unlock();
  WakeAll(std::exchange(wake, {}));
  if (unlocked_for_testing) unlocked_for_testing();
  lock.lock();
  s = Find(id);
  // A view made anew since (a reset) was judged whole by the new region.
  return s != nullptr && s->view.get() == view && view->RegionMoveUnderWay();
}

void Replicator::Impl::Flush(absl::Time now) {
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

void Replicator::Impl::EndAll(const absl::Status& status) {
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : subs_) sinks.push_back(s->sink);
  }
  for (auto& sink : sinks) sink->End(status);
}

uint64_t Replicator::Impl::frame() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frame_;
}

size_t Replicator::Impl::subscribers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return subs_.size();
}

namespace {

// What a subscriber is owed, in entities, by its state: pending changes,
// kept frames beyond the first (the message it would send next), what it is
// owed from the state up to the live entities (the destroyed it had are not
// counted: finding them is O(log)), and a snapshot's stale entities.
size_t Owed(const Subscription& s, size_t live) {
  if (const auto* noting = s.as<Noting>()) return noting->pending.size();
  if (const auto* caught_up = s.as<CaughtUp>()) {
    return caught_up->frames > 1 ? caught_up->entities : 0;
  }
  if (const auto* owed = s.as<OwedFromState>()) {
    return std::min(owed->entities, live);
  }
  if (const auto* snapshotting = s.as<Snapshotting>()) {
    return snapshotting->snapshot->stale.count;
  }
  return 0;
}

bool InSnapshot(const Subscription& s) {
  const auto* owed = s.as<OwedFromState>();
  return s.as<Snapshotting>() != nullptr ||
         (owed != nullptr && owed->scan != nullptr);
}

}  // namespace

std::vector<SubscriberInfo> Replicator::Impl::Subscribers(uint64_t after_id,
                                                          size_t limit) const {
  std::vector<SubscriberInfo> out;
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<SubscriptionId, const Subscription*>> chosen;
    for (const auto& [id, s] : subs_) {
      if (id > after_id) chosen.emplace_back(id, s.get());
    }
    const auto by_id = [](const auto& a, const auto& b) {
      return a.first < b.first;
    };
    if (chosen.size() > limit) {
      std::nth_element(chosen.begin(), chosen.begin() + limit, chosen.end(),
                       by_id);
      chosen.resize(limit);
    }
    std::sort(chosen.begin(), chosen.end(), by_id);
    for (const auto& [id, s] : chosen) {
      out.push_back({
          .id = id,
          .subscribed = s->subscribed,
          .position_precision = s->options.compact_precision,
          .entities_listed = static_cast<uint32_t>(s->options.entities.size()),
          .subtrees_listed = static_cast<uint32_t>(s->options.subtrees.size()),
          .max_rate_hz = s->options.max_rate_hz,
          .no_echo_client_id = s->options.no_echo_client_id,
          .accepts_kept_view_snapshots = s->options.accepts_kept_view_snapshots,
          .last_frame_sent = s->last_frame_sent,
          .pending = Owed(*s, state_.size()),
          .in_snapshot = InSnapshot(*s),
          .messages = s->messages,
          .frames_folded = s->frames_folded,
          .views_resent_whole = s->views_resent_whole,
          .kept_view_snapshots = s->kept_view_snapshots,
      });
      sinks.push_back(s->sink);
    }
  }
  const absl::Time now = absl::Now();
  for (size_t k = 0; k < out.size(); ++k) sinks[k]->Describe(now, out[k]);
  return out;
}

StreamStats Replicator::Impl::stream_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StreamStats stats = counted_;
  stats.bytes = bytes_written.load(std::memory_order_relaxed);
  stats.streams_cut_off = cut_off.load(std::memory_order_relaxed);
  for (const auto& [id, s] : subs_) {
    if (InSnapshot(*s)) ++stats.subscribers_in_snapshot;
  }
  return stats;
}

}  // namespace xform::server
