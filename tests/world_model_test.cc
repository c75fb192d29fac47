// Copyright 2026 The xform Authors.
//
// The randomized model test. A deliberately naive scene graph (std::map,
// recursion, double precision) and an xform::World receive the same random
// operations, single and batched, good and bad. After every step:
//   - both give the same status code, and a refused batch changed nothing;
//   - every world matrix agrees within kTolerance (see below), and every
//     parent and child set agrees exactly;
// and at every frame end the reported created, destroyed and re-parented
// entities equal the difference between the world's states at the two frame
// ends exactly; the moved entities include every net change and nothing that
// did not change, was not created and was not recomputed at some step of the
// frame; and replaying
// the changes on a copy of the previous state reproduces the new one.

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glm/gtc/matrix_inverse.hpp"
#include "glm/gtc/quaternion.hpp"
#include "gtest/gtest.h"
#include "xform/world.h"

namespace xform {
namespace {

// World matrices agree when every element is within kTolerance of the
// reference, scaled by the element's magnitude when it is above one. The
// scenes are kept as well conditioned as real ones (new parents are chosen
// above kMaxDepth, though a link may stack a subtree deeper; scale components
// in [0.6, 1.6]): a set-world under a parent chain inverts the
// parent's float world, and that costs digits in proportion to its condition
// number, which grows with depth and scale anisotropy.
constexpr double kTolerance = 2e-3;
constexpr int kMaxDepth = 8;

// ---------------------------------------------------------------------------
// The reference: a map of nodes, recursion for world matrices, doubles.

struct RefNode {
  EntityId parent = kNoEntity;
  glm::dvec3 position{0.0};
  glm::dquat rotation{1.0, 0.0, 0.0, 0.0};
  glm::dvec3 scale{1.0};
};

glm::dmat4 RefLocal(const RefNode& n) {
  return glm::translate(glm::dmat4(1.0), n.position) *
         glm::mat4_cast(n.rotation) * glm::scale(glm::dmat4(1.0), n.scale);
}

// Nearest TRS, the same construction as xform::Decompose, in double.
void RefDecompose(const glm::dmat4& m, RefNode* n) {
  n->position = glm::dvec3(m[3]);
  glm::dvec3 x(m[0]), y(m[1]), z(m[2]);
  glm::dvec3 s(glm::length(x), glm::length(y), glm::length(z));
  if (glm::dot(glm::cross(x, y), z) < 0.0) s.x = -s.x;
  x /= s.x;
  y = glm::normalize(y - glm::dot(y, x) * x);
  z = glm::cross(x, y);
  n->scale = s;
  n->rotation = glm::normalize(glm::quat_cast(glm::dmat3(x, y, z)));
}

struct RefWorld {
  std::map<EntityId, RefNode> nodes;
  // Entities whose subtrees the world may recompute for the commands applied
  // since this was last cleared: those given a new local or parent. The world
  // lists a recomputed entity as moved even when its matrix came out the same.
  std::set<EntityId> recomputed_roots;

  bool Has(EntityId e) const { return nodes.count(e) != 0; }

  glm::dmat4 World(EntityId e) const {
    const RefNode& n = nodes.at(e);
    const glm::dmat4 local = RefLocal(n);
    return n.parent == kNoEntity ? local : World(n.parent) * local;
  }

  std::set<EntityId> Children(EntityId e) const {
    std::set<EntityId> out;
    for (const auto& [id, n] : nodes) {
      if (n.parent == e) out.insert(id);
    }
    return out;
  }

  void DestroySubtree(EntityId e) {
    for (EntityId c : Children(e)) DestroySubtree(c);
    nodes.erase(e);
  }

