// Copyright 2026 The xform Authors.
//
// MirrorState's own decoding of compact streams: that it holds exactly what
// the reference decoder (CompactMovesReader) makes of the same messages,
// through frames split into parts, rows moved by destruction, creation and
// resyncs; and that a message it refuses leaves the copy as it was, never
// half a frame.

#include "client/mirror_state.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "xform/v1/compact_moves.h"
#include "xform/v1/xform.pb.h"

namespace xform::client_internal {
namespace {

constexpr float kPrecision = 0.001f;

struct Row {
  EntityId parent;
  Matrix3x4 world;
};

// The copy by id, for comparison whatever the row order: each entity it
// holds once, at the slot Find() gives.
std::map<EntityId, Row> Rows(const Copy& copy) {
  std::map<EntityId, Row> rows;
  copy.ForEachRow([&](uint32_t i) {
    EXPECT_EQ(copy.Find(copy.id(i)), i) << copy.id(i);
    rows[copy.id(i)] = {copy.parent(i), copy.world(i)};
  });
  EXPECT_EQ(rows.size(), copy.size());
  return rows;
}

void ExpectSameRows(const Copy& got, const Copy& want, int frame) {
  const std::map<EntityId, Row> a = Rows(got), b = Rows(want);
  ASSERT_EQ(a.size(), b.size()) << "frame " << frame;
  for (const auto& [id, row] : b) {
    auto it = a.find(id);
    ASSERT_NE(it, a.end()) << "entity " << id << " frame " << frame;
    EXPECT_EQ(it->second.parent, row.parent) << id;
    // Bit for bit: both decode the same integers the same way.
    ASSERT_EQ(std::memcmp(it->second.world.m.data(), row.world.m.data(), 48), 0)
        << "entity " << id << " frame " << frame;
  }
}

Matrix3x4 RandomPose(std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  const float angle = u(rng) * 3;
  const float c = std::cos(angle), s = std::sin(angle);
  const float scale = rng() % 4 == 0 ? 1 + 0.5f * (u(rng) + 1) : 1;
  Matrix3x4 m = {};
  m.m = {c * scale, -s * scale, 0,     u(rng) * 100,  //
         s * scale, c * scale,  0,     u(rng) * 100,  //
         0,         0,          scale, u(rng) * 100};
  if (rng() % 50 == 0) m.m[1] += 0.5f;  // Shear: goes raw.
  return m;
}

// The headers of a snapshot's `parts` messages at `frame`.
std::vector<v1::FrameUpdate> SnapshotParts(uint64_t frame, int parts,
                                           bool keeps_view) {
  std::vector<v1::FrameUpdate> out(parts);
  for (int p = 0; p < parts; ++p) {
    v1::FrameUpdate& u = out[p];
    u.set_frame(frame);
    u.set_snapshot(true);
    u.set_keeps_view(keeps_view);
    u.set_part(p);
    u.set_snapshot_done(p + 1 == parts);
    u.set_last_part(p + 1 == parts);
    u.set_position_precision(kPrecision);
  }
  return out;
}

// A server's side of one compact stream: what each entity is, and what it
// last sent of it, so it knows when a delta may be sent.
class Sender {
 public:
  explicit Sender(uint32_t seed) : rng_(seed) {}

  // A resync: every entity, whole, over `parts` parts (the last destroying
  // one that an earlier part created, as a snapshot taken while the world
  // changes may).
  std::vector<v1::FrameUpdate> Snapshot(uint64_t frame, int parts) {
    sent_.clear();
    std::vector<EntityId> ids;
    for (const auto& [id, e] : alive_) ids.push_back(id);
    std::vector<v1::FrameUpdate> out =
        SnapshotParts(frame, parts, /*keeps_view=*/false);
    for (int p = 0; p < parts; ++p) {
      v1::FrameUpdate& u = out[p];
      v1::CompactMovesWriter writer(kPrecision);
      for (size_t k = p; k < ids.size(); k += parts) {
        u.add_created(ids[k]);
        u.add_created_parent(alive_[ids[k]].parent);
        writer.Add(ids[k], alive_[ids[k]].world.m.data(), nullptr);
        sent_[ids[k]] = alive_[ids[k]].world;
      }
      u.set_compact_moved(writer.Finish());
    }
    if (parts > 1 && !ids.empty()) {
      out.back().add_destroyed(ids[0]);
      alive_.erase(ids[0]);
      sent_.erase(ids[0]);
    }
    return out;
  }

