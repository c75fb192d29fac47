// Copyright 2026 The xform Authors.
//
// What xform says in foxglove's schemas (foxglove.FrameTransforms), for
// xformctl's recordings and their playback (tools/ctl_record.h).
//
// Frames. An entity is the frame "e<id>"; the world's origin, every root's
// parent, is "world". Foxglove's frames are rigid, so an entity's frame is
// its world pose without its scale (Decompose's position and rotation), and
// a FrameTransform is that frame in its parent's: where there is no scale
// in the chain, exactly the entity's local transform; where there is, still
// the entity's true world position and orientation, which a viewer
// composing the transforms gets back.
//
// Drawing. An entity is drawn as a SceneEntity "e<id>" in its own frame,
// frame-locked (so it moves with /tf, and is sent again only when it is
// created or its scale changes): one cube at the frame's origin, as large
// as the entity's world scale, orange for a root and cyan below one.
//
// Costs: O(entities in the message).

#ifndef XFORM_TOOLS_FOXGLOVE_TRANSFORMS_H_
#define XFORM_TOOLS_FOXGLOVE_TRANSFORMS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "foxglove/FrameTransforms.pb.h"
#include "foxglove/SceneUpdate.pb.h"
#include "google/protobuf/descriptor.h"
#include "xform/mirror.h"
#include "xform/transform.h"

namespace xform::foxglove_io {

inline constexpr absl::string_view kWorldFrame = "world";

// "e<id>", or "world" for kNoEntity.
std::string FrameId(EntityId entity);
// The entity a frame id names ("world": kNoEntity); INVALID_ARGUMENT for
// anything else.
absl::StatusOr<EntityId> EntityOfFrameId(absl::string_view frame_id);

// `state`'s entities as transforms at `stamp` (nanoseconds), each in its
// parent's frame: `state` must hold parent_worlds
// (Mirror::TakeChangedState(/*with_parent_worlds=*/true)).
foxglove::FrameTransforms TransformsOf(const MirrorChangedState& state,
                                       int64_t stamp);
// The same into `out` (cleared first).
void TransformsInto(const MirrorChangedState& state, int64_t stamp,
                    foxglove::FrameTransforms* out);

// TransformsOf, serialized, for a sender of many messages: each is built
// in a protobuf arena whose first block is kept and grown to the largest
// message, so that after the first few, building one allocates nothing
// (protobuf's Clear() would free a message's parts).
class TransformsEncoder {
 public:
  // Replaces `out` with the FrameTransforms of `state` at `stamp`.
  void Encode(const MirrorChangedState& state, int64_t stamp, std::string* out);

 private:
  std::vector<char> block_ = std::vector<char>(64 << 10);
};

// The SceneUpdate for `state` at `stamp`: an entity for each of
// `drawn` (indices into state.entities: the created, or those whose scale
// changed), a deletion for each destroyed one.
foxglove::SceneUpdate SceneUpdateOf(const MirrorChangedState& state,
                                    int64_t stamp,
                                    absl::Span<const size_t> drawn);
// An entity's world scale, as its cube's size.
glm::vec3 ScaleOf(const Matrix3x4& world);

// A transform's translation and rotation as a local transform (scale 1,
// the rotation normalized); INVALID_ARGUMENT for a value that is not
// finite or a rotation far from unit length (under 0.5 or over 2).
absl::StatusOr<Transform> LocalOf(const foxglove::FrameTransform& transform);

// The FileDescriptorSet of `message`'s file and everything it imports: a
// protobuf schema as MCAP and foxglove's WebSocket protocol carry one.
std::string FileDescriptorSetOf(const google::protobuf::Descriptor* message);

}  // namespace xform::foxglove_io

#endif  // XFORM_TOOLS_FOXGLOVE_TRANSFORMS_H_
