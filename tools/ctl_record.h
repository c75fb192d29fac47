// Copyright 2026 The xform Authors.
//
// `xformctl record` and `xformctl play`: a world's stream to an MCAP file
// that Foxglove opens, and such a file back into a world.
//
// A recording (tools/mcap/mcap.h, zstd chunks, indexed) holds:
//   - /tf, foxglove.FrameTransforms in protobuf (the schema a
//     FileDescriptorSet of foxglove's own .proto): one message for each
//     frame the recorder's mirror took in, its log and publish time the
//     frame's stamp (FrameUpdate.stamp_nanos), its sequence the frame
//     number's low 32 bits; every entity created, moved or re-parented by
//     that frame, in its parent's frame (tools/foxglove/transforms.h). The
//     first is the whole view.
//   - /xform/destroyed, JSON {"frame_ids": ["e7", ...]}: the entities a
//     frame destroyed, before that frame's /tf message.
//   - /xform/scene, foxglove.SceneUpdate: each entity as a box in its own
//     frame (frame-locked, so it moves with /tf; sent when the entity is
//     new or its scale changed), and deletions for the destroyed, after
//     that frame's /tf message. Foxglove's 3D panel draws the world with
//     no model.
// The channel's metadata names the world ("xform.world").
//
// A recorder that falls behind the world folds frames, as any subscriber
// does: a message then holds several frames' net changes.
//
// Play writes each /tf message as one batch that ends a frame, stamped
// with its log time (or, with `restamp`, the server's clock): entities it
// has not created yet are created (parents first), those whose parent
// changed are re-linked, every one's local set; a frame's destroys go in
// the same batch. At `rate` times the recorded pace (0: as fast as the
// server answers). Scale is not in FrameTransforms: a world played back has
// its entities' world poses without their scale (the recording's boxes
// show it).

#ifndef XFORM_TOOLS_CTL_RECORD_H_
#define XFORM_TOOLS_CTL_RECORD_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "xform/client.h"
#include "xform/mirror.h"

namespace xform::tools {

inline constexpr char kTransformsTopic[] = "/tf";
inline constexpr char kDestroyedTopic[] = "/xform/destroyed";
inline constexpr char kSceneTopic[] = "/xform/scene";

struct RecordOptions {
  std::string out;  // The .mcap file, created or truncated.
  // Stop after this many frames past the first (whole view) message; 0:
  // until `stop`.
  int frames = 0;
  std::function<bool()> stop = [] { return false; };
  // Called once the view is in and recording has begun.
  std::function<void()> on_started = [] {};
};

struct RecordSummary {
  uint64_t messages = 0;  // /tf messages.
  uint64_t transforms = 0;
  uint64_t destroyed = 0;
};

// Subscribes as `mirror` says (its driver and callbacks are the
// recorder's) and records until done.
absl::StatusOr<RecordSummary> RecordWorld(Client& client, MirrorOptions mirror,
                                          const RecordOptions& options);

struct PlayOptions {
  // Created (driven) if it does not exist; one that holds entities is
  // refused FAILED_PRECONDITION.
  std::string world;
  double rate = 1;  // Times the recorded pace; 0: at once.
  bool restamp = false;
  std::function<bool()> stop = [] { return false; };
};

struct PlaySummary {
  uint64_t messages = 0;  // /tf messages played.
  uint64_t frames = 0;    // Batches written.
  uint64_t created = 0;
};

// INVALID_ARGUMENT for a message that is not what a recording holds (a
// frame id that names no entity, a pose that is not one), DATA_LOSS for a
// file that is not MCAP, the server's status for a refused batch.
absl::StatusOr<PlaySummary> PlayRecording(Client& client,
                                          const std::string& path,
                                          const PlayOptions& options);

}  // namespace xform::tools

#endif  // XFORM_TOOLS_CTL_RECORD_H_
