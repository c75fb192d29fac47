// Copyright 2026 The xform Authors.

#include "client/mirror_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace xform::client_internal {

namespace {
// Lookups are started a block at a time, every lookup of a block before any
// is used, so a copy of a big world waits for memory once a block rather
// than once an entity (each lookup misses the cache: about half the time a
// Mirror took for a frame before this).
constexpr int kBlock = 32;
constexpr size_t kKeptDecoded = size_t{1} << 16;
}  // namespace

uint32_t Copy::Add(EntityId e, EntityId parent) {
  if (e >= dense_end_) {
    // At least doubled, so that the slots past the range move O(log) times
    // in all; only while within the limit, which bounds the memory.
    const size_t covered = std::max<size_t>(e + 1, size_t{2} * dense_end_);
    if (covered <= DenseLimit(size_ + 1)) GrowDense(covered);
  }
  if (e < dense_end_) {
    const auto i = static_cast<uint32_t>(e);
    if (Holds(i)) {
      rows_[i].parent = parent;
    } else {
      rows_[i] = {.world = Matrix3x4(), .id = e, .parent = parent};
      if (!held_.empty()) held_[i].present = false;
      SetHolds(i, true);
      ++size_;
    }
    return i;
  }
  if (auto it = sparse_.find(e); it != sparse_.end()) {
    rows_[it->second].parent = parent;
    return it->second;
  }
  ++size_;
  return AddSparse({.world = Matrix3x4(), .id = e, .parent = parent}, nullptr);
}

uint32_t Copy::AddSparse(const Row& row, const Held* held) {
  const auto slot = static_cast<uint32_t>(rows_.size());
  rows_.push_back(row);
  if (!held_.empty()) held_.push_back(held != nullptr ? *held : Held());
  sparse_.emplace(row.id, slot);
  return slot;
}

bool Copy::Remove(EntityId e) {
  const uint32_t i = Find(e);
  if (i == kAbsent) return false;
  --size_;
  ++moves_;
  if (i < dense_end_) {
    SetHolds(i, false);
    if (!held_.empty()) held_[i].present = false;
    return true;
  }
  sparse_.erase(e);
  const size_t last = rows_.size() - 1;
  if (i != last) {
    rows_[i] = rows_[last];
    if (!held_.empty()) held_[i] = held_[last];
    sparse_[rows_[i].id] = i;
  }
  rows_.pop_back();
  if (!held_.empty()) held_.pop_back();
  return true;
}

void Copy::GrowDense(size_t covered) {
  // The slots past the dense range, taken out, then put back where they
  // go now. O(slots).
  const std::vector<Row> sparse_rows(rows_.begin() + dense_end_, rows_.end());
  std::vector<Held> sparse_held;
  if (!held_.empty()) {
    sparse_held.assign(held_.begin() + dense_end_, held_.end());
    held_.resize(dense_end_);
    held_.resize(covered);
  }
  rows_.resize(dense_end_);
  rows_.resize(covered);
  present_.resize((covered + 63) / 64);
  dense_end_ = static_cast<uint32_t>(covered);
  sparse_.clear();
  for (size_t k = 0; k < sparse_rows.size(); ++k) {
    const Row& row = sparse_rows[k];
    const Held* held = sparse_held.empty() ? nullptr : &sparse_held[k];
    if (row.id >= dense_end_) {
      AddSparse(row, held);
      continue;
    }
    rows_[row.id] = row;
    SetHolds(static_cast<uint32_t>(row.id), true);
    if (held != nullptr) held_[row.id] = *held;
  }
  if (!sparse_rows.empty()) ++moves_;
}

void Copy::CopyFrom(const Copy& other) {
  const uint64_t moves = std::max(moves_, other.moves_);
  *this = other;
  moves_ = moves + 1;  // Every slot found in either before is stale.
}

void Copy::Clear() {
  rows_.clear();
  held_.clear();
  sparse_.clear();
  present_.clear();
  dense_end_ = 0;
  size_ = 0;
  ++moves_;
}

absl::Status MirrorState::Apply(const v1::FrameUpdate& u,
                                const v1::WireMovedWorlds* worlds) {
  if (absl::Status decoded = Decode(u, worlds); !decoded.ok()) return decoded;
  Commit(u, worlds);
  return absl::OkStatus();
}

