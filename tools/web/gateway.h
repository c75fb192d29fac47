// Copyright 2026 The xform Authors.
//
// WebGateway: xform-web's server. It serves the page (index.html and its
// bundle, read once from a directory), a list of worlds, and a WebSocket
// per browser tab. Each tab subscribes to xformd through a Mirror of its
// own, with the world, subtree filter and region the tab asked for, so resync,
// filters, TLS and tokens are the client library's. The tab then gets, as
// binary messages (tab_frame.h), the changes its mirror saw, with the
// stamp of the frame they are from, so that the page draws them
// interpolated a little in the past (page/src/smoothing.js).
//
// Each tab is served at its own pace: the page acknowledges each binary
// message once it has applied it, and a tab has at most two unacknowledged
// (one being written). Frames that arrive meanwhile only mark the tab
// behind; the next message carries their net changes, read from the mirror
// then. A slow tab (a slow network, or a page too busy rendering to read)
// skips frames and catches up like a slow subscriber; nothing queues. Its
// memory is its mirror (its view of the world) plus one message.
//
// HTTP, on --listen, for requests whose Host is an address, localhost or
// one of allowed_hosts (else 403):
//   GET /                the page (index.html)
//   GET /app.js[.map]    its bundle
//   GET /api/worlds      JSON: {"worlds": [{"name", "entities", "frame",
//                        "tick_hz"}], "error": "..."} (refreshed each second)
//   GET /ws?world=W[&subtrees=1,2][&region=sphere:x,y,z,r[,margin=m]]
//          [&rate=HZ]    the WebSocket; 400 on a bad query, 503 past
//                        max_tabs. A region (xform/region.h's text, as
//                        xformctl takes it) makes the tab's view the
//                        entities in it: "follow camera". A rate asks
//                        xformd for at most HZ frames a second (0 to
//                        1000; 0, or none, is every frame).
// Tab to gateway, text: {"ack": frame} after applying a message;
// {"pause": true|false}; {"region": "sphere:..."} moves a tab's region
// (Mirror::SetRegion, from one thread of the gateway's, a tab's latest
// region only): its next message holds what entered and left. Anything
// else (binary, other JSON, a bad region, a region from a tab opened
// without one, larger than max_inbound_bytes) closes that tab with a close
// code (1003, 1008 or 1009) and touches nothing else.
// Gateway to tab, text: {"type": "status", "synced": bool, "message":
// "..."} whenever the mirror's state changes (reconnecting, live, a region
// move refused), checked every status_period.
//
// Foxglove, on --foxglove_listen when set (xform-web's flag: 8765, as
// foxglove_bridge): foxglove.websocket.v1, each world the gateway's token
// lists advertised as two channels, foxglove.FrameTransforms and
// foxglove.SceneUpdate; the view's subtrees, region and rate from the
// URL's query, as a tab's (foxglove_session.h says the rest).
//
// Beast on an io_context of `threads` threads; each connection on a strand.

#ifndef XFORM_TOOLS_WEB_GATEWAY_H_
#define XFORM_TOOLS_WEB_GATEWAY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "xform/client.h"
#include "xform/mirror.h"

namespace xform::web {

struct GatewayOptions {
  std::string listen = "127.0.0.1:8080";  // HOST:PORT; port 0 picks one.
  // Names, besides "localhost", that requests may give as their Host
  // (case-insensitive; a port is ignored). A Host that is an IP address is
  // always answered: DNS rebinding needs a name. Any other gets 403, on
  // every path and on the WebSocket upgrade, so that a page whose name is
  // re-pointed at this machine cannot read worlds through the gateway.
  std::vector<std::string> allowed_hosts;
  std::string web_root;  // Holds index.html, app.js (and app.js.map).
  int threads = 2;
  int max_tabs = 64;                // Open WebSockets; past it, 503.
  size_t max_inbound_bytes = 4096;  // One message from a tab.
  // The mirror's queue, in messages: a tab's mirror that falls this far
  // behind stops its stream, and xformd folds frames for it.
  int mirror_max_queued = 4;
  // How xformd sends the tabs' mirrors their matrices (the tabs get raw
  // floats either way).
  MirrorOptions::Encoding upstream_encoding = MirrorOptions::Encoding::kRaw;
  absl::Duration status_period = absl::Milliseconds(250);
  // A tab that has not read anything (not even a ping) for this long is
  // closed.
  absl::Duration idle_timeout = absl::Seconds(30);

  // The Foxglove endpoint: HOST:PORT, or empty for none.
  std::string foxglove_listen;
  // Origins, besides this host's own, that may open it ("*": any): a
  // browser-based Foxglove is another site.
  std::vector<std::string> foxglove_allowed_origins = {
      "https://app.foxglove.dev"};
  int foxglove_max_clients = 16;
  // Worlds one client may subscribe to at once: each is a Mirror, a stream
  // from xformd and a thread.
  int foxglove_max_worlds = 8;
  // One message from a Foxglove client (subscribe lists grow with worlds).
  size_t foxglove_max_inbound_bytes = 65536;
  // Messages to a Foxglove client not yet written (status replies to its
  // requests, advertisements) past which it is closed: one that sends
  // faster than it reads.
  int foxglove_max_queued = 256;
};

struct GatewayStats {
  int tabs = 0;                // Open now.
  uint64_t tabs_opened = 0;    // Since start.
  uint64_t messages_sent = 0;  // Binary messages, all tabs.
  uint64_t bytes_sent = 0;
  uint64_t frames_seen = 0;            // Frames the tabs' mirrors applied.
  uint64_t tabs_closed_for_input = 0;  // Bad input from a tab.
  int tabs_paused = 0;  // Open tabs whose page paused them ({"pause": true}).
  int foxglove_clients = 0;        // Open now.
  uint64_t foxglove_opened = 0;    // Since start.
  uint64_t foxglove_refusals = 0;  // Handshakes and requests refused.
};

class WebGateway {
 public:
  // Reads the page from web_root, binds, and serves on its own threads.
  // `client` must outlive the gateway.
  static absl::StatusOr<std::unique_ptr<WebGateway>> Start(
      Client& client, const GatewayOptions& options);
  ~WebGateway();  // Closes every tab and joins the threads.
  WebGateway(const WebGateway&) = delete;
  WebGateway& operator=(const WebGateway&) = delete;

  int port() const;
  int foxglove_port() const;  // 0 without foxglove_listen.
  GatewayStats stats() const;

  class Impl;

 private:
  explicit WebGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xform::web

#endif  // XFORM_TOOLS_WEB_GATEWAY_H_
