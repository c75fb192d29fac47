// Copyright 2026 The xform Authors.
//
// A small tour of the core until the server exists: builds a scene, moves part
// of it, and prints what each frame reports as changed.

#include <cstdio>
#include <vector>

#include "xform/world.h"

namespace {

void Print(const xform::FrameChanges& changes, size_t show) {
  std::printf(
      "frame %llu: %zu moved, %zu created, %zu destroyed, %zu reparented\n",
      static_cast<unsigned long long>(changes.frame), changes.moved.size(),
      changes.created.size(), changes.destroyed.size(),
      changes.reparented.size());
  for (size_t k = 0; k < changes.moved.size() && k < show; ++k) {
    const xform::Matrix3x4 m = changes.MovedWorld(k);
    std::printf("  entity %llu at (%.3f, %.3f, %.3f)\n",
                static_cast<unsigned long long>(changes.moved[k]), m.m[3],
                m.m[7], m.m[11]);
  }
}

}  // namespace

int main() {
  xform::World world;
  // A solar system: a sun, 8 planets, 4 moons each.
  std::vector<xform::CreateOp> scene;
  scene.push_back({1, xform::kNoEntity, {}});
  for (uint64_t planet = 0; planet < 8; ++planet) {
    const uint64_t id = 100 + planet;
    xform::Transform orbit;
    orbit.position = {10.0f * static_cast<float>(planet + 1), 0, 0};
    scene.push_back({id, 1, orbit});
    for (uint64_t moon = 0; moon < 4; ++moon) {
      xform::Transform local;
      local.position = {0, 0, 1.0f + static_cast<float>(moon)};
      scene.push_back({id * 10 + moon, id, local});
    }
  }
  if (auto s = world.CreateMany(scene); !s.ok()) {
    std::fprintf(stderr, "create failed: %s\n", s.ToString().c_str());
    return 1;
  }
  xform::FrameChanges changes;
  world.EndFrame(&changes);
  Print(changes, 3);

  // Turn the third planet: it and its four moons move, nothing else does.
  xform::Transform turned;
  turned.position = {30, 0, 0};
  turned.rotation = glm::angleAxis(glm::radians(90.0f), glm::vec3(0, 1, 0));
  (void)world.SetLocal(102, turned);
  world.EndFrame(&changes);
  Print(changes, 5);

  // Hand a moon to another planet, keeping where it is in the world.
  (void)world.Link(1020, 103, xform::LinkMode::kKeepWorld);
  (void)world.Destroy(107, xform::DestroyMode::kSubtree);
  world.EndFrame(&changes);
  Print(changes, 5);
  std::printf("%zu transforms, %llu recomputed in all\n", world.size(),
              static_cast<unsigned long long>(world.stats().recomputed));
  return 0;
}
