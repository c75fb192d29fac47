// Copyright 2026 The xform Authors.
//
// The compact encoding of a FrameUpdate's moved entities (ENCODING_COMPACT):
// what FrameUpdate.compact_moved holds, both directions.
//
// docs/wire.md is the specification, for a client in another language; this
// is the one implementation, both directions.
//
// A world matrix that is a rotation and a per-axis scale (R * S, no shear)
// is sent decomposed and quantized (QuantizedPose):
// - position: integer multiples of the subscription's precision;
// - rotation: smallest-three, each of the three as round(c * kRotationScale)
//   (16383 sqrt 2 = 23169.06..., 15 bits), the largest component left out
//   and rebuilt; the rotation is at most 0.01 degree off;
// - scale: log2 of each axis' scale at 1 / 65536 (relative error 1e-5).
// Quantizing absolute values and delta-coding the integers means a receiver
// holds exactly the integers the sender coded against: errors never add up.
//
// The bytes: varint count, then per entry, in ascending id order (an
// entity at most once a message):
//   varint   id minus the previous entry's id (the first: minus 0)
//   byte     flags: bits 0-1 the kind (0 delta, 1 whole, 2 raw); bits 2-3
//            the rotation's left-out component; bit 4 the scale is present
//            (delta); bit 5 the rotation is whole, not a delta (delta)
//   delta:   3 zigzag varints, position minus the held position; 3 zigzag
//            varints, the rotation minus the held one (or whole); if
//            present, 3 zigzag varints, log scale minus the held one
//   whole:   3 zigzag varints, position minus the previous whole entry's in
//            this message (the first: minus 0), so that a cluster far from
//            the origin costs its spread, not its distance; 3 zigzag
//            varints rotation; 3 zigzag varints log scale
//   raw:     the 12 floats of the matrix, little-endian
// A delta is coded against the pose the receiver holds for the entity: the
// one the stream last carried for it. The server sends deltas only where it
// knows that pose (a frame shared by subscribers that have every frame
// before it, see server/replication/replicator.h), wholes elsewhere.

#ifndef XFORM_V1_COMPACT_MOVES_H_
#define XFORM_V1_COMPACT_MOVES_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/wire_format_lite.h"
#include "xform/transform.h"
#include "xform/v1/xform.pb.h"

namespace xform::v1 {

// What a subscription may ask for. The server serves the power of two at or
// below the asked precision (CompactPrecision in wire.h), so the bounds are
// powers of two: 2^-20 (about 1e-6) to 2^10.
inline constexpr float kDefaultPositionPrecision = 0.001f;
inline constexpr float kMinPositionPrecision = 0x1p-20f;
inline constexpr float kMaxPositionPrecision = 0x1p10f;

// What a rotation's three sent components are multiplied by and rounded:
// 16383 sqrt 2, so that the largest they can be, 1 / sqrt 2, is 16383.
// docs/wire.md gives it to a decoder as this number.
inline constexpr double kRotationScale = 16383 * 1.4142135623730951;
// What a log2 scale is multiplied by and rounded.
inline constexpr double kLogScaleScale = 65536;

// A world matrix as the compact encoding carries it.
struct QuantizedPose {
  std::array<int64_t, 3> position;
  std::array<int32_t, 3> rotation;  // The three smallest, in x y z w order.
  std::array<int32_t, 3> log_scale;
  uint8_t largest;  // The left-out component (0 x .. 3 w), never negative.
};

class PoseQuantizer {
 public:
  explicit PoseQuantizer(float precision)
      : precision_(precision), inverse_(1 / static_cast<double>(precision)) {}

  // The matrix's pose, or none for one that is not a rotation and a positive
  // scale within 1e-4 (shear, a reflection, a zero or non-finite scale, a
  // position beyond 2^52 precisions): such an entry goes raw. Deterministic:
  // the same matrix always gives the same integers.
  std::optional<QuantizedPose> Quantize(const Matrix3x4& m) const;
  // Quantize for many: poses[k] for matrices[k] (12 floats each, as in
  // Matrix3x4), the same integers as one at a time. About 16 ns a matrix
  // where there are many, against 40 one at a time (`BM_EncodeCompact*`):
  // a matrix's steps wait on each other, several matrices' do not.
  void QuantizeMany(absl::Span<const float* const> matrices,
                    absl::Span<std::optional<QuantizedPose>> poses) const;
  Matrix3x4 Dequantize(const QuantizedPose& q) const;
  // The same, into `m`: for a caller writing many, no matrix made aside.
  void Dequantize(const QuantizedPose& q, Matrix3x4& m) const;

