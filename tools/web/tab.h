// Copyright 2026 The xform Authors.
//
// A browser tab's WebSocket (gateway.h says what a tab is sent and may
// send): a Mirror of the tab's view, and the net changes since the last
// message written whenever the page has acknowledged enough. Everything but
// the mirror's two callbacks runs on the tab's strand; the callbacks (on
// the mirror's thread) only note the publication time and post a wake-up,
// at most one outstanding.

#ifndef XFORM_TOOLS_WEB_TAB_H_
#define XFORM_TOOLS_WEB_TAB_H_

#include <cstdint>
#include <memory>

#include "tools/web/gateway_impl.h"
#include "tools/web/page_protocol.h"

namespace xform::web {

// The tab `query` asked for on `stream`; Accept() opens it.
std::shared_ptr<Connection> MakeTab(beast::tcp_stream stream,
                                    WebGateway::Impl& gateway, uint64_t id,
                                    TabQuery query);

}  // namespace xform::web

#endif  // XFORM_TOOLS_WEB_TAB_H_
