// Copyright 2026 The xform Authors.

#include "xform/v1/compact_moves.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "glm/gtc/quaternion.hpp"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "xform/internal/math_kernels.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace xform::v1 {
namespace {

using ::google::protobuf::internal::WireFormatLite;
using ::google::protobuf::io::CodedOutputStream;

// Columns this far from orthogonal (cosine of their angle) are shear.
constexpr float kMaxSkew = 1e-4f;
// Beyond this many precisions a double no longer holds the position exactly.
constexpr double kMaxPositionSteps = 4503599627370496.0;  // 2^52

// Round to nearest (halves away from zero), inline and without a branch:
// std::lround is a library call, a branch on the sign is mispredicted as
// often as signs are random, and this runs 3 * 3 times a moved entity.
inline int64_t Round(double x) {
  return static_cast<int64_t>(x + std::copysign(0.5, x));
}

// Round() for a float well inside int32's range, in a form the compiler
// runs as vectors (no double, no branch). A value within half a float's
// step of a half may round away from the nearer integer: far inside the
// half a quantum the bounds allow.
inline int32_t RoundFloat(float x) {
  return static_cast<int32_t>(x + std::copysign(0.5f, x));
}
constexpr float kRotationScaleFloat = static_cast<float>(kRotationScale);

// log2 of a positive normal float at 1 / 65536, rounded, in a form the
// compiler runs as vectors (log2f is a call a lane). The exponent's bits
// give the whole part, exactly; the mantissa m, taken into
// [sqrt(1/2), sqrt(2)), gives the rest by the series log2(m) = 2 / ln 2 *
// (t + t^3 / 3 + t^5 / 5 + t^7 / 7 + ...) in t = (m - 1) / (m + 1),
// |t| < 0.172, whose next term is under 5e-8: so only the fraction is
// rounded, and a large scale loses nothing to a float's step at its log.
inline int32_t LogScaleOf(float x) {
  // Offset by sqrt(1/2)'s bits, the exponent's field counts whole powers
  // from there, and what is left below it, put back over the offset, is m.
  constexpr int32_t kRootHalf = 0x3f3504f3;
  const int32_t offset = std::bit_cast<int32_t>(x) - kRootHalf;
  const int32_t exponent = offset >> 23;  // Arithmetic: floors.
  const float m = std::bit_cast<float>((offset & 0x007fffff) + kRootHalf);
  const float t = (m - 1) / (m + 1);
  const float t2 = t * t;
  const float fraction =
      t * (2.88539008f +
           t2 * (0.961796694f + t2 * (0.577078016f + t2 * 0.412198583f)));
  return exponent * static_cast<int32_t>(kLogScaleScale) +
         RoundFloat(fraction * float{kLogScaleScale});
}

// `chosen` ? a : b, by the bits: the compiler may turn a select into
// branches, which keep lanes from running as vectors.
inline float Pick(bool chosen, float a, float b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(chosen);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) |
                              (std::bit_cast<uint32_t>(b) & ~mask));
}

using compact_internal::kDelta;
using compact_internal::kRaw;
using compact_internal::kRotationWhole;
using compact_internal::kScalePresent;
using compact_internal::kWhole;
// An id and flags, and the larger of a raw entry and nine varints.
constexpr size_t kMaxEntryBytes = 10 + 1 + 9 * 10;

// Writers at a cursor into room made beforehand (kMaxEntryBytes an entry).
void PutVarint(uint64_t v, uint8_t*& out) {
  out = CodedOutputStream::WriteVarint64ToArray(v, out);
}
void PutSigned(int64_t v, uint8_t*& out) {
  PutVarint(WireFormatLite::ZigZagEncode64(v), out);
}
template <typename T, size_t N>
void PutDeltas(const std::array<T, N>& now, const std::array<T, N>& before,
               uint8_t*& out) {
  for (size_t i = 0; i < N; ++i) {
    PutSigned(static_cast<int64_t>(now[i]) - static_cast<int64_t>(before[i]),
              out);
  }
}

// 2^(n / 65536) for a log scale n, without a call to exp2f (three a moved
// entity on every subscriber, where scales are not 1): n's fraction splits
// into two bytes, each looked up (2^(hi / 256) and 2^(lo / 65536)), and
// its whole part goes into the float's exponent. Within 2 ulp of exp2f,
// far inside the 2^-16 the log is kept to.
struct Exp2Tables {
  std::array<float, 256> high, low;
  Exp2Tables() {
    for (int i = 0; i < 256; ++i) {
      high[i] = static_cast<float>(std::exp2(i / 256.0));
      low[i] = static_cast<float>(std::exp2(i / 65536.0));
    }
  }
};
const Exp2Tables kExp2;

