// Copyright 2026 The xform Authors.

#include "server/host/world_history.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"

namespace xform::server {
namespace {

EntityId SetEntity(const Command& command) {
  if (const auto* set = std::get_if<SetLocalOp>(&command)) return set->entity;
  if (const auto* set = std::get_if<SetWorldOp>(&command)) return set->entity;
  return kNoEntity;
}

}  // namespace

WorldHistory::WorldHistory(HistoryLimits limits) : limits_(limits) {
  if (limits.window_nanos > 0) {
    history_ = std::make_unique<History>(
        HistoryOptions{.window_nanos = limits.window_nanos,
                       .max_bytes = limits.max_bytes,
                       .hold_to_newest = limits.hold_to_newest,
                       .max_links = limits.max_links});
  }
}

absl::StatusOr<Stamp> WorldHistory::StampOf(int64_t requested,
                                            absl::Time now) const {
  if (requested == 0) return absl::ToUnixNanos(now);
  if (requested < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stamp_nanos ", requested, " is negative"));
  }
  if (newest_ != 0 && requested - newest_ > limits_.max_ahead_nanos) {
    return absl::OutOfRangeError(absl::StrCat(
        "stamp_nanos ", requested, " is more than ",
        limits_.max_ahead_nanos / 1e9, " s past the world's newest stamp, ",
        newest_, " (--max_stamp_ahead_seconds)"));
  }
  return requested;
}

void WorldHistory::TakeLateSets(std::vector<Command>& commands, Stamp stamp,
                                Prepared& prepared) const {
  // No entity has a sample newer than the world's newest stamp.
  if (history_ == nullptr || stamp >= newest_) return;
  // Late sets leave the batch, in order; the rest keep theirs.
  auto late = [&](const Command& command) {
    const EntityId entity = SetEntity(command);
    return entity != kNoEntity && stamp < history_->NewestOf(entity);
  };
  if (std::none_of(commands.begin(), commands.end(), late)) return;
  for (const Command& command : commands) {
    if (late(command)) prepared.late.push_back(command);
  }
  commands.erase(std::remove_if(commands.begin(), commands.end(), late),
                 commands.end());
}

void WorldHistory::Prepare(absl::Span<const Command> commands,
                           const World& world, Prepared& prepared) const {
  for (const Command& command : commands) {
    const auto* destroy = std::get_if<DestroyOp>(&command);
    if (destroy == nullptr || history_ == nullptr) continue;
    if (destroy->mode == DestroyMode::kSubtree) {
      absl::StatusOr<std::vector<EntityId>> subtree =
          world.Subtree(destroy->entity);
      if (subtree.ok()) {
        prepared.destroyed.insert(prepared.destroyed.end(), subtree->begin(),
                                  subtree->end());
      }
    } else {
      prepared.destroyed.push_back(destroy->entity);
      absl::StatusOr<std::vector<EntityId>> children =
          world.Children(destroy->entity);
      if (children.ok()) {
        prepared.kept_children.insert(prepared.kept_children.end(),
                                      children->begin(), children->end());
      }
    }
  }
}

void WorldHistory::RecordLateSet(const Command& command, Stamp stamp) {
  const EntityId entity = SetEntity(command);
  absl::StatusOr<EntityId> parent = history_->ParentAt(entity, stamp);
  if (!parent.ok()) return;
  if (const auto* set = std::get_if<SetLocalOp>(&command)) {
    history_->Record(entity, stamp, *parent, Normalized(set->local),
                     SampleKind::kSet);
    return;
  }
  // A late set-world: its local under the parent as the parent was then.
  const auto& set = std::get<SetWorldOp>(command);
  Matrix3x4 parent_world;
  if (*parent != kNoEntity) {
    absl::StatusOr<TimedPose> then =
        history_->Lookup(kNoEntity, *parent, stamp);
    if (!then.ok()) return;  // Not known then: nothing to record it against.
    parent_world = then->pose;
  }
  history_->Record(entity, stamp, *parent,
                   LocalForWorld(parent_world, ToMatrix(Normalized(set.world))),
                   SampleKind::kSet);
}

void WorldHistory::Record(absl::Span<const Command> commands, Stamp stamp,
                          const World& world, const Prepared& prepared) {
  newest_ = std::max(newest_, stamp);
  ++version_;
  if (history_ == nullptr) return;
  for (const Command& late : prepared.late) RecordLateSet(late, stamp);
  // Structure is recorded no earlier than what the entity holds already.
  auto record = [&](EntityId entity, SampleKind kind) {
    absl::StatusOr<Transform> local = world.Local(entity);
    if (!local.ok()) return;  // Gone again later in the batch.
    const Stamp at = kind == SampleKind::kSet
                         ? stamp
                         : std::max(stamp, history_->NewestOf(entity));
    history_->Record(entity, at, *world.Parent(entity), *local, kind);
  };
  // Two stages ahead: an entity's entry, then (once that is in the cache)
  // the end of its samples.
  constexpr size_t kAhead = internal::kPrefetchAhead;
  for (size_t k = 0; k < commands.size(); ++k) {
    if (k + 2 * kAhead < commands.size()) {
      const EntityId ahead = SetEntity(commands[k + 2 * kAhead]);
      if (ahead != kNoEntity) history_->Prefetch(ahead);
    }
    if (k + kAhead < commands.size()) {
      const EntityId ahead = SetEntity(commands[k + kAhead]);
      if (ahead != kNoEntity) history_->PrefetchSamples(ahead);
    }
    const Command& command = commands[k];
    if (const auto* set = std::get_if<SetLocalOp>(&command)) {
      // The local as given (the world keeps it normalized, so does this),
      // under the parent the history has: no look-up in the world.
      if (!history_->RecordSet(set->entity, stamp, Normalized(set->local))) {
        record(set->entity, SampleKind::kSet);
      }
    } else if (const auto* create = std::get_if<CreateOp>(&command)) {
      record(create->entity, SampleKind::kCreate);
    } else if (const auto* link = std::get_if<LinkOp>(&command)) {
      record(link->entity, SampleKind::kLink);
    } else if (const EntityId set_world = SetEntity(command);
               set_world != kNoEntity) {
      record(set_world, SampleKind::kSet);
    }
  }
  for (EntityId entity : prepared.destroyed) {
    if (world.Has(entity)) continue;  // Created again later in the batch.
    history_->RecordDestroy(entity,
                            std::max(stamp, history_->NewestOf(entity)));
  }
  for (EntityId child : prepared.kept_children) {
    record(child, SampleKind::kLink);
  }
}

void WorldHistory::Restart(const World& world, Stamp stamp) {
  *this = WorldHistory(limits_);
  newest_ = stamp;
  ++version_;
  if (history_ == nullptr) return;
  world.ForEach([&](EntityId entity, EntityId parent, const Matrix3x4&) {
    history_->Record(entity, std::max<Stamp>(stamp, 1), parent,
                     *world.Local(entity), SampleKind::kCreate);
  });
}

void WorldHistory::Fill(v1::WorldHistory* info) const {
  info->set_newest_stamp_nanos(newest_);
  info->set_time_model(limits_.hold_to_newest ? v1::TIME_MODEL_HOLD
                                              : v1::TIME_MODEL_TF2);
  if (history_ == nullptr) return;
  info->set_window_nanos(history_->window());
  info->set_samples(history_->samples());
  info->set_bytes(history_->MemoryBytes());
  info->set_refused_old(history_->refused_old());
}

}  // namespace xform::server
