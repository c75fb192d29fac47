// Copyright 2026 The xform Authors.

#include "server/host/frame_digest.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace xform::server {
namespace {

// SplitMix64's finalizer: every input bit reaches every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9u;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebu;
  x ^= x >> 31;
  return x;
}

// One entry: its kind, its entity, and what it carries, chained.
uint64_t Entry(uint64_t kind, EntityId entity, const uint64_t* words,
               size_t count) {
  uint64_t h = Mix(kind ^ Mix(entity));
  for (size_t i = 0; i < count; ++i) h = Mix(h ^ words[i]);
  return h;
}

}  // namespace

std::string FrameCounts(const FrameChanges& changes) {
  return absl::StrCat("moved ", changes.moved.size(), ", created ",
                      changes.created.size(), ", destroyed ",
                      changes.destroyed.size(), ", re-parented ",
                      changes.reparented.size());
}

uint64_t FrameDigest(const FrameChanges& changes) {
  uint64_t sum = Mix(changes.frame);
  for (size_t k = 0; k < changes.moved.size(); ++k) {
    uint64_t words[6];
    static_assert(sizeof words == 12 * sizeof(float));
    std::memcpy(words, changes.moved_world.data() + 12 * k, sizeof words);
    sum += Entry(1, changes.moved[k], words, 6);
  }
  for (size_t k = 0; k < changes.created.size(); ++k) {
    const uint64_t parent = changes.created_parent[k];
    sum += Entry(2, changes.created[k], &parent, 1);
  }
  for (EntityId e : changes.destroyed) sum += Entry(3, e, nullptr, 0);
  for (size_t k = 0; k < changes.reparented.size(); ++k) {
    const uint64_t parent = changes.reparented_parent[k];
    sum += Entry(4, changes.reparented[k], &parent, 1);
  }
  return sum;
}

}  // namespace xform::server
