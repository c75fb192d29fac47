// Copyright 2026 The xform Authors.
//
// The view of a region of space: a ViewFilter whose members are the
// entities whose positions are in a Region (xform/region.h), found and
// kept through the world's SpatialIndex, and moved in parts as the region
// moves (StartRegionMove, MoveRegionMore).

#ifndef XFORM_SERVER_REPLICATION_REGION_FILTER_H_
#define XFORM_SERVER_REPLICATION_REGION_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "server/replication/published_state.h"
#include "server/replication/spatial_index.h"
#include "server/replication/view_filter.h"
#include "xform/region.h"

namespace xform::server {

// The entities of `inner`'s view (null: the world) whose positions are in
// `region`, by its rule (xform/region.h: in when inside it, out when
// outside it grown by its margin), judged after every frame. Membership is
// a bit per slot; `index` places the state's live slots (the Replicator
// keeps it while it has region views) and outlives the filter. Costs:
// Contains O(1); Follow O(1) and `inner`'s; FollowMoves O(moved) bit tests
// and, for each moved entity in or near the region, a test of its
// position (with the moves by cell, FrameMoves::by_cell: O(cells the
// region grown covers where moves are + the moves from and to them));
// StartRegionMove O(cells the old and new regions grown cover, at most
// the occupied ones), MoveRegionMore O(its slots); the snapshot's search
// O(cells the region grown covers, at most the occupied ones, + the
// slots in them), judging `walk_chunk` of them at a time (after `inner`'s
// own).
// The cells of `cell_size` that a region view's searches cover: those of
// the box around `region` grown by its margin. O(1).
uint64_t CellsOfRegion(const Region& region, float cell_size);

std::unique_ptr<ViewFilter> MakeRegionFilter(const PublishedState& state,
                                             const SpatialIndex& index,
                                             const Region& region,
                                             std::unique_ptr<ViewFilter> inner,
                                             size_t walk_chunk);

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_REGION_FILTER_H_