  void SetLocalFromWorld(EntityId e, EntityId parent, const glm::dmat4& world) {
    const glm::dmat4 parent_world =
        parent == kNoEntity ? glm::dmat4(1.0) : World(parent);
    RefDecompose(glm::inverse(parent_world) * world, &nodes[e]);
  }
};

RefNode ToRef(const Transform& t) {
  RefNode n;
  n.position = glm::dvec3(t.position);
  n.rotation = glm::normalize(glm::dquat(t.rotation));
  n.scale = glm::dvec3(t.scale);
  return n;
}

bool RefValidTransform(const Transform& t) {
  for (int k = 0; k < 3; ++k) {
    if (!std::isfinite(t.position[k]) || !std::isfinite(t.scale[k]))
      return false;
    if (std::fabs(t.scale[k]) < kMinAbsScale) return false;
  }
  for (int k = 0; k < 4; ++k) {
    if (!std::isfinite(t.rotation[k])) return false;
  }
  return std::fabs(glm::dot(t.rotation, t.rotation) - 1.0f) <=
         kUnitQuaternionTolerance;
}

// One command on the reference, checked the naive way.
absl::StatusCode RefApply(RefWorld& w, const Command& command) {
  using C = absl::StatusCode;
  if (const auto* create = std::get_if<CreateOp>(&command)) {
    if (create->entity == kNoEntity || !RefValidTransform(create->local)) {
      return C::kInvalidArgument;
    }
    if (create->parent == create->entity) return C::kFailedPrecondition;
    if (create->parent != kNoEntity && !w.Has(create->parent))
      return C::kNotFound;
    if (w.Has(create->entity)) return C::kAlreadyExists;
    RefNode n = ToRef(create->local);
    n.parent = create->parent;
    w.nodes[create->entity] = n;
  } else if (const auto* destroy = std::get_if<DestroyOp>(&command)) {
    if (destroy->entity == kNoEntity) return C::kInvalidArgument;
    if (!w.Has(destroy->entity)) return C::kNotFound;
    if (destroy->mode == DestroyMode::kSubtree) {
      w.DestroySubtree(destroy->entity);
    } else {
      const EntityId grandparent = w.nodes[destroy->entity].parent;
      for (EntityId c : w.Children(destroy->entity)) {
        w.recomputed_roots.insert(c);
        const glm::dmat4 world = w.World(c);
        w.nodes[c].parent = grandparent;
        w.SetLocalFromWorld(c, grandparent, world);
      }
      w.nodes.erase(destroy->entity);
    }
  } else if (const auto* link = std::get_if<LinkOp>(&command)) {
    if (link->entity == kNoEntity) return C::kInvalidArgument;
    if (!w.Has(link->entity)) return C::kNotFound;
    if (link->parent == link->entity) return C::kFailedPrecondition;
    if (link->parent != kNoEntity) {
      if (!w.Has(link->parent)) return C::kNotFound;
      for (EntityId a = link->parent; a != kNoEntity; a = w.nodes[a].parent) {
        if (a == link->entity) return C::kFailedPrecondition;
      }
    }
    w.recomputed_roots.insert(link->entity);
    const glm::dmat4 world = w.World(link->entity);
    w.nodes[link->entity].parent = link->parent;
    if (link->mode == LinkMode::kKeepWorld) {
      w.SetLocalFromWorld(link->entity, link->parent, world);
    }
  } else if (const auto* set_local = std::get_if<SetLocalOp>(&command)) {
    if (set_local->entity == kNoEntity ||
        !RefValidTransform(set_local->local)) {
      return C::kInvalidArgument;
    }
    if (!w.Has(set_local->entity)) return C::kNotFound;
    w.recomputed_roots.insert(set_local->entity);
    const EntityId parent = w.nodes[set_local->entity].parent;
    w.nodes[set_local->entity] = ToRef(set_local->local);
    w.nodes[set_local->entity].parent = parent;
  } else if (const auto* set_world = std::get_if<SetWorldOp>(&command)) {
    if (set_world->entity == kNoEntity ||
        !RefValidTransform(set_world->world)) {
      return C::kInvalidArgument;
    }
    if (!w.Has(set_world->entity)) return C::kNotFound;
    w.recomputed_roots.insert(set_world->entity);
    const EntityId parent = w.nodes[set_world->entity].parent;
    if (parent == kNoEntity) {
      w.nodes[set_world->entity] = ToRef(set_world->world);
    } else {
      w.SetLocalFromWorld(set_world->entity, parent,
                          RefLocal(ToRef(set_world->world)));
    }
  }
  return C::kOk;
}

// A batch on the reference: all or nothing.
absl::StatusCode RefApplyBatch(RefWorld& w, const std::vector<Command>& batch) {
  RefWorld copy = w;
  for (const Command& command : batch) {
    if (absl::StatusCode code = RefApply(copy, command);
        code != absl::StatusCode::kOk) {
      return code;
    }
  }
  w = std::move(copy);
  return absl::StatusCode::kOk;
}

std::string Describe(const Command& command) {
  if (const auto* create = std::get_if<CreateOp>(&command)) {
    return absl::StrCat("create ", create->entity, " under ", create->parent);
  } else if (const auto* destroy = std::get_if<DestroyOp>(&command)) {
    return absl::StrCat(
        "destroy ", destroy->entity,
        destroy->mode == DestroyMode::kSubtree ? " subtree" : " keep children");
  } else if (const auto* link = std::get_if<LinkOp>(&command)) {
    return absl::StrCat(
        "link ", link->entity, " to ", link->parent,
        link->mode == LinkMode::kKeepLocal ? " keep local" : " keep world");
  } else if (const auto* set_local = std::get_if<SetLocalOp>(&command)) {
    return absl::StrCat("set local ", set_local->entity);
  }
  return absl::StrCat("set world ", std::get<SetWorldOp>(command).entity);
}

std::string Describe(const std::vector<Command>& batch) {
  std::string out;
  for (const Command& c : batch) absl::StrAppend(&out, "\n  ", Describe(c));
  return out;
}

// ---------------------------------------------------------------------------
// Random operations.

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  float Uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int Int(int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }

