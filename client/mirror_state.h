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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xform/internal/huge_page_allocator.h"
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
// at a slot found from its id without a trip to memory of its own. A frame
// writes its moved entities' rows at scattered places, each a trip to
// memory; an index of 4 bytes an id beside them was a second trip for each
// (on a 1M world, its 4 MB per Mirror missed the cache as the rows do), and
// one the row's fetch had to wait for.
//
// So an id below about twice the number held (most writers hand ids out
// densely: 1, 2, 3 ...) is its own slot, and a bit an id says which of
// those slots hold their entity: 16 KB for 100k ids, which stay in the
// cache. That is why this is not internal::IdIndex, which the world and the
// server use: IdIndex maps an id to an index of the owner's choosing (a row
// that moves as the world restructures, a slot reused), so it needs its 4
// bytes an id, and here they were the second trip (16 compact Mirrors of a
// 100k world took 1.4 times as long with them, BM_MirrorApplyCompact
// /0/16/100000, 9d7e801). Both keep ids that are not dense in a hash map
// beside. Any other id (a hash, a handle with high bits set, a hostile
// peer's) has a slot past those, found in a hash map, so every id works.
// Slots of the first kind never move; those past them are kept packed, a
// removal swapping the last one in, and move as the first kind's range
// grows.
//
// Memory: a row of 64 bytes (and, once a compact stream sends a pose, a
// held pose of 64) for each slot. The dense range doubles as it grows,
// and only while it stays below twice the number held plus 4,096: ids 1 to
// N take between N and 2N slots; at worst (the range's ids mostly
// destroyed, every entity held past it) there are three slots for each of
// the most entities held at once since the last Clear(), plus 4,096.
class Copy {
 public:
  static constexpr uint32_t kAbsent = ~uint32_t{0};

  // Entities held.
  size_t size() const { return size_; }
  // Calls visit(i) for each slot i holding an entity. O(slots): at most
  // three for each of the most entities held at once (see above).
  template <typename Visit>
  void ForEachRow(Visit visit) const {
    for (uint32_t i = 0; i < dense_end_; ++i) {
      if (Holds(i)) visit(i);
    }
    for (auto i = dense_end_; i < rows_.size(); ++i) visit(i);
  }

  // e's slot, or kAbsent. Reads a bit (or, for an id past the dense range,
  // a hash map).
  uint32_t Find(EntityId e) const {
    if (e < dense_end_) {
      return Holds(static_cast<uint32_t>(e)) ? static_cast<uint32_t>(e)
                                             : kAbsent;
    }
    if (sparse_.empty()) return kAbsent;
    auto it = sparse_.find(e);
    return it == sparse_.end() ? kAbsent : it->second;
  }
  // Starts loading e's row, to be written soon after. For an id past the
  // dense range, nothing: its slot is found cold.
  void PrefetchRow(EntityId e) const {
    if (e < dense_end_) __builtin_prefetch(&rows_[e], /*rw=*/1);
  }
  // Starts loading e's held pose, for held(Find(e)) soon after. (For an id
  // past the dense range, another slot's, to no harm: GCC 12 at -O3 deleted
  // this prefetch, in DecodeCompact's loop, when it also checked the range,
  // and the decode took 2.5 times as long.)
  void PrefetchHeld(EntityId e) const {
    if (e < held_.size()) __builtin_prefetch(held_.data() + e);
  }
  EntityId id(uint32_t i) const { return rows_[i].id; }
  EntityId parent(uint32_t i) const { return rows_[i].parent; }
  const Matrix3x4& world(uint32_t i) const { return rows_[i].world; }
  // The pose the stream last sent compactly for the entity at `i`, or null
  // (never sent so, or last sent raw).
  const v1::QuantizedPose* held(uint32_t i) const {
    return i < held_.size() && held_[i].present ? &held_[i].pose : nullptr;
  }
  // Counts removals, rows moved to other slots, and Clear(): a slot found
  // before is good (its entity still there) while this stays the same.
  uint64_t moves() const { return moves_; }

