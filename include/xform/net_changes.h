// Copyright 2026 The xform Authors.
//
// NetChanges: what happened to each entity since an observer last looked,
// folded to one net change per entity. A subscriber's unsent events on the
// server and a Mirror's changes not yet asked for are both this: however many
// frames go by, an observer is told once per entity, and only what it can
// see from where it last looked.
//
//   NetChanges changes;
//   changes.Note(e, NetChange::kCreated);
//   changes.Note(e, NetChange::kMoved);      // Still just created, and where.
//   for (const auto& [entity, net] : changes) { ... }
//
// The folding, entity by entity:
//   - destroyed after created: never seen, so nothing at all;
//   - created after destroyed: it stayed, perhaps elsewhere under another
//     parent (moved and re-parented);
//   - destroyed: only that, whatever came before;
//   - anything else accumulates.
// "Created" and "destroyed" are as the observer sees them: an entity entering
// or leaving a filtered view is created or destroyed to that view.
//
// O(1) a Note; memory O(entities changed). Not thread-safe.

#ifndef XFORM_NET_CHANGES_H_
#define XFORM_NET_CHANGES_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "xform/world.h"

namespace xform {

// One entity's net change: a set of these bits.
enum NetChange : uint8_t {
  kCreated = 1,
  kDestroyed = 2,
  kMoved = 4,
  kReparented = 8,
};

class NetChanges {
 public:
  using Map = absl::flat_hash_map<EntityId, uint8_t>;

  // Folds `change` (one NetChange bit) into `entity`'s net change.
  void Note(EntityId entity, NetChange change);

  bool empty() const { return net_.empty(); }
  size_t size() const { return net_.size(); }
  Map::const_iterator begin() const { return net_.begin(); }
  Map::const_iterator end() const { return net_.end(); }

  // Makes room for `n` entities in all, so that noting that many does not
  // regrow the table on the way.
  void Reserve(size_t n) { net_.reserve(n); }
  // Forgets everything, keeping the memory for the next round.
  void clear() { net_.clear(); }
  // Forgets everything and gives the memory back.
  void Release() { Map().swap(net_); }
  // Everything noted so far, leaving this empty, with room for as many:
  // for taking the changes out under a lock and reading them after it, a
  // round at a time, without regrowing the map through each round.
  Map Take() {
    Map taken;
    taken.reserve(net_.size());
    taken.swap(net_);
    return taken;
  }
  // Starts loading where `entity`'s change would be, for a Note soon after:
  // in a big map each Note is a cache miss, and a batch of them can wait
  // for memory together instead of in turn.
  void Prefetch(EntityId entity) const { net_.prefetch(entity); }

 private:
  Map net_;
};

}  // namespace xform

#endif  // XFORM_NET_CHANGES_H_