absl::Status MirrorState::Decode(const v1::FrameUpdate& u,
                                 const v1::WireMovedWorlds* worlds) {
  last_decoded_ = {decoded_size_, decoded_size_, RowsMoved()};
  const size_t unplaced_before = unplaced_poses_.size();
  absl::Status decoded = absl::OkStatus();
  if (!u.compact_moved().empty()) {
    // Against the copy the message will change: a delta frame's parts all
    // against the copy before the frame (none is taken in before its
    // last, and none lists an entity another does); a snapshot's against
    // the one being built, none at its first part (whose entries are whole,
    // even where it keeps the view: then the copy is taken in at commit).
    Copy* against = &copy_;
    if (u.snapshot()) {
      against = in_snapshot_ && u.part() != 0 ? &staging_ : nullptr;
    }
    decoded = DecodeCompact(u, against);
  }
  last_decoded_.end = decoded_size_;
  if (decoded.ok()) {
    absl::StatusOr<size_t> held_bytes =
        CheckLimits(u, worlds, unplaced_poses_.size() - unplaced_before);
    decoded = held_bytes.status();
    last_decoded_.held_bytes = held_bytes.value_or(0);
  }
  if (!decoded.ok()) {
    decoded_size_ = last_decoded_.begin;
    last_decoded_.end = last_decoded_.begin;
    unplaced_poses_.resize(unplaced_before);
  }
  return decoded;
}

absl::StatusOr<size_t> MirrorState::CheckLimits(
    const v1::FrameUpdate& u, const v1::WireMovedWorlds* worlds,
    size_t unplaced) const {
  auto refuse = [&u](absl::string_view why) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame ", u.frame(), " part ", u.part(), ": ", why));
  };
  // What the copy the message changes holds, and what it and the earlier
  // parts of its frame create: an upper bound on what it will hold.
  size_t holds = copy_.size() + frame_parts_created_;
  if (u.snapshot()) {
    // The copy being built: at a first part, none, or the copy it keeps.
    if (in_snapshot_ && u.part() != 0) {
      holds = staging_.size();
    } else {
      holds = u.keeps_view() ? copy_.size() : 0;
    }
  }
  if (holds + static_cast<size_t>(u.created_size()) > max_entities_) {
    return refuse(absl::StrCat("the copy would hold more than ", max_entities_,
                               " entities (MirrorOptions.max_entities)"));
  }
  if (u.snapshot() || u.last_part()) return 0;
  // A part held until its frame's last: its message, and what was decoded
  // of it. O(entries), as decoding was.
  const size_t bytes =
      sizeof(Part) + u.ByteSizeLong() +
      (worlds != nullptr ? sizeof(float) * worlds->floats() : 0) +
      sizeof(DecodedMove) * (last_decoded_.end - last_decoded_.begin) +
      sizeof(v1::QuantizedPose) * unplaced;
  if (frame_parts_bytes_ + bytes > kHeldFrameBytesPerEntity * max_entities_) {
    return refuse(absl::StrCat("a frame's parts would hold more than ",
                               kHeldFrameBytesPerEntity * max_entities_,
                               " bytes (", kHeldFrameBytesPerEntity,
                               " for each of MirrorOptions.max_entities)"));
  }
  return bytes;
}

void MirrorState::NewStream() {
  ClearFrameParts();
  if (in_snapshot_) {
    staging_.Clear();
    in_snapshot_ = false;
  }
}

void MirrorState::ClearFrameParts() {
  frame_parts_.clear();
  frame_parts_created_ = 0;
  frame_parts_bytes_ = 0;
}

