// Copyright 2026 The xform Authors.
//
// libFuzzer: ApplyRequest bytes through the wire conversion, validation and
// World::Apply on a small world, which must stay consistent whatever the
// batch did (applied whole, or refused changing nothing).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "xform/v1/wire.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace {

// Three chains of 20 and some roots: links, cycles and deep destroys reach.
const xform::World& Seed() {
  static const xform::World* world = [] {
    auto* w = new xform::World();
    std::vector<xform::CreateOp> ops;
    for (xform::EntityId e = 1; e <= 64; ++e) {
      ops.push_back({e, e <= 60 && e % 20 != 1 ? e - 1 : 0, {}});
    }
    if (!w->CreateMany(ops).ok()) std::abort();
    xform::FrameChanges changes;
    w->EndFrame(&changes);
    return w;
  }();
  return *world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xform::v1::ApplyRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto commands = xform::v1::ToCommands(request, /*max_batch=*/1 << 16);
  if (!commands.ok()) return 0;
  xform::World world = Seed();
  const size_t before = world.size();
  const absl::Status applied = world.Apply(*commands);
  if (!world.CheckConsistency().ok()) std::abort();
  if (!applied.ok() && world.size() != before) std::abort();  // Not atomic.
  xform::FrameChanges changes;
  world.EndFrame(&changes);
  if (!world.CheckConsistency().ok()) std::abort();
  return 0;
}
