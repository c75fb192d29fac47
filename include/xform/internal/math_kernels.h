// Copyright 2026 The xform Authors.
//
// The two products behind local and world matrices, inline so propagation's
// sweep compiles to one straight block per instance. Matrices are Matrix3x4
// rows. Not part of the API: the core and the wire codecs (which make a
// compact stream's poses matrices again) share it.

#ifndef XFORM_INTERNAL_MATH_KERNELS_H_
#define XFORM_INTERNAL_MATH_KERNELS_H_

#include <cmath>

#include "glm/gtc/quaternion.hpp"
#include "glm/vec3.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace xform::internal {

#if defined(__SSE2__)
// Lane `lane` of `v` in all four lanes. pshufd rather than shufps: SSE2's
// shufps overwrites its source, so each of a row's three broadcasts would
// first copy the row, a third more instructions in the sweep's loop.
template <int lane>
inline __m128 Broadcast(__m128 v) {
  return _mm_castsi128_ps(_mm_shuffle_epi32(
      _mm_castps_si128(v), _MM_SHUFFLE(lane, lane, lane, lane)));
}

// ComposeTrs (below) from registers: `position` (x, y, z, any), a unit
// quaternion `quat` (x, y, z, w) and `scale` (x, y, z, 1). The scalar
// form's products and sums in the same order, so the same bits, four at a
// time: a compact stream's subscriber makes a matrix of every moved
// entity's pose with it, from a quaternion it put together in a register.
inline void ComposeTrs(__m128 position, __m128 quat, __m128 scale,
                       float* __restrict out) {
  const __m128 twice = _mm_add_ps(quat, quat);
  const __m128 squares = _mm_mul_ps(quat, twice);  // xx yy zz ww
  // 1 - (yy + zz), 1 - (xx + zz), 1 - (xx + yy).
  const __m128 diagonal = _mm_sub_ps(
      _mm_set1_ps(1.0f),
      _mm_add_ps(_mm_shuffle_ps(squares, squares, _MM_SHUFFLE(0, 0, 0, 1)),
                 _mm_shuffle_ps(squares, squares, _MM_SHUFFLE(0, 1, 2, 2))));
  // xy xz yz, and wz wy wx.
  const __m128 products =
      _mm_mul_ps(_mm_shuffle_ps(quat, quat, _MM_SHUFFLE(0, 1, 0, 0)),
                 _mm_shuffle_ps(twice, twice, _MM_SHUFFLE(0, 2, 2, 1)));
  const __m128 by_w =
      _mm_mul_ps(Broadcast<3>(quat),
                 _mm_shuffle_ps(twice, twice, _MM_SHUFFLE(0, 0, 1, 2)));
  const __m128 sums = _mm_add_ps(products, by_w);   // xy+wz xz+wy yz+wx
  const __m128 diffs = _mm_sub_ps(products, by_w);  // xy-wz xz-wy yz-wx
  // The rows, before scaling: (1-(yy+zz), xy-wz, xz+wy, x),
  // (xy+wz, 1-(xx+zz), yz-wx, y), (xz-wy, yz+wx, 1-(xx+yy), z).
  const __m128 row0 =
      _mm_shuffle_ps(_mm_unpacklo_ps(diagonal, diffs),
                     _mm_unpacklo_ps(sums, position), _MM_SHUFFLE(1, 2, 1, 0));
  const __m128 row1 =
      _mm_shuffle_ps(_mm_unpacklo_ps(sums, diagonal),
                     _mm_shuffle_ps(diffs, position, _MM_SHUFFLE(1, 1, 2, 2)),
                     _MM_SHUFFLE(2, 0, 3, 0));
  const __m128 row2 = _mm_shuffle_ps(
      _mm_shuffle_ps(diffs, sums, _MM_SHUFFLE(2, 2, 1, 1)),
      _mm_unpackhi_ps(diagonal, position), _MM_SHUFFLE(1, 0, 2, 0));
  // Column j times scale j; the translation times 1.
  _mm_storeu_ps(out, _mm_mul_ps(row0, scale));
  _mm_storeu_ps(out + 4, _mm_mul_ps(row1, scale));
  _mm_storeu_ps(out + 8, _mm_mul_ps(row2, scale));
}
#endif

// out = T(position) * R(rotation) * S(scale) for a unit quaternion.
inline void ComposeTrs(const glm::vec3& p, const glm::quat& q,
                       const glm::vec3& s, float* __restrict out) {
#if defined(__SSE2__)
  ComposeTrs(_mm_setr_ps(p.x, p.y, p.z, 0.0f), _mm_setr_ps(q.x, q.y, q.z, q.w),
             _mm_setr_ps(s.x, s.y, s.z, 1.0f), out);
#else
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
#endif
}

