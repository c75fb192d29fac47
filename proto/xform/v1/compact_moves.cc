// Copyright 2026 The xform Authors.

#include "xform/v1/compact_moves.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glm/gtc/quaternion.hpp"
#include "glm/mat3x3.hpp"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace xform::v1 {
namespace {

using ::google::protobuf::internal::WireFormatLite;
using ::google::protobuf::io::CodedOutputStream;

// The three smallest quaternion components lie within +-1/sqrt(2): 15 bits.
constexpr double kRotationScale = 16383 * 1.4142135623730951;
constexpr double kLogScaleScale = 65536;
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

using compact_internal::kDelta;
using compact_internal::kRaw;
using compact_internal::kWhole;
constexpr uint8_t kScalePresent = 1 << 4;
constexpr uint8_t kRotationWhole = 1 << 5;
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
// out[i] = base[i] + deltas[i], or false when that is out of T's range.
template <typename T, size_t N>
bool Add(const std::array<T, N>& base, const int64_t* deltas,
         std::array<T, N>* out) {
  for (size_t i = 0; i < N; ++i) {
    // Wrapping arithmetic: hostile bytes must not be undefined behaviour.
    const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(base[i]) +
                                           static_cast<uint64_t>(deltas[i]));
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      return false;
    (*out)[i] = static_cast<T>(v);
  }
  return true;
}
constexpr std::array<int32_t, 3> kZero32 = {0, 0, 0};

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

}  // namespace

std::optional<QuantizedPose> PoseQuantizer::Quantize(const Matrix3x4& m) const {
  // Runs twice a moved entity on the server, for every compact frame: so
  // one reciprocal per column rather than three divisions, and no branch on
  // which quaternion component is largest (it is as good as random).
  glm::vec3 col[3];
  float scale[3];
  for (int j = 0; j < 3; ++j) {
    col[j] = {m.m[j], m.m[4 + j], m.m[8 + j]};
    scale[j] = glm::length(col[j]);
    if (!(scale[j] > 0) || !std::isfinite(scale[j])) return std::nullopt;
    col[j] *= 1 / scale[j];
  }
  if (std::abs(glm::dot(col[0], col[1])) > kMaxSkew ||
      std::abs(glm::dot(col[0], col[2])) > kMaxSkew ||
      std::abs(glm::dot(col[1], col[2])) > kMaxSkew ||
      glm::dot(glm::cross(col[0], col[1]), col[2]) <= 0) {
    return std::nullopt;
  }
  QuantizedPose q;
  for (int i = 0; i < 3; ++i) {
    // The precision is a power of two on the wire (CompactPrecision), so
    // this multiplication is the division exactly.
    const double steps = static_cast<double>(m.m[4 * i + 3]) * inverse_;
    if (!(std::abs(steps) < kMaxPositionSteps)) return std::nullopt;
    q.position[i] = Round(steps);
    // A float's log2 is 2^-23 exact, far finer than the 2^-16 kept.
    const float log_scale = std::log2(scale[i]);
    q.log_scale[i] = static_cast<int32_t>(Round(log_scale * kLogScaleScale));
  }
  // The rotation's quaternion, from the products of its components that
  // the matrix holds: p[i][j] = 4 q_i q_j (x y z w order; column j of the
  // matrix is col[j], so element (r, c) is col[c][r]). The largest
  // component is the one with the largest square, p[i][i]; it is taken as
  // positive, and each component is p[largest][i] / (4 q_largest).
  const float m00 = col[0].x, m11 = col[1].y, m22 = col[2].z;
  const float p[4][4] = {{1 + m00 - m11 - m22, col[1].x + col[0].y,
                          col[2].x + col[0].z, col[1].z - col[2].y},
                         {col[1].x + col[0].y, 1 - m00 + m11 - m22,
                          col[2].y + col[1].z, col[2].x - col[0].z},
                         {col[2].x + col[0].z, col[2].y + col[1].z,
                          1 - m00 - m11 + m22, col[0].y - col[1].x},
                         {col[1].z - col[2].y, col[2].x - col[0].z,
                          col[0].y - col[1].x, 1 + m00 + m11 + m22}};
  int largest = 0;
  for (int i = 1; i < 4; ++i)
    largest = p[i][i] > p[largest][largest] ? i : largest;
  const float* row = p[largest];
  // Normalized at once: |(row)| = 4 q_largest |q|, so dividing by it gives
  // the unit quaternion's components.
  const float unit = 1 / std::sqrt(row[0] * row[0] + row[1] * row[1] +
                                   row[2] * row[2] + row[3] * row[3]);
  q.largest = static_cast<uint8_t>(largest);
  for (int k = 0; k < 3; ++k) {
    q.rotation[k] = static_cast<int32_t>(
        Round(row[kSmallestThree[largest][k]] * unit * kRotationScale));
  }
  return q;
}

Matrix3x4 PoseQuantizer::Dequantize(const QuantizedPose& q) const {
  Matrix3x4 m;
  Dequantize(q, m);
  return m;
}

