// Copyright 2026 The xform Authors.

#include "server/replication/echo_filter.h"

#include "server/replication/slot_bits.h"

namespace xform::server {

EchoFilter::WritingClients EchoFilter::WritingClientsOf(
    const FrameWriters& writers) {
  WritingClients clients;
  absl::string_view last;
  for (const auto& [e, client] : writers) {
    // Mostly one or a few writers: a compare, not a hash, an entity.
    if (client == last && !clients.empty()) continue;
    clients.insert(client);
    last = client;
  }
  return clients;
}

absl::flat_hash_set<EntityId> EchoFilter::EchoesOf(
    const std::string& client, const FrameWriters& writers,
    const PublishedState& state) {
  // Everything below an entity another writer set moved because of it: mark
  // those subtrees, each slot once (a walk stops at what an earlier one
  // marked), so this is O(moved).
  SlotBits foreign;
  for (const auto& [e, writer] : writers) {
    if (writer == client) continue;
    const PublishedState::Slot slot = state.Find(e);
    if (slot == PublishedState::kNoSlot) continue;
    state.VisitSubtree(slot,
                       [&](PublishedState::Slot d) { return foreign.set(d); });
  }
  absl::flat_hash_set<EntityId> echoes;
  for (const auto& [e, writer] : writers) {
    if (writer != client) continue;
    // Destroyed since (no slot): nothing of it is sent, echo or not.
    const PublishedState::Slot slot = state.Find(e);
    if (slot == PublishedState::kNoSlot || !foreign.test(slot)) {
      echoes.insert(e);
    }
  }
  return echoes;
}

bool EchoFilter::MayShare(
    const WritingClients& writing,
    absl::FunctionRef<bool(const absl::flat_hash_set<EntityId>&)> moves_any)
    const {
  return !writing.contains(client_) && !untracked_ &&
         (lagging_.empty() || !moves_any(lagging_));
}

void EchoFilter::Lagged(EntityId e, size_t max) {
  if (!compact_ || untracked_) return;
  lagging_.insert(e);
  if (lagging_.size() > max) {
    absl::flat_hash_set<EntityId>().swap(lagging_);
    untracked_ = true;
  }
}

void EchoFilter::Forget() {
  absl::flat_hash_set<EntityId>().swap(lagging_);
  untracked_ = false;
}

}  // namespace xform::server