  // A frame of changes, over `parts` parts: some destroyed (in any part),
  // some created (moved whole, in a later part than their creation where
  // there is one), many moved (deltas where the receiver holds a pose).
  std::vector<v1::FrameUpdate> Frame(uint64_t frame, int parts) {
    std::vector<v1::FrameUpdate> out(parts);
    std::vector<v1::CompactMovesWriter> writers;
    for (int p = 0; p < parts; ++p) {
      out[p].set_frame(frame);
      out[p].set_part(p);
      out[p].set_last_part(p + 1 == parts);
      out[p].set_position_precision(kPrecision);
      writers.emplace_back(kPrecision);
    }
    std::vector<EntityId> ids;
    for (const auto& [id, e] : alive_) ids.push_back(id);
    std::vector<Matrix3x4> keep;  // What writers point to.
    keep.reserve(2 * ids.size() + 64);
    for (EntityId id : ids) {
      const int part = static_cast<int>(rng_() % parts);
      const uint32_t what = rng_() % 1000;
      if (what < 5) {
        out[part].add_destroyed(id);
        alive_.erase(id);
        sent_.erase(id);
      } else if (what < 400) {
        alive_[id].world = RandomPose(rng_);
        keep.push_back(alive_[id].world);
        auto held = sent_.find(id);
        if (held != sent_.end()) keep.push_back(held->second);
        writers[part].Add(id, alive_[id].world.m.data(),
                          held != sent_.end() ? &keep.back() : nullptr);
        sent_[id] = alive_[id].world;
      }
    }
    for (int k = 0; k < 3; ++k) {
      const int created_in = static_cast<int>(rng_() % parts);
      const int moved_in =
          created_in + static_cast<int>(rng_() % (parts - created_in));
      const EntityId parent =
          ids.empty() ? kNoEntity : ids[rng_() % ids.size()];
      Create(parent, out[created_in], writers[moved_in], keep);
    }
    for (int p = 0; p < parts; ++p)
      out[p].set_compact_moved(writers[p].Finish());
    return out;
  }

  // What changed since the receiver's last message, as a snapshot that
  // keeps its view, over `parts` parts: some of what it holds destroyed,
  // some re-parented and moved, many moved, a few created; each entry
  // whole. What it changes, noted as the receiver should note it.
  std::vector<v1::FrameUpdate> KeptViewSnapshot(uint64_t frame, int parts,
                                                NetChanges::Map& changes) {
    std::vector<v1::FrameUpdate> out =
        SnapshotParts(frame, parts, /*keeps_view=*/true);
    std::vector<v1::CompactMovesWriter> writers;
    for (int p = 0; p < parts; ++p) writers.emplace_back(kPrecision);
    std::vector<EntityId> ids;
    for (const auto& [id, e] : alive_) ids.push_back(id);
    std::vector<Matrix3x4> keep;  // What writers point to.
    keep.reserve(ids.size() + 64);
    for (EntityId id : ids) {
      const int p = static_cast<int>(rng_() % parts);
      const uint32_t what = rng_() % 1000;
      if (what >= 400) continue;
      if (what < 10) {
        out[p].add_destroyed(id);
        alive_.erase(id);
        sent_.erase(id);
        changes[id] = kDestroyed;
        continue;
      }
      if (what < 100) {
        // Under a root, or an entity of a lower id that is still there.
        const EntityId parent =
            id > 1 && rng_() % 2 ? 1 + rng_() % (id - 1) : kNoEntity;
        const EntityId was = alive_[id].parent;
        alive_[id].parent = alive_.contains(parent) ? parent : kNoEntity;
        out[p].add_reparented(id);
        out[p].add_reparented_parent(alive_[id].parent);
        // Noted only where the parent is another.
        changes[id] = alive_[id].parent != was ? kReparented | kMoved : kMoved;
      } else {
        changes[id] = kMoved;
      }
      alive_[id].world = RandomPose(rng_);
      keep.push_back(alive_[id].world);
      writers[p].Add(id, keep.back().m.data(), nullptr);
      sent_[id] = alive_[id].world;
    }
    for (int k = 0; k < 5; ++k) {
      const int p = static_cast<int>(rng_() % parts);
      changes[Create(kNoEntity, out[p], writers[p], keep)] = kCreated | kMoved;
    }
    for (int p = 0; p < parts; ++p) {
      out[p].set_compact_moved(writers[p].Finish());
    }
    return out;
  }

