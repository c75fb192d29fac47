// Copyright 2026 The xform Authors.
//
// The binary message xform-web sends a browser tab: what changed in the
// tab's view since the previous message, laid out so the page views it as
// typed arrays without parsing (tools/web/page/src/frame.js reads it).
//
// Little-endian, every array aligned to its element size:
//   offset  0  u32  kTabFrameMagic ("XFW2")
//           4  u32  flags: kTabFrameResynced
//           8  u32  n, entities created, moved or re-parented
//          12  u32  d, entities destroyed
//          16  f64  frame
//          24  f64  the frame's publication, Unix milliseconds (xformd's
//                   server_time_unix_nanos)
//          32  f64  when xform-web sent this, Unix milliseconds
//          40  f64  the frame's stamp (FrameUpdate.stamp_nanos), in
//                   milliseconds on the world's writers' clock: when the
//                   poses were true, what the page interpolates by
//          48  f64  ids[n]
//              f64  parents[n] (0: a root)
//              f32  worlds[12 n], 3x4 row-major as in the protocol
//              f64  destroyed[d]
// Ids travel as doubles, which JavaScript holds exactly up to 2^53; an id
// above that is sent rounded (the page cannot key it exactly).
//
// 48 + 64 bytes per entity + 8 per destroyed one.

#ifndef XFORM_TOOLS_WEB_TAB_FRAME_H_
#define XFORM_TOOLS_WEB_TAB_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "xform/mirror.h"

namespace xform::web {

inline constexpr uint32_t kTabFrameMagic = 0x32574658;  // "XFW2"
inline constexpr uint32_t kTabFrameResynced = 1;
inline constexpr size_t kTabFrameHeaderBytes = 48;

// Writes `state` as one message into `out` (replacing what it held, keeping
// its memory). O(entities in state).
void EncodeTabFrame(const MirrorChangedState& state, absl::Time published,
                    absl::Time sent, std::string* out);

}  // namespace xform::web

#endif  // XFORM_TOOLS_WEB_TAB_FRAME_H_
