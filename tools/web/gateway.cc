// Copyright 2026 The xform Authors.

#include "tools/web/gateway.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Asio's scheduler, inlined into this file at -O3, trips GCC 12's
// -Wnull-dereference: a false positive in its header, off for this file.
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"
#include "tools/web/page_protocol.h"
#include "tools/web/tab_frame.h"
#include "xform/mirror.h"
#include "xform/region.h"

namespace xform::web {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

Response TextResponse(const Request& request, http::status status,
                      std::string_view content_type, std::string body) {
  Response response(status, request.version());
  response.set(http::field::server, "xform-web");
  response.set(http::field::content_type, content_type);
  response.set(http::field::cache_control, "no-cache");
  response.keep_alive(request.keep_alive());
  if (request.method() != http::verb::head) response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

}  // namespace

class Tab;

class WebGateway::Impl {
 public:
  Impl(Client& client, const GatewayOptions& options)
      : client_(client), options_(options), acceptor_(ioc_) {
    for (const std::string& name : options_.allowed_hosts) {
      allowed_hosts_.insert(HostName(name));
    }
  }

  absl::Status Init() {
    for (auto [name, into] : {std::pair{"index.html", &index_html_},
                              std::pair{"app.js", &app_js_}}) {
      absl::StatusOr<std::string> file =
          ReadFile(absl::StrCat(options_.web_root, "/", name));
      if (!file.ok()) {
        return absl::NotFoundError(absl::StrCat(
            file.status().message(), " (--web_root: the built page)"));
      }
      *into = *std::move(file);
    }
    app_js_map_ =
        ReadFile(absl::StrCat(options_.web_root, "/app.js.map")).value_or("");

    absl::StatusOr<ListenAddress> listen = ParseListenAddress(options_.listen);
    if (!listen.ok()) return listen.status();
    beast::error_code ec;
    const asio::ip::address address = asio::ip::make_address(listen->host, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen=", options_.listen, ": not an IP address: ", ec.message()));
    }
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(listen->port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", options_.listen, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();

    RefreshWorlds();
    refresher_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
        RefreshWorlds();
      }
    });
    mover_ = std::thread([this] { MoveRegions(); });
    Accept();
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
    return absl::OkStatus();
  }

  ~Impl();

  int port() const { return port_; }
  GatewayStats stats() const {
    GatewayStats stats;
    stats.tabs = tabs_open_.load();
    stats.tabs_opened = tabs_opened_.load();
    stats.messages_sent = messages_sent_.load();
    stats.bytes_sent = bytes_sent_.load();
    stats.frames_seen = frames_seen_.load();
    stats.tabs_closed_for_input = tabs_closed_for_input_.load();
    stats.tabs_paused = tabs_paused_.load();
    return stats;
  }

  // For HttpSession: whether the request's Host is a name this gateway
  // answers to (see GatewayOptions::allowed_hosts). A page whose name an
  // attacker re-points at this machine (DNS rebinding) is same-origin with
  // the gateway as far as its browser knows, and sends its own name as
  // Host and Origin alike; only the Host tells the gateway apart from it.
  bool HostAllowed(const Request& request) const {
    const auto header = request.find(http::field::host);
    if (header == request.end()) return true;  // Browsers always send one.
    const std::string_view value = header->value();
    const std::string name = HostName({value.data(), value.size()});
    beast::error_code ec;
    asio::ip::make_address(name, ec);
    if (!ec) return true;  // An address: no name to re-point.
    return name == "localhost" || allowed_hosts_.contains(name);
  }

  // For HttpSession: the answer to a plain request.
  Response Answer(const Request& request) {
    if (request.method() != http::verb::get &&
        request.method() != http::verb::head) {
      return TextResponse(request, http::status::method_not_allowed,
                          "text/plain", "GET only\n");
    }
    const std::string_view target = request.target();
    const std::string_view path = target.substr(0, target.find('?'));
    if (path == "/" || path == "/index.html") {
      return TextResponse(request, http::status::ok, "text/html; charset=utf-8",
                          index_html_);
    }
    if (path == "/app.js") {
      return TextResponse(request, http::status::ok,
                          "text/javascript; charset=utf-8", app_js_);
    }
    if (path == "/app.js.map" && !app_js_map_.empty()) {
      return TextResponse(request, http::status::ok, "application/json",
                          app_js_map_);
    }
    if (path == "/favicon.ico") {
      return TextResponse(request, http::status::no_content, "text/plain", "");
    }
    if (path == "/ws") {
      return TextResponse(request, http::status::upgrade_required, "text/plain",
                          "a WebSocket: /ws?world=NAME\n");
    }
    if (path == "/api/worlds") {
      absl::MutexLock lock(&worlds_mu_);
      return TextResponse(request, http::status::ok, "application/json",
                          worlds_json_);
    }
    return TextResponse(request, http::status::not_found, "text/plain",
                        "not found\n");
  }

  // For HttpSession: a WebSocket upgrade to /ws. Takes the stream when it
  // opens a tab; otherwise returns the refusal to send.
  std::optional<Response> Upgrade(beast::tcp_stream& stream,
                                  const Request& request);

  // For tabs.
  Client& client() { return client_; }
  const GatewayOptions& options() const { return options_; }
  void CountFrame() { frames_seen_.fetch_add(1, std::memory_order_relaxed); }
  void CountMessage(size_t bytes) {
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void CountBadInput() { tabs_closed_for_input_.fetch_add(1); }
  void CountPaused(int change) { tabs_paused_.fetch_add(change); }
  // Moves `tab`'s region to `region` on the mover's thread (a unary call to
  // xformd, which a tab's strand must not wait for). Only a tab's latest
  // region is sent: one asked for while its last is on its way replaces
  // the one before it.
  void MoveRegion(const std::shared_ptr<Tab>& tab, const Region& region);
  void TabEnded(uint64_t id) {
    absl::MutexLock lock(&tabs_mu_);
    if (tabs_.erase(id)) tabs_open_.fetch_sub(1);
  }

 private:
  void Accept();
  void RefreshWorlds() {
    std::string json = WorldsJson(client_.ListWorlds());
    absl::MutexLock lock(&worlds_mu_);
    worlds_json_ = std::move(json);
  }

  Client& client_;
  const GatewayOptions options_;
  absl::flat_hash_set<std::string> allowed_hosts_;  // Lowercased.
  std::string index_html_, app_js_, app_js_map_;
  int port_ = 0;

  std::atomic<int> tabs_open_{0}, tabs_paused_{0};
  std::atomic<uint64_t> tabs_opened_{0}, messages_sent_{0}, bytes_sent_{0},
      frames_seen_{0}, tabs_closed_for_input_{0};

  // The region mover's queue: each tab's latest region, in the order tabs
  // asked.
  void MoveRegions();
  absl::Mutex moves_mu_;
  absl::flat_hash_map<Tab*, std::pair<std::weak_ptr<Tab>, Region>>
      pending_moves_ ABSL_GUARDED_BY(moves_mu_);
  std::deque<Tab*> move_order_ ABSL_GUARDED_BY(moves_mu_);
  bool moves_stopping_ ABSL_GUARDED_BY(moves_mu_) = false;
  std::thread mover_;

  absl::Mutex worlds_mu_;
  std::string worlds_json_ ABSL_GUARDED_BY(worlds_mu_);
  absl::Notification stop_;
  std::thread refresher_;

  // Open tabs, for closing their mirrors at shutdown. Declared before the
  // io_context: tabs that its handlers hold unregister as it goes.
  absl::Mutex tabs_mu_;
  uint64_t next_tab_id_ ABSL_GUARDED_BY(tabs_mu_) = 1;
  absl::flat_hash_map<uint64_t, std::weak_ptr<Tab>> tabs_
      ABSL_GUARDED_BY(tabs_mu_);

  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_{ioc_};
  std::vector<std::thread> threads_;
};