// out = a * b for affine a and b. `out` may not alias either input. This is
// propagation's whole inner loop: one load of each input row, three
// broadcasts and a tree of adds per output row. Both branches round the same
// way, so a product is bitwise the same wherever it is computed.
inline void MultiplyAffine(const float* __restrict a, const float* __restrict b,
                           float* __restrict out) {
#if defined(__SSE2__)
  const __m128 b0 = _mm_loadu_ps(b);
  const __m128 b1 = _mm_loadu_ps(b + 4);
  const __m128 b2 = _mm_loadu_ps(b + 8);
  // Keeps only a row's translation lane: (0, 0, 0, a[row][3]).
  const __m128 translation_lane = _mm_castsi128_ps(_mm_setr_epi32(0, 0, 0, -1));
  for (int row = 0; row < 3; ++row) {
    const __m128 r = _mm_loadu_ps(a + 4 * row);
    // Summed as a tree: a child right after its parent waits on this result,
    // so the latency of one row is the latency of the sweep there.
    const __m128 x = _mm_mul_ps(Broadcast<0>(r), b0);
    const __m128 y = _mm_mul_ps(Broadcast<1>(r), b1);
    const __m128 z = _mm_mul_ps(Broadcast<2>(r), b2);
    _mm_storeu_ps(out + 4 * row,
                  _mm_add_ps(_mm_add_ps(x, y),
                             _mm_add_ps(z, _mm_and_ps(r, translation_lane))));
  }
#else
  for (int row = 0; row < 3; ++row) {
    const float a0 = a[4 * row], a1 = a[4 * row + 1], a2 = a[4 * row + 2];
    for (int col = 0; col < 4; ++col) {
      const float t = col == 3 ? a[4 * row + 3] : 0.0f;
      out[4 * row + col] =
          (a0 * b[col] + a1 * b[4 + col]) + (a2 * b[8 + col] + t);
    }
  }
#endif
}

#if defined(__SSE2__)
// MultiplyAffine, also folding the result into `poison` (see FiniteCheck)
// from the registers, before they are stored.
inline void MultiplyAffineChecked(const float* __restrict a,
                                  const float* __restrict b,
                                  float* __restrict out, __m128& poison) {
  const __m128 b0 = _mm_loadu_ps(b);
  const __m128 b1 = _mm_loadu_ps(b + 4);
  const __m128 b2 = _mm_loadu_ps(b + 8);
  const __m128 translation_lane = _mm_castsi128_ps(_mm_setr_epi32(0, 0, 0, -1));
  __m128 rows[3];
  for (int row = 0; row < 3; ++row) {
    const __m128 r = _mm_loadu_ps(a + 4 * row);
    const __m128 x = _mm_mul_ps(Broadcast<0>(r), b0);
    const __m128 y = _mm_mul_ps(Broadcast<1>(r), b1);
    const __m128 z = _mm_mul_ps(Broadcast<2>(r), b2);
    rows[row] = _mm_add_ps(_mm_add_ps(x, y),
                           _mm_add_ps(z, _mm_and_ps(r, translation_lane)));
    _mm_storeu_ps(out + 4 * row, rows[row]);
  }
  const __m128 sum = _mm_add_ps(_mm_add_ps(rows[0], rows[1]), rows[2]);
  poison = _mm_or_ps(poison, _mm_mul_ps(sum, _mm_setzero_ps()));
}
#endif

// Records whether the sweep's products were finite, at the cost of two adds,
// a multiply and an or per product, with no branch and no reload: the three
// rows are summed and x * 0 is 0 for a finite x and NaN otherwise; or-ing a
// NaN's bits into zeros leaves a NaN. An infinity or NaN anywhere makes its
// column's sum non-finite. The sum can also overflow where no entry does, when
// a column's entries are each beyond about 1e38: such a matrix counts as not
// finite, which no transform of a sane scene comes near.
class FiniteCheck {
 public:
#if defined(__SSE2__)
  // out = a * b (MultiplyAffine), folded in.
  void Multiply(const float* a, const float* b, float* out) {
    MultiplyAffineChecked(a, b, out, poison_);
  }
  bool finite() const {
    return _mm_movemask_ps(_mm_cmpunord_ps(poison_, poison_)) == 0;
  }

 private:
  __m128 poison_ = _mm_setzero_ps();
#else
  void Multiply(const float* a, const float* b, float* out) {
    MultiplyAffine(a, b, out);
    for (int k = 0; k < 4; ++k) {
      finite_ &= std::isfinite((out[k] + out[4 + k]) + out[8 + k]);
    }
  }
  bool finite() const { return finite_; }

 private:
  bool finite_ = true;
#endif
};

}  // namespace xform::internal

#endif  // XFORM_INTERNAL_MATH_KERNELS_H_