inline float ScaleOf(int32_t log_scale) {
  const uint32_t fraction = static_cast<uint32_t>(log_scale) & 0xffff;
  // Floor, and clamped to a normal float's exponents: a hostile one gives
  // a huge or tiny scale, as exp2f would, and no undefined shift.
  const int32_t whole = std::clamp(log_scale >> 16, -126, 127);
  const float power =
      std::bit_cast<float>(static_cast<uint32_t>(whole + 127) << 23);
  return kExp2.high[fraction >> 8] * kExp2.low[fraction & 0xff] * power;
}
// The components sent when component i is left out, in x y z w order.
constexpr int kSmallestThree[4][3] = {
    {1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}};
constexpr float kRotationStep = 1 / kRotationScale;

#if defined(__SSE2__)
// kPlace[largest][k]: all ones in the lane (x y z w) that sent component k
// goes to, k = 3 being the rebuilt largest; zeros elsewhere. Placed by
// masks, not by a branch or a store and reload, the quaternion stays in a
// register, and which component is largest is as good as random.
struct alignas(16) LaneMask {
  uint32_t lanes[4];
};
constexpr auto kPlace = [] {
  std::array<std::array<LaneMask, 4>, 4> place{};
  for (int largest = 0; largest < 4; ++largest) {
    for (int k = 0; k < 3; ++k) {
      place[largest][k].lanes[kSmallestThree[largest][k]] = ~0u;
    }
    place[largest][3].lanes[largest] = ~0u;
  }
  return place;
}();

// `v` where `mask` is all ones, zero elsewhere.
inline __m128 Keep(__m128 v, const LaneMask& mask) {
  return _mm_and_ps(v, _mm_load_ps(reinterpret_cast<const float*>(mask.lanes)));
}
#endif

// Up to kBatchLanes matrices on their way to poses, a step at a time, in
// columns (PoseQuantizer::QuantizeLanes): one matrix's steps wait on each
// other (a square root, then a division, then another square root and
// division), several matrices' do not, and the compiler runs the lanes
// side by side. Each step is inlined into QuantizeLanes: a call between
// them would keep the lanes from staying in registers.
constexpr size_t kBatchLanes = 8;
struct LaneBatch {
  // col[j][r][lane]: element (r, j) of the lane's matrix, column j being
  // the axis j scaled.
  float col[3][3][kBatchLanes];
  float position[3][kBatchLanes];
  int32_t pose[kBatchLanes];  // Still a pose (1) or not (0).
  float scale[3][kBatchLanes];
  double steps[3][kBatchLanes];
  float sent[3][kBatchLanes];
  int32_t largest[kBatchLanes];
  int32_t rotation[3][kBatchLanes], log_scale[3][kBatchLanes];
};

// Lanes past the matrices given hold the identity (and are dropped).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void LoadLanes(
    absl::Span<const float* const> matrices, LaneBatch& lanes) {
  static constexpr float kIdentity[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  for (size_t lane = 0; lane < kBatchLanes; ++lane) {
    const float* m = lane < matrices.size() ? matrices[lane] : kIdentity;
    for (int r = 0; r < 3; ++r) {
      for (int j = 0; j < 3; ++j) lanes.col[j][r][lane] = m[4 * r + j];
      lanes.position[r][lane] = m[4 * r + 3];
    }
  }
}

// A pose: each column's length positive and finite (which also rules out
// a non-finite element), the columns orthogonal within kMaxSkew, and no
// reflection. Conditions combine with & rather than &&: a branch would keep
// the compiler from running the lanes as vectors. Here: the lengths, and
// the columns made unit.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void NormalizeColumns(LaneBatch& lanes) {
  for (size_t lane = 0; lane < kBatchLanes; ++lane) lanes.pose[lane] = 1;
  for (int j = 0; j < 3; ++j) {
    for (size_t lane = 0; lane < kBatchLanes; ++lane) {
      const float x = lanes.col[j][0][lane], y = lanes.col[j][1][lane],
                  z = lanes.col[j][2][lane];
      const float length = std::sqrt(x * x + y * y + z * z);
      lanes.scale[j][lane] = length;
      // A positive one is normal, as LogScaleOf needs: the root of a
      // positive float is at least 2^-75.
      lanes.pose[lane] &=
          int{length > 0} & int{length <= std::numeric_limits<float>::max()};
      const float inverse = 1 / length;
      for (int r = 0; r < 3; ++r) lanes.col[j][r][lane] *= inverse;
    }
  }
}

