// Copyright 2026 The xform Authors.
//
// Inside xform-web's gateway, for its own files only (gateway.cc, tab.cc,
// foxglove_session.cc): WebGateway::Impl, which owns the listeners, the
// io threads, the list of worlds and the region mover, and Connection,
// what it holds of each WebSocket it serves (a browser tab, a Foxglove
// client). Beast on an io_context; each connection on a strand of its own.

#ifndef XFORM_TOOLS_WEB_GATEWAY_IMPL_H_
#define XFORM_TOOLS_WEB_GATEWAY_IMPL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Asio's scheduler, inlined at -O3, trips GCC 12's -Wnull-dereference: a
// false positive in its header, off for the files that include it.
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tools/web/gateway.h"
#include "xform/client.h"
#include "xform/region.h"

namespace xform::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

inline std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

// A plain answer, kept alive as the request asks.
Response TextResponse(const Request& request, http::status status,
                      std::string_view content_type, std::string body);

using WebSocket = websocket::stream<beast::tcp_stream>;

// A connection's WebSocket before its handshake: 10 s to complete it, the
// gateway's idle timeout with pings, messages in at most `max_inbound`
// bytes, whole messages out, the handshake's answer naming xform-web (and
// `subprotocol`, when one was chosen).
void PrepareWebSocket(WebSocket& ws, const GatewayOptions& options,
                      size_t max_inbound, std::string subprotocol = "");

// Closes a connection's socket, as its End() does.
inline void CloseSocket(WebSocket& ws) {
  beast::error_code ignored;
  beast::get_lowest_layer(ws).socket().close(ignored);
}

// A WebSocket the gateway serves. Its views are Mirrors of its own.
class Connection {
 public:
  virtual ~Connection() = default;
  // Completes the WebSocket handshake of the request that opened it.
  virtual void Accept(const Request& request) = 0;
  // On the gateway's region mover (a unary call to xformd per view, which
  // the connection's strand must not wait for): moves its views' regions.
  virtual absl::Status SetRegion(const Region& region) = 0;
  // Then, from the mover: the outcome, to post to the connection's strand.
  virtual void PostRegionMoved(absl::Status status) = 0;
  // At shutdown, with the io threads and the mover joined: drops the
  // Mirrors, so that no callback outlives the gateway.
  virtual void StopMirrors() = 0;
};

class WebGateway::Impl {
 public:
  Impl(Client& client, const GatewayOptions& options);
  ~Impl();
  absl::Status Init();

  int port() const { return port_; }
  int foxglove_port() const { return foxglove_port_; }
  GatewayStats stats() const;

  // For HttpSession: whether the request's Host is a name this gateway
  // answers to (see GatewayOptions::allowed_hosts). A page whose name an
  // attacker re-points at this machine (DNS rebinding) is same-origin with
  // the gateway as far as its browser knows, and sends its own name as
  // Host and Origin alike; only the Host tells the gateway apart from it.
  bool HostAllowed(const Request& request) const;
  // For HttpSession: the answer to a plain request on --listen, or on the
  // Foxglove endpoint.
  Response Answer(const Request& request);
  Response AnswerFoxglove(const Request& request);
  // For HttpSession: a WebSocket upgrade, to /ws (a tab) or on the
  // Foxglove endpoint. Takes the stream when it opens a connection;
  // otherwise returns the refusal to send.
  std::optional<Response> Upgrade(beast::tcp_stream& stream,
                                  const Request& request);
  std::optional<Response> UpgradeFoxglove(beast::tcp_stream& stream,
                                          const Request& request);

