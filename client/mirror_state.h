// Copyright 2026 The xform Authors.
//
// MirrorState is what a Mirror knows of its world and how each FrameUpdate
// changes it: a copy of each entity's parent and world matrix (and, for a
// compact stream, the pose each delta is coded against), a snapshot being
// built aside, a frame's parts held until its last, and the net changes
// since the caller last asked. The Mirror feeds it its stream's
// messages; it knows nothing of streams or threads, so it can be driven (and
// fuzzed) with messages alone. Lenient, as a client must be with a peer it
// does not control: an entry naming what it does not have is skipped.
//
// Not thread-safe: the Mirror guards it. Decode() reads the copies and
// writes only its own scratch, so it may run beside readers of copy(), as
// long as nothing changes the copies meanwhile (Commit() is what does).

#ifndef XFORM_CLIENT_MIRROR_STATE_H_
#define XFORM_CLIENT_MIRROR_STATE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xform/internal/huge_page_allocator.h"
#include "xform/internal/id_index.h"
#include "xform/mirror.h"
#include "xform/net_changes.h"
#include "xform/transform.h"
#include "xform/v1/compact_moves.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/wire.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::client_internal {

// Each entity's id, parent and world matrix, a row of one cache line each,
// with removal by swapping the last row in: the mirror has no order to keep,
// only lookups and whole-copy reads to serve. A frame writes its moved
// entities' rows at scattered places, each a trip to memory: a row on a
// line of its own is one trip, where matrices in a column of their own (48
// bytes each) straddled two lines every other row. Beside the rows, once a
// compact stream sends a pose, each entity's held pose: a delta's base is
// found with the same lookup as the row it moves, and goes with the row.
class Copy {
 public:
  static constexpr uint32_t kAbsent = internal::IdIndex::kAbsent;

  size_t size() const { return rows_.size(); }
  uint32_t Find(EntityId e) const { return index_.Find(e); }
  // Starts loading what Find(e) reads, for a Find soon after.
  void Prefetch(EntityId e) const { index_.Prefetch(e); }
  // Starts loading world(i), to be written soon after.
  void PrefetchWorld(uint32_t i) const {
    __builtin_prefetch(&rows_[i], /*rw=*/1);
  }
  // Starts loading held(i), to be read soon after.
  void PrefetchHeld(uint32_t i) const {
    if (i < held_.size()) __builtin_prefetch(&held_[i]);
  }
  EntityId id(uint32_t i) const { return rows_[i].id; }
  EntityId parent(uint32_t i) const { return rows_[i].parent; }
  const Matrix3x4& world(uint32_t i) const { return rows_[i].world; }
  // The pose the stream last sent compactly for the entity at `i`, or null
  // (never sent so, or last sent raw).
  const v1::QuantizedPose* held(uint32_t i) const {
    return i < held_.size() && held_[i].present ? &held_[i].pose : nullptr;
  }

  // Adds `e`, or re-parents it when present (a replayed create).
  uint32_t Add(EntityId e, EntityId parent) {
    const uint32_t row = index_.Insert(e, rows_.size());
    if (row == rows_.size()) {
      rows_.push_back({.world = Matrix3x4(), .id = e, .parent = parent});
      if (!held_.empty()) held_.emplace_back();
    } else {
      rows_[row].parent = parent;
    }
    return row;
  }
  void Remove(EntityId e) {
    const uint32_t i = index_.Find(e);
    if (i == kAbsent) return;
    index_.Erase(e);
    if (i + 1 != rows_.size()) {
      rows_[i] = rows_.back();
      if (!held_.empty()) held_[i] = held_.back();
      index_.Set(rows_[i].id, i);
    }
    rows_.pop_back();
    if (!held_.empty()) held_.pop_back();
  }
  void SetParent(uint32_t i, EntityId parent) { rows_[i].parent = parent; }
  void SetWorld(uint32_t i, const Matrix3x4& m) { rows_[i].world = m; }
  // world(i), to be written in place (a matrix read off the wire).
  Matrix3x4& mutable_world(uint32_t i) { return rows_[i].world; }
  // `pose` null: nothing held (a raw entry). The column is made at the
  // first pose held, so a raw stream's copy never pays for it.
  void SetHeld(uint32_t i, const v1::QuantizedPose* pose) {
    if (pose == nullptr) {
      if (i < held_.size()) held_[i].present = false;
      return;
    }
    if (held_.size() < rows_.size()) held_.resize(rows_.size());
    held_[i] = {*pose, true};
  }
  // The pose at `i`, held from now, to be written in place (what was held
  // there is gone, unless read before).
  v1::QuantizedPose& HoldPose(uint32_t i) {
    if (held_.size() < rows_.size()) held_.resize(rows_.size());
    held_[i].present = true;
    return held_[i].pose;
  }
  void Clear() {
    index_.Clear();
    rows_.clear();
    held_.clear();
  }