namespace {

// One plain HTTP connection: requests answered in turn, until it upgrades
// to a tab, closes, or is idle for 30 s.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, WebGateway::Impl& gateway)
      : stream_(std::move(socket)), gateway_(gateway) {}

  void Run() {
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this()] { self->Read(); });
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->header_limit(8192);
    parser_->body_limit(1024);
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     });
  }

  void OnRead(beast::error_code ec) {
    if (ec) {
      stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      return;
    }
    Request request = parser_->release();
    if (!gateway_.HostAllowed(request)) {
      Send(TextResponse(request, http::status::forbidden, "text/plain",
                        "this gateway does not answer to that Host name "
                        "(xform-web --allowed_hosts)\n"),
           /*then_read=*/false);
      return;
    }
    if (websocket::is_upgrade(request)) {
      std::optional<Response> refusal = gateway_.Upgrade(stream_, request);
      if (refusal) Send(*std::move(refusal), /*then_read=*/false);
      return;
    }
    Send(gateway_.Answer(request), request.keep_alive());
  }

  void Send(Response response, bool then_read) {
    auto shared = std::make_shared<Response>(std::move(response));
    http::async_write(stream_, *shared,
                      [self = shared_from_this(), shared, then_read](
                          beast::error_code ec, size_t) {
                        if (!ec && then_read && !shared->need_eof()) {
                          self->Read();
                        } else {
                          self->stream_.socket().shutdown(
                              tcp::socket::shutdown_send, ec);
                        }
                      });
  }

  beast::tcp_stream stream_;
  WebGateway::Impl& gateway_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