  // For connections.
  Client& client() { return client_; }
  const GatewayOptions& options() const { return options_; }
  void CountFrame() { frames_seen_.fetch_add(1, std::memory_order_relaxed); }
  void CountMessage(size_t bytes) {
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void CountBadInput() { tabs_closed_for_input_.fetch_add(1); }
  void CountFoxgloveRefusal() { foxglove_refusals_.fetch_add(1); }
  void CountPaused(int change) { tabs_paused_.fetch_add(change); }
  // Moves `connection`'s regions to `region` on the mover's thread. Only
  // a connection's latest region is sent: one asked for while its last is
  // on its way replaces the one before it.
  void MoveRegion(const std::shared_ptr<Connection>& connection,
                  const Region& region);
  void ConnectionEnded(uint64_t id, bool foxglove);
  // The worlds xformd listed last (each second), and a number that
  // changes when the list does.
  std::pair<uint64_t, std::vector<std::string>> Worlds();
  // This run of the gateway, for Foxglove's serverInfo.sessionId.
  const std::string& run_id() const { return run_id_; }
  // Encoded messages Foxglove clients of the same view share, by a key
  // that names the view and the frames they span: the newest
  // kSharedPayloads, found by a scan.
  std::shared_ptr<const std::string> SharedPayload(const std::string& key);
  void SharePayload(std::string key,
                    std::shared_ptr<const std::string> payload);

 private:
  absl::Status Listen(const std::string& listen, tcp::acceptor& acceptor,
                      int* port);
  void Accept(tcp::acceptor& acceptor, bool foxglove);
  void RefreshWorlds();
  void MoveRegions();
  // Registers a connection that `make` opens with the id it is given, or
  // returns 503 when `open` already has `limit`.
  template <typename Make>
  std::optional<Response> Open(const Request& request, bool foxglove,
                               Make make);

  Client& client_;
  const GatewayOptions options_;
  const std::string run_id_;
  absl::flat_hash_set<std::string> allowed_hosts_;    // Lowercased.
  absl::flat_hash_set<std::string> allowed_origins_;  // Foxglove's.
  std::string index_html_, app_js_, app_js_map_;
  int port_ = 0;
  int foxglove_port_ = 0;

  std::atomic<int> tabs_open_{0}, tabs_paused_{0}, foxglove_open_{0};
  std::atomic<uint64_t> tabs_opened_{0}, messages_sent_{0}, bytes_sent_{0},
      frames_seen_{0}, tabs_closed_for_input_{0}, foxglove_opened_{0},
      foxglove_refusals_{0};

  // The region mover's queue: each connection's latest region, in the
  // order they asked.
  absl::Mutex moves_mu_;
  absl::flat_hash_map<Connection*, std::pair<std::weak_ptr<Connection>, Region>>
      pending_moves_ ABSL_GUARDED_BY(moves_mu_);
  std::deque<Connection*> move_order_ ABSL_GUARDED_BY(moves_mu_);
  bool moves_stopping_ ABSL_GUARDED_BY(moves_mu_) = false;
  std::thread mover_;

  static constexpr size_t kSharedPayloads = 16;
  absl::Mutex shared_mu_;
  std::deque<std::pair<std::string, std::shared_ptr<const std::string>>>
      shared_payloads_ ABSL_GUARDED_BY(shared_mu_);

  absl::Mutex worlds_mu_;
  std::string worlds_json_ ABSL_GUARDED_BY(worlds_mu_);
  std::vector<std::string> world_names_ ABSL_GUARDED_BY(worlds_mu_);
  uint64_t worlds_generation_ ABSL_GUARDED_BY(worlds_mu_) = 0;
  absl::Notification stop_;
  std::thread refresher_;

  // Open connections, for closing their mirrors at shutdown. Declared
  // before the io_context: connections that its handlers hold unregister
  // as it goes.
  absl::Mutex connections_mu_;
  uint64_t next_connection_id_ ABSL_GUARDED_BY(connections_mu_) = 1;
  absl::flat_hash_map<uint64_t, std::weak_ptr<Connection>> connections_
      ABSL_GUARDED_BY(connections_mu_);

  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  tcp::acceptor foxglove_acceptor_;
  asio::steady_timer accept_retry_{ioc_};
  std::vector<std::thread> threads_;
};

}  // namespace xform::web

#endif  // XFORM_TOOLS_WEB_GATEWAY_IMPL_H_