 private:
  // A cache line each, aligned: a Held read is one trip to memory, not two
  // (unaligned, its 57 bytes would mostly straddle two lines).
  struct alignas(64) Held {
    v1::QuantizedPose pose;
    bool present = false;
  };
  static_assert(sizeof(Held) == 64);
  struct alignas(64) Row {
    Matrix3x4 world;
    EntityId id;
    EntityId parent;
  };
  static_assert(sizeof(Row) == 64);

  // The rows a frame writes, at scattered places, on 2 MB pages once they
  // are big: 16 compact Mirrors of a 1M world took 154-614 ms a frame with
  // these on 4 KB pages (each row's page missing the TLB, and worse as the
  // run went on), 21 ms on 2 MB ones; raw 9.3 against 3.9 ms
  // (BM_MirrorApply*/0/16/1000000). Not from 4 MB, as the world's columns:
  // at 100k entities (4.8 and 6.4 MB) 2 MB pages were 5-10% slower.
  static constexpr size_t kRowsOnHugePagesFrom = size_t{16} << 20;
  template <typename T>
  using RowColumn = internal::Column<T, kRowsOnHugePagesFrom>;

  internal::IdIndex index_;
  RowColumn<Row> rows_;
  RowColumn<Held> held_;  // Empty, or one per entity.
};

class MirrorState {
 public:
  // What the parts of one frame may hold, for each of max_entities: a
  // frame lists an entity at most once in each of its lists, which takes
  // at most about 230 bytes (a compact entry, at most 48 bytes and at most
  // 120 decoded, beside its creation, destruction and re-parenting).
  static constexpr size_t kHeldFrameBytesPerEntity = 256;

  // `max_entities`: the most the copy may hold (MirrorOptions).
  explicit MirrorState(size_t max_entities = kDefaultMirrorMaxEntities)
      : max_entities_(max_entities) {}

  // Each message of the stream, in order, is decoded, then committed. Apart
  // because decoding is most of the work and changes nothing a reader of
  // copy() sees: the Mirror does it outside the lock its readers take.
  //
  // Decode: checks `u` and decodes its compact moves against the poses held
  // for them, and holds the poses it decodes for the entities it finds (the
  // decoder's own, which no reader of the copy sees: held as they are read,
  // a commit does not touch each entity's pose a second time). DATA_LOSS
  // for bytes that do not parse or a delta for an entity holding no pose;
  // RESOURCE_EXHAUSTED for one that would take the copy past max_entities
  // (counting every entity created, even one there already), or a frame
  // whose parts, held until its last, would take more than
  // kHeldFrameBytesPerEntity x max_entities bytes. Either way `u` must not
  // be committed, and the stream must be dropped and resynced (a message
  // refused leaves the copy as it was, and never half a frame in it; the
  // poses held may have moved on, which the resync's snapshot replaces).
  // O(entries in u).
  //
  // `worlds`, to both: the message's moved_world where
  // v1::ParseLeavingMovedWorld left it (null: in `u`), valid until Commit
  // returns. A part held for its frame's last keeps a copy.
  absl::Status Decode(const v1::FrameUpdate& u,
                      const v1::WireMovedWorlds* worlds = nullptr);
  // Takes `u`, which Decode() accepted last, into the copy (or, for a
  // frame's parts before its last, holds it). O(entries in u), and O(world)
  // for a snapshot's last part, which compares the copies (once changes
  // have been asked for).
  void Commit(const v1::FrameUpdate& u,
              const v1::WireMovedWorlds* worlds = nullptr);
  // Both, at once.
  absl::Status Apply(const v1::FrameUpdate& u,
                     const v1::WireMovedWorlds* worlds = nullptr);
  // Appends what the last Decode() found in compact moves, raw (12 floats
  // an entity; no matrices for null `worlds`), for a caller that lists each
  // message's moves. Before its Commit(). O(entries).
  void AppendDecoded(std::vector<EntityId>& ids,
                     std::vector<float>* worlds) const;