// A browser tab: a WebSocket and the Mirror that feeds it. Everything but
// the mirror's two callbacks runs on the tab's strand; the callbacks (on
// the mirror's thread) only note the publication time and post a wake-up,
// at most one outstanding.
class Tab : public std::enable_shared_from_this<Tab> {
 public:
  Tab(beast::tcp_stream stream, WebGateway::Impl& gateway, uint64_t id,
      TabQuery query)
      : ws_(std::move(stream)),
        gateway_(gateway),
        id_(id),
        query_(std::move(query)),
        status_timer_(ws_.get_executor()) {}

  ~Tab() {
    mirror_.reset();  // Joins its thread: no callback outlives the tab.
    if (paused_) gateway_.CountPaused(-1);
    gateway_.TabEnded(id_);
  }

  // For the gateway's region mover, which holds the tab: the mirror is
  // set before the tab reads its first message, and reset only when the
  // tab is gone or the mover has stopped.
  absl::Status SetRegion(const Region& region) {
    return mirror_->SetRegion(region);
  }
  // On the tab's strand: what became of its latest region move.
  void RegionMoved(const absl::Status& status) {
    region_error_ =
        status.ok() ? "" : absl::StrCat("region: ", status.ToString());
    CheckStatus(/*again=*/false);
  }

  void Accept(const Request& request) {
    websocket::stream_base::timeout timeout{};
    timeout.handshake_timeout = std::chrono::seconds(10);
    timeout.idle_timeout = ToChrono(gateway_.options().idle_timeout);
    timeout.keep_alive_pings = true;
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(timeout);
    ws_.set_option(
        websocket::stream_base::decorator([](websocket::response_type& r) {
          r.set(http::field::server, "xform-web");
        }));
    ws_.read_message_max(gateway_.options().max_inbound_bytes);
    ws_.auto_fragment(false);
    ws_.async_accept(request,
                     [self = shared_from_this()](beast::error_code ec) {
                       self->OnAccept(ec);
                     });
  }

  // At shutdown, with the io threads and the region mover joined: no more
  // wake-ups.
  void StopMirror() { mirror_.reset(); }
  auto executor() { return ws_.get_executor(); }

 private:
  struct Signals {
    std::atomic<int64_t> published_unix_nanos{0};
    std::atomic<bool> wake_posted{false};
  };