absl::Status MirrorState::ResolveMove(v1::CompactMovesParser& parser,
                                      const v1::CompactMovesParser::Entry& e,
                                      Copy* against, DecodedMove& d) {
  d.id = e.id;
  d.slot = against != nullptr ? against->Find(e.id) : Copy::kAbsent;
  d.unplaced_pose = DecodedMove::kNoPose;
  if (e.is_raw()) {
    d.world = e.raw;
    if (d.slot != Copy::kAbsent) against->SetHeld(d.slot, nullptr);
    return absl::OkStatus();
  }
  const v1::QuantizedPose* pose;
  absl::Status resolved;
  if (d.slot != Copy::kAbsent) {
    // In place: what is held is a delta's base, then the pose.
    // (Resolved aside and copied in, the copy's wide loads of the
    // pose's fields, just written one by one, each waited for those
    // writes to land.)
    const v1::QuantizedPose* held =
        e.is_delta() ? against->held(d.slot) : nullptr;
    v1::QuantizedPose& hold = against->HoldPose(d.slot);
    resolved = parser.Resolve(e, held, hold);
    pose = &hold;
  } else {
    d.unplaced_pose = static_cast<uint32_t>(unplaced_poses_.size());
    v1::QuantizedPose& unplaced = unplaced_poses_.emplace_back();
    resolved = parser.Resolve(e, nullptr, unplaced);
    pose = &unplaced;
  }
  if (!resolved.ok()) return resolved;
  parser.quantizer().Dequantize(*pose, d.world);
  return absl::OkStatus();
}

absl::Status MirrorState::DecodeCompact(const v1::FrameUpdate& u,
                                        Copy* against) {
  v1::CompactMovesParser parser(u);
  if (absl::Status started = parser.Start(); !started.ok()) return started;
  const size_t count = parser.count();
  const size_t base = decoded_size_;
  decoded_size_ = base + count;
  // Grown, never shrunk to fit: entries are written before they are read,
  // and value-initializing them anew each message (an identity matrix
  // among them) cost as much as a tenth of the decoding.
  if (decoded_.size() < decoded_size_) decoded_.resize(decoded_size_);
  // A block at a time, in two steps, the first a block ahead: a block's
  // entries are read and their held poses prefetched (found from an
  // entity's id alone), then the block before is resolved against them.
  // So each prefetch has a block's work to land in. Their rows are not
  // touched until the commit: prefetched here as well, 16 Mirrors of 100k
  // took 1.4 times as long (BM_MirrorApplyCompact/0/16/100000).
  using Entry = v1::CompactMovesParser::Entry;
  Entry blocks[2][kBlock];
  auto block_size = [count](size_t first) {
    return static_cast<int>(std::min<size_t>(kBlock, count - first));
  };
  auto read_block = [&](size_t first, Entry* block) {
    const int n = block_size(first);
    for (int k = 0; k < n; ++k) {
      if (absl::Status read = parser.Read(block[k]); !read.ok()) return read;
      if (against != nullptr) against->PrefetchHeld(block[k].id);
    }
    return absl::OkStatus();
  };
  auto resolve_block = [&](size_t first, const Entry* block) {
    DecodedMove* const out = &decoded_[base + first];
    const int n = block_size(first);
    for (int k = 0; k < n; ++k) {
      if (absl::Status resolved =
              ResolveMove(parser, block[k], against, out[k]);
          !resolved.ok()) {
        return resolved;
      }
    }
    return absl::OkStatus();
  };
  if (count > 0) {
    if (absl::Status read = read_block(0, blocks[0]); !read.ok()) return read;
  }
  for (size_t first = 0, b = 0; first < count; first += kBlock, b ^= 1) {
    const size_t next = first + kBlock;
    if (next < count) {
      if (absl::Status read = read_block(next, blocks[b ^ 1]); !read.ok()) {
        return read;
      }
    }
    if (absl::Status resolved = resolve_block(first, blocks[b]);
        !resolved.ok()) {
      return resolved;
    }
  }
  return parser.Finish();
}

void MirrorState::AppendDecoded(std::vector<EntityId>& ids,
                                std::vector<float>* worlds) const {
  const size_t n = last_decoded_.end - last_decoded_.begin;
  ids.reserve(ids.size() + n);
  if (worlds != nullptr) worlds->reserve(worlds->size() + 12 * n);
  for (size_t k = last_decoded_.begin; k < last_decoded_.end; ++k) {
    ids.push_back(decoded_[k].id);
    if (worlds == nullptr) continue;
    worlds->insert(worlds->end(), decoded_[k].world.m.begin(),
                   decoded_[k].world.m.end());
  }
}