  float precision() const { return precision_; }

 private:
  // Matrices quantized side by side.
  static constexpr size_t kLanes = 8;
  // QuantizeMany for at most kLanes.
  void QuantizeLanes(absl::Span<const float* const> matrices,
                     absl::Span<std::optional<QuantizedPose>> poses) const;

  const float precision_;
  const double inverse_;
};

// Writes one message's compact_moved. Entries may be added in any order;
// what they point to must stay valid until Finish().
class CompactMovesWriter {
 public:
  explicit CompactMovesWriter(float precision, size_t expected = 0)
      : quantizer_(precision) {
    entries_.reserve(expected);
  }

  // `world`: 12 floats. `previous`: the matrix the receiver was last sent
  // for the entity, when the receiver is known to hold it; null sends it
  // whole.
  void Add(EntityId e, const float* world, const Matrix3x4* previous) {
    entries_.push_back({e, world, previous});
  }
  // The bytes, in id order: O(n log n) for the sort, O(n) quantizing.
  std::string Finish();

 private:
  struct Entry {
    EntityId id;
    const float* world;
    const Matrix3x4* previous;
  };
  const PoseQuantizer quantizer_;
  std::vector<Entry> entries_;
};

namespace compact_internal {
// An entry's kind, its flags' bits 0-1 (the grammar above).
inline constexpr uint8_t kDelta = 0;
inline constexpr uint8_t kWhole = 1;
inline constexpr uint8_t kRaw = 2;
// Its other bits.
inline constexpr uint8_t kScalePresent = 1 << 4;
inline constexpr uint8_t kRotationWhole = 1 << 5;
}  // namespace compact_internal

// Reads one message's compact_moved, an entry at a time, for a receiver that
// keeps the poses it holds its own way: the one home of the bytes' grammar
// and of what an entry means. A Mirror keeps poses beside its copy
// (client/mirror_state.h); CompactMovesReader keeps them in a map.
//
//   CompactMovesParser parser(update);
//   if (absl::Status s = parser.Start(); !s.ok()) return s;
//   for (uint64_t k = 0; k < parser.count(); ++k) {
//     parser.Read(entry);  // then, unless raw, Resolve(entry, held, pose)
//   }
//   return parser.Finish();
//
// Every refusal is DATA_LOSS, naming the frame and part: the stream must
// then be dropped and the view resynced.
class CompactMovesParser {
 public:
  struct Entry {
    EntityId id;
    uint8_t flags;
    int64_t values[9];  // As read: position, rotation, scale.
    Matrix3x4 raw;      // A raw entry's matrix.

    bool is_raw() const { return (flags & 3) == compact_internal::kRaw; }
    bool is_delta() const { return (flags & 3) == compact_internal::kDelta; }
  };

  // `update` must outlive the parser.
  explicit CompactMovesParser(const FrameUpdate& update);

  // Checks the precision, and reads the count: at most one entry per 2
  // bytes, so a count cannot ask for more room than its bytes justify.
  absl::Status Start();
  uint64_t count() const { return count_; }
  // The next entry: refused when cut short, of an unknown kind, or when its
  // id is not above the one before (an entity twice in one message).
  absl::Status Read(Entry& entry);
  // The pose a whole or delta entry codes. A delta needs `held`, the pose
  // the receiver holds for the entity (refused without); a whole is coded
  // against the whole before it, so wholes are resolved in the order read.
  // `pose` may be `*held`, resolving in place. Refused when a value leaves
  // its range (`pose` then holds nothing to use).
  absl::Status Resolve(const Entry& entry, const QuantizedPose* held,
                       QuantizedPose& pose);
  // Refused when bytes follow the last entry.
  absl::Status Finish();

  const PoseQuantizer& quantizer() const { return quantizer_; }

 private:
  absl::Status Bad(absl::string_view why) const;
  absl::Status NotHeld(EntityId e) const;
  // False when the bytes end first (or a varint runs past 10 bytes).
  bool ReadVarint(uint64_t& v);
  bool ReadSigned(int64_t& v);

