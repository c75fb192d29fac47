// Copyright 2026 The xform Authors.
//
// The largest gRPC message either end sends or accepts by default: xformd's
// --max_message_bytes, and the client library's Client::Options. The server
// splits frames and snapshots into parts well under it (see
// docs/limits.md), so a client that keeps this default receives everything a
// default server sends; raise both together.

#ifndef XFORM_MESSAGE_SIZE_H_
#define XFORM_MESSAGE_SIZE_H_

namespace xform {

inline constexpr int kDefaultMaxMessageBytes = 16 << 20;

}  // namespace xform

#endif  // XFORM_MESSAGE_SIZE_H_