// The unit columns orthogonal, and not a reflection.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void CheckOrthonormal(LaneBatch& lanes) {
  for (size_t lane = 0; lane < kBatchLanes; ++lane) {
    const auto dot = [&](int a, int b) {
      return lanes.col[a][0][lane] * lanes.col[b][0][lane] +
             lanes.col[a][1][lane] * lanes.col[b][1][lane] +
             lanes.col[a][2][lane] * lanes.col[b][2][lane];
    };
    const float cross[3] = {lanes.col[0][1][lane] * lanes.col[1][2][lane] -
                                lanes.col[1][1][lane] * lanes.col[0][2][lane],
                            lanes.col[0][2][lane] * lanes.col[1][0][lane] -
                                lanes.col[1][2][lane] * lanes.col[0][0][lane],
                            lanes.col[0][0][lane] * lanes.col[1][1][lane] -
                                lanes.col[1][0][lane] * lanes.col[0][1][lane]};
    const float handedness = cross[0] * lanes.col[2][0][lane] +
                             cross[1] * lanes.col[2][1][lane] +
                             cross[2] * lanes.col[2][2][lane];
    lanes.pose[lane] &= int{std::abs(dot(0, 1)) <= kMaxSkew} &
                        int{std::abs(dot(0, 2)) <= kMaxSkew} &
                        int{std::abs(dot(1, 2)) <= kMaxSkew} &
                        int{handedness > 0};
  }
}

// The position in steps of the precision, a power of two on the wire
// (CompactPrecision), so that multiplying by `inverse` divides exactly.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void PositionSteps(double inverse,
                                                       LaneBatch& lanes) {
  for (int i = 0; i < 3; ++i) {
    for (size_t lane = 0; lane < kBatchLanes; ++lane) {
      const double s = static_cast<double>(lanes.position[i][lane]) * inverse;
      lanes.pose[lane] &= std::abs(s) < kMaxPositionSteps;
      lanes.steps[i][lane] = s;
    }
  }
}

// The rotation's quaternion, from the products of its components that
// the matrix holds: p[i][j] = 4 q_i q_j (x y z w order). The largest
// component is the one with the largest square, p[i][i]; it is taken as
// positive, and each other component is p[largest][i] / (4 q_largest).
// Row `largest` of p holds p[largest][largest] and the three sent; its
// length is 4 q_largest |q|, so dividing by it gives the unit
// quaternion's components. Chosen by selects, not by indexing or a
// branch (which component is largest is as good as random).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void SmallestThree(LaneBatch& lanes) {
  for (size_t lane = 0; lane < kBatchLanes; ++lane) {
    const float c0x = lanes.col[0][0][lane], c0y = lanes.col[0][1][lane],
                c0z = lanes.col[0][2][lane];
    const float c1x = lanes.col[1][0][lane], c1y = lanes.col[1][1][lane],
                c1z = lanes.col[1][2][lane];
    const float c2x = lanes.col[2][0][lane], c2y = lanes.col[2][1][lane],
                c2z = lanes.col[2][2][lane];
    const float xx = 1 + c0x - c1y - c2z, yy = 1 - c0x + c1y - c2z,
                zz = 1 - c0x - c1y + c2z, ww = 1 + c0x + c1y + c2z;
    const float xy = c1x + c0y, xz = c2x + c0z, yz = c2y + c1z;
    const float xw = c1z - c2y, yw = c2x - c0z, zw = c0y - c1x;
    const bool y_larger = yy > xx;
    int32_t l = y_larger ? 1 : 0;
    float diagonal = y_larger ? yy : xx;
    const bool z_larger = zz > diagonal;
    l = z_larger ? 2 : l;
    diagonal = z_larger ? zz : diagonal;
    const bool w_larger = ww > diagonal;
    l = w_larger ? 3 : l;
    diagonal = w_larger ? ww : diagonal;
    // Row l without its diagonal, in x y z w order.
    const float a = l <= 1 ? xy : (l == 2 ? xz : xw);
    const float b = l == 0 ? xz : (l <= 2 ? yz : yw);
    const float c = l == 0 ? xw : (l == 1 ? yw : zw);
    const float unit =
        1 / std::sqrt(diagonal * diagonal + a * a + b * b + c * c);
    lanes.sent[0][lane] = a * unit;
    lanes.sent[1][lane] = b * unit;
    lanes.sent[2][lane] = c * unit;
    lanes.largest[lane] = l;
  }
}

