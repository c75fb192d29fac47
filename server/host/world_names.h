// Copyright 2026 The xform Authors.
//
// WorldNames: a hosted world's named entities, tf2's frame names
// ("base_link"), beside the core World, which knows entities by id only.
//
// A batch names entities as it creates them (CreateCommand.name) or
// renames them (RenameCommand; "" takes a name away). Prepare() checks a
// batch's names against the world before it, in command order: a name is
// valid (CheckName), not held by another entity (ALREADY_EXISTS), a renamed
// entity is in the world or created earlier in the batch (NOT_FOUND).
// A destroyed entity's name is free for the commands after its destroy;
// the names of the entities a subtree destroy takes with it are freed when
// the batch is committed (so not reusable within that batch). Commit()
// applies what Prepare() found, once the World took the batch: a batch the
// World refuses changes no name.
//
// Outside, an entity without a name is "e<id>", and the world's origin is
// "world" (Resolve): names may be neither.
//
// Costs: Prepare O(commands' entities) plus the names they touch; Commit
// the same, and O(named entities) more for a batch with a subtree destroy
// (each named entity checked for still being there). Memory: the names.
// Not thread-safe: the HostedWorld's lock guards it with its World.

#ifndef XFORM_SERVER_HOST_WORLD_NAMES_H_
#define XFORM_SERVER_HOST_WORLD_NAMES_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::server {

class WorldNames {
 public:
  // A name's rules: 1 to max_bytes bytes, no control characters, and
  // neither "world" nor "e" followed by digits (the names of the origin and
  // of unnamed entities). INVALID_ARGUMENT saying which.
  static absl::Status CheckName(absl::string_view name, size_t max_bytes);

  // What a batch does to the names, found by Prepare.
  struct Prepared {
    // In order: (entity, name), "" taking the entity's name away.
    std::vector<std::pair<EntityId, std::string>> changes;
    bool subtree_destroyed = false;  // Commit checks every named entity.
    bool empty() const { return changes.empty() && !subtree_destroyed; }
  };
  absl::StatusOr<Prepared> Prepare(const v1::ApplyRequest& request,
                                   const World& world, size_t max_bytes) const;
  // Applies `prepared` once `world` took its batch.
  void Commit(const Prepared& prepared, const World& world);

  // The entity a frame names: "world" (kNoEntity), a name, or "e<id>" of an
  // entity without one; NOT_FOUND for none (INVALID_ARGUMENT for "").
  absl::StatusOr<EntityId> Resolve(absl::string_view frame) const;
  // `entity`'s name, or "" for none.
  const std::string& NameOf(EntityId entity) const;
  size_t size() const { return by_entity_.size(); }
  void ForEach(absl::FunctionRef<void(EntityId entity, const std::string& name)>
                   visit) const;
  // Names as a snapshot held them (replacing these).
  void Restore(const std::vector<std::pair<EntityId, std::string>>& names);

 private:
  void Set(EntityId entity, const std::string& name);

  absl::flat_hash_map<std::string, EntityId> by_name_;
  absl::flat_hash_map<EntityId, std::string> by_entity_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_HOST_WORLD_NAMES_H_