void MirrorState::Commit(const v1::FrameUpdate& u,
                         const v1::WireMovedWorlds* worlds) {
  const DecodedRange decoded = last_decoded_;
  last_decoded_ = {};
  if (u.snapshot()) {
    ApplySnapshotPart(u, worlds, decoded);
  } else if (!u.last_part()) {
    // The parts of a frame are taken in together, so the copy never shows
    // half a frame. Parts come in order, with no other message between.
    Part& part = frame_parts_.emplace_back(Part{u, decoded});
    if (worlds != nullptr) worlds->AppendTo(*part.update.mutable_moved_world());
    frame_parts_created_ += static_cast<size_t>(u.created_size());
    frame_parts_bytes_ += decoded.held_bytes;
    return;
  } else {
    for (const Part& part : frame_parts_) {
      ApplyDelta(part.update, nullptr, part.decoded);
    }
    ClearFrameParts();
    ApplyDelta(u, worlds, decoded);
  }
  if (frame_parts_.empty()) {
    // Kept for the next frame, unless a huge one (64 bytes an entry) left
    // it bigger than frames mostly need.
    decoded_size_ = 0;
    unplaced_poses_.clear();
    if (decoded_.capacity() > kKeptDecoded) {
      std::vector<DecodedMove>().swap(decoded_);
    }
    if (unplaced_poses_.capacity() > kKeptDecoded) {
      std::vector<v1::QuantizedPose>().swap(unplaced_poses_);
    }
  }
}

void MirrorState::ApplyDelta(const v1::FrameUpdate& u,
                             const v1::WireMovedWorlds* worlds,
                             const DecodedRange& decoded) {
  const v1::FrameUpdateReader r(u, worlds);
  for (EntityId e : r.destroyed()) {
    if (copy_.Remove(e)) Note(e, kDestroyed);
  }
  for (int k = 0; k < r.created_size(); ++k) {
    copy_.Add(r.created(k), r.created_parent(k));
    Note(r.created(k), kCreated);
  }
  for (int k = 0; k < r.reparented_size(); ++k) {
    const uint32_t i = copy_.Find(r.reparented(k));
    if (i == Copy::kAbsent) continue;
    copy_.SetParent(i, r.reparented_parent(k));
    Note(r.reparented(k), kReparented);
  }
  ApplyMoved(r, copy_);
  ApplyDecoded(decoded, copy_);
  frame_ = u.frame();
  stamp_ = u.stamp_nanos();
}

void MirrorState::ApplyMoved(const v1::FrameUpdateReader& r, Copy& copy) {
  const bool note = NotesMovesIn(copy);
  for (int first = 0; first < r.moved_size(); first += kBlock) {
    const int n = std::min(kBlock, r.moved_size() - first);
    for (int k = 0; k < n; ++k) {
      copy.PrefetchRow(r.moved(first + k));
      if (note) pending_.Prefetch(r.moved(first + k));
    }
    for (int k = 0; k < n; ++k) {
      const uint32_t slot = copy.Find(r.moved(first + k));
      if (slot == Copy::kAbsent) continue;
      r.CopyMovedWorld(first + k, copy.mutable_world(slot));
      if (note) Note(r.moved(first + k), kMoved);
    }
  }
}

// As ApplyMoved, with the slots Decode() found where no row has moved or
// gone since (else each entity is looked up again).
void MirrorState::ApplyDecoded(const DecodedRange& decoded, Copy& copy) {
  const bool note = NotesMovesIn(copy);
  const bool slots_good = decoded.rows_moved == RowsMoved();
  for (size_t first = decoded.begin; first < decoded.end; first += kBlock) {
    const int n =
        static_cast<int>(std::min<size_t>(kBlock, decoded.end - first));
    const DecodedMove* const moves = &decoded_[first];
    for (int k = 0; k < n; ++k) {
      copy.PrefetchRow(moves[k].id);
      if (note) pending_.Prefetch(moves[k].id);
    }
    for (int k = 0; k < n; ++k) {
      const uint32_t slot = slots_good && moves[k].slot != Copy::kAbsent
                                ? moves[k].slot
                                : copy.Find(moves[k].id);
      if (slot == Copy::kAbsent) continue;
      copy.SetWorld(slot, moves[k].world);
      // A pose found a row at decoding, and is held there (moved with its
      // row since, if rows moved); one that did not is held now.
      if (moves[k].slot == Copy::kAbsent) {
        const uint32_t pose = moves[k].unplaced_pose;
        copy.SetHeld(slot, pose == DecodedMove::kNoPose
                               ? nullptr
                               : &unplaced_poses_[pose]);
      }
      if (note) Note(moves[k].id, kMoved);
    }
  }
}