  void OnAccept(beast::error_code ec) {
    if (ec) return;
    MirrorOptions options;
    options.world = query_.world;
    options.subtrees = query_.subtrees;
    options.region = query_.region;
    options.max_rate_hz = query_.max_rate_hz;
    options.encoding = gateway_.options().upstream_encoding;
    options.max_queued = gateway_.options().mirror_max_queued;
    std::weak_ptr<Tab> weak = weak_from_this();
    auto executor = ws_.get_executor();
    WebGateway::Impl* gateway = &gateway_;
    options.on_update_matrices = false;  // It reads the copy.
    options.on_update = [signals = signals_](const MirrorUpdate& update) {
      signals->published_unix_nanos.store(absl::ToUnixNanos(update.published),
                                          std::memory_order_relaxed);
    };
    options.on_frame = [signals = signals_, weak, executor, gateway](uint64_t) {
      gateway->CountFrame();
      if (signals->wake_posted.exchange(true)) return;
      asio::post(executor, [weak] {
        if (std::shared_ptr<Tab> tab = weak.lock()) tab->OnWake();
      });
    };
    absl::StatusOr<std::unique_ptr<Mirror>> mirror =
        Mirror::Start(gateway_.client(), std::move(options));
    if (!mirror.ok()) {
      CloseFor(websocket::close_code::policy_error,
               std::string(mirror.status().message()), /*bad_input=*/false);
      return;
    }
    mirror_ = *std::move(mirror);
    CheckStatus();
    ReadControl();
  }

