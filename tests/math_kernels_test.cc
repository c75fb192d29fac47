// Copyright 2026 The xform Authors.
//
// The matrix kernels the core and the wire codecs share, against their
// definitions.

#include "xform/internal/math_kernels.h"

#include <cmath>
#include <cstring>
#include <random>

#include "glm/gtc/quaternion.hpp"
#include "glm/mat3x3.hpp"
#include "gtest/gtest.h"

namespace xform::internal {
namespace {

// ComposeTrs, in the form this build has (SSE2 on x86-64), is glm's
// rotation matrix of the quaternion, each column times its scale, to the
// bit: a local matrix, and a matrix a compact subscriber makes of a pose,
// must not depend on which form made it.
TEST(ComposeTrsTest, IsGlmsMatrixToTheBit) {
  std::mt19937 rng(17);
  std::normal_distribution<float> n;
  std::uniform_real_distribution<float> u(-1000, 1000);
  for (int k = 0; k < 100'000; ++k) {
    const glm::quat q =
        glm::normalize(glm::quat(n(rng), n(rng), n(rng), n(rng)));
    const glm::vec3 p(u(rng), u(rng), u(rng));
    const glm::vec3 s(std::exp2(n(rng)), std::exp2(n(rng)), std::exp2(n(rng)));
    const glm::mat3 r = glm::mat3_cast(q);
    float want[12];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) want[4 * i + j] = r[j][i] * s[j];
      want[4 * i + 3] = p[i];
    }
    float got[12];
    ComposeTrs(p, q, s, got);
    for (int e = 0; e < 12; ++e) {
      ASSERT_EQ(std::memcmp(&want[e], &got[e], sizeof(float)), 0)
          << "matrix " << k << ", element " << e << ": " << got[e]
          << " against " << want[e];
    }
  }
}

}  // namespace
}  // namespace xform::internal