// Snapshot messages build a fresh copy aside (or, where one keeps the view,
// change a copy of the copy); the last one swaps it in and notes the
// difference from the copy it replaces, so a resync tells the caller
// exactly what changed while the stream was down.
void MirrorState::ApplySnapshotPart(const v1::FrameUpdate& u,
                                    const v1::WireMovedWorlds* worlds,
                                    const DecodedRange& decoded) {
  if (!in_snapshot_ || u.part() == 0) {
    if (u.keeps_view()) {
      staging_.CopyFrom(copy_);
    } else {
      staging_.Clear();
    }
    ClearFrameParts();  // Of a stream that broke mid-frame.
    in_snapshot_ = true;
    keeping_view_ = u.keeps_view();
  }
  // A snapshot streamed while the world changes: later parts may destroy,
  // re-parent or move what earlier ones created.
  const v1::FrameUpdateReader r(u, worlds);
  for (EntityId e : r.destroyed()) {
    staging_.Remove(e);
  }
  for (int k = 0; k < r.created_size(); ++k) {
    staging_.Add(r.created(k), r.created_parent(k));
  }
  for (int k = 0; k < r.reparented_size(); ++k) {
    const uint32_t i = staging_.Find(r.reparented(k));
    if (i == Copy::kAbsent) continue;
    staging_.SetParent(i, r.reparented_parent(k));
  }
  ApplyMoved(r, staging_);
  ApplyDecoded(decoded, staging_);
  if (!u.snapshot_done()) return;

  if (changes_asked_) NoteSnapshotDifference();
  std::swap(copy_, staging_);
  staging_.Clear();
  ++copies_swapped_;
  in_snapshot_ = false;
  // One that kept the view caught the copy up: the difference noted is what
  // changed, as a frame's would be, and no resync.
  if (have_snapshot_ && !keeping_view_) {
    ++resyncs_;
    resynced_since_asked_ = true;
  }
  have_snapshot_ = true;
  frame_ = u.frame();
  stamp_ = u.stamp_nanos();
  history_ = u.history();
}

void MirrorState::NoteSnapshotDifference() {
  copy_.ForEachRow([&](uint32_t i) {
    if (staging_.Find(copy_.id(i)) == Copy::kAbsent) {
      Note(copy_.id(i), kDestroyed);
    }
  });
  staging_.ForEachRow([&](uint32_t i) {
    const EntityId e = staging_.id(i);
    const uint32_t old = copy_.Find(e);
    if (old == Copy::kAbsent) {
      Note(e, kCreated);
      Note(e, kMoved);
      return;
    }
    if (copy_.parent(old) != staging_.parent(i)) Note(e, kReparented);
    if (!(copy_.world(old) == staging_.world(i))) Note(e, kMoved);
  });
}

NetChanges::Map MirrorState::TakeChanges(bool* resynced, bool whole) {
  *resynced = resynced_since_asked_;
  resynced_since_asked_ = false;
  if (whole && changes_asked_) {
    // The destroyed stay; the rest are listed from the copy.
    NetChanges::Map all = pending_.Take();
    for (auto it = all.begin(); it != all.end();) {
      if (copy_.Find(it->first) != Copy::kAbsent) {
        all.erase(it++);
      } else {
        ++it;
      }
    }
    all.reserve(all.size() + copy_.size());
    copy_.ForEachRow(
        [&](uint32_t i) { all.emplace(copy_.id(i), kCreated | kMoved); });
    return all;
  }
  if (!changes_asked_) {
    // What notes from the start would have folded to: what the copy holds,
    // created and placed; whatever came and went, nothing. O(copy), once.
    changes_asked_ = true;
    NetChanges::Map all;
    all.reserve(copy_.size());
    copy_.ForEachRow(
        [&](uint32_t i) { all.emplace(copy_.id(i), kCreated | kMoved); });
    return all;
  }
  return pending_.Take();
}

}  // namespace xform::client_internal
