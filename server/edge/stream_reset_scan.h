// Copyright 2026 The xform Authors.
//
// CountStreamResets: how many HTTP/2 RST_STREAM frames a client's bytes hold,
// for the Acceptor to look at what a plaintext connection has sent that gRPC
// has not read yet (a recv() with MSG_PEEK).
//
// Why: HTTP/2 rapid reset (CVE-2023-44487). gRPC 1.51's reader keeps parsing
// while its socket has data and lets none of the streams it started go on
// until it runs dry, so a flood from two connections is never seen by
// anything above the transport (CancelFloodGuard included) while memory grows
// by hundreds of MB a second (docs/security.md). The flood's own bytes are
// queued in the socket meanwhile, and they say what it is: stream after
// stream cancelled. An honest client cancels a call now and then; it never
// has hundreds of cancels waiting unread.
//
// The bytes start wherever gRPC stopped reading, often inside a frame. So a
// frame is counted only as part of a chain: from an RST_STREAM's header
// (length 4, type 3, no flags, a client's odd stream id), the frames after it
// are followed by their lengths while each header is well formed (type and
// flags as HTTP/2 defines, length at most 16 KiB, gRPC's frame size), to the
// end of the bytes, and the resets of the first chain that reaches the end
// are the count. A header's shape met by chance inside a message breaks off
// at the first bad header, and the search starts again there.
//
// Cost: O(bytes): the search and the chains only move forward. No state.

#ifndef XFORM_SERVER_EDGE_STREAM_RESET_SCAN_H_
#define XFORM_SERVER_EDGE_STREAM_RESET_SCAN_H_

#include "absl/strings/string_view.h"

namespace xform::server {

// RST_STREAM frames in `bytes`, a stretch of an HTTP/2 client's stream
// starting anywhere (above).
int CountStreamResets(absl::string_view bytes);

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_STREAM_RESET_SCAN_H_