// The rotation's integers, in float (they are at most 16383, where a
// float holds every integer), and the log scales'. A lane that is no
// pose may hold a NaN or an infinity here, whose conversion to an
// integer is undefined: it converts the identity's values instead.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void RotationAndScaleIntegers(
    LaneBatch& lanes) {
  for (int i = 0; i < 3; ++i) {
    for (size_t lane = 0; lane < kBatchLanes; ++lane) {
      const float component = Pick(lanes.pose[lane], lanes.sent[i][lane], 0.0f);
      const float axis_scale =
          Pick(lanes.pose[lane], lanes.scale[i][lane], 1.0f);
      lanes.rotation[i][lane] = RoundFloat(component * kRotationScaleFloat);
      lanes.log_scale[i][lane] = LogScaleOf(axis_scale);
    }
  }
}

// One entry after its id: raw (`pose` none), whole (no held pose, or none
// that quantized), or a delta against the held one; `origin` is the last
// whole entry's position, which the next whole one is sent against.
inline void PutEntry(const float* world,
                     const std::optional<QuantizedPose>& pose,
                     const std::optional<QuantizedPose>* held_pose,
                     std::array<int64_t, 3>& origin, uint8_t*& out) {
  constexpr std::array<int32_t, 3> kZero = {0, 0, 0};
  if (!pose) {
    *out++ = kRaw;
    // Little-endian floats: the byte order of every machine we build for.
    std::memcpy(out, world, 48);
    out += 48;
    return;
  }
  const QuantizedPose& p = *pose;
  uint8_t flags = p.largest << 2;
  if (held_pose == nullptr || !*held_pose) {
    *out++ = flags | kWhole;
    PutDeltas(p.position, origin, out);
    origin = p.position;
    PutDeltas(p.rotation, kZero, out);
    PutDeltas(p.log_scale, kZero, out);
    return;
  }
  const QuantizedPose& h = **held_pose;
  const bool rotation_whole = h.largest != p.largest;
  // Element by element: std::array's != is a call to memcmp.
  const bool scale = h.log_scale[0] != p.log_scale[0] ||
                     h.log_scale[1] != p.log_scale[1] ||
                     h.log_scale[2] != p.log_scale[2];
  if (rotation_whole) flags |= kRotationWhole;
  if (scale) flags |= kScalePresent;
  *out++ = flags | kDelta;
  PutDeltas(p.position, h.position, out);
  PutDeltas(p.rotation, rotation_whole ? kZero : h.rotation, out);
  if (scale) PutDeltas(p.log_scale, h.log_scale, out);
}

}  // namespace

std::optional<QuantizedPose> PoseQuantizer::Quantize(const Matrix3x4& m) const {
  const float* const matrix = m.m.data();
  std::optional<QuantizedPose> pose;
  QuantizeMany({&matrix, 1}, {&pose, 1});
  return pose;
}

void PoseQuantizer::QuantizeMany(
    absl::Span<const float* const> matrices,
    absl::Span<std::optional<QuantizedPose>> poses) const {
  for (size_t k = 0; k < matrices.size(); k += kLanes) {
    const size_t n = std::min(kLanes, matrices.size() - k);
    QuantizeLanes(matrices.subspan(k, n), poses.subspan(k, n));
  }
}