  // Expects `copy` to hold what this sender last sent: each entity, its
  // parent, and its world matrix within the encoding's bounds.
  void ExpectHeldBy(const Copy& copy) const {
    const std::map<EntityId, Row> rows = Rows(copy);
    ASSERT_EQ(rows.size(), alive_.size());
    for (const auto& [id, want] : alive_) {
      auto it = rows.find(id);
      ASSERT_NE(it, rows.end()) << id;
      EXPECT_EQ(it->second.parent, want.parent) << id;
      for (int k = 0; k < 12; ++k) {
        EXPECT_NEAR(it->second.world.m[k], want.world.m[k], 2e-3) << id;
      }
    }
  }

  void Populate(int n) {
    for (int k = 0; k < n; ++k) {
      alive_[next_id_++] = {kNoEntity, RandomPose(rng_)};
    }
  }

 private:
  // A new entity under `parent`, created in `created_in`, its matrix sent
  // whole by `moved_in` (of the same part or a later one), kept in `keep`.
  EntityId Create(EntityId parent, v1::FrameUpdate& created_in,
                  v1::CompactMovesWriter& moved_in,
                  std::vector<Matrix3x4>& keep) {
    const EntityId id = next_id_++;
    alive_[id] = {parent, RandomPose(rng_)};
    created_in.add_created(id);
    created_in.add_created_parent(parent);
    keep.push_back(alive_[id].world);
    moved_in.Add(id, keep.back().m.data(), nullptr);
    sent_[id] = alive_[id].world;
    return id;
  }