  const FrameUpdate& update_;
  const PoseQuantizer quantizer_;
  // The bytes not yet read: [at_, end_).
  const uint8_t* at_;
  const uint8_t* const end_;
  uint64_t count_ = 0;
  uint64_t read_ = 0;
  EntityId id_ = 0;
  std::array<int64_t, 3> origin_ = {0, 0, 0};
};

// Read, inline: it runs once an entry on every subscriber, where an
// out-of-line call returning a Status each time cost a Mirror about 3% of
// its decoding (BM_MirrorApplyCompact, 190 -> 184 us a 5,000-move frame).

// Byte by byte, rather than with protobuf's CodedInputStream: most values
// here are one or two bytes, and its out-of-line path for anything past
// one byte was a tenth of a Mirror's decoding.
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
  uint64_t zigzag;
  if (!ReadVarint(zigzag)) return false;
  v = google::protobuf::internal::WireFormatLite::ZigZagDecode64(zigzag);
  return true;
}

inline absl::Status CompactMovesParser::Read(Entry& e) {
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
  if (kind == compact_internal::kRaw) {
    if (end_ - at_ < 48) return Bad("cut short");
    std::memcpy(e.raw.m.data(), at_, 48);
    at_ += 48;
    return absl::OkStatus();
  }
  if (kind != compact_internal::kWhole && kind != compact_internal::kDelta) {
    return Bad("unknown entry kind");
  }
  const int values = kind == compact_internal::kDelta &&
                             !(e.flags & compact_internal::kScalePresent)
                         ? 6
                         : 9;
  for (int v = 0; v < values; ++v) {
    if (!ReadSigned(e.values[v])) return Bad("cut short");
  }
  return absl::OkStatus();
}

namespace compact_internal {
// out[i] = base[i] + deltas[i], every element; false when one leaves T's
// range. `out` may be `base`.
template <typename T, size_t N>
inline bool AddDeltas(const std::array<T, N>& base, const int64_t* deltas,
                      std::array<T, N>& out) {
  bool in_range = true;
  for (size_t i = 0; i < N; ++i) {
    // Wrapping arithmetic: hostile bytes must not be undefined behaviour.
    const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(base[i]) +
                                           static_cast<uint64_t>(deltas[i]));
    in_range &= v == static_cast<T>(v);
    out[i] = static_cast<T>(v);
  }
  return in_range;
}
}  // namespace compact_internal

// Resolve, inline for the same reason as Read: once an entry on every
// subscriber. Its range checks are and-ed, one branch an entry.
inline absl::Status CompactMovesParser::Resolve(const Entry& e,
                                                const QuantizedPose* held,
                                                QuantizedPose& p) {
  using compact_internal::AddDeltas;
  static constexpr std::array<int32_t, 3> kZero = {0, 0, 0};
  p.largest = (e.flags >> 2) & 3;
  bool in_range;
  if (!e.is_delta()) {
    in_range = AddDeltas(origin_, &e.values[0], p.position);
    in_range &= AddDeltas(kZero, &e.values[3], p.rotation);
    in_range &= AddDeltas(kZero, &e.values[6], p.log_scale);
    origin_ = p.position;
  } else {
    if (held == nullptr) return NotHeld(e.id);
    in_range = AddDeltas(held->position, &e.values[0], p.position);
    in_range &= AddDeltas(
        (e.flags & compact_internal::kRotationWhole) ? kZero : held->rotation,
        &e.values[3], p.rotation);
    if (e.flags & compact_internal::kScalePresent) {
      in_range &= AddDeltas(held->log_scale, &e.values[6], p.log_scale);
    } else {
      p.log_scale = held->log_scale;
    }
  }
  return in_range ? absl::OkStatus() : Bad("a value out of range");
}

// Turns compact FrameUpdates back into raw ones (moved, moved_world), in the
// order a stream delivers them, holding each entity's last pose in a map of
// its own: for a receiver that keeps no copy of the world (the tests'
// reference decoder).
// One per stream: a new stream starts with Reset().
class CompactMovesReader {
 public:
  // Decodes `update`'s compact_moved (if any) into its moved and
  // moved_world, in place, and forgets the destroyed. DATA_LOSS for bytes
  // that do not parse, or a delta for an entity it holds no pose of: the
  // stream must then be dropped and the view resynced.
  absl::Status Decode(FrameUpdate& update);
  void Reset() { held_.clear(); }
  size_t held() const { return held_.size(); }

 private:
  absl::flat_hash_map<EntityId, QuantizedPose> held_;
};

}  // namespace xform::v1

#endif  // XFORM_V1_COMPACT_MOVES_H_