void PoseQuantizer::QuantizeLanes(
    absl::Span<const float* const> matrices,
    absl::Span<std::optional<QuantizedPose>> poses) const {
  // A lane's integers depend on its matrix alone, whichever lane it is in:
  // the deltas need the same matrix to give the same integers every time.
  static_assert(kLanes == kBatchLanes);
  LaneBatch lanes;
  LoadLanes(matrices, lanes);
  NormalizeColumns(lanes);
  CheckOrthonormal(lanes);
  PositionSteps(inverse_, lanes);
  SmallestThree(lanes);
  RotationAndScaleIntegers(lanes);
  for (size_t lane = 0; lane < matrices.size(); ++lane) {
    if (!lanes.pose[lane]) {
      poses[lane].reset();
      continue;
    }
    QuantizedPose& q = poses[lane].emplace();
    for (int i = 0; i < 3; ++i) {
      q.position[i] = Round(lanes.steps[i][lane]);
      q.rotation[i] = lanes.rotation[i][lane];
      q.log_scale[i] = lanes.log_scale[i][lane];
    }
    q.largest = static_cast<uint8_t>(lanes.largest[lane]);
  }
}

Matrix3x4 PoseQuantizer::Dequantize(const QuantizedPose& q) const {
  Matrix3x4 m;
  Dequantize(q, m);
  return m;
}

void PoseQuantizer::Dequantize(const QuantizedPose& q, Matrix3x4& m) const {
  // In float, and not normalized again: the three components are known to
  // 1 / kRotationScale, far coarser than a float's 2^-24, and rebuilding the
  // largest makes the quaternion unit to a float's precision. (Three hostile
  // ones whose squares pass 1 leave the largest 0, and give a matrix that is no
  // rotation, as a hostile peer's raw entry could be anyway.) This runs once
  // a moved entity on every subscriber.
  const float scale[3] = {ScaleOf(q.log_scale[0]), ScaleOf(q.log_scale[1]),
                          ScaleOf(q.log_scale[2])};
  float position[3];
  for (int i = 0; i < 3; ++i) {
    position[i] =
        static_cast<float>(q.position[i] * static_cast<double>(precision_));
  }
#if defined(__SSE2__)
  // The same sums in the same order as the scalar form below, so the same
  // bits, with the quaternion put together in a register: the matrix's
  // every step waits on the square root, and half the instructions (87
  // against 182, callgrind) let the next entity's decoding start the
  // sooner.
  const __m128 sent =
      _mm_mul_ps(_mm_cvtepi32_ps(_mm_setr_epi32(q.rotation[0], q.rotation[1],
                                                q.rotation[2], 0)),
                 _mm_set1_ps(kRotationStep));
  const __m128 squares = _mm_mul_ps(sent, sent);
  const __m128 sum =
      _mm_add_ss(_mm_add_ss(squares, internal::Broadcast<1>(squares)),
                 internal::Broadcast<2>(squares));
  const __m128 largest = _mm_sqrt_ss(
      _mm_max_ss(_mm_sub_ss(_mm_set_ss(1.0f), sum), _mm_setzero_ps()));
  const auto& place = kPlace[q.largest & 3];
  const __m128 quat =
      _mm_or_ps(_mm_or_ps(Keep(internal::Broadcast<0>(sent), place[0]),
                          Keep(internal::Broadcast<1>(sent), place[1])),
                _mm_or_ps(Keep(internal::Broadcast<2>(sent), place[2]),
                          Keep(internal::Broadcast<0>(largest), place[3])));
  internal::ComposeTrs(_mm_setr_ps(position[0], position[1], position[2], 0.0f),
                       quat, _mm_setr_ps(scale[0], scale[1], scale[2], 1.0f),
                       m.m.data());
#else
  // Placed by table, not by a branch on which is largest (that is random).
  const int largest = q.largest & 3;
  std::array<float, 4> c;
  float sum = 0;
  for (int k = 0; k < 3; ++k) {
    const float v = static_cast<float>(q.rotation[k]) * kRotationStep;
    c[kSmallestThree[largest][k]] = v;
    sum += v * v;
  }
  c[largest] = std::sqrt(std::max(0.0f, 1.0f - sum));
  internal::ComposeTrs({position[0], position[1], position[2]},
                       glm::quat(c[3], c[0], c[1], c[2]),
                       {scale[0], scale[1], scale[2]}, m.m.data());
#endif
}

