// Copyright 2026 The xform Authors.

#include "tools/scenes.h"

#include <algorithm>
#include <random>

#include "absl/container/flat_hash_map.h"

namespace xform {
Transform RandomTransform(std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Transform t;
  t.position = {u(rng) * 10, u(rng) * 10, u(rng) * 10};
  t.rotation = glm::angleAxis(u(rng) * 3.0f,
                              glm::normalize(glm::vec3(u(rng), u(rng), u(rng)) +
                                             glm::vec3(0, 0, 0.01f)));
  t.scale = {1.0f + 0.2f * u(rng), 1.0f + 0.2f * u(rng), 1.0f + 0.2f * u(rng)};
  return t;
}

std::optional<SceneShape> ParseSceneShape(absl::string_view name) {
  if (name == "wide") return SceneShape::kWide;
  if (name == "scene") return SceneShape::kScene;
  if (name == "chains") return SceneShape::kChains;
  if (name == "city") return SceneShape::kCity;
  return std::nullopt;
}

const char* SceneShapeName(SceneShape shape) {
  switch (shape) {
    case SceneShape::kWide:
      return "wide";
    case SceneShape::kScene:
      return "scene";
    case SceneShape::kChains:
      return "chains";
    case SceneShape::kCity:
      return "city";
  }
  return "?";
}

std::vector<CreateOp> MakeScene(SceneShape shape, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<CreateOp> ops(count);
  std::uniform_int_distribution<int> back(1, 64);
  std::bernoulli_distribution new_root(0.01);
  for (size_t i = 0; i < count; ++i) {
    EntityId parent = kNoEntity;
    switch (shape) {
      case SceneShape::kWide:
        parent = i % 1000 == 0 ? kNoEntity : (i / 1000) * 1000 + 1;
        break;
      case SceneShape::kScene:
        if (i > 0 && !new_root(rng)) {
          parent =
              std::max<int64_t>(0, static_cast<int64_t>(i) - back(rng)) + 1;
        }
        break;
      case SceneShape::kChains:
        parent = i % 100 == 0 ? kNoEntity : i;  // The previous node.
        break;
      case SceneShape::kCity:
        break;
    }
    ops[i] = {i + 1, parent, RandomTransform(rng)};
    if (shape == SceneShape::kCity) {
      std::uniform_real_distribution<float> ground(0, kCitySize), height(0, 20),
          yaw(0, 6.2831853f);
      Transform& local = ops[i].local;
      local.position = {ground(rng), height(rng), ground(rng)};
      local.rotation = glm::angleAxis(yaw(rng), glm::vec3(0, 1, 0));
      local.scale = glm::vec3(1);
    }
  }
  // A parent scaled unevenly skews its rotated children: their world
  // matrices are no longer a rotation and a scale, which engines warn
  // against and the compact encoding sends raw. So only leaves (ids are
  // 1..count, a parent's op is ops[parent - 1]) keep a per-axis scale.
  for (const CreateOp& op : ops) {
    if (op.parent != kNoEntity) {
      glm::vec3& scale = ops[op.parent - 1].local.scale;
      scale = glm::vec3(scale.x);
    }
  }
  return ops;
}

std::vector<EntityId> Leaves(const std::vector<CreateOp>& scene) {
  // Ids are 1..n in MakeScene's scenes, but any ids work here.
  absl::flat_hash_map<EntityId, bool> has_child;
  for (const CreateOp& op : scene) has_child.try_emplace(op.entity, false);
  for (const CreateOp& op : scene) {
    if (op.parent != kNoEntity) has_child[op.parent] = true;
  }
  std::vector<EntityId> leaves;
  for (const CreateOp& op : scene) {
    if (!has_child[op.entity]) leaves.push_back(op.entity);
  }
  return leaves;
}

std::vector<EntityId> Roots(const std::vector<CreateOp>& scene) {
  std::vector<EntityId> roots;
  for (const CreateOp& op : scene) {
    if (op.parent == kNoEntity) roots.push_back(op.entity);
  }
  return roots;
}

}  // namespace xform
