// Copyright 2026 The xform Authors.
//
// Value types shared by every layer: entity ids, local transforms (TRS) and
// world matrices, plus the few operations on them that callers need outside a
// World (composition, inversion, decomposition, validation).

#ifndef XFORM_TRANSFORM_H_
#define XFORM_TRANSFORM_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "glm/gtc/quaternion.hpp"
#include "glm/mat4x4.hpp"
#include "glm/vec3.hpp"

namespace xform {

// Entities are chosen by the client. Zero is reserved: it means "no entity",
// which is how a parent of "none" (a root) is spelled everywhere, on the wire
// included.
using EntityId = uint64_t;
inline constexpr EntityId kNoEntity = 0;

// A local transform: translate(position) * rotate(rotation) * scale(scale).
// Scale is non-uniform along the principal axes of the rotated frame.
struct Transform {
  glm::vec3 position{0.0f};
  glm::quat rotation{1.0f, 0.0f, 0.0f, 0.0f};  // glm takes (w, x, y, z).
  glm::vec3 scale{1.0f};

  friend bool operator==(const Transform&, const Transform&) = default;
};

// An affine matrix as three rows of [R*S | t], row-major: m[4*row + col].
// This is the order on the wire too: 12 floats per entity, the implicit
// fourth row being (0, 0, 0, 1).
struct Matrix3x4 {
  std::array<float, 12> m = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};

  float operator()(int row, int col) const { return m[4 * row + col]; }
  glm::vec3 translation() const { return {m[3], m[7], m[11]}; }

  friend bool operator==(const Matrix3x4&, const Matrix3x4&) = default;
};

// How far a rotation's squared length may be from one before it is refused.
// Accepted rotations are renormalized, so stored rotations are exact units.
inline constexpr float kUnitQuaternionTolerance = 1e-3f;
// Scale components smaller than this in magnitude are refused: a zero scale
// makes the world matrix singular, so set-world and keep-world links below it
// would have no answer. Negative scale (mirroring) is allowed.
inline constexpr float kMinAbsScale = 1e-6f;

// Returns InvalidArgument when `t` has a non-finite number, a scale component
// below kMinAbsScale in magnitude, or a rotation that is not a unit quaternion
// within kUnitQuaternionTolerance.
absl::Status ValidateTransform(const Transform& t);

// `t` with its rotation normalized. Call only on a validated transform.
Transform Normalized(const Transform& t);

// The matrix of a local transform.
Matrix3x4 ToMatrix(const Transform& t);

// parent * child, both affine.
Matrix3x4 Multiply(const Matrix3x4& parent, const Matrix3x4& child);

// The TRS nearest to `a`: exact when `a` has no shear. A matrix with shear
// (a non-uniformly scaled parent under a rotated child) has no exact TRS; the
// result then keeps the translation and the axis lengths, and orthonormalizes
// the rotation (Gram-Schmidt from the x axis).
Transform Decompose(const Matrix3x4& a);

// The local transform that yields `world` under a parent whose world matrix
// is `parent_world`: Decompose(parent_world^-1 * world), computed in
// double so that a badly conditioned parent (deep, non-uniformly scaled) does
// not cost the float result its digits.
Transform LocalForWorld(const Matrix3x4& parent_world, const Matrix3x4& world);

glm::mat4 ToMat4(const Matrix3x4& a);

// One entity as a read returns it (Client::Read): the current, not only the
// published, state.
struct EntityState {
  EntityId entity = kNoEntity;
  EntityId parent = kNoEntity;
  Transform local;
  Matrix3x4 world;
};

}  // namespace xform

#endif  // XFORM_TRANSFORM_H_
