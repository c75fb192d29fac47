// Copyright 2026 The xform Authors.

#include "tools/foxglove/transforms.h"

#include <functional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glm/gtc/quaternion.hpp"
#include "google/protobuf/arena.h"
#include "google/protobuf/descriptor.pb.h"

namespace xform::foxglove_io {
namespace {

// An entity's frame: its world position and rotation, in double.
struct Rigid {
  glm::dvec3 position{0};
  glm::dquat rotation{1, 0, 0, 0};
};

void SetStamp(int64_t stamp, google::protobuf::Timestamp* out) {
  out->set_seconds(stamp / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(stamp % 1'000'000'000));
}

Rigid RigidOf(const Matrix3x4& world) {
  const Transform t = Decompose(world);
  return {glm::dvec3(t.position), glm::normalize(glm::dquat(t.rotation))};
}

}  // namespace

std::string FrameId(EntityId entity) {
  return entity == kNoEntity ? std::string(kWorldFrame)
                             : absl::StrCat("e", entity);
}

absl::StatusOr<EntityId> EntityOfFrameId(absl::string_view frame_id) {
  if (frame_id == kWorldFrame) return kNoEntity;
  EntityId entity = kNoEntity;
  if (frame_id.size() < 2 || frame_id[0] != 'e' ||
      !absl::SimpleAtoi(frame_id.substr(1), &entity) || entity == kNoEntity ||
      frame_id[1] == '+' || frame_id[1] == '-') {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame id '", frame_id, "' is neither 'world' nor e<entity id>"));
  }
  return entity;
}

foxglove::FrameTransforms TransformsOf(const MirrorChangedState& state,
                                       int64_t stamp) {
  foxglove::FrameTransforms out;
  TransformsInto(state, stamp, &out);
  return out;
}

void TransformsInto(const MirrorChangedState& state, int64_t stamp,
                    foxglove::FrameTransforms* out) {
  // Clear() keeps the transforms it held for add_transforms() to reuse.
  out->Clear();
  out->mutable_transforms()->Reserve(static_cast<int>(state.entities.size()));
  for (size_t k = 0; k < state.entities.size(); ++k) {
    const EntityId parent = state.parents[k];
    const Rigid parent_frame =
        parent == kNoEntity ? Rigid{} : RigidOf(state.parent_worlds[k]);
    const Rigid child = RigidOf(state.worlds[k]);
    const glm::dquat inverse = glm::conjugate(parent_frame.rotation);
    const glm::dvec3 translation =
        inverse * (child.position - parent_frame.position);
    const glm::dquat rotation = glm::normalize(inverse * child.rotation);

    foxglove::FrameTransform* t = out->add_transforms();
    SetStamp(stamp, t->mutable_timestamp());
    t->set_parent_frame_id(FrameId(parent));
    t->set_child_frame_id(FrameId(state.entities[k]));
    t->mutable_translation()->set_x(translation.x);
    t->mutable_translation()->set_y(translation.y);
    t->mutable_translation()->set_z(translation.z);
    t->mutable_rotation()->set_x(rotation.x);
    t->mutable_rotation()->set_y(rotation.y);
    t->mutable_rotation()->set_z(rotation.z);
    t->mutable_rotation()->set_w(rotation.w);
  }
}

void TransformsEncoder::Encode(const MirrorChangedState& state, int64_t stamp,
                               std::string* out) {
  size_t used = 0;
  {
    google::protobuf::ArenaOptions options;
    options.initial_block = block_.data();
    options.initial_block_size = block_.size();
    google::protobuf::Arena arena(options);
    auto* transforms =
        google::protobuf::Arena::CreateMessage<foxglove::FrameTransforms>(
            &arena);
    TransformsInto(state, stamp, transforms);
    transforms->SerializeToString(out);
    used = arena.SpaceAllocated();
  }
  // Grown only once the arena, which writes into the block, is gone.
  if (used > block_.size()) block_.resize(used + used / 4);
}

glm::vec3 ScaleOf(const Matrix3x4& world) {
  // Decompose's scale without its rotation: the columns' lengths, x's
  // negated for a mirrored basis. Per moved entity and frame, so cheap.
  const glm::vec3 x(world(0, 0), world(1, 0), world(2, 0));
  const glm::vec3 y(world(0, 1), world(1, 1), world(2, 1));
  const glm::vec3 z(world(0, 2), world(1, 2), world(2, 2));
  glm::vec3 scale(glm::length(x), glm::length(y), glm::length(z));
  if (glm::dot(glm::cross(x, y), z) < 0.0f) scale.x = -scale.x;
  return scale;
}

foxglove::SceneUpdate SceneUpdateOf(const MirrorChangedState& state,
                                    int64_t stamp,
                                    absl::Span<const size_t> drawn) {
  foxglove::SceneUpdate update;
  for (EntityId e : state.destroyed) {
    foxglove::SceneEntityDeletion* deletion = update.add_deletions();
    SetStamp(stamp, deletion->mutable_timestamp());
    deletion->set_type(foxglove::SceneEntityDeletion::MATCHING_ID);
    deletion->set_id(FrameId(e));
  }
  for (size_t k : drawn) {
    foxglove::SceneEntity* entity = update.add_entities();
    SetStamp(stamp, entity->mutable_timestamp());
    entity->set_frame_id(FrameId(state.entities[k]));
    entity->set_id(FrameId(state.entities[k]));
    entity->set_frame_locked(true);
    foxglove::CubePrimitive* cube = entity->add_cubes();
    cube->mutable_pose()->mutable_orientation()->set_w(1);
    const glm::vec3 size = ScaleOf(state.worlds[k]);
    cube->mutable_size()->set_x(size.x);
    cube->mutable_size()->set_y(size.y);
    cube->mutable_size()->set_z(size.z);
    const bool root = state.parents[k] == kNoEntity;
    cube->mutable_color()->set_r(root ? 1.0 : 0.0);
    cube->mutable_color()->set_g(root ? 0.53 : 0.78);
    cube->mutable_color()->set_b(root ? 0.0 : 1.0);
    cube->mutable_color()->set_a(1);
  }
  return update;
}

absl::StatusOr<Transform> LocalOf(const foxglove::FrameTransform& transform) {
  const glm::dvec3 position(transform.translation().x(),
                            transform.translation().y(),
                            transform.translation().z());
  const glm::dquat rotation(transform.rotation().w(), transform.rotation().x(),
                            transform.rotation().y(), transform.rotation().z());
  const double length = glm::length(rotation);
  // !(a < b) refuses NaN too.
  if (!(glm::length(position) < 1e30) || !(length > 0.5 && length < 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform of '", transform.child_frame_id(),
                     "': a translation or rotation that is not a pose"));
  }
  Transform local;
  local.position = glm::vec3(position);
  local.rotation = glm::quat(rotation / length);
  return local;
}

std::string FileDescriptorSetOf(const google::protobuf::Descriptor* message) {
  google::protobuf::FileDescriptorSet set;
  absl::flat_hash_set<const google::protobuf::FileDescriptor*> added;
  // Imports before the files that import them, as protoc writes a set.
  std::function<void(const google::protobuf::FileDescriptor*)> add =
      [&](const google::protobuf::FileDescriptor* file) {
        if (!added.insert(file).second) return;
        for (int i = 0; i < file->dependency_count(); ++i) {
          add(file->dependency(i));
        }
        file->CopyTo(set.add_file());
      };
  add(message->file());
  return set.SerializeAsString();
}

}  // namespace xform::foxglove_io
