// Copyright 2026 The xform Authors.
//
// libFuzzer: ApplyRequest bytes through the wire conversion, validation and
// World::Apply on a small world, which must stay consistent whatever the
// batch did (applied whole, or refused changing nothing). The batch is applied
// twice, shifting the columns command by command and restructuring the world
// once, and the two must agree to the bit: the same status, the same world in
// the same order, the same frame changes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "tests/world_compare.h"
#include "tests/world_peer.h"
#include "xform/v1/wire.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace {

// Three chains of 20 and some roots: links, cycles and deep destroys reach.
// Walks to the root past 1,000 ancestors take a batch back, so that the
// fuzzer reaches that refusal too.
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
    w->set_max_ancestor_walk(1000);
    return w;
  }();
  return *world;
}

void Check(bool holds) {
  if (!holds) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xform::v1::ApplyRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto commands = xform::v1::ToCommands(request, /*max_batch=*/1 << 16);
  if (!commands.ok()) return 0;
  xform::World shifting = Seed();
  xform::WorldPeer::RestructureAt(shifting, std::numeric_limits<size_t>::max());
  xform::World restructuring = Seed();
  xform::WorldPeer::RestructureAt(restructuring, 1);
  const size_t before = shifting.size();
  const absl::Status shifted = shifting.Apply(*commands);
  const absl::Status restructured = restructuring.Apply(*commands);
  Check(shifted == restructured);  // Code and message.
  Check(shifting.CheckConsistency().ok());
  Check(restructuring.CheckConsistency().ok());
  Check(shifted.ok() || shifting.size() == before);  // Not atomic.
  Check(xform::testing::InOrder(shifting) ==
        xform::testing::InOrder(restructuring));
  xform::FrameChanges a, b;
  shifting.EndFrame(&a);
  restructuring.EndFrame(&b);
  Check(shifting.CheckConsistency().ok());
  Check(restructuring.CheckConsistency().ok());
  Check(xform::testing::Sorted(a) == xform::testing::Sorted(b));
  return 0;
}
