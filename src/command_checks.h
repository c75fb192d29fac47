// Copyright 2026 The xform Authors.
//
// The checks of one command, in one order, shared by every path that
// validates: BatchValidator (any batch) and the world's fast paths for a batch
// of creates alone (World::CreateMany) or of set-locals alone
// (World::SetLocalsOf). So one bad command gets one answer whatever the batch
// around it. Each path says how it looks entities up: the validator through
// its overlay of what the batch did so far, the fast paths straight in the
// world's map (and a create claims its id in the same lookup).

#ifndef XFORM_SRC_COMMAND_CHECKS_H_
#define XFORM_SRC_COMMAND_CHECKS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "xform/world.h"

namespace xform::command_checks {

// "command 3 (create entity 7): already exists".
inline absl::Status Annotate(const absl::Status& status, size_t index,
                             absl::string_view what, EntityId entity) {
  return absl::Status(status.code(),
                      absl::StrCat("command ", index, " (", what, " entity ",
                                   entity, "): ", status.message()));
}

inline absl::Status RequireId(EntityId entity) {
  if (entity == kNoEntity) {
    return absl::InvalidArgumentError("entity id 0 is reserved for 'none'");
  }
  return absl::OkStatus();
}

// A create: the id, the transform, the parent (not itself, existing), then
// the id free. `exists(id)` says whether an entity is there;
// `claim(id)` takes the id, false when it is taken.
template <typename Exists, typename Claim>
absl::Status CheckCreate(const CreateOp& op, Exists&& exists, Claim&& claim) {
  if (absl::Status s = RequireId(op.entity); !s.ok()) return s;
  if (absl::Status s = ValidateTransform(op.local); !s.ok()) return s;
  if (op.parent == op.entity) {
    return absl::FailedPreconditionError("an entity cannot be its own parent");
  }
  if (op.parent != kNoEntity && !exists(op.parent)) {
    return absl::NotFoundError(
        absl::StrCat("parent ", op.parent, " not found"));
  }
  if (!claim(op.entity)) return absl::AlreadyExistsError("already exists");
  return absl::OkStatus();
}

// A set-local or set-world: the id, the transform, then the entity there.
// `find(id)` says whether it is there (and may note where).
template <typename Find>
absl::Status CheckSetTransform(EntityId entity, const Transform& t,
                               Find&& find) {
  if (absl::Status s = RequireId(entity); !s.ok()) return s;
  if (absl::Status s = ValidateTransform(t); !s.ok()) return s;
  if (!find(entity)) return absl::NotFoundError("not found");
  return absl::OkStatus();
}

}  // namespace xform::command_checks

#endif  // XFORM_SRC_COMMAND_CHECKS_H_
