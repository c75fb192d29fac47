// Copyright 2026 The xform Authors.
//
// A Foxglove client's WebSocket on xform-web's Foxglove endpoint
// (foxglove.websocket.v1, foxglove_protocol.h).
//
// Channels. Each world the gateway's token lists (only the query's world=,
// when given) is two channels, advertised on connect and as worlds come
// and go (the gateway lists them each second):
//   /xform/<world>/tf     foxglove.FrameTransforms: each entity's frame
//                         ("e<id>") in its parent's ("world" for a root)
//   /xform/<world>/scene  foxglove.SceneUpdate: each entity a cube of its
//                         scale, frame-locked to its frame
// both protobuf, the schema a FileDescriptorSet of foxglove's own .proto
// (tools/foxglove/transforms.h says how xform's transforms become these).
// A world that goes and comes back keeps its channel ids.
//
// Views. Subscribing to either channel of a world starts a Mirror of it
// (at most GatewayOptions::foxglove_max_worlds at once), with the query's
// subtrees=, region= and rate= (as a tab's: /?subtrees=1,2&rate=10). Its
// first message is the whole view; then each message holds what changed
// since the one before, stamped with its frame's stamp. A resync (the
// world deleted and re-created, xformd restarted) sends the whole view
// again, and the scene deletes all before it draws, so the client's tree
// is re-seeded rather than left with what no longer is (foxglove#925).
//
// Pace. One message is written at a time; frames that arrive meanwhile
// only mark the view behind, and the next message holds their net
// changes. A slow client skips frames; nothing queues but the replies to
// its own requests, and a client whose unread replies pass
// foxglove_max_queued is closed. Its memory is its Mirrors plus one message
// per channel.
//
// Parameters ("parameters" capability): xform.region, settable when the
// connection was opened with a region, moves every view's region (a
// viewer that follows a camera); xform.subtrees, xform.rate_hz and
// xform.world are read-only.
//
// A message the session does not read (not JSON, an op it does not serve,
// a binary message, an unknown channel or subscription) gets an error
// status and changes nothing; one larger than foxglove_max_inbound_bytes
// closes the connection (1009).

#ifndef XFORM_TOOLS_WEB_FOXGLOVE_SESSION_H_
#define XFORM_TOOLS_WEB_FOXGLOVE_SESSION_H_

#include <cstdint>
#include <memory>

#include "tools/web/gateway_impl.h"
#include "tools/web/page_protocol.h"

namespace xform::web {

// The Foxglove client `query` asked for on `stream`; Accept() opens it.
std::shared_ptr<Connection> MakeFoxgloveSession(beast::tcp_stream stream,
                                                WebGateway::Impl& gateway,
                                                uint64_t id, TabQuery query);

}  // namespace xform::web

#endif  // XFORM_TOOLS_WEB_FOXGLOVE_SESSION_H_