  std::mt19937 rng_;
  EntityId next_id_ = 1;
  std::map<EntityId, Row> alive_;
  absl::flat_hash_map<EntityId, Matrix3x4> sent_;
};

// A copy against a map, through adds, replays, removals, moves and held
// poses of ids of every kind: dense from the start, past the dense range
// until it grows over them (their slots then move), far past it (a hash's),
// and the two extremes.
TEST(CopyTest, EachEntityAtTheSlotFindGivesWithItsRowAndPose) {
  struct Want {
    EntityId parent;
    float world;   // Its matrix's first value.
    int64_t pose;  // Its held pose's first value, or -1 for none.
  };
  std::mt19937 rng(7);
  auto random_id = [&rng]() -> EntityId {
    switch (rng() % 8) {
      case 0:
        return EntityId{1} << 40 | rng() % 2000;
      case 1:
        return rng() % 3 == 0 ? 0 : ~EntityId{0} - rng() % 2;
      case 2:
      case 3:
        return 5000 + rng() % 20000;
      default:
        return rng() % 6000;
    }
  };
  Copy copy;
  std::map<EntityId, Want> want;
  std::map<EntityId, uint32_t> slots;  // As last seen.
  uint64_t moves = copy.moves();
  for (int step = 0; step < 60000; ++step) {
    const EntityId e = random_id();
    const uint32_t i = copy.Find(e);
    ASSERT_EQ(i != Copy::kAbsent, want.contains(e)) << e;
    // First only adds (so that moves() counts only slots moved), then
    // removals too: mostly adds while there are few, mostly removals
    // past 12,000.
    const bool removals = step >= 20000;
    const int op = static_cast<int>(rng() % 10);
    if (op < 5 || i == Copy::kAbsent || (op < 7 && !removals)) {
      if (removals && want.size() > 12000 && rng() % 2 == 0) {
        copy.Remove(e);
        want.erase(e);
      } else {
        const EntityId parent = rng();
        copy.Add(e, parent);
        if (!want.contains(e)) want[e] = {parent, 1, -1};
        want[e].parent = parent;
      }
    } else if (op < 7) {
      copy.Remove(e);
      want.erase(e);
    } else if (op < 8) {
      Matrix3x4 m;
      m.m[0] = static_cast<float>(step);
      copy.SetWorld(i, m);
      want[e].world = m.m[0];
    } else if (op < 9) {
      copy.HoldPose(i).position[0] = step;
      want[e].pose = step;
    } else {
      copy.SetHeld(i, nullptr);
      want[e].pose = -1;
    }
    if (step % 97 != 0 && step < 59999) continue;
    ASSERT_EQ(copy.size(), want.size()) << "step " << step;
    size_t visited = 0;
    bool moved = false;
    copy.ForEachRow([&](uint32_t slot) {
      ++visited;
      const EntityId id = copy.id(slot);
      ASSERT_TRUE(want.contains(id)) << id;
      EXPECT_EQ(copy.Find(id), slot) << id;
      EXPECT_EQ(copy.parent(slot), want[id].parent) << id;
      EXPECT_EQ(copy.world(slot).m[0], want[id].world) << id;
      const v1::QuantizedPose* held = copy.held(slot);
      EXPECT_EQ(held == nullptr ? -1 : held->position[0], want[id].pose) << id;
      auto it = slots.find(id);
      if (it != slots.end() && it->second != slot) moved = true;
      slots[id] = slot;
    });
    ASSERT_EQ(visited, want.size()) << "step " << step;
    // A slot found is good while moves() stays the same.
    if (moved) {
      EXPECT_GT(copy.moves(), moves) << "step " << step;
    }
    moves = copy.moves();
  }
  copy.Clear();
  EXPECT_EQ(copy.size(), 0u);
  EXPECT_EQ(copy.Find(1), Copy::kAbsent);
}

TEST(MirrorStateTest, HoldsWhatTheReferenceDecoderMakesOfACompactStream) {
  Sender sender(7);
  sender.Populate(2000);
  MirrorState compact;    // Decodes for itself.
  MirrorState reference;  // Takes the reference decoder's raw messages.
  v1::CompactMovesReader reader;
  std::mt19937 rng(11);
  auto feed = [&](std::vector<v1::FrameUpdate> messages, int frame) {
    for (v1::FrameUpdate& u : messages) {
      ASSERT_TRUE(compact.Apply(u).ok()) << frame;
      ASSERT_TRUE(reader.Decode(u).ok()) << frame;
      ASSERT_TRUE(u.compact_moved().empty());
      ASSERT_TRUE(reference.Apply(u).ok()) << frame;
    }
    ExpectSameRows(compact.copy(), reference.copy(), frame);
  };
  feed(sender.Snapshot(1, 3), 1);
  for (int frame = 2; frame <= 300 && !testing::Test::HasFatalFailure();
       ++frame) {
    if (frame % 97 == 0) {
      feed(sender.Snapshot(frame, 1 + static_cast<int>(rng() % 3)), frame);
    } else {
      feed(sender.Frame(frame, 1 + static_cast<int>(rng() % 3)), frame);
    }
  }
  EXPECT_GT(compact.copy().size(), 500u);
  EXPECT_EQ(compact.resyncs(), 3);
}

// A snapshot that keeps the view changes a copy of the copy, swapped in at
// its last part: then the copy is the sender's world, the changes noted are
// what the snapshot listed, and it is no resync. The poses held of what it
// did not list stay held: the deltas after it decode against them.
TEST(MirrorStateTest, ASnapshotThatKeepsTheViewChangesOnlyWhatItLists) {
  Sender sender(9);
  sender.Populate(1000);
  MirrorState state;
  for (const v1::FrameUpdate& u : sender.Snapshot(1, 2)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  for (uint64_t f = 2; f < 6; ++f) {
    for (const v1::FrameUpdate& u : sender.Frame(f, 2)) {
      ASSERT_TRUE(state.Apply(u).ok());
    }
  }
  bool resynced;
  state.TakeChanges(&resynced);  // Changes are noted from here.
  const std::map<EntityId, Row> before = Rows(state.copy());
  NetChanges::Map changes;
  const std::vector<v1::FrameUpdate> kept =
      sender.KeptViewSnapshot(6, 3, changes);
  for (const v1::FrameUpdate& u : kept) {
    ASSERT_TRUE(state.Apply(u).ok());
    if (!u.snapshot_done()) {
      // Not yet in the copy.
      EXPECT_EQ(Rows(state.copy()).size(), before.size());
      EXPECT_EQ(state.frame(), 5u);
    }
  }
  sender.ExpectHeldBy(state.copy());
  EXPECT_EQ(state.frame(), 6u);
  EXPECT_GT(changes.size(), 300u);
  EXPECT_EQ(state.TakeChanges(&resynced), changes);
  EXPECT_FALSE(resynced);
  EXPECT_EQ(state.resyncs(), 0);
  for (uint64_t f = 7; f < 20; ++f) {
    for (const v1::FrameUpdate& u : sender.Frame(f, 1 + f % 3)) {
      ASSERT_TRUE(state.Apply(u).ok()) << f;
    }
  }
  sender.ExpectHeldBy(state.copy());
  // A snapshot that does not keep the view is a resync.
  for (const v1::FrameUpdate& u : sender.Snapshot(20, 2)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  state.TakeChanges(&resynced);
  EXPECT_TRUE(resynced);
  EXPECT_EQ(state.resyncs(), 1);
}

// A frame whose second part holds a delta for an entity the mirror holds no
// pose of: refused, and the first part (a destruction, a creation, moves)
// is nowhere in the copy; the stream resyncs from there.
TEST(MirrorStateTest, ARefusedPartLeavesNoHalfFrame) {
  Sender sender(3);
  sender.Populate(100);
  MirrorState state;
  for (const v1::FrameUpdate& u : sender.Snapshot(1, 1)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  const std::map<EntityId, Row> before = Rows(state.copy());
  std::vector<v1::FrameUpdate> frame = sender.Frame(2, 2);
  ASSERT_TRUE(state.Apply(frame[0]).ok());
  std::mt19937 rng(1);
  const Matrix3x4 m = RandomPose(rng);
  v1::CompactMovesWriter orphan(kPrecision);
  orphan.Add(1'000'000, m.m.data(), &m);  // Never sent: no pose held.
  frame[1].set_compact_moved(orphan.Finish());
  const absl::Status refused = state.Apply(frame[1]);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_NE(refused.message().find("not held"), absl::string_view::npos);
  const std::map<EntityId, Row> after = Rows(state.copy());
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [id, row] : before) {
    ASSERT_TRUE(after.contains(id)) << id;
    EXPECT_EQ(std::memcmp(after.at(id).world.m.data(), row.world.m.data(), 48),
              0)
        << id;
  }
  EXPECT_EQ(state.frame(), 1u);
  bool resynced;
  state.TakeChanges(&resynced);
  // A resync on a new stream takes the mirror on.
  for (const v1::FrameUpdate& u : sender.Snapshot(3, 2)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  EXPECT_EQ(state.frame(), 3u);
  EXPECT_EQ(state.resyncs(), 1);
  for (const v1::FrameUpdate& u : sender.Frame(4, 2)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  EXPECT_EQ(state.frame(), 4u);
}

// What a server sends cannot grow a mirror past its max_entities: not by
// creating (in a snapshot or a frame), nor by a frame whose last part never
// comes. Each is refused before it changes anything.
TEST(MirrorStateTest, HoldsNoMoreThanItsMaxEntities) {
  Sender sender(5);
  sender.Populate(100);
  {
    MirrorState state(99);
    absl::Status refused;
    for (const v1::FrameUpdate& u : sender.Snapshot(1, 2)) {
      refused = state.Apply(u);
      if (!refused.ok()) break;
    }
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
    EXPECT_FALSE(state.have_snapshot());
    EXPECT_EQ(state.copy().size(), 0u);
  }
  MirrorState state(100);
  for (const v1::FrameUpdate& u : sender.Snapshot(1, 2)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  const size_t size = state.copy().size();  // A snapshot destroys one.
  ASSERT_LT(size, 100u);
  const std::map<EntityId, Row> before = Rows(state.copy());

  v1::FrameUpdate create;
  create.set_frame(2);
  create.set_last_part(true);
  // One more than fits.
  for (EntityId e = 1'000'000; e < 1'000'000 + (101 - size); ++e) {
    create.add_created(e);
    create.add_created_parent(kNoEntity);
  }
  const absl::Status refused = state.Apply(create);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("max_entities"), absl::string_view::npos);
  EXPECT_EQ(state.frame(), 1u);

  // Parts that never end, each empty: refused once they hold 256 bytes for
  // each of max_entities, long before memory would run out.
  v1::FrameUpdate part;
  part.set_frame(2);
  part.set_last_part(false);
  absl::Status held;
  int parts = 0;
  for (; parts < 1'000'000 && held.ok(); ++parts) {
    part.set_part(static_cast<uint32_t>(parts));
    held = state.Apply(part);
  }
  EXPECT_EQ(held.code(), absl::StatusCode::kResourceExhausted) << held;
  EXPECT_LT(parts, 1000);
  EXPECT_EQ(state.frame(), 1u);
  const std::map<EntityId, Row> after = Rows(state.copy());
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [id, row] : before) ASSERT_TRUE(after.contains(id)) << id;

  // A resync on a new stream takes the mirror on.
  for (const v1::FrameUpdate& u : sender.Snapshot(3, 2)) {
    ASSERT_TRUE(state.Apply(u).ok());
  }
  EXPECT_EQ(state.frame(), 3u);
  // Up to the limit, exactly, fits.
  v1::FrameUpdate fill;
  fill.set_frame(4);
  fill.set_last_part(true);
  for (EntityId e = 2'000'000; state.copy().size() + fill.created_size() < 100;
       ++e) {
    fill.add_created(e);
    fill.add_created_parent(kNoEntity);
  }
  ASSERT_TRUE(state.Apply(fill).ok());
  EXPECT_EQ(state.copy().size(), 100u);
}

// Changes are noted only once asked for: the first TakeChanges of a state
// that never asked gives what one that asked from the start has folded to,
// whatever came and went between, and from then on the two agree exactly.
TEST(MirrorStateTest, ChangesFirstAskedForLateAreTheNetSinceTheStart) {
  Sender sender(7);
  sender.Populate(200);
  MirrorState asked, late;
  bool resynced;
  EXPECT_TRUE(asked.TakeChanges(&resynced).empty());
  auto apply = [&](const std::vector<v1::FrameUpdate>& parts) {
    for (const v1::FrameUpdate& u : parts) {
      ASSERT_TRUE(asked.Apply(u).ok());
      ASSERT_TRUE(late.Apply(u).ok());
    }
  };
  apply(sender.Snapshot(1, 2));
  for (uint64_t f = 2; f < 20; ++f) apply(sender.Frame(f, 1 + f % 3));
  apply(sender.Snapshot(20, 3));  // A resync.
  for (uint64_t f = 21; f < 30; ++f) apply(sender.Frame(f, 1 + f % 2));

  bool asked_resynced, late_resynced;
  const NetChanges::Map from_start = asked.TakeChanges(&asked_resynced);
  const NetChanges::Map first = late.TakeChanges(&late_resynced);
  EXPECT_EQ(asked_resynced, late_resynced);
  ASSERT_EQ(first.size(), late.copy().size());
  ASSERT_EQ(first.size(), from_start.size());
  for (const auto& [e, net] : from_start) {
    ASSERT_TRUE(first.contains(e)) << e;
    EXPECT_TRUE(net & kCreated) << e;
    EXPECT_EQ(first.at(e), kCreated | kMoved) << e;
  }
  for (uint64_t f = 30; f < 40; ++f) apply(sender.Frame(f, 1 + f % 3));
  apply(sender.Snapshot(40, 2));
  apply(sender.Frame(41, 2));
  EXPECT_EQ(asked.TakeChanges(&asked_resynced),
            late.TakeChanges(&late_resynced));
  EXPECT_TRUE(asked_resynced);
  EXPECT_TRUE(late_resynced);
}

}  // namespace
}  // namespace xform::client_internal