std::string CompactMovesWriter::Finish() {
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.id < b.id; });
  // Written at a cursor into room for the worst case, then copied out at
  // its size: appending byte by byte costs more than the quantizing, and
  // fresh room for the worst case (half a MB a 5,000-entity frame) would
  // be mapped and faulted in anew each time. So the room is the thread's,
  // kept.
  thread_local std::vector<uint8_t> room;
  room.resize(std::max(room.size(), 10 + kMaxEntryBytes * entries_.size()));
  uint8_t* const begin = room.data();
  uint8_t* out = begin;
  // Every pose quantized first, many at once (the sent poses, then the
  // held ones), and then written: in the thread's room too.
  thread_local std::vector<const float*> matrices;
  thread_local std::vector<std::optional<QuantizedPose>> poses;
  const size_t n = entries_.size();
  matrices.resize(n);
  for (size_t k = 0; k < n; ++k) matrices[k] = entries_[k].world;
  for (const Entry& e : entries_) {
    if (e.previous != nullptr) matrices.push_back(e.previous->m.data());
  }
  poses.resize(matrices.size());
  quantizer_.QuantizeMany(matrices, absl::MakeSpan(poses));
  PutVarint(n, out);
  EntityId last_id = 0;
  std::array<int64_t, 3> origin = {0, 0, 0};
  size_t next_held = n;
  for (size_t k = 0; k < n; ++k) {
    const Entry& e = entries_[k];
    PutVarint(e.id - last_id, out);
    last_id = e.id;
    const std::optional<QuantizedPose>* const held_pose =
        e.previous != nullptr ? &poses[next_held++] : nullptr;
    PutEntry(e.world, poses[k], held_pose, origin, out);
  }
  entries_.clear();
  return std::string(reinterpret_cast<const char*>(begin), out - begin);
}

CompactMovesParser::CompactMovesParser(const FrameUpdate& update)
    : update_(update),
      quantizer_(update.position_precision()),
      at_(reinterpret_cast<const uint8_t*>(update.compact_moved().data())),
      end_(at_ + update.compact_moved().size()) {}

absl::Status CompactMovesParser::Bad(absl::string_view why) const {
  return absl::DataLossError(absl::StrCat("compact moves of frame ",
                                          update_.frame(), " part ",
                                          update_.part(), ": ", why));
}

absl::Status CompactMovesParser::Start() {
  if (!(quantizer_.precision() >= kMinPositionPrecision &&
        quantizer_.precision() <= kMaxPositionPrecision)) {
    return Bad("no valid position_precision");
  }
  // Each entry takes at least 2 bytes: a count beyond that is a lie.
  if (!ReadVarint(count_) || count_ > update_.compact_moved().size() / 2) {
    return Bad("bad count");
  }
  return absl::OkStatus();
}

absl::Status CompactMovesParser::NotHeld(EntityId e) const {
  return Bad(absl::StrCat("a delta for entity ", e, ", not held"));
}

absl::Status CompactMovesParser::Finish() {
  if (at_ != end_) return Bad("bytes after the last entry");
  return absl::OkStatus();
}

absl::Status CompactMovesReader::Decode(FrameUpdate& u) {
  // A snapshot begun afresh sends everything whole: what is held goes (but
  // for one that keeps the view, whose entities not sent are held still).
  if (u.snapshot() && u.part() == 0 && !u.keeps_view()) held_.clear();
  for (EntityId e : u.destroyed()) held_.erase(e);
  if (u.compact_moved().empty()) return absl::OkStatus();
  CompactMovesParser parser(u);
  if (absl::Status started = parser.Start(); !started.ok()) return started;
  auto* moved = u.mutable_moved();
  auto* worlds = u.mutable_moved_world();
  moved->Reserve(moved->size() + static_cast<int>(parser.count()));
  worlds->Reserve(worlds->size() + 12 * static_cast<int>(parser.count()));
  for (uint64_t k = 0; k < parser.count(); ++k) {
    CompactMovesParser::Entry e;
    if (absl::Status read = parser.Read(e); !read.ok()) return read;
    moved->Add(e.id);
    if (e.is_raw()) {
      held_.erase(e.id);
      worlds->Add(e.raw.m.begin(), e.raw.m.end());
      continue;
    }
    const QuantizedPose* held = nullptr;
    if (e.is_delta()) {
      auto it = held_.find(e.id);
      if (it != held_.end()) held = &it->second;
    }
    QuantizedPose p;
    if (absl::Status resolved = parser.Resolve(e, held, p); !resolved.ok()) {
      return resolved;
    }
    held_[e.id] = p;
    const Matrix3x4 m = parser.quantizer().Dequantize(p);
    worlds->Add(m.m.begin(), m.m.end());
  }
  if (absl::Status finished = parser.Finish(); !finished.ok()) return finished;
  u.clear_compact_moved();
  return absl::OkStatus();
}

}  // namespace xform::v1
