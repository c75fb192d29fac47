// Copyright 2026 The xform Authors.
//
// FrameUpdate, both directions: FrameUpdateWriter puts one frame's changes, or
// a snapshot, into messages under a byte budget (the server's one place for
// it); FrameUpdateReader reads a message's entries back as core types (the
// client library's, the tools' and the tests'). How an entry is laid out on
// the wire (ids, 12 floats a world matrix) is known here and nowhere else, so
// another encoding changes these two classes.

#ifndef XFORM_V1_FRAME_UPDATE_H_
#define XFORM_V1_FRAME_UPDATE_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "xform/transform.h"
#include "xform/v1/xform.pb.h"

namespace xform::v1 {

// Writes FrameUpdates in the order the proto promises across parts: the caller
// adds destroyed entities, then created ones parents first, re-parented ones
// parents first, then moves. A part is started whenever the next entry would
// not fit in `max_bytes` of entries.
class FrameUpdateWriter {
 public:
  // Wire bytes of each kind of entry.
  static constexpr size_t kIdBytes = 8;
  static constexpr size_t kMatrixBytes = 4 * 12;
  // A created entity, or one re-parented and moved: the same size.
  static constexpr size_t kEntryBytes = 3 * kIdBytes + kMatrixBytes;

  // Parts are numbered from `first_part` (a streamed snapshot's next).
  // `stamp_nanos`: FrameUpdate.stamp_nanos.
  FrameUpdateWriter(uint64_t frame, absl::Time time, int64_t stamp_nanos,
                    size_t max_bytes, bool snapshot, uint32_t first_part = 0);

  // Whether `bytes` more still fit in the current part (or the first).
  bool Fits(size_t bytes) const {
    return parts_.empty() || used_ + bytes <= max_bytes_;
  }
  size_t room() const {
    return parts_.empty() ? max_bytes_ : max_bytes_ - used_;
  }

  // A hint: `n` creations (or re-parent-and-moves) follow, as many as fit
  // in the current part made room for at once, so that its arrays are not
  // grown, and copied, a doubling at a time.
  void Reserve(size_t n);

  void Destroyed(absl::Span<const EntityId> entities);
  // A created entity comes with its world matrix, in the same part.
  void Created(EntityId e, EntityId parent, const Matrix3x4& world);
  void Reparented(EntityId e, EntityId parent);
  void Moved(EntityId e, const Matrix3x4& world);
  // `worlds` holds 12 floats per entity, in Matrix3x4 order.
  void Moved(absl::Span<const EntityId> entities, const float* worlds);

  // The parts, numbered and (unless more are to come) the last one marked
  // with `frames_skipped` (and, for a snapshot, snapshot_done); at least one.
  std::vector<FrameUpdate> Finish(uint64_t frames_skipped, bool last = true);

 private:
  // How many of `count` entries of `bytes` each go in the current part,
  // starting a new one when not even one fits.
  size_t Fit(size_t bytes, size_t count);
  FrameUpdate& Part() { return parts_.back(); }
  void Start();

  const uint64_t frame_;
  const int64_t time_nanos_;
  const int64_t stamp_nanos_;
  const size_t max_bytes_;
  const bool snapshot_;
  const uint32_t first_part_;
  std::deque<FrameUpdate> parts_;  // A deque: Part() stays valid.
  size_t used_ = 0;
};

// A FrameUpdate's moved_world left in the buffers it was received in (see
// ParseLeavingMovedWorld): the bytes of its packed floats, in pieces as
// the buffers cut them, which must outlive it. Parsing them into the
// message copies every matrix once more before it is read: for 16 Mirrors
// of a 1M world, about 1.5 ms of CPU a frame (docs/benchmarks.md).
// Not thread-safe: reads keep a cursor, so that reading in order is O(1) a
// matrix.
class WireMovedWorlds {
 public:
  // A matrix's 48 bytes: 12 little-endian floats, Matrix3x4's order.
  using MatrixBytes = std::array<std::byte, 48>;

  size_t floats() const { return bytes_ / 4; }
  bool empty() const { return bytes_ == 0; }
  // The bytes of matrix `k` (below floats() / 12): where they lie, or, for
  // one the buffers split, copied into `scratch`. Inline where the matrix
  // is in the piece the last one was read in: a 1M world's Mirrors read
  // 160,000 a frame.
  const std::byte* Matrix(size_t k, MatrixBytes& scratch) const {
    const size_t begin = sizeof(MatrixBytes) * k;
    if (cursor_ < pieces_.size()) {
      const Piece& piece = pieces_[cursor_];
      if (begin >= piece.begin &&
          begin + sizeof(MatrixBytes) <= piece.begin + piece.size) {
        return piece.data + (begin - piece.begin);
      }
    }
    return MatrixElsewhere(begin, scratch);
  }
  // The floats into `to`, which has room for floats() of them.
  void CopyTo(float* to) const;
  // Appends the floats to `to` (what parsing them would have made).
  void AppendTo(google::protobuf::RepeatedField<float>& to) const;
  void Clear();

