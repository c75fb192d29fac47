// Copyright 2026 The xform Authors.

#include "server/replicator.h"

#include <algorithm>
#include <utility>

namespace xform::server {
namespace {

// Wire bytes per entity in a message: id, parent, 12 floats, plus tags.
constexpr size_t kBytesPerEntity = 8 + 8 + 48 + 8;

void AppendWorld(const Matrix3x4& m, v1::FrameUpdate* update) {
  for (float f : m.m) update->add_moved_world(f);
}

}  // namespace

void Replicator::Note(Subscription& s, EntityId e, uint8_t event) {
  auto [it, inserted] = s.pending.try_emplace(e, 0);
  uint8_t& flags = it->second;
  if (event == kEntered) {
    // Left and came back before the subscriber heard: to it, the entity just
    // stayed, perhaps under another parent and elsewhere.
    flags = (flags & kLeft) ? kReparented | kMoved : (flags | kEntered);
  } else if (event == kLeft) {
    if (flags & kEntered) {
      s.pending.erase(it);  // Came and went unseen.
    } else {
      flags = kLeft;
    }
  } else {
    flags |= event;
  }
}

void Replicator::Fold(Subscription& s) {
  if (!s.ready) return;
  const v1::FrameUpdate& u = s.ready->message();
  for (EntityId e : u.destroyed()) Note(s, e, kLeft);
  for (EntityId e : u.created()) Note(s, e, kEntered);
  for (EntityId e : u.reparented()) Note(s, e, kReparented);
  for (EntityId e : u.moved()) Note(s, e, kMoved);
  s.ready.reset();
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
  auto it = state_.find(e);
  if (it == state_.end()) return false;
  if (s.whole_world || s.listed.contains(e)) return true;
  for (EntityId a = e; !s.roots.empty() && a != kNoEntity;
       a = state_.at(a).parent) {
    if (s.roots.contains(a)) return true;
  }
  return false;
}

bool Replicator::IsEcho(const std::string& client, const FrameWriters& writers,
                        EntityId e) const {
  auto self = writers.find(e);
  if (self == writers.end() || self->second != client) return false;
  // Another writer's change above it moves it too.
  for (auto it = state_.find(e);
       it != state_.end() && it->second.parent != kNoEntity;
       it = state_.find(it->second.parent)) {
    auto above = writers.find(it->second.parent);
    if (above != writers.end() && above->second != client) return false;
  }
  return true;
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
    std::shared_ptr<const Outgoing> shared;
    for (auto& [id, s] : subs_) {
      const bool caught_up = s->whole_world && s->pending.empty() &&
                             s->snapshot.empty() && !s->ready &&
                             s->options.max_rate_hz == 0 &&
                             s->options.no_echo_client_id.empty();
      if (!caught_up) continue;
      if (!shared) shared = FrameMessage(changes, time);
      s->ready = shared;
      served.insert(id);
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

    // The published state follows the frame, in the order FrameChanges gives.
    for (EntityId e : changes.destroyed) {
      auto it = state_.find(e);
      if (it == state_.end()) continue;
      RemoveChild(it->second.parent, e);
      state_.erase(it);
      children_.erase(e);
    }
    for (size_t k = 0; k < changes.created.size(); ++k) {
      state_[changes.created[k]].parent = changes.created_parent[k];
      children_[changes.created_parent[k]].push_back(changes.created[k]);
    }
    for (size_t k = 0; k < changes.reparented.size(); ++k) {
      Published& p = state_[changes.reparented[k]];
      RemoveChild(p.parent, changes.reparented[k]);
      p.parent = changes.reparented_parent[k];
      children_[p.parent].push_back(changes.reparented[k]);
    }
    for (size_t k = 0; k < changes.moved.size(); ++k) {
      // As scattered over the world as the writes were: overlap the misses.
      if (k + 8 < changes.moved.size()) state_.prefetch(changes.moved[k + 8]);
      Matrix3x4& m = state_[changes.moved[k]].world;
      std::copy_n(&changes.moved_world[12 * k], 12, m.m.begin());
    }
    frame_ = changes.frame;
    frame_time_ = time;

    // The other whole-world subscribers fold the frame into their pending
    // events.
    for (auto& [id, s] : subs_) {
      if (!s->whole_world || served.contains(id)) continue;
      const bool echo_filtered = !s->options.no_echo_client_id.empty();
      Fold(*s);
      for (EntityId e : changes.destroyed) Note(*s, e, kLeft);
      for (EntityId e : changes.created) Note(*s, e, kEntered);
      for (EntityId e : changes.reparented) Note(*s, e, kReparented);
      for (EntityId e : changes.moved) {
        if (!echo_filtered ||
            !IsEcho(s->options.no_echo_client_id, writers, e)) {
          Note(*s, e, kMoved);
        }
      }
    }
    if (!filtered.empty()) {
      const absl::flat_hash_set<EntityId> moved(changes.moved.begin(),
                                                changes.moved.end());
      const absl::flat_hash_set<EntityId> reparented(changes.reparented.begin(),
                                                     changes.reparented.end());
      for (size_t f = 0; f < filtered.size(); ++f) {
        Subscription& s = *filtered[f];
        for (size_t k = 0; k < touched.size(); ++k) {
          const EntityId e = touched[k];
          const bool was = before[f][k];
          const bool is = InView(s, e);
          if (!was && is) {
            Note(s, e, kEntered);
          } else if (was && !is) {
            Note(s, e, kLeft);
          } else if (was && is) {
            if (reparented.contains(e)) Note(s, e, kReparented);
            if (moved.contains(e) &&
                (s.options.no_echo_client_id.empty() ||
                 !IsEcho(s.options.no_echo_client_id, writers, e))) {
              Note(s, e, kMoved);
            }
          }
        }
      }
    }
    for (auto& [id, s] : subs_) {
      if (served.contains(id)) continue;
      if (!s->pending.empty() || s->ready) wake.push_back(s->sink);
    }
  }
  for (auto& sink : wake) sink->Wake();
}

std::shared_ptr<const Outgoing> Replicator::FrameMessage(
    const FrameChanges& changes, absl::Time time) {
  v1::FrameUpdate message;
  message.set_frame(changes.frame);
  message.set_server_time_unix_nanos(absl::ToUnixNanos(time));
  message.mutable_created()->Add(changes.created.begin(),
                                 changes.created.end());
  message.mutable_created_parent()->Add(changes.created_parent.begin(),
                                        changes.created_parent.end());
  message.mutable_destroyed()->Add(changes.destroyed.begin(),
                                   changes.destroyed.end());
  message.mutable_reparented()->Add(changes.reparented.begin(),
                                    changes.reparented.end());
  message.mutable_reparented_parent()->Add(changes.reparented_parent.begin(),
                                           changes.reparented_parent.end());
  message.mutable_moved()->Add(changes.moved.begin(), changes.moved.end());
  message.mutable_moved_world()->Add(changes.moved_world.begin(),
                                     changes.moved_world.end());
  return std::make_shared<const Outgoing>(std::move(message));
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
  std::vector<EntityId> view;
  absl::flat_hash_set<EntityId> seen;
  const auto add_tree = [&](EntityId root) {
    ForEachInSubtree(root, [&](EntityId e) {
      if (e != kNoEntity && seen.insert(e).second) view.push_back(e);
    });
  };
  if (s.whole_world) {
    add_tree(kNoEntity);
  } else {
    for (EntityId root : s.options.subtrees) {
      if (state_.contains(root)) add_tree(root);
    }
    for (EntityId e : s.options.entities) {
      if (state_.contains(e) && seen.insert(e).second) view.push_back(e);
    }
    SortByDepth(view);
  }
  const size_t per_message =
      std::max<size_t>(1, s.options.max_message_bytes / kBytesPerEntity);
  for (size_t first = 0; first == 0 || first < view.size();
       first += per_message) {
    v1::FrameUpdate& chunk = s.snapshot.emplace_back();
    chunk.set_frame(frame_);
    chunk.set_server_time_unix_nanos(absl::ToUnixNanos(frame_time_));
    chunk.set_snapshot(true);
    const size_t last = std::min(view.size(), first + per_message);
    for (size_t k = first; k < last; ++k) {
      const Published& p = state_.at(view[k]);
      chunk.add_created(view[k]);
      chunk.add_created_parent(p.parent);
      chunk.add_moved(view[k]);
      AppendWorld(p.world, &chunk);
    }
    if (view.empty()) break;
  }
  s.snapshot.back().set_snapshot_done(true);
  s.last_frame_sent = frame_;
}

void Replicator::SortByDepth(std::vector<EntityId>& entities) const {
  std::vector<std::pair<uint32_t, EntityId>> keyed;
  keyed.reserve(entities.size());
  for (EntityId e : entities) {
    uint32_t depth = 0;
    for (auto it = state_.find(e);
         it != state_.end() && it->second.parent != kNoEntity;
         it = state_.find(it->second.parent)) {
      ++depth;
    }
    keyed.push_back({depth, e});
  }
  std::stable_sort(
      keyed.begin(), keyed.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < keyed.size(); ++k) entities[k] = keyed[k].second;
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
  if (!s.snapshot.empty()) {
    auto chunk =
        std::make_shared<const Outgoing>(std::move(s.snapshot.front()));
    s.snapshot.pop_front();
    return chunk;
  }
  if (s.ready) {
    s.last_frame_sent = s.ready->message().frame();
    return std::exchange(s.ready, nullptr);
  }
  if (s.pending.empty() || now < s.next_allowed) return nullptr;

  v1::FrameUpdate message;
  v1::FrameUpdate* update = &message;
  update->set_frame(frame_);
  update->set_server_time_unix_nanos(absl::ToUnixNanos(frame_time_));
  const uint64_t skipped =
      frame_ > s.last_frame_sent ? frame_ - s.last_frame_sent - 1 : 0;
  update->set_frames_skipped(skipped);
  s.frames_skipped += skipped;
  s.last_frame_sent = frame_;

  // Everything pending fits in one message unless the view is huge; the rest
  // then goes in the next message (from the then-latest frame).
  const size_t budget =
      std::max<size_t>(1, s.options.max_message_bytes / kBytesPerEntity);
  std::vector<EntityId> entered, reparented, moved;
  std::vector<EntityId> taken;
  for (const auto& [e, flags] : s.pending) {
    if (taken.size() == budget) break;
    taken.push_back(e);
    if (flags & kLeft) {
      update->add_destroyed(e);
      continue;
    }
    if (flags & kEntered) {
      entered.push_back(e);
      continue;
    }
    if (flags & kReparented) reparented.push_back(e);
    if (flags & kMoved) moved.push_back(e);
  }
  if (taken.size() == s.pending.size()) {
    s.pending.clear();
  } else {
    for (EntityId e : taken) s.pending.erase(e);
  }
  SortByDepth(entered);
  SortByDepth(reparented);
  for (EntityId e : entered) {
    const Published& p = state_.at(e);
    update->add_created(e);
    update->add_created_parent(p.parent);
    update->add_moved(e);
    AppendWorld(p.world, update);
  }
  for (EntityId e : reparented) {
    update->add_reparented(e);
    update->add_reparented_parent(state_.at(e).parent);
  }
  for (EntityId e : moved) {
    update->add_moved(e);
    AppendWorld(state_.at(e).world, update);
  }
  if (s.options.max_rate_hz > 0) {
    s.next_allowed = now + absl::Seconds(1.0 / s.options.max_rate_hz);
  }
  return std::make_shared<const Outgoing>(std::move(message));
}

void Replicator::Flush(absl::Time now) {
  std::vector<std::shared_ptr<UpdateSink>> sinks;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    out.push_back(
        {id, s->pending.size(), s->last_frame_sent, s->frames_skipped});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace xform::server