  // Adds `e`, or re-parents it when present (a replayed create); its slot.
  // Amortized O(1).
  uint32_t Add(EntityId e, EntityId parent);
  // Removes `e`; whether it was there. O(1).
  bool Remove(EntityId e);
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
    HoldPose(i) = *pose;
  }
  // The pose at `i`, held from now, to be written in place (what was held
  // there is gone, unless read before).
  v1::QuantizedPose& HoldPose(uint32_t i) {
    if (held_.size() < rows_.size()) held_.resize(rows_.size());
    held_[i].present = true;
    return held_[i].pose;
  }
  void Clear();
  // Becomes a copy of `other`. O(other's slots).
  void CopyFrom(const Copy& other);

 private:
  // A cache line each, aligned: a Held read is one trip to memory, not two
  // (unaligned, its 57 bytes would mostly straddle two lines).
  struct alignas(64) Held {
    v1::QuantizedPose pose;
    bool present = false;
  };
  static_assert(sizeof(Held) == 64);
  // A row on a line of its own is one trip to memory, where matrices in a
  // column of their own (48 bytes each) straddled two lines every other row.
  struct alignas(64) Row {
    Matrix3x4 world;
    EntityId id = kNoEntity;
    EntityId parent = kNoEntity;
  };
  static_assert(sizeof(Row) == 64);

  // An id below this is kept in the dense range when `held` are held (and
  // none at or past kMaxDenseEnd, so that slots fit in 32 bits).
  static constexpr size_t DenseLimit(size_t held) {
    return std::min(2 * held + 4096, kMaxDenseEnd);
  }
  static constexpr size_t kMaxDenseEnd = size_t{1} << 31;
  // Makes the dense range [0, covered); the slots past it move, each to its
  // own id's slot if now covered.
  void GrowDense(size_t covered);
  // Places `row`, whose id is not in the copy, past the dense range.
  uint32_t AddSparse(const Row& row, const Held* held);

  // The rows and held poses a frame reads and writes, at scattered places,
  // on 2 MB pages once a column is 4 MB, as the world's columns are: 16
  // compact Mirrors of a 1M world took 154-614 ms a frame with these on 4
  // KB pages (each row's page missing the TLB, and worse as the run went
  // on), 21 ms on 2 MB ones. At 100k (8 MB a column), 16 Mirrors took 0.72
  // times as long compact, 0.87 raw (BM_MirrorApplyCompact/0/16/100000,
  // BM_MirrorParseApplyRaw/0/16/100000/1). (While an index entry came
  // first, 2 MB pages had been 5-10% slower at 100k.)
  template <typename T>
  using RowColumn = internal::Column<T>;

  // Whether dense slot `i` holds its entity.
  bool Holds(uint32_t i) const { return (present_[i / 64] >> (i % 64)) & 1; }
  void SetHolds(uint32_t i, bool holds) {
    const uint64_t bit = uint64_t{1} << (i % 64);
    present_[i / 64] = holds ? present_[i / 64] | bit : present_[i / 64] & ~bit;
  }

  // Slots [0, dense_end_): by id. [dense_end_, size): packed, by sparse_.
  RowColumn<Row> rows_;
  RowColumn<Held> held_;           // Empty, or one per slot.
  std::vector<uint64_t> present_;  // A bit for each dense slot.
  uint32_t dense_end_ = 0;
  absl::flat_hash_map<EntityId, uint32_t> sparse_;
  size_t size_ = 0;
  uint64_t moves_ = 0;
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
  // The stamp of that frame (FrameUpdate.stamp_nanos).
  int64_t stamp() const { return stamp_; }
  int resyncs() const { return resyncs_; }
  // The history of the frames the copy holds (FrameUpdate.history), once a
  // snapshot is applied.
  uint64_t history() const { return history_; }
  // A new stream begins: what the last one left unfinished (a frame's
  // parts held for its last, a snapshot partway) is dropped. The copy stays:
  // the new stream may resume it (SubscribeRequest.resume_from_frame).
  void NewStream();
  // The net changes since the last call, and whether a resync came since.
  // The first call gives every entity in the copy, created and moved (what
  // changes noted from the start fold to), O(copy); only from then are
  // changes noted. With `whole`, every entity in the copy is listed
  // created and moved, with what was destroyed since the last call: a
  // viewer that re-seeds its own copy from scratch, O(copy).
  NetChanges::Map TakeChanges(bool* resynced, bool whole = false);

 private:
  // A compact entry as decoded, waiting for its message's commit: a cache
  // line. Its pose is held at once where its row was found; the pose of
  // one whose row is not there yet (created by its message) waits in
  // unplaced_poses_.
  struct DecodedMove {
    static constexpr uint32_t kNoPose = ~uint32_t{0};
    EntityId id;
    // Its row in the copy decoded against, or kAbsent; good while no row
    // has moved since (RowsMoved() unchanged).
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
  // One entry of a compact frame into `d`: its pose resolved (in `against`'s
  // held pose where it has the entity, else in unplaced_poses_) and its
  // world matrix.
  absl::Status ResolveMove(v1::CompactMovesParser& parser,
                           const v1::CompactMovesParser::Entry& e,
                           Copy* against, DecodedMove& d);
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

  Copy copy_;
  Copy staging_;
  bool in_snapshot_ = false;
  // The snapshot being received started from the copy (keeps_view).
  bool keeping_view_ = false;
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
  // Counts removals and moves of rows, in either copy (and swaps of the
  // two): a decoded slot is stale once this has moved.
  uint64_t RowsMoved() const {
    return copy_.moves() + staging_.moves() + copies_swapped_;
  }
  uint64_t copies_swapped_ = 0;
  bool have_snapshot_ = false;
  uint64_t frame_ = 0;
  int64_t stamp_ = 0;
  uint64_t history_ = 0;
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
