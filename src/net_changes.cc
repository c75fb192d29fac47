// Copyright 2026 The xform Authors.

#include "xform/net_changes.h"

namespace xform {

void NetChanges::Note(EntityId entity, NetChange change) {
  auto [it, inserted] = net_.try_emplace(entity, 0);
  uint8_t& net = it->second;
  if (change == kDestroyed) {
    if (net & kCreated) {
      net_.erase(it);  // Came and went unseen.
    } else {
      net = kDestroyed;
    }
  } else if (change == kCreated && (net & kDestroyed)) {
    net = kMoved | kReparented;  // Went and came back: it stayed.
  } else {
    net |= change;
  }
}

}  // namespace xform
