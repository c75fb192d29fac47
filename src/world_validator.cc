// Copyright 2026 The xform Authors.

#include "src/world_validator.h"

#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/command_checks.h"

namespace xform {
namespace {

using command_checks::Annotate;
using command_checks::RequireId;

}  // namespace

absl::Status BatchValidator::Check(size_t index, const Command& command) {
  struct Visitor {
    BatchValidator& v;
    size_t index;
    absl::Status operator()(const CreateOp& op) {
      return Wrap(v.CheckCreate(op), "create", op.entity);
    }
    absl::Status operator()(const DestroyOp& op) {
      return Wrap(v.CheckDestroy(op), "destroy", op.entity);
    }
    absl::Status operator()(const LinkOp& op) {
      return Wrap(v.CheckLink(op), "link", op.entity);
    }
    absl::Status operator()(const SetLocalOp& op) {
      return Wrap(v.CheckTransformTarget(op.entity, op.local), "set local",
                  op.entity);
    }
    absl::Status operator()(const SetWorldOp& op) {
      return Wrap(v.CheckTransformTarget(op.entity, op.world), "set world",
                  op.entity);
    }
    absl::Status Wrap(const absl::Status& s, absl::string_view what,
                      EntityId entity) const {
      return s.ok() ? s : Annotate(s, index, what, entity);
    }
  };
  return std::visit(Visitor{*this, index}, command);
}

absl::Status BatchValidator::CheckCreate(const CreateOp& op) {
  const auto exists = [&](EntityId e) { return Exists(e); };
  if (absl::Status s = command_checks::CheckCreate(
          op, exists, [&](EntityId e) { return !Exists(e); });
      !s.ok()) {
    return s;
  }
  Node& node = nodes_[op.entity];
  node = Node{.alive = true, .fresh = true, .parent = kNoEntity};
  SetParent(op.entity, op.parent);
  return absl::OkStatus();
}

absl::Status BatchValidator::CheckDestroy(const DestroyOp& op) {
  if (absl::Status s = RequireId(op.entity); !s.ok()) return s;
  if (!Exists(op.entity)) return absl::NotFoundError("not found");
  if (op.mode == DestroyMode::kReparentChildren) {
    const EntityId grandparent = ParentOf(op.entity);
    for (EntityId child : ChildrenOf(op.entity)) SetParent(child, grandparent);
  } else {
    std::vector<EntityId> stack = {op.entity};
    while (!stack.empty()) {
      const EntityId e = stack.back();
      stack.pop_back();
      for (EntityId child : ChildrenOf(e)) stack.push_back(child);
      Touch(e).alive = false;
    }
  }
  Touch(op.entity).alive = false;
  return absl::OkStatus();
}

absl::Status BatchValidator::CheckLink(const LinkOp& op) {
  if (absl::Status s = RequireId(op.entity); !s.ok()) return s;
  if (!Exists(op.entity)) return absl::NotFoundError("not found");
  if (op.parent == op.entity) {
    return absl::FailedPreconditionError("an entity cannot be its own parent");
  }
  if (op.parent != kNoEntity) {
    if (!Exists(op.parent)) {
      return absl::NotFoundError(
          absl::StrCat("parent ", op.parent, " not found"));
    }
    const bool cycle = IsAncestorOrSelf(op.entity, op.parent);
    if (absl::Status walked = world_.CheckWalked(); !walked.ok()) {
      return walked;
    }
    if (cycle) {
      return absl::FailedPreconditionError(
          absl::StrCat("parent ", op.parent,
                       " is a descendant: the link would make a cycle"));
    }
  }
  SetParent(op.entity, op.parent);
  return absl::OkStatus();
}

absl::Status BatchValidator::CheckTransformTarget(EntityId entity,
                                                  const Transform& t) {
  return command_checks::CheckSetTransform(
      entity, t, [&](EntityId e) { return Exists(e); });
}

bool BatchValidator::Exists(EntityId entity) const {
  if (auto it = nodes_.find(entity); it != nodes_.end())
    return it->second.alive;
  return world_.Has(entity);
}

EntityId BatchValidator::ParentOf(EntityId entity) const {
  if (auto it = nodes_.find(entity); it != nodes_.end())
    return it->second.parent;
  return world_.parent_entity_of(world_.index_of(entity));
}

std::vector<EntityId> BatchValidator::ChildrenOf(EntityId entity) const {
  std::vector<EntityId> children;
  absl::flat_hash_set<EntityId> seen;
  const auto is_child = [&](EntityId c) {
    auto it = nodes_.find(c);
    if (it == nodes_.end()) return true;  // Untouched: the world's link holds.
    return it->second.alive && it->second.parent == entity;
  };
  const auto node = nodes_.find(entity);
  const bool fresh = node != nodes_.end() && node->second.fresh;
  if (!fresh) {
    const World::Index i = world_.index_of(entity);
    for (World::Index c = i + 1; c < world_.end_of(i); c = world_.end_of(c)) {
      const EntityId child = world_.entity_of(c);
      if (is_child(child) && seen.insert(child).second) {
        children.push_back(child);
      }
    }
  }
  if (auto it = adopted_.find(entity); it != adopted_.end()) {
    for (EntityId child : it->second) {
      if (is_child(child) && seen.insert(child).second) {
        children.push_back(child);
      }
    }
  }
  return children;
}

BatchValidator::Node& BatchValidator::Touch(EntityId entity) {
  if (auto it = nodes_.find(entity); it != nodes_.end()) return it->second;
  const World::Index i = world_.index_of(entity);
  if (!InTouchedSubtree(i)) {
    // Drop the ranges this one holds, then add it.
    const World::Index end = world_.end_of(i);
    auto it = touched_ranges_.lower_bound(i);
    while (it != touched_ranges_.end() && it->first < end) {
      it = touched_ranges_.erase(it);
    }
    touched_ranges_.emplace(i, end);
  }
  const EntityId parent = world_.parent_entity_of(i);
  return nodes_.emplace(entity, Node{.parent = parent}).first->second;
}

bool BatchValidator::InTouchedSubtree(World::Index i) const {
  auto it = touched_ranges_.upper_bound(i);
  if (it == touched_ranges_.begin()) return false;
  --it;
  return i < it->second;
}

bool BatchValidator::IsAncestorOrSelf(EntityId ancestor,
                                      EntityId entity) const {
  for (EntityId e = entity; e != kNoEntity;) {
    ++world_.walked_;
    if (e == ancestor) return true;
    if (auto it = nodes_.find(e); it != nodes_.end()) {
      e = it->second.parent;
      continue;
    }
    const World::Index i = world_.index_of(e);
    if (!InTouchedSubtree(i)) {
      // Nothing above `e` was touched: the world's ranges answer. (A touched
      // `ancestor` with `e` in its world subtree would have put `e` in a
      // touched range.)
      const World::Index a = world_.index_of(ancestor);
      return a != internal::kNoIndex && a < i && i < world_.end_of(a);
    }
    e = world_.parent_entity_of(i);
  }
  return false;
}

void BatchValidator::SetParent(EntityId entity, EntityId parent) {
  // ParentOf() reads the world for untouched entities, so touch first.
  Touch(entity).parent = parent;
  if (parent != kNoEntity) adopted_[parent].push_back(entity);
}

}  // namespace xform
