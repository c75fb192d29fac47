// Copyright 2026 The xform Authors.
//
// FrameDigest: 64 bits that tell whether two Worlds closed the same frame
// alike: its number, and every entity it created, destroyed, re-parented
// (with its parent) and moved (with its world matrix, bit for bit). In a
// cluster the node that writes a world logs each frame's digest, and every
// node that follows the log checks its own (cluster/world_follower.h): the
// core is deterministic, so a difference is a replica out of step, which
// reloads.
//
// The lists' order is not part of it (each entry is hashed apart and the
// hashes summed), so two worlds whose storage differs (one rebuilt from a
// snapshot) agree. O(entities the frame lists).

#ifndef XFORM_SERVER_HOST_FRAME_DIGEST_H_
#define XFORM_SERVER_HOST_FRAME_DIGEST_H_

#include <cstdint>
#include <string>

#include "xform/world.h"

namespace xform::server {

uint64_t FrameDigest(const FrameChanges& changes);

// What a frame changed, counted ("moved 12, created 3, destroyed 0,
// re-parented 1"): logged beside its digest, so that a replica whose
// digest differs says in what.
std::string FrameCounts(const FrameChanges& changes);

}  // namespace xform::server

#endif  // XFORM_SERVER_HOST_FRAME_DIGEST_H_
