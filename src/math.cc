// Copyright 2026 The xform Authors.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "glm/gtc/matrix_access.hpp"
#include "glm/gtc/matrix_inverse.hpp"
#include "xform/internal/math_kernels.h"
#include "xform/transform.h"

namespace xform {
namespace {

bool AllFinite(const Transform& t) {
  for (int k = 0; k < 3; ++k) {
    if (!std::isfinite(t.position[k]) || !std::isfinite(t.scale[k])) {
      return false;
    }
  }
  for (int k = 0; k < 4; ++k) {
    if (!std::isfinite(t.rotation[k])) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateTransform(const Transform& t) {
  if (!AllFinite(t)) {
    return absl::InvalidArgumentError("transform has a non-finite number");
  }
  for (int k = 0; k < 3; ++k) {
    if (std::fabs(t.scale[k]) < kMinAbsScale) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale component ", k, " is ", t.scale[k],
                       ": magnitude below ", kMinAbsScale));
    }
  }
  const float length2 = glm::dot(t.rotation, t.rotation);
  if (std::fabs(length2 - 1.0f) > kUnitQuaternionTolerance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rotation is not a unit quaternion (squared length ", length2, ")"));
  }
  return absl::OkStatus();
}

Transform Normalized(const Transform& t) {
  Transform out = t;
  out.rotation = glm::normalize(t.rotation);
  return out;
}

Matrix3x4 ToMatrix(const Transform& t) {
  Matrix3x4 out;
  internal::ComposeTrs(t.position, t.rotation, t.scale, out.m.data());
  return out;
}

Matrix3x4 Multiply(const Matrix3x4& parent, const Matrix3x4& child) {
  Matrix3x4 out;
  internal::MultiplyAffine(parent.m.data(), child.m.data(), out.m.data());
  return out;
}

glm::mat4 ToMat4(const Matrix3x4& a) {
  glm::mat4 out(1.0f);
  for (int row = 0; row < 3; ++row) {
    out = glm::row(out, row,
                   glm::vec4(a(row, 0), a(row, 1), a(row, 2), a(row, 3)));
  }
  return out;
}

namespace {

glm::dmat4 ToDMat4(const Matrix3x4& a) { return glm::dmat4(ToMat4(a)); }

Transform DecomposeDouble(const glm::dmat4& a) {
  glm::dvec3 x(a[0]), y(a[1]), z(a[2]);
  glm::dvec3 scale(glm::length(x), glm::length(y), glm::length(z));
  // A mirrored basis cannot be a rotation: put the reflection in x's scale.
  if (glm::dot(glm::cross(x, y), z) < 0.0) scale.x = -scale.x;
  x /= scale.x;
  // Gram-Schmidt keeps the result a rotation even when the basis is sheared.
  y = glm::normalize(y - glm::dot(y, x) * x);
  z = glm::cross(x, y);
  Transform out;
  out.position = glm::vec3(a[3]);
  out.scale = glm::vec3(scale);
  out.rotation = glm::quat(glm::normalize(glm::quat_cast(glm::dmat3(x, y, z))));
  return out;
}

}  // namespace

Transform Decompose(const Matrix3x4& a) { return DecomposeDouble(ToDMat4(a)); }

Transform LocalForWorld(const Matrix3x4& parent_world, const Matrix3x4& world) {
  return DecomposeDouble(glm::affineInverse(ToDMat4(parent_world)) *
                         ToDMat4(world));
}

}  // namespace xform
