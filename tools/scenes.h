// Copyright 2026 The xform Authors.
//
// Generated scenes of a known shape and size, for benchmarks, load tests and
// demos, so every measurement of xform (core benchmarks, the replication
// bench, xform-load) runs on the same worlds. Deterministic for a seed.

#ifndef XFORM_TOOLS_SCENES_H_
#define XFORM_TOOLS_SCENES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/string_view.h"
#include "xform/world.h"

namespace xform {

enum class SceneShape {
  kWide,    // Roots with 999 children each (a crowd of flat objects).
  kScene,   // Node i's parent is a random node among the previous 64, or
            // none with probability 1%: a game level's bushy, shallow trees.
  kChains,  // Chains of depth 100 (skeletons, robot arms).
  kCity,    // Roots spread over kCitySize x kCitySize (x and z from 0),
            // 0-20 high (y), turned about y only, at scale 1: a city's
            // traffic, for region views.
};

inline constexpr float kCitySize = 1000;

std::optional<SceneShape> ParseSceneShape(absl::string_view name);
const char* SceneShapeName(SceneShape shape);

// `count` creates, ids 1..count in order, parents before children, each
// with a random local transform (RandomTransform's, but a parent's scale is
// uniform: see MakeScene).
std::vector<CreateOp> MakeScene(SceneShape shape, size_t count,
                                uint32_t seed = 42);

// A random local transform of the kind the scenes use: position within
// +-10, any rotation, scale within 0.8-1.2 per axis.
Transform RandomTransform(std::mt19937& rng);

// The entities of `scene` that no other entity has as its parent: setting
// one of them moves exactly one world matrix.
std::vector<EntityId> Leaves(const std::vector<CreateOp>& scene);
std::vector<EntityId> Roots(const std::vector<CreateOp>& scene);

}  // namespace xform

#endif  // XFORM_TOOLS_SCENES_H_
