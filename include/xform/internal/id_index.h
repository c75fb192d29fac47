// Copyright 2026 The xform Authors.
//
// IdIndex maps an entity's id to an index of ours: its row in the world,
// its slot in the server's published state. That lookup is paid for every
// moved entity of every frame, as the server takes a frame in and finds
// what its subscribers hold. (A Mirror's copy does without: see
// client_internal::Copy.)
//
// Most writers hand out ids densely (1, 2, 3 ...), so ids up to about twice
// the number held are kept in a flat array, 4 bytes an id: a lookup is one
// load from an array a fraction of the size of a hash map's slots (which, at
// 100k entities, are 2 MB and miss the cache on every lookup, twice: the
// control bytes, then the slot). Any other id (a hash, a handle with
// high bits set, a hostile peer's) goes in a hash map beside it, so every id
// works, and the array's memory stays bounded by the ids held: at most 16
// bytes for each id ever held at once, plus 32 KB.
//
// Not part of the API (the core and the server share it). Not thread-safe:
// its owner guards it.

#ifndef XFORM_INTERNAL_ID_INDEX_H_
#define XFORM_INTERNAL_ID_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "xform/internal/huge_page_allocator.h"
#include "xform/transform.h"

namespace xform::internal {

class IdIndex {
 public:
  static constexpr uint32_t kAbsent = ~uint32_t{0};

  size_t size() const { return size_; }
  // What the array takes, for the bound above.
  size_t array_bytes() const { return dense_.capacity() * sizeof(uint32_t); }
  // All it takes: the array, and the hash map's slots and control bytes.
  size_t bytes() const {
    return array_bytes() +
           sparse_.capacity() * (sizeof(decltype(sparse_)::slot_type) + 1);
  }

  // The index of `e`, or kAbsent. O(1).
  uint32_t Find(EntityId e) const {
    if (e < dense_.size()) return dense_[e];
    if (sparse_.empty()) return kAbsent;
    auto it = sparse_.find(e);
    return it == sparse_.end() ? kAbsent : it->second;
  }
  // Starts loading what Find(e) reads, for a Find soon after: the array's
  // entry; an id past it is looked up cold. Not the hash map's slot too:
  // with absl's prefetch() beside this one, GCC 12 at -O3 -DNDEBUG deleted
  // both (its dead code pass kept neither), in every loop that called this.
  void Prefetch(EntityId e) const {
    if (e < dense_.size()) __builtin_prefetch(&dense_[e]);
  }

  // Maps `e` to `row` unless it is mapped already; either way, its index.
  // Amortized O(1): the array at least doubles when it grows, and only then
  // are the hash map's ids that it now covers moved into it.
  uint32_t Insert(EntityId e, uint32_t row) {
    if (e >= dense_.size() && e < DenseLimit(size_ + 1)) Grow(e);
    if (e < dense_.size()) {
      if (dense_[e] != kAbsent) return dense_[e];
      dense_[e] = row;
    } else {
      auto [it, inserted] = sparse_.try_emplace(e, row);
      if (!inserted) return it->second;
    }
    ++size_;
    return row;
  }
  // Maps `e` to `row` unless it is mapped already; whether it did. (Insert's
  // answer cannot tell when `e` is mapped to `row` already.)
  bool TryInsert(EntityId e, uint32_t row) {
    const size_t held = size_;
    Insert(e, row);
    return size_ > held;
  }
  // Points `e`, which is mapped, to another index.
  void Set(EntityId e, uint32_t row) {
    if (e < dense_.size()) {
      dense_[e] = row;
    } else {
      sparse_[e] = row;
    }
  }
  // Maps `e` to `row`, whether or not it was mapped.
  void InsertOrAssign(EntityId e, uint32_t row) {
    if (Insert(e, row) != row) Set(e, row);
  }
  void Erase(EntityId e) {
    if (e < dense_.size()) {
      if (dense_[e] == kAbsent) return;
      dense_[e] = kAbsent;
    } else if (sparse_.erase(e) == 0) {
      return;
    }
    --size_;
  }
  void Clear() {
    Column<uint32_t>().swap(dense_);
    sparse_.clear();
    size_ = 0;
  }

 private:
  // An id below this goes in the array when `held` ids are held.
  static constexpr size_t DenseLimit(size_t held) { return 2 * held + 4096; }

  // Makes the array cover `e`: at least doubled, so that the ids moved in
  // from the hash map are moved O(log) times in all.
  void Grow(EntityId e) {
    const size_t covered = std::max<size_t>(e + 1, 2 * dense_.size());
    dense_.resize(covered, kAbsent);
    for (auto it = sparse_.begin(); it != sparse_.end();) {
      if (it->first < covered) {
        dense_[it->first] = it->second;
        sparse_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  // dense_[e]: e's index, or kAbsent. On 2 MB pages when big (a million
  // ids and more), as the columns it indexes are.
  Column<uint32_t> dense_;
  absl::flat_hash_map<EntityId, uint32_t> sparse_;  // Ids past the array.
  size_t size_ = 0;
};

}  // namespace xform::internal

#endif  // XFORM_INTERNAL_ID_INDEX_H_