  Transform GoodTransform() {
    Transform t;
    t.position = {Uniform(-10, 10), Uniform(-10, 10), Uniform(-10, 10)};
    const glm::vec3 axis = glm::normalize(
        glm::vec3(Uniform(-1, 1), Uniform(-1, 1), Uniform(-1, 1)) +
        glm::vec3(0.0f, 0.0f, 1e-3f));
    t.rotation = glm::angleAxis(Uniform(-3.14f, 3.14f), axis);
    t.scale = {Uniform(0.6f, 1.6f), Uniform(0.6f, 1.6f), Uniform(0.6f, 1.6f)};
    if (Chance(0.05)) t.scale.y = -t.scale.y;
    return t;
  }

  Transform AnyTransform() {
    Transform t = GoodTransform();
    if (!Chance(0.04)) return t;
    switch (Int(0, 4)) {
      case 0:
        t.position.x = std::nanf("");
        break;
      case 1:
        t.scale.z = 0.0f;
        break;
      case 2:
        t.rotation.w *= 1.5f;
        break;
      case 3:
        t.position.y = std::numeric_limits<float>::infinity();
        break;
      default:
        t.rotation = glm::quat(0, 0, 0, 0);
        break;
    }
    return t;
  }

  // Ids from a small range so duplicates, misses and re-use happen often.
  EntityId Id() {
    return Chance(0.01) ? kNoEntity : static_cast<EntityId>(Int(1, 400));
  }
  // A parent: an existing entity most of the time (kept shallow), else any id.
  EntityId Parent(const RefWorld& ref) {
    if (Chance(0.2) || ref.nodes.empty()) return Chance(0.5) ? kNoEntity : Id();
    auto it = ref.nodes.begin();
    std::advance(it, Int(0, static_cast<int>(ref.nodes.size()) - 1));
    EntityId p = it->first;
    int depth = 0;
    for (EntityId a = p; a != kNoEntity; a = ref.nodes.at(a).parent) ++depth;
    return depth >= kMaxDepth - 1 ? kNoEntity : p;
  }
  EntityId Existing(const RefWorld& ref) {
    if (ref.nodes.empty() || Chance(0.05)) return Id();
    auto it = ref.nodes.begin();
    std::advance(it, Int(0, static_cast<int>(ref.nodes.size()) - 1));
    return it->first;
  }

  Command Any(const RefWorld& ref) {
    switch (Int(0, 9)) {
      case 0:
      case 1:
        return CreateOp{Id(), Parent(ref), AnyTransform()};
      case 2:
        return DestroyOp{Existing(ref), Chance(0.5)
                                            ? DestroyMode::kSubtree
                                            : DestroyMode::kReparentChildren};
      case 3:
      case 4:
        return LinkOp{
            Existing(ref), Parent(ref),
            Chance(0.5) ? LinkMode::kKeepLocal : LinkMode::kKeepWorld};
      case 5:
        return SetWorldOp{Existing(ref), AnyTransform()};
      default:
        return SetLocalOp{Existing(ref), AnyTransform()};
    }
  }

