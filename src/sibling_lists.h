// Copyright 2026 The xform Authors.
//
// SiblingLists is a world's tree as doubly linked lists of children, kept for
// the length of one batch that restructures the world a lot. In the world's
// columns each link, destroy or insertion moves every instance after the
// change point, O(n) each, so k of them cost O(k n); here each is O(1) (a
// destroy O(its subtree)), and one O(n) pass at the end puts the columns
// back in pre-order (World::EndRestructure).
//
// Instances are the world's column positions. The lists keep sibling order
// exactly as the columns' primitives would: a linked or created instance
// becomes its parent's last child (a root: the last root), and the children
// of an instance dissolved into its parent take its place in order.

#ifndef XFORM_SRC_SIBLING_LISTS_H_
#define XFORM_SRC_SIBLING_LISTS_H_

#include <vector>

#include "absl/types/span.h"
#include "xform/world.h"

namespace xform::internal {

class SiblingLists {
 public:
  // The lists of the tree whose pre-ordered parent column is `parent`. O(n).
  explicit SiblingLists(absl::Span<const Index> parent);

  // `child`, detached or new (a new one: the next position after the last
  // the lists know), becomes the last child of `parent` (kNoIndex: the last
  // root). O(1).
  void Append(Index parent, Index child);
  // Takes `child` and its subtree out of `parent`'s children. O(1).
  void Detach(Index parent, Index child);
  // `child`'s children take its place among `parent`'s, in their order, and
  // `child` is detached with none. O(1); the children's parent column is
  // the caller's to update.
  void Dissolve(Index parent, Index child);

  Index first_child(Index i) const { return first_[i]; }
  Index next_sibling(Index i) const { return next_[i]; }

  // `i` and its descendants in pre-order, appended to `out`. `parent` is the
  // tree's parent column now. O(subtree).
  void AppendSubtree(Index i, absl::Span<const Index> parent,
                     std::vector<Index>* out) const;
  // Every instance still in the tree, in pre-order: the order the world's
  // columns take. O(n).
  std::vector<Index> PreOrder(absl::Span<const Index> parent) const;

 private:
  Index& FirstOf(Index parent) {
    return parent == kNoIndex ? first_root_ : first_[parent];
  }
  Index& LastOf(Index parent) {
    return parent == kNoIndex ? last_root_ : last_[parent];
  }

  // Per instance: first and last child, next and previous sibling.
  std::vector<Index> first_;
  std::vector<Index> last_;
  std::vector<Index> next_;
  std::vector<Index> prev_;
  Index first_root_ = kNoIndex;
  Index last_root_ = kNoIndex;
};

}  // namespace xform::internal

#endif  // XFORM_SRC_SIBLING_LISTS_H_