  const Copy& copy() const { return copy_; }
  // A snapshot was applied whole, and none is being received.
  bool have_snapshot() const { return have_snapshot_; }
  bool in_snapshot() const { return in_snapshot_; }
  uint64_t frame() const { return frame_; }  // 0 before a snapshot.
  int resyncs() const { return resyncs_; }
  // The net changes since the last call, and whether a resync came since.
  // The first call gives every entity in the copy, created and moved (what
  // changes noted from the start fold to), O(copy); only from then are
  // changes noted.
  NetChanges::Map TakeChanges(bool* resynced);

 private:
  // A compact entry as decoded, waiting for its message's commit: a cache
  // line. Its pose is held at once where its row was found; the pose of
  // one whose row is not there yet (created by its message) waits in
  // unplaced_poses_.
  struct DecodedMove {
    static constexpr uint32_t kNoPose = ~uint32_t{0};
    EntityId id;
    // Its row in the copy decoded against, or kAbsent; good while no row
    // has moved since (rows_moved_ unchanged).
    uint32_t slot;
    // Where slot is kAbsent: its pose in unplaced_poses_, or kNoPose (raw).
    uint32_t unplaced_pose;
    Matrix3x4 world;
  };
  static_assert(sizeof(DecodedMove) == 64);
  // One message's decoded entries: decoded_[begin, end).
  struct DecodedRange {
    size_t begin = 0;
    size_t end = 0;
    uint64_t rows_moved = 0;  // When decoded.
    size_t held_bytes = 0;    // What it takes held as a frame's part, or 0.
  };
  struct Part {
    v1::FrameUpdate update;
    DecodedRange decoded;
  };

  absl::Status DecodeCompact(const v1::FrameUpdate& u, Copy* against);
  // RESOURCE_EXHAUSTED where `u` passes the limits Decode() documents;
  // else what it adds to the bytes its frame holds, if it is held.
  // `unplaced`: the poses its decoding left in unplaced_poses_.
  absl::StatusOr<size_t> CheckLimits(const v1::FrameUpdate& u,
                                     const v1::WireMovedWorlds* worlds,
                                     size_t unplaced) const;
  // Forgets a frame's held parts.
  void ClearFrameParts();
  void Note(EntityId e, NetChange change) {
    if (changes_asked_) pending_.Note(e, change);
  }
  void ApplyDelta(const v1::FrameUpdate& u, const v1::WireMovedWorlds* worlds,
                  const DecodedRange& decoded);
  // Whether moves into `copy` are noted: into the live copy, once changes
  // are asked for (a snapshot built aside is diffed when it is swapped in).
  bool NotesMovesIn(const Copy& copy) const {
    return changes_asked_ && &copy == &copy_;
  }
  void ApplyMoved(const v1::FrameUpdateReader& r, Copy& copy);
  void ApplyDecoded(const DecodedRange& decoded, Copy& copy);
  void ApplySnapshotPart(const v1::FrameUpdate& u,
                         const v1::WireMovedWorlds* worlds,
                         const DecodedRange& decoded);
  // Notes how the snapshot built aside differs from the copy. O(world).
  void NoteSnapshotDifference();
  void RemoveRow(Copy& copy, EntityId e) {
    copy.Remove(e);
    ++rows_moved_;
  }

  Copy copy_;
  Copy staging_;
  bool in_snapshot_ = false;
  // The most entities the copy (or the one being built) may hold.
  const size_t max_entities_;
  // The parts so far of a frame that comes in several, with the entities
  // they create and the bytes they take, for the limits.
  std::vector<Part> frame_parts_;
  size_t frame_parts_created_ = 0;
  size_t frame_parts_bytes_ = 0;
  // What Decode() made of the messages not yet taken in; cleared once none
  // is held.
  std::vector<DecodedMove> decoded_;  // Its first decoded_size_ in use.
  size_t decoded_size_ = 0;
  std::vector<v1::QuantizedPose> unplaced_poses_;  // Cleared with decoded_.
  DecodedRange last_decoded_;
  // Counts removals and swaps of rows, in either copy: a decoded slot is
  // stale once this has moved.
  uint64_t rows_moved_ = 0;
  bool have_snapshot_ = false;
  uint64_t frame_ = 0;
  int resyncs_ = 0;
  NetChanges pending_;  // Since the caller last asked.
  // Changes are kept once the caller first asks for them. Until then they
  // are all the copy holds, created (and placed) since the start: a caller
  // that reads only the copy or the callbacks never pays a lookup an
  // entity per message for them, nor their memory.
  bool changes_asked_ = false;
  bool resynced_since_asked_ = false;
};

}  // namespace xform::client_internal

#endif  // XFORM_CLIENT_MIRROR_STATE_H_
