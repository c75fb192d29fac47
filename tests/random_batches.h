// Copyright 2026 The xform Authors.
//
// Random batches that a world accepts: creates (as roots and under existing
// entities), links, destroys of both kinds, set-locals and set-worlds, over
// entities numbered from a base of the caller's, so that several writers can
// share one world without touching each other's entities. For tests that
// need many valid writes (an image's round trip, the crash test's writers).

#ifndef XFORM_TESTS_RANDOM_BATCHES_H_
#define XFORM_TESTS_RANDOM_BATCHES_H_

#include <cstdint>
#include <random>
#include <vector>

#include "glm/gtc/quaternion.hpp"
#include "xform/world.h"

namespace xform::testing {

class RandomBatches {
 public:
  // Ids from `first_id` up, never reused.
  RandomBatches(uint64_t seed, EntityId first_id)
      : rng_(seed), next_id_(first_id) {}

  // A batch of up to `max_commands` that `model` accepts; applies it to
  // `model` too. Set-locals only (a physics step) one time in three.
  std::vector<Command> Next(World& model, int max_commands) {
    for (;;) {
      World trial = model;
      std::vector<Command> batch;
      const int count =
          std::uniform_int_distribution<int>(1, max_commands)(rng_);
      const bool physics = Pick(3) == 0 && !mine_.empty();
      for (int k = 0; k < count; ++k) {
        Command command = physics
                              ? Command(SetLocalOp{Any(), RandomTransform()})
                              : RandomCommand(trial);
        if (trial.Apply({&command, 1}).ok()) batch.push_back(command);
      }
      if (batch.empty()) continue;
      if (!model.Apply(batch).ok()) continue;  // Never: each one applied.
      // Forget the ids the batch destroyed.
      std::erase_if(mine_, [&](EntityId e) { return !model.Has(e); });
      return batch;
    }
  }

  // The entities this writer created that are alive, as far as it knows.
  const std::vector<EntityId>& entities() const { return mine_; }
  // Takes `model`'s entities as its own (after a batch it made was lost).
  void Adopt(const World& model) {
    mine_.clear();
    model.ForEach(
        [&](EntityId e, EntityId, const Matrix3x4&) { mine_.push_back(e); });
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  EntityId Any() { return mine_[Pick(static_cast<int>(mine_.size()))]; }
  float Uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng_);
  }
  Transform RandomTransform() {
    Transform t;
    t.position = {Uniform(-10, 10), Uniform(-10, 10), Uniform(-10, 10)};
    t.rotation = glm::normalize(glm::quat(Uniform(-1, 1), Uniform(-1, 1),
                                          Uniform(-1, 1), Uniform(-1, 1)));
    t.scale = {Uniform(0.6f, 1.6f), Uniform(0.6f, 1.6f), Uniform(0.6f, 1.6f)};
    return t;
  }
  Command RandomCommand(const World& trial) {
    std::erase_if(mine_, [&](EntityId e) { return !trial.Has(e); });
    const int kind = mine_.size() < 8 ? 0 : Pick(10);
    if (kind <= 2) {
      const EntityId id = next_id_++;
      const EntityId parent = mine_.empty() || Pick(4) == 0 ? kNoEntity : Any();
      mine_.push_back(id);
      return CreateOp{id, parent, RandomTransform()};
    }
    if (kind == 3) {
      return LinkOp{Any(), Pick(3) == 0 ? kNoEntity : Any(),
                    Pick(2) ? LinkMode::kKeepLocal : LinkMode::kKeepWorld};
    }
    if (kind == 4) {
      return DestroyOp{Any(), Pick(2) ? DestroyMode::kSubtree
                                      : DestroyMode::kReparentChildren};
    }
    if (kind == 5) return SetWorldOp{Any(), RandomTransform()};
    return SetLocalOp{Any(), RandomTransform()};
  }

  std::mt19937_64 rng_;
  EntityId next_id_;
  std::vector<EntityId> mine_;
};

}  // namespace xform::testing

#endif  // XFORM_TESTS_RANDOM_BATCHES_H_