  // Messages from the page: {"ack": frame}, {"pause": bool} and
  // {"region": "sphere:..."}.
  void ReadControl() {
    ws_.async_read(inbound_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->OnControl(ec);
                   });
  }

  void OnControl(beast::error_code ec) {
    if (ec) {
      // message_too_big: Beast has closed with 1009 already.
      if (ec == websocket::error::message_too_big) gateway_.CountBadInput();
      End();
      return;
    }
    if (!ws_.got_text()) {
      CloseFor(websocket::close_code::unknown_data,
               "binary messages are not accepted", /*bad_input=*/true);
      return;
    }
    const std::optional<TabControl> control =
        ParseTabControl(beast::buffers_to_string(inbound_.data()));
    inbound_.consume(inbound_.size());
    if (!control) {
      CloseFor(websocket::close_code::policy_error,
               "expected {\"ack\": frame}, {\"pause\": true|false} or "
               "{\"region\": \"sphere:x,y,z,r\"}",
               /*bad_input=*/true);
      return;
    }
    switch (control->kind) {
      case TabControl::Kind::kAck:
        if (unacked_ > 0) --unacked_;
        break;
      case TabControl::Kind::kPause:
        if (control->pause != paused_) gateway_.CountPaused(paused_ ? -1 : 1);
        paused_ = control->pause;
        if (!paused_) behind_ = true;  // Whatever built up meanwhile, at once.
        break;
      case TabControl::Kind::kRegion:
        if (!MoveRegion(control->region)) return;
        break;
    }
    Write();
    ReadControl();
  }

  // A region the page moved its view to; false when the tab is closed for
  // it (not a region, or a tab opened without one).
  bool MoveRegion(const std::string& text) {
    if (!query_.region) {
      CloseFor(websocket::close_code::policy_error,
               "this tab has no region to move (open it with &region=)",
               /*bad_input=*/true);
      return false;
    }
    absl::StatusOr<Region> region = Region::Parse(text);
    if (!region.ok()) {
      CloseFor(websocket::close_code::policy_error,
               absl::StrCat("region: ", region.status().message()),
               /*bad_input=*/true);
      return false;
    }
    gateway_.MoveRegion(shared_from_this(), *region);
    return true;
  }

  void OnWake() {
    signals_->wake_posted.store(false);
    behind_ = true;
    Write();
  }

  // Starts the next write, if none is in flight: a close, a status, or the
  // net changes since the last message.
  void Write() {
    if (writing_ || ended_) return;
    if (close_reason_) {
      writing_ = true;
      ws_.async_close(*close_reason_, [self = shared_from_this()](
                                          beast::error_code) { self->End(); });
      return;
    }
    if (!status_pending_.empty()) {
      out_.swap(status_pending_);
      status_pending_.clear();
      ws_.text(true);
      StartWrite(/*binary=*/false);
      return;
    }
    if (!behind_ || paused_ || mirror_ == nullptr || unacked_ >= kMaxUnacked) {
      return;
    }
    behind_ = false;
    const MirrorChangedState state = mirror_->TakeChangedState();
    if (state.empty()) return;
    EncodeTabFrame(state,
                   absl::FromUnixNanos(signals_->published_unix_nanos.load()),
                   absl::Now(), &out_);
    ws_.binary(true);
    ++unacked_;
    StartWrite(/*binary=*/true);
  }

  void StartWrite(bool binary) {
    writing_ = true;
    ws_.async_write(asio::buffer(out_),
                    [self = shared_from_this(), binary](beast::error_code ec,
                                                        size_t bytes) {
                      self->writing_ = false;
                      if (ec) {
                        self->End();
                        return;
                      }
                      if (binary) self->gateway_.CountMessage(bytes);
                      self->Write();
                    });
  }

  // Tells the page whether the mirror is live, and why not or why its
  // region did not move, when that changes; then again each status_period
  // when `again`.
  void CheckStatus(bool again = true) {
    if (ended_ || mirror_ == nullptr) return;
    const absl::Status status = mirror_->status();
    nlohmann::json json = {
        {"type", "status"},
        {"synced", mirror_->synced()},
        {"message", status.ok() ? region_error_ : status.ToString()}};
    std::string text = json.dump();
    if (text != last_status_) {
      last_status_ = text;
      status_pending_ = std::move(text);
      Write();
    }
    if (!again) return;
    status_timer_.expires_after(ToChrono(gateway_.options().status_period));
    status_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->CheckStatus();
    });
  }

  void CloseFor(websocket::close_code code, std::string reason,
                bool bad_input) {
    if (bad_input) gateway_.CountBadInput();
    // A close frame's reason is at most 123 bytes.
    if (reason.size() > 123) reason.resize(123);
    close_reason_ = websocket::close_reason(code, reason);
    Write();
  }

  void End() {
    if (ended_) return;
    ended_ = true;
    status_timer_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

  websocket::stream<beast::tcp_stream> ws_;
  WebGateway::Impl& gateway_;
  const uint64_t id_;
  const TabQuery query_;
  const std::shared_ptr<Signals> signals_ = std::make_shared<Signals>();
  std::unique_ptr<Mirror> mirror_;
  asio::steady_timer status_timer_;
  beast::flat_buffer inbound_;
  std::string out_;  // The message in flight.
  std::string status_pending_;
  std::string last_status_;
  std::string region_error_;  // Why the latest region move failed.
  std::optional<websocket::close_reason> close_reason_;
  // Binary messages the page has not acknowledged yet. A browser buffers
  // what its socket receives without bound while its script is busy
  // (rendering, say), so the tab's pace is its acknowledgements, not TCP's.
  static constexpr int kMaxUnacked = 2;
  int unacked_ = 0;
  bool writing_ = false;
  bool behind_ = false;  // Frames arrived since the last message.
  bool paused_ = false;
  bool ended_ = false;
};

