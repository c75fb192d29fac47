// Copyright 2026 The xform Authors.
//
// The two products in propagation's inner loop, inline so the sweep compiles
// to one straight block per instance. Matrices are Matrix3x4 rows.

#ifndef XFORM_SRC_MATH_KERNELS_H_
#define XFORM_SRC_MATH_KERNELS_H_

#include "glm/gtc/quaternion.hpp"
#include "glm/vec3.hpp"

namespace xform::internal {

// out = T(position) * R(rotation) * S(scale) for a unit quaternion.
inline void ComposeTrs(const glm::vec3& p, const glm::quat& q,
                       const glm::vec3& s, float* __restrict out) {
  const float x2 = q.x + q.x, y2 = q.y + q.y, z2 = q.z + q.z;
  const float xx = q.x * x2, yy = q.y * y2, zz = q.z * z2;
  const float xy = q.x * y2, xz = q.x * z2, yz = q.y * z2;
  const float wx = q.w * x2, wy = q.w * y2, wz = q.w * z2;
  out[0] = (1.0f - (yy + zz)) * s.x;
  out[1] = (xy - wz) * s.y;
  out[2] = (xz + wy) * s.z;
  out[3] = p.x;
  out[4] = (xy + wz) * s.x;
  out[5] = (1.0f - (xx + zz)) * s.y;
  out[6] = (yz - wx) * s.z;
  out[7] = p.y;
  out[8] = (xz - wy) * s.x;
  out[9] = (yz + wx) * s.y;
  out[10] = (1.0f - (xx + yy)) * s.z;
  out[11] = p.z;
}

// out = a * b for affine a and b. `out` may not alias either input.
inline void MultiplyAffine(const float* __restrict a, const float* __restrict b,
                           float* __restrict out) {
  for (int row = 0; row < 3; ++row) {
    const float a0 = a[4 * row], a1 = a[4 * row + 1], a2 = a[4 * row + 2];
    for (int col = 0; col < 4; ++col) {
      out[4 * row + col] = a0 * b[col] + a1 * b[4 + col] + a2 * b[8 + col];
    }
    out[4 * row + 3] += a[4 * row + 3];
  }
}

}  // namespace xform::internal

#endif  // XFORM_SRC_MATH_KERNELS_H_
