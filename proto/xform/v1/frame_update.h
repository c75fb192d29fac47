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
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
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
  FrameUpdateWriter(uint64_t frame, absl::Time time, size_t max_bytes,
                    bool snapshot, uint32_t first_part = 0);

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
  const size_t max_bytes_;
  const bool snapshot_;
  const uint32_t first_part_;
  std::deque<FrameUpdate> parts_;  // A deque: Part() stays valid.
  size_t used_ = 0;
};

// A FrameUpdate's entries as core types. Lenient, as a client must be with a
// peer it does not control: an entry whose parallel arrays are short is
// dropped (a created entity without a parent is a root), never read past.
class FrameUpdateReader {
 public:
  explicit FrameUpdateReader(const FrameUpdate& update) : u_(update) {}

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
    return std::min(u_.moved_size(), u_.moved_world_size() / 12);
  }
  EntityId moved(int k) const { return u_.moved(k); }
  Matrix3x4 moved_world(int k) const;
  // The 12 floats of moved_world(k), in place.
  const float* moved_world_data(int k) const {
    return u_.moved_world().data() + 12 * k;
  }

 private:
  const FrameUpdate& u_;
};

}  // namespace xform::v1

#endif  // XFORM_V1_FRAME_UPDATE_H_