std::optional<Response> WebGateway::Impl::Upgrade(beast::tcp_stream& stream,
                                                  const Request& request) {
  const std::string target(request.target());
  const size_t question = target.find('?');
  if (target.substr(0, question) != "/ws") {
    return TextResponse(request, http::status::not_found, "text/plain",
                        "WebSockets are at /ws\n");
  }
  // A page from another site must not read worlds through this gateway
  // (which holds the token): a browser's Origin must be this host.
  const std::string origin(request[http::field::origin]);
  const std::string host(request[http::field::host]);
  if (!origin.empty() && origin != absl::StrCat("http://", host) &&
      origin != absl::StrCat("https://", host)) {
    return TextResponse(request, http::status::forbidden, "text/plain",
                        "cross-origin WebSocket refused\n");
  }
  absl::StatusOr<TabQuery> query = ParseTabQuery(
      question == std::string::npos ? "" : target.substr(question + 1));
  if (!query.ok()) {
    return TextResponse(request, http::status::bad_request, "text/plain",
                        absl::StrCat(query.status().message(), "\n"));
  }
  uint64_t id;
  std::shared_ptr<Tab> tab;
  {
    absl::MutexLock lock(&tabs_mu_);
    if (tabs_open_.load() >= options_.max_tabs) {
      return TextResponse(
          request, http::status::service_unavailable, "text/plain",
          absl::StrCat("at --max_tabs=", options_.max_tabs, "\n"));
    }
    id = next_tab_id_++;
    tab =
        std::make_shared<Tab>(std::move(stream), *this, id, *std::move(query));
    tabs_.emplace(id, tab);
    tabs_open_.fetch_add(1);
  }
  tabs_opened_.fetch_add(1);
  tab->Accept(request);
  return std::nullopt;
}

void WebGateway::Impl::Accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec,
                                                         tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      std::make_shared<HttpSession>(std::move(socket), *this)->Run();
      Accept();
      return;
    }
    // Out of descriptors, say: try again shortly rather than spin.
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait([this](beast::error_code wait) {
      if (!wait) Accept();
    });
  });
}

void WebGateway::Impl::MoveRegion(const std::shared_ptr<Tab>& tab,
                                  const Region& region) {
  absl::MutexLock lock(&moves_mu_);
  auto [it, added] = pending_moves_.try_emplace(tab.get(), tab, region);
  if (added) {
    move_order_.push_back(tab.get());
  } else {
    it->second.second = region;
  }
}

void WebGateway::Impl::MoveRegions() {
  for (;;) {
    std::shared_ptr<Tab> tab;
    std::optional<Region> region;
    {
      absl::MutexLock lock(&moves_mu_);
      moves_mu_.Await(absl::Condition(
          +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->moves_mu_) {
            return impl->moves_stopping_ || !impl->move_order_.empty();
          },
          this));
      if (moves_stopping_) return;
      const auto it = pending_moves_.find(move_order_.front());
      move_order_.pop_front();
      tab = it->second.first.lock();
      region = it->second.second;
      pending_moves_.erase(it);
    }
    if (tab == nullptr) continue;  // Closed meanwhile.
    absl::Status status = tab->SetRegion(*region);
    asio::post(tab->executor(),
               [tab, status = std::move(status)] { tab->RegionMoved(status); });
  }
}

WebGateway::Impl::~Impl() {
  stop_.Notify();
  if (refresher_.joinable()) refresher_.join();
  {
    absl::MutexLock lock(&moves_mu_);
    moves_stopping_ = true;
  }
  if (mover_.joinable()) mover_.join();
  ioc_.stop();
  for (std::thread& thread : threads_) thread.join();
  std::vector<std::shared_ptr<Tab>> open;
  {
    absl::MutexLock lock(&tabs_mu_);
    for (auto& [id, weak] : tabs_) {
      if (std::shared_ptr<Tab> tab = weak.lock()) open.push_back(tab);
    }
  }
  for (const std::shared_ptr<Tab>& tab : open) tab->StopMirror();
}

absl::StatusOr<std::unique_ptr<WebGateway>> WebGateway::Start(
    Client& client, const GatewayOptions& options) {
  auto impl = std::make_unique<Impl>(client, options);
  if (absl::Status status = impl->Init(); !status.ok()) return status;
  return std::unique_ptr<WebGateway>(new WebGateway(std::move(impl)));
}

WebGateway::WebGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WebGateway::~WebGateway() = default;
int WebGateway::port() const { return impl_->port(); }
GatewayStats WebGateway::stats() const { return impl_->stats(); }

}  // namespace xform::web
