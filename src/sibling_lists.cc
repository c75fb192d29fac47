// Copyright 2026 The xform Authors.

#include "src/sibling_lists.h"

namespace xform::internal {

SiblingLists::SiblingLists(absl::Span<const Index> parent)
    : first_(parent.size(), kNoIndex),
      last_(parent.size(), kNoIndex),
      next_(parent.size(), kNoIndex),
      prev_(parent.size(), kNoIndex) {
  // Pre-order lists each parent's children in their order.
  for (Index i = 0; i < parent.size(); ++i) Append(parent[i], i);
}

void SiblingLists::Append(Index parent, Index child) {
  if (child == first_.size()) {
    for (std::vector<Index>* column : {&first_, &last_, &next_, &prev_}) {
      column->push_back(kNoIndex);
    }
  }
  Index& last = LastOf(parent);
  prev_[child] = last;
  next_[child] = kNoIndex;
  if (last == kNoIndex) {
    FirstOf(parent) = child;
  } else {
    next_[last] = child;
  }
  last = child;
}

void SiblingLists::Detach(Index parent, Index child) {
  const Index prev = prev_[child];
  const Index next = next_[child];
  (prev == kNoIndex ? FirstOf(parent) : next_[prev]) = next;
  (next == kNoIndex ? LastOf(parent) : prev_[next]) = prev;
  prev_[child] = next_[child] = kNoIndex;
}

void SiblingLists::Dissolve(Index parent, Index child) {
  const Index first = first_[child];
  if (first == kNoIndex) {
    Detach(parent, child);
    return;
  }
  const Index last = last_[child];
  const Index prev = prev_[child];
  const Index next = next_[child];
  prev_[first] = prev;
  next_[last] = next;
  (prev == kNoIndex ? FirstOf(parent) : next_[prev]) = first;
  (next == kNoIndex ? LastOf(parent) : prev_[next]) = last;
  first_[child] = last_[child] = kNoIndex;
  prev_[child] = next_[child] = kNoIndex;
}

void SiblingLists::AppendSubtree(Index i, absl::Span<const Index> parent,
                                 std::vector<Index>* out) const {
  // Depth first without a stack: down to a first child, else along to the
  // next sibling, else up until an ancestor below `i` has one.
  Index at = i;
  while (true) {
    out->push_back(at);
    if (first_[at] != kNoIndex) {
      at = first_[at];
      continue;
    }
    while (at != i && next_[at] == kNoIndex) at = parent[at];
    if (at == i) return;
    at = next_[at];
  }
}

std::vector<Index> SiblingLists::PreOrder(
    absl::Span<const Index> parent) const {
  std::vector<Index> order;
  order.reserve(first_.size());
  for (Index root = first_root_; root != kNoIndex; root = next_[root]) {
    AppendSubtree(root, parent, &order);
  }
  return order;
}

}  // namespace xform::internal
