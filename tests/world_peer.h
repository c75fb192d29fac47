// Copyright 2026 The xform Authors.
//
// World's friend for tests, benchmarks and fuzzers: reaches the threshold at
// which a batch restructures (to apply the same batch both ways) and the
// sweep on its own (to time it apart from setting locals). Not for xformd.

#ifndef XFORM_TESTS_WORLD_PEER_H_
#define XFORM_TESTS_WORLD_PEER_H_

#include <cstddef>
#include <vector>

#include "xform/world.h"

namespace xform {

class WorldPeer {
 public:
  // From `commands` shifting commands on, a batch restructures: 1 always,
  // SIZE_MAX never.
  static void RestructureAt(World& world, size_t commands) {
    world.restructure_at_ = commands;
  }
  static void SetLocalsWithoutPropagating(World& world,
                                          const std::vector<SetLocalOp>& ops) {
    for (const SetLocalOp& op : ops) {
      world.ApplySetLocal(world.index_of(op.entity), op.local);
    }
  }
  static void Propagate(World& world) { world.Propagate(); }
};

}  // namespace xform

#endif  // XFORM_TESTS_WORLD_PEER_H_