 private:
  std::mt19937 rng_;
};

// ---------------------------------------------------------------------------
// The world's state at a frame end, to check the reported changes against.

struct Observed {
  EntityId parent;
  Matrix3x4 world;
  friend bool operator==(const Observed&, const Observed&) = default;
};
using State = std::map<EntityId, Observed>;

State Snapshot(const World& world) {
  State state;
  world.ForEach([&](EntityId e, EntityId parent, const Matrix3x4& m) {
    state[e] = Observed{parent, m};
  });
  return state;
}

// Replays `changes` on `state` the way FrameChanges says a copy should.
void Replay(const FrameChanges& changes, State* state) {
  for (EntityId e : changes.destroyed) state->erase(e);
  for (size_t k = 0; k < changes.created.size(); ++k) {
    (*state)[changes.created[k]].parent = changes.created_parent[k];
  }
  for (size_t k = 0; k < changes.reparented.size(); ++k) {
    state->at(changes.reparented[k]).parent = changes.reparented_parent[k];
  }
  for (size_t k = 0; k < changes.moved.size(); ++k) {
    state->at(changes.moved[k]).world = changes.MovedWorld(k);
  }
}

// `touched`: entities whose world matrix changed between two consecutive
// steps of the frame, that a command of the frame created, or that a command
// had recomputed (RefWorld::recomputed_roots).
void ExpectFrameChangesExact(const State& before, const State& after,
                             const std::set<EntityId>& touched,
                             const FrameChanges& changes) {
  std::set<EntityId> moved, created, destroyed, reparented;
  for (const auto& [e, now] : after) {
    const auto was = before.find(e);
    if (was == before.end()) {
      created.insert(e);
      moved.insert(e);
      continue;
    }
    if (!(was->second.world == now.world)) moved.insert(e);
    if (was->second.parent != now.parent) reparented.insert(e);
  }
  for (const auto& [e, was] : before) {
    if (!after.count(e)) destroyed.insert(e);
  }
  const auto as_set = [](const std::vector<EntityId>& v) {
    return std::set<EntityId>(v.begin(), v.end());
  };
  const std::set<EntityId> reported = as_set(changes.moved);
  EXPECT_EQ(changes.moved.size(), reported.size()) << "moved has duplicates";
  for (EntityId e : moved)
    EXPECT_TRUE(reported.count(e)) << e << " not in moved";
  for (EntityId e : reported) {
    EXPECT_TRUE(touched.count(e) && after.count(e))
        << e << " moved but untouched";
  }
  EXPECT_EQ(as_set(changes.created), created);
  EXPECT_EQ(as_set(changes.destroyed), destroyed);
  EXPECT_EQ(as_set(changes.reparented), reparented);

  // Parents come before their children in the lists that link.
  std::set<EntityId> seen;
  for (size_t k = 0; k < changes.created.size(); ++k) {
    EXPECT_TRUE(!created.count(changes.created_parent[k]) ||
                seen.count(changes.created_parent[k]))
        << "created " << changes.created[k] << " before its parent";
    seen.insert(changes.created[k]);
  }

  State replayed = before;
  Replay(changes, &replayed);
  EXPECT_TRUE(replayed == after) << "replaying the frame's changes diverged";
}

// ---------------------------------------------------------------------------

// std::map iterates by id, not parents first, so fill the memo in pre-order.
void ExpectAgreesPreOrder(const World& world, const RefWorld& ref, int step) {
  std::vector<EntityId> order;
  world.ForEach(
      [&](EntityId e, EntityId, const Matrix3x4&) { order.push_back(e); });
  std::map<EntityId, glm::dmat4> memo;
  std::map<EntityId, std::set<EntityId>> ref_children;
  for (const auto& [e, n] : ref.nodes) ref_children[n.parent].insert(e);
  ASSERT_EQ(order.size(), ref.nodes.size()) << "step " << step;
  for (EntityId e : order) {
    const auto it = ref.nodes.find(e);
    ASSERT_NE(it, ref.nodes.end()) << "step " << step << " extra entity " << e;
    const RefNode& n = it->second;
    ASSERT_EQ(*world.Parent(e), n.parent) << "step " << step << " entity " << e;
    ASSERT_TRUE(n.parent == kNoEntity || memo.count(n.parent))
        << "step " << step << ": " << e << " precedes its parent " << n.parent;
    const std::vector<EntityId> children = *world.Children(e);
    ASSERT_EQ(children.size(), ref_children[e].size()) << "step " << step;
    ASSERT_EQ(std::set<EntityId>(children.begin(), children.end()),
              ref_children[e])
        << "step " << step << " entity " << e;
    const glm::dmat4 expected =
        n.parent == kNoEntity ? RefLocal(n) : memo.at(n.parent) * RefLocal(n);
    memo[e] = expected;
    const Matrix3x4 actual = *world.WorldMatrix(e);
    for (int row = 0; row < 3; ++row) {
      for (int col = 0; col < 4; ++col) {
        const double want = expected[col][row];
        ASSERT_NEAR(actual(row, col), want,
                    kTolerance * std::max(1.0, std::fabs(want)))
            << "step " << step << " entity " << e << " m(" << row << "," << col
            << ")";
      }
    }
  }
}

class WorldModelTest : public testing::TestWithParam<uint32_t> {};

TEST_P(WorldModelTest, AgreesWithNaiveReference) {
  constexpr int kSteps = 26000;
  Generator gen(GetParam());
  World world;
  RefWorld ref;
  State frame_start = Snapshot(world);
  State last_step = frame_start;
  std::set<EntityId> touched;
  FrameChanges changes;
  int refused = 0;
  int frames = 0;

  for (int step = 0; step < kSteps; ++step) {
    std::vector<Command> batch;
    const int shape = gen.Int(0, 9);
    absl::Status status;
    if (shape <= 5) {
      // A single call through its own entry point.
      batch.push_back(gen.Any(ref));
      const Command& c = batch[0];
      if (const auto* create = std::get_if<CreateOp>(&c)) {
        status = world.Create(create->entity, create->parent, create->local);
      } else if (const auto* destroy = std::get_if<DestroyOp>(&c)) {
        status = world.Destroy(destroy->entity, destroy->mode);
      } else if (const auto* link = std::get_if<LinkOp>(&c)) {
        status = link->parent == kNoEntity
                     ? world.Unlink(link->entity, link->mode)
                     : world.Link(link->entity, link->parent, link->mode);
      } else if (const auto* set_local = std::get_if<SetLocalOp>(&c)) {
        status = world.SetLocal(set_local->entity, set_local->local);
      } else if (const auto* set_world = std::get_if<SetWorldOp>(&c)) {
        status = world.SetWorld(set_world->entity, set_world->world);
      }
    } else if (shape == 6) {
      // A bulk create: a small forest, parents in the batch or outside it.
      std::vector<CreateOp> ops;
      const int n = gen.Int(1, 24);
      for (int k = 0; k < n; ++k) {
        CreateOp op{gen.Id(), gen.Parent(ref), gen.AnyTransform()};
        if (!ops.empty() && gen.Chance(0.6)) {
          op.parent = ops[gen.Int(0, static_cast<int>(ops.size()) - 1)].entity;
        }
        ops.push_back(op);
        batch.push_back(op);
      }
      status = world.CreateMany(ops);
    } else if (shape == 7) {
      std::vector<SetLocalOp> ops;
      const int n = gen.Int(1, 32);
      for (int k = 0; k < n; ++k) {
        ops.push_back({gen.Existing(ref), gen.AnyTransform()});
        batch.push_back(ops.back());
      }
      status = world.SetLocals(ops);
    } else {
      // A mixed batch: its later commands see what its earlier ones did.
      const int n = gen.Int(2, 12);
      for (int k = 0; k < n; ++k) batch.push_back(gen.Any(ref));
      status = world.Apply(batch);
    }

    const absl::StatusCode expected = RefApplyBatch(ref, batch);
    ASSERT_EQ(status.code(), expected)
        << "step " << step << ": " << status << Describe(batch);
    if (!status.ok()) ++refused;
    const absl::Status consistent = world.CheckConsistency();
    ASSERT_TRUE(consistent.ok())
        << "step " << step << ": " << consistent << Describe(batch);
    ExpectAgreesPreOrder(world, ref, step);
    if (HasFatalFailure()) {
      FAIL() << "after step " << step << " (" << status
             << "):" << Describe(batch);
    }

    const State now = Snapshot(world);
    for (const auto& [e, observed] : now) {
      const auto was = last_step.find(e);
      if (was == last_step.end() || !(was->second.world == observed.world)) {
        touched.insert(e);
      }
    }
    if (status.ok()) {
      for (const Command& c : batch) {
        if (const auto* create = std::get_if<CreateOp>(&c))
          touched.insert(create->entity);
      }
      for (EntityId root : ref.recomputed_roots) {
        const absl::StatusOr<std::vector<EntityId>> subtree =
            world.Subtree(root);
        if (subtree.ok()) touched.insert(subtree->begin(), subtree->end());
      }
    }
    ref.recomputed_roots.clear();
    last_step = now;

    if (gen.Chance(0.15)) {
      world.EndFrame(&changes);
      ++frames;
      ExpectFrameChangesExact(frame_start, now, touched, changes);
      if (HasFailure()) {
        FAIL() << "frame changes wrong at step " << step;
      }
      frame_start = now;
      touched.clear();
    }
  }
  // The generator must really exercise both outcomes.
  EXPECT_GT(refused, kSteps / 50);
  EXPECT_GT(frames, kSteps / 10);
  EXPECT_GT(world.size(), 20u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, WorldModelTest,
                         testing::Values(1u, 2u, 3u, 4u));

}  // namespace
}  // namespace xform