void PoseQuantizer::Dequantize(const QuantizedPose& q, Matrix3x4& m) const {
  // In float, and not normalized again: the three components are known to
  // 1 / 23170, far coarser than a float's 2^-24, and rebuilding the largest
  // makes the quaternion unit to a float's precision. (Three hostile ones
  // whose squares pass 1 give a matrix that is no rotation, as a hostile
  // peer's raw entry could be anyway.) This runs once a moved entity on
  // every subscriber.
  constexpr float kRotationStep = 1 / kRotationScale;
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
  const glm::mat3 rotation = glm::mat3_cast(glm::quat(c[3], c[0], c[1], c[2]));
  for (int j = 0; j < 3; ++j) {
    const float s = ScaleOf(q.log_scale[j]);
    for (int i = 0; i < 3; ++i) m.m[4 * i + j] = rotation[j][i] * s;
  }
  for (int i = 0; i < 3; ++i) {
    m.m[4 * i + 3] =
        static_cast<float>(q.position[i] * static_cast<double>(precision_));
  }
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
  PutVarint(entries_.size(), out);
  EntityId last_id = 0;
  std::array<int64_t, 3> origin = {0, 0, 0};
  constexpr std::array<int32_t, 3> kZero = {0, 0, 0};
  for (const Entry& e : entries_) {
    PutVarint(e.id - last_id, out);
    last_id = e.id;
    Matrix3x4 world;
    std::copy_n(e.world, 12, world.m.begin());
    const std::optional<QuantizedPose> pose = quantizer_.Quantize(world);
    if (!pose) {
      *out++ = kRaw;
      // Little-endian floats: the byte order of every machine we build for.
      std::memcpy(out, e.world, 48);
      out += 48;
      continue;
    }
    const QuantizedPose& p = *pose;
    const std::optional<QuantizedPose> held =
        e.previous != nullptr ? quantizer_.Quantize(*e.previous) : std::nullopt;
    uint8_t flags = p.largest << 2;
    if (!held) {
      *out++ = flags | kWhole;
      PutDeltas(p.position, origin, out);
      origin = p.position;
      PutDeltas(p.rotation, kZero, out);
      PutDeltas(p.log_scale, kZero, out);
      continue;
    }
    const QuantizedPose& h = *held;
    const bool rotation_whole = h.largest != p.largest;
    const bool scale = h.log_scale != p.log_scale;
    if (rotation_whole) flags |= kRotationWhole;
    if (scale) flags |= kScalePresent;
    *out++ = flags | kDelta;
    PutDeltas(p.position, h.position, out);
    PutDeltas(p.rotation, rotation_whole ? kZero : h.rotation, out);
    if (scale) PutDeltas(p.log_scale, h.log_scale, out);
  }
  entries_.clear();
  return std::string(reinterpret_cast<const char*>(begin), out - begin);
}

CompactMovesParser::CompactMovesParser(const FrameUpdate& update)
    : update_(update),
      quantizer_(update.position_precision()),
      at_(reinterpret_cast<const uint8_t*>(update.compact_moved().data())),
      end_(at_ + update.compact_moved().size()) {}

// Read inline, byte by byte, rather than with protobuf's CodedInputStream:
// most values here are one or two bytes, and its out-of-line path for
// anything past one byte was a tenth of a Mirror's decoding.
inline bool CompactMovesParser::ReadVarint(uint64_t& v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (at_ == end_) return false;
    const uint8_t byte = *at_++;
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) {
      v = result;
      return true;
    }
  }
  return false;
}

inline bool CompactMovesParser::ReadSigned(int64_t& v) {
  uint64_t raw;
  if (!ReadVarint(raw)) return false;
  v = WireFormatLite::ZigZagDecode64(raw);
  return true;
}

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

absl::Status CompactMovesParser::Read(Entry& e) {
  uint64_t id_delta;
  if (!ReadVarint(id_delta) || at_ == end_) return Bad("cut short");
  e.flags = *at_++;
  // Ascending ids: a receiver decodes a message's entries against what it
  // held before the message, so an entity in it twice would be misread.
  if (id_delta == 0 && read_ > 0) return Bad("an id not above the last");
  ++read_;
  id_ += id_delta;
  e.id = id_;
  const uint8_t kind = e.flags & 3;
  if (kind == kRaw) {
    if (end_ - at_ < 48) return Bad("cut short");
    std::memcpy(e.raw.m.data(), at_, 48);
    at_ += 48;
    return absl::OkStatus();
  }
  if (kind != kWhole && kind != kDelta) return Bad("unknown entry kind");
  const int values = kind == kDelta && !(e.flags & kScalePresent) ? 6 : 9;
  for (int v = 0; v < values; ++v) {
    if (!ReadSigned(e.values[v])) return Bad("cut short");
  }
  return absl::OkStatus();
}

absl::Status CompactMovesParser::Resolve(const Entry& e,
                                         const QuantizedPose* held,
                                         QuantizedPose& p) {
  p.largest = (e.flags >> 2) & 3;
  bool ok;
  if (!e.is_delta()) {
    ok = Add(origin_, &e.values[0], &p.position) &&
         Add(kZero32, &e.values[3], &p.rotation) &&
         Add(kZero32, &e.values[6], &p.log_scale);
    origin_ = p.position;
  } else {
    if (held == nullptr) {
      return Bad(absl::StrCat("a delta for entity ", e.id, ", not held"));
    }
    ok = Add(held->position, &e.values[0], &p.position) &&
         Add((e.flags & kRotationWhole) ? kZero32 : held->rotation,
             &e.values[3], &p.rotation);
    p.log_scale = held->log_scale;
    if (ok && (e.flags & kScalePresent)) {
      ok = Add(held->log_scale, &e.values[6], &p.log_scale);
    }
  }
  return ok ? absl::OkStatus() : Bad("a value out of range");
}

absl::Status CompactMovesParser::Finish() {
  if (at_ != end_) return Bad("bytes after the last entry");
  return absl::OkStatus();
}

absl::Status CompactMovesReader::Decode(FrameUpdate& u) {
  // A snapshot begun afresh sends everything whole: what is held goes.
  if (u.snapshot() && u.part() == 0) held_.clear();
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