 private:
  friend absl::Status ParseLeavingMovedWorld(
      google::protobuf::io::ZeroCopyInputStream& in, FrameUpdate& update,
      WireMovedWorlds& worlds);
  struct Piece {
    const std::byte* data;
    size_t begin;  // Its first byte's offset in the floats' bytes.
    size_t size;
  };
  void Add(const void* data, size_t size);
  // Matrix() beyond the cursor's piece: finds its piece, and gathers one
  // split between two.
  const std::byte* MatrixElsewhere(size_t begin, MatrixBytes& scratch) const;

  std::vector<Piece> pieces_;
  size_t bytes_ = 0;
  mutable size_t cursor_ = 0;  // The piece the last read ended in.
};

// Parses `in` into `update`, as update.ParseFromZeroCopyStream(&in) does:
// DATA_LOSS where that fails. O(bytes).
absl::Status ParseFrameUpdate(google::protobuf::io::ZeroCopyInputStream& in,
                              FrameUpdate& update);

// Parses `in` into `update`, as ParseFrameUpdate does, except that a packed
// moved_world stays where `in`'s buffers hold it, in `worlds`: `in` (and what
// its buffers belong to) must outlive `worlds`. The other fields' bytes are
// copied aside, as they are, and parsed. Where moved_world comes unpacked (a
// peer may send it so), or the host is not little-endian, it is all parsed
// into `update` and `worlds` is left empty. O(bytes), and no copy of the
// matrices.
absl::Status ParseLeavingMovedWorld(
    google::protobuf::io::ZeroCopyInputStream& in, FrameUpdate& update,
    WireMovedWorlds& worlds);

// A FrameUpdate's entries as core types. Lenient, as a client must be with a
// peer it does not control: an entry whose parallel arrays are short is
// dropped (a created entity without a parent is a root), never read past.
class FrameUpdateReader {
 public:
  explicit FrameUpdateReader(const FrameUpdate& update) : u_(update) {}
  // With the moved_world ParseLeavingMovedWorld left on the wire (which
  // must outlive the reader); null or empty: the message's own.
  FrameUpdateReader(const FrameUpdate& update, const WireMovedWorlds* worlds)
      : u_(update),
        worlds_(worlds != nullptr && !worlds->empty() ? worlds : nullptr) {}

  absl::Span<const EntityId> destroyed() const {
    return {u_.destroyed().data(), static_cast<size_t>(u_.destroyed_size())};
  }

  int created_size() const { return u_.created_size(); }
  EntityId created(int k) const { return u_.created(k); }
  EntityId created_parent(int k) const {
    return k < u_.created_parent_size() ? u_.created_parent(k) : kNoEntity;
  }

  int reparented_size() const {
    return std::min(u_.reparented_size(), u_.reparented_parent_size());
  }
  EntityId reparented(int k) const { return u_.reparented(k); }
  EntityId reparented_parent(int k) const { return u_.reparented_parent(k); }

  int moved_size() const {
    const size_t floats = worlds_ != nullptr
                              ? worlds_->floats()
                              : static_cast<size_t>(u_.moved_world_size());
    return static_cast<int>(
        std::min<size_t>(static_cast<size_t>(u_.moved_size()), floats / 12));
  }
  EntityId moved(int k) const { return u_.moved(k); }
  Matrix3x4 moved_world(int k) const;
  // moved_world(k) into `m`, with no matrix made aside: O(1) when read in
  // order of k.
  void CopyMovedWorld(int k, Matrix3x4& m) const {
    static_assert(sizeof(m.m) == sizeof(WireMovedWorlds::MatrixBytes));
    if (worlds_ == nullptr) {
      std::copy_n(u_.moved_world().data() + 12 * k, 12, m.m.begin());
      return;
    }
    WireMovedWorlds::MatrixBytes scratch;
    std::memcpy(m.m.data(), worlds_->Matrix(static_cast<size_t>(k), scratch),
                sizeof(m.m));
  }

 private:
  const FrameUpdate& u_;
  const WireMovedWorlds* const worlds_ = nullptr;
};

}  // namespace xform::v1

#endif  // XFORM_V1_FRAME_UPDATE_H_
