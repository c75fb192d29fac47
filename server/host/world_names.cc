// Copyright 2026 The xform Authors.

#include "server/host/world_names.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace xform::server {
namespace {

constexpr absl::string_view kWorldFrame = "world";

// "e" and digits: the name of an unnamed entity.
bool LooksLikeAnId(absl::string_view name) {
  if (name.size() < 2 || name[0] != 'e') return false;
  for (char c : name.substr(1)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The batch's view of the names: the world's, with what its commands so
// far changed over them.
class Overlay {
 public:
  Overlay(const absl::flat_hash_map<std::string, EntityId>& by_name,
          const absl::flat_hash_map<EntityId, std::string>& by_entity)
      : by_name_(by_name), by_entity_(by_entity) {}

  // Who holds `name` now (kNoEntity: no one).
  EntityId Holder(const std::string& name) const {
    if (const auto it = names_.find(name); it != names_.end()) {
      return it->second;
    }
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? kNoEntity : it->second;
  }
  const std::string& NameOf(EntityId entity) const {
    static const std::string kNone;
    if (const auto it = entities_.find(entity); it != entities_.end()) {
      return it->second;
    }
    const auto it = by_entity_.find(entity);
    return it == by_entity_.end() ? kNone : it->second;
  }
  void Set(EntityId entity, const std::string& name,
           WorldNames::Prepared& prepared) {
    const std::string old = NameOf(entity);
    if (!old.empty()) names_[old] = kNoEntity;
    if (!name.empty()) names_[name] = entity;
    entities_[entity] = name;
    prepared.changes.emplace_back(entity, name);
  }

 private:
  const absl::flat_hash_map<std::string, EntityId>& by_name_;
  const absl::flat_hash_map<EntityId, std::string>& by_entity_;
  absl::flat_hash_map<std::string, EntityId> names_;
  absl::flat_hash_map<EntityId, std::string> entities_;
};

absl::Status Taken(const std::string& name, EntityId holder) {
  return absl::AlreadyExistsError(
      absl::StrCat("name '", name, "' is entity ", holder, "'s"));
}

// One entity named `name` ("" for none) by command `k`, into `overlay`.
absl::Status Name(int k, EntityId entity, const std::string& name,
                  size_t max_bytes, Overlay& overlay,
                  WorldNames::Prepared& prepared) {
  if (!name.empty()) {
    if (absl::Status s = WorldNames::CheckName(name, max_bytes); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("command ", k, ": ", s.message()));
    }
    const EntityId holder = overlay.Holder(name);
    if (holder != kNoEntity && holder != entity) return Taken(name, holder);
  }
  if (name != overlay.NameOf(entity)) overlay.Set(entity, name, prepared);
  return absl::OkStatus();
}

}  // namespace

absl::Status WorldNames::CheckName(absl::string_view name, size_t max_bytes) {
  if (name.empty() || name.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a name is 1 to ", max_bytes, " bytes (--max_name_bytes)"));
  }
  for (char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      return absl::InvalidArgumentError("a name holds no control characters");
    }
  }
  if (name == kWorldFrame || LooksLikeAnId(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name, "' is not a name: 'world' and e<id> name frames already"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorldNames::Prepared> WorldNames::Prepare(
    const v1::ApplyRequest& request, const World& world,
    size_t max_bytes) const {
  Prepared prepared;
  Overlay overlay(by_name_, by_entity_);
  absl::flat_hash_set<EntityId> created, destroyed;
  for (int k = 0; k < request.commands_size(); ++k) {
    const v1::Command& c = request.commands(k);
    if (c.has_create()) {
      const v1::CreateCommand& create = c.create();
      if (create.name_size() != 0 &&
          create.name_size() != create.entity_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "command ", k, ": create: name must be empty or one per entity"));
      }
      for (int i = 0; i < create.entity_size(); ++i) {
        created.insert(create.entity(i));
        destroyed.erase(create.entity(i));
        if (create.name_size() == 0) continue;
        if (absl::Status s = Name(k, create.entity(i), create.name(i),
                                  max_bytes, overlay, prepared);
            !s.ok()) {
          return s;
        }
      }
    } else if (c.has_rename()) {
      const v1::RenameCommand& rename = c.rename();
      if (rename.name_size() != rename.entity_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("command ", k, ": rename: one name per entity"));
      }
      for (int i = 0; i < rename.entity_size(); ++i) {
        const EntityId e = rename.entity(i);
        if (destroyed.contains(e) || (!created.contains(e) && !world.Has(e))) {
          return absl::NotFoundError(
              absl::StrCat("command ", k, ": rename: no entity ", e));
        }
        if (absl::Status s =
                Name(k, e, rename.name(i), max_bytes, overlay, prepared);
            !s.ok()) {
          return s;
        }
      }
    } else if (c.has_destroy()) {
      prepared.subtree_destroyed |= !c.destroy().keep_children();
      for (EntityId e : c.destroy().entity()) {
        destroyed.insert(e);
        created.erase(e);
        if (!overlay.NameOf(e).empty()) overlay.Set(e, "", prepared);
      }
    }
  }
  return prepared;
}

void WorldNames::Commit(const Prepared& prepared, const World& world) {
  for (const auto& [entity, name] : prepared.changes) Set(entity, name);
  if (!prepared.subtree_destroyed) return;
  std::vector<EntityId> gone;
  for (const auto& [entity, name] : by_entity_) {
    if (!world.Has(entity)) gone.push_back(entity);
  }
  for (EntityId entity : gone) Set(entity, "");
}

void WorldNames::Set(EntityId entity, const std::string& name) {
  if (const auto it = by_entity_.find(entity); it != by_entity_.end()) {
    by_name_.erase(it->second);
    by_entity_.erase(it);
  }
  if (name.empty()) return;
  by_name_[name] = entity;
  by_entity_[entity] = name;
}

absl::StatusOr<EntityId> WorldNames::Resolve(absl::string_view frame) const {
  if (frame.empty()) return absl::InvalidArgumentError("an empty frame name");
  if (frame == kWorldFrame) return kNoEntity;
  if (const auto it = by_name_.find(frame); it != by_name_.end()) {
    return it->second;
  }
  EntityId entity = kNoEntity;
  if (LooksLikeAnId(frame) && absl::SimpleAtoi(frame.substr(1), &entity) &&
      entity != kNoEntity) {
    return entity;
  }
  return absl::NotFoundError(absl::StrCat("no frame named '", frame, "'"));
}

const std::string& WorldNames::NameOf(EntityId entity) const {
  static const std::string kNone;
  const auto it = by_entity_.find(entity);
  return it == by_entity_.end() ? kNone : it->second;
}

void WorldNames::ForEach(
    absl::FunctionRef<void(EntityId entity, const std::string& name)> visit)
    const {
  for (const auto& [entity, name] : by_entity_) visit(entity, name);
}

void WorldNames::Restore(
    const std::vector<std::pair<EntityId, std::string>>& names) {
  by_name_.clear();
  by_entity_.clear();
  for (const auto& [entity, name] : names) Set(entity, name);
}

}  // namespace xform::server
