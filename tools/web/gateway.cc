// Copyright 2026 The xform Authors.

#include "tools/web/gateway.h"

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/web/foxglove_protocol.h"
#include "tools/web/foxglove_session.h"
#include "tools/web/gateway_impl.h"
#include "tools/web/page_protocol.h"
#include "tools/web/tab.h"

namespace xform::web {

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

void PrepareWebSocket(WebSocket& ws, const GatewayOptions& options,
                      size_t max_inbound, std::string subprotocol) {
  websocket::stream_base::timeout timeout{};
  timeout.handshake_timeout = std::chrono::seconds(10);
  timeout.idle_timeout = ToChrono(options.idle_timeout);
  timeout.keep_alive_pings = true;
  beast::get_lowest_layer(ws).expires_never();
  ws.set_option(timeout);
  ws.set_option(websocket::stream_base::decorator(
      [subprotocol = std::move(subprotocol)](websocket::response_type& r) {
        r.set(http::field::server, "xform-web");
        if (!subprotocol.empty()) {
          r.set(http::field::sec_websocket_protocol, subprotocol);
        }
      }));
  ws.read_message_max(max_inbound);
  ws.auto_fragment(false);
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

// One plain HTTP connection: requests answered in turn, until it upgrades
// to a tab or a Foxglove client, closes, or is idle for 30 s.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, WebGateway::Impl& gateway, bool foxglove)
      : stream_(std::move(socket)), gateway_(gateway), foxglove_(foxglove) {}

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
      std::optional<Response> refusal =
          foxglove_ ? gateway_.UpgradeFoxglove(stream_, request)
                    : gateway_.Upgrade(stream_, request);
      if (refusal) Send(*std::move(refusal), /*then_read=*/false);
      return;
    }
    Send(
        foxglove_ ? gateway_.AnswerFoxglove(request) : gateway_.Answer(request),
        request.keep_alive());
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
  const bool foxglove_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

WebGateway::Impl::Impl(Client& client, const GatewayOptions& options)
    : client_(client),
      options_(options),
      run_id_(absl::StrCat(absl::ToUnixNanos(absl::Now()))),
      acceptor_(ioc_),
      foxglove_acceptor_(ioc_) {
  for (const std::string& name : options_.allowed_hosts) {
    allowed_hosts_.insert(HostName(name));
  }
  for (const std::string& origin : options_.foxglove_allowed_origins) {
    allowed_origins_.insert(origin);
  }
}

absl::Status WebGateway::Impl::Init() {
  for (auto [name, into] :
       {std::pair{"index.html", &index_html_}, std::pair{"app.js", &app_js_}}) {
    absl::StatusOr<std::string> file =
        ReadFile(absl::StrCat(options_.web_root, "/", name));
    if (!file.ok()) {
      return absl::NotFoundError(absl::StrCat(file.status().message(),
                                              " (--web_root: the built page)"));
    }
    *into = *std::move(file);
  }
  app_js_map_ =
      ReadFile(absl::StrCat(options_.web_root, "/app.js.map")).value_or("");
  if (absl::Status s = Listen(options_.listen, acceptor_, &port_); !s.ok()) {
    return s;
  }
  if (!options_.foxglove_listen.empty()) {
    if (absl::Status s = Listen(options_.foxglove_listen, foxglove_acceptor_,
                                &foxglove_port_);
        !s.ok()) {
      return s;
    }
  }

  RefreshWorlds();
  refresher_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      RefreshWorlds();
    }
  });
  mover_ = std::thread([this] { MoveRegions(); });
  Accept(acceptor_, /*foxglove=*/false);
  if (foxglove_acceptor_.is_open()) Accept(foxglove_acceptor_, true);
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([this] { ioc_.run(); });
  }
  return absl::OkStatus();
}

absl::Status WebGateway::Impl::Listen(const std::string& listen,
                                      tcp::acceptor& acceptor, int* port) {
  absl::StatusOr<ListenAddress> address = ParseListenAddress(listen);
  if (!address.ok()) return address.status();
  beast::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(address->host, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", listen, ": not an IP address: ", ec.message()));
  }
  const tcp::endpoint endpoint(ip, static_cast<uint16_t>(address->port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, ": ", ec.message()));
  }
  *port = acceptor.local_endpoint().port();
  return absl::OkStatus();
}

GatewayStats WebGateway::Impl::stats() const {
  GatewayStats stats;
  stats.tabs = tabs_open_.load();
  stats.tabs_opened = tabs_opened_.load();
  stats.messages_sent = messages_sent_.load();
  stats.bytes_sent = bytes_sent_.load();
  stats.frames_seen = frames_seen_.load();
  stats.tabs_closed_for_input = tabs_closed_for_input_.load();
  stats.tabs_paused = tabs_paused_.load();
  stats.foxglove_clients = foxglove_open_.load();
  stats.foxglove_opened = foxglove_opened_.load();
  stats.foxglove_refusals = foxglove_refusals_.load();
  return stats;
}

bool WebGateway::Impl::HostAllowed(const Request& request) const {
  const auto header = request.find(http::field::host);
  if (header == request.end()) return true;  // Browsers always send one.
  const std::string_view value = header->value();
  const std::string name = HostName({value.data(), value.size()});
  beast::error_code ec;
  asio::ip::make_address(name, ec);
  if (!ec) return true;  // An address: no name to re-point.
  return name == "localhost" || allowed_hosts_.contains(name);
}

Response WebGateway::Impl::Answer(const Request& request) {
  if (request.method() != http::verb::get &&
      request.method() != http::verb::head) {
    return TextResponse(request, http::status::method_not_allowed, "text/plain",
                        "GET only\n");
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

template <typename Make>
std::optional<Response> WebGateway::Impl::Open(const Request& request,
                                               bool foxglove, Make make) {
  std::atomic<int>& open = foxglove ? foxglove_open_ : tabs_open_;
  const int limit =
      foxglove ? options_.foxglove_max_clients : options_.max_tabs;
  std::shared_ptr<Connection> connection;
  {
    absl::MutexLock lock(&connections_mu_);
    if (open.load() >= limit) {
      return TextResponse(
          request, http::status::service_unavailable, "text/plain",
          absl::StrCat(
              foxglove ? "at --foxglove_max_clients=" : "at --max_tabs=", limit,
              "\n"));
    }
    const uint64_t id = next_connection_id_++;
    connection = make(id);
    connections_.emplace(id, connection);
    open.fetch_add(1);
  }
  (foxglove ? foxglove_opened_ : tabs_opened_).fetch_add(1);
  connection->Accept(request);
  return std::nullopt;
}

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
  return Open(request, /*foxglove=*/false, [&](uint64_t id) {
    return MakeTab(std::move(stream), *this, id, *std::move(query));
  });
}

Response WebGateway::Impl::AnswerFoxglove(const Request& request) {
  return TextResponse(
      request, http::status::upgrade_required, "text/plain",
      absl::StrCat("a Foxglove WebSocket (", foxglove_ws::kSubprotocol,
                   "): open ws://HOST:", foxglove_port_,
                   " in Foxglove (Open connection, Foxglove WebSocket)\n"));
}

std::optional<Response> WebGateway::Impl::UpgradeFoxglove(
    beast::tcp_stream& stream, const Request& request) {
  const std::string_view offered = request[http::field::sec_websocket_protocol];
  if (!foxglove_ws::OffersSubprotocol({offered.data(), offered.size()})) {
    CountFoxgloveRefusal();
    return TextResponse(request, http::status::bad_request, "text/plain",
                        absl::StrCat("this endpoint speaks ",
                                     foxglove_ws::kSubprotocol, " only\n"));
  }
  // Foxglove's web app is another site: its Origin is let in when listed
  // (--foxglove_allowed_origins; "*" lets any in). A client that is not a
  // browser sends none.
  const std::string origin(request[http::field::origin]);
  const std::string host(request[http::field::host]);
  if (!origin.empty() && !allowed_origins_.contains("*") &&
      !allowed_origins_.contains(origin) &&
      origin != absl::StrCat("http://", host) &&
      origin != absl::StrCat("https://", host)) {
    CountFoxgloveRefusal();
    return TextResponse(request, http::status::forbidden, "text/plain",
                        "this Origin is not in --foxglove_allowed_origins\n");
  }
  const std::string target(request.target());
  const size_t question = target.find('?');
  absl::StatusOr<TabQuery> query = ParseViewQuery(
      question == std::string::npos ? "" : target.substr(question + 1));
  if (!query.ok()) {
    CountFoxgloveRefusal();
    return TextResponse(request, http::status::bad_request, "text/plain",
                        absl::StrCat(query.status().message(), "\n"));
  }
  return Open(request, /*foxglove=*/true, [&](uint64_t id) {
    return MakeFoxgloveSession(std::move(stream), *this, id, *std::move(query));
  });
}

void WebGateway::Impl::Accept(tcp::acceptor& acceptor, bool foxglove) {
  acceptor.async_accept(asio::make_strand(ioc_), [this, &acceptor, foxglove](
                                                     beast::error_code ec,
                                                     tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      std::make_shared<HttpSession>(std::move(socket), *this, foxglove)->Run();
      Accept(acceptor, foxglove);
      return;
    }
    // Out of descriptors, say: try again shortly rather than spin.
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait(
        [this, &acceptor, foxglove](beast::error_code wait) {
          if (!wait) Accept(acceptor, foxglove);
        });
  });
}

void WebGateway::Impl::ConnectionEnded(uint64_t id, bool foxglove) {
  absl::MutexLock lock(&connections_mu_);
  if (connections_.erase(id)) {
    (foxglove ? foxglove_open_ : tabs_open_).fetch_sub(1);
  }
}

void WebGateway::Impl::RefreshWorlds() {
  absl::StatusOr<std::vector<WorldInfo>> worlds = client_.ListWorlds();
  std::string json = WorldsJson(worlds);
  std::vector<std::string> names;
  if (worlds.ok()) {
    for (const WorldInfo& world : *worlds) names.push_back(world.name);
  }
  absl::MutexLock lock(&worlds_mu_);
  worlds_json_ = std::move(json);
  // A failed list keeps the last: xformd unreachable for a moment is not
  // every world gone.
  if (worlds.ok() && names != world_names_) {
    world_names_ = std::move(names);
    ++worlds_generation_;
  }
}

std::shared_ptr<const std::string> WebGateway::Impl::SharedPayload(
    const std::string& key) {
  absl::MutexLock lock(&shared_mu_);
  for (const auto& [k, payload] : shared_payloads_) {
    if (k == key) return payload;
  }
  return nullptr;
}

void WebGateway::Impl::SharePayload(
    std::string key, std::shared_ptr<const std::string> payload) {
  absl::MutexLock lock(&shared_mu_);
  if (shared_payloads_.size() == kSharedPayloads) shared_payloads_.pop_front();
  shared_payloads_.emplace_back(std::move(key), std::move(payload));
}

std::pair<uint64_t, std::vector<std::string>> WebGateway::Impl::Worlds() {
  absl::MutexLock lock(&worlds_mu_);
  return {worlds_generation_, world_names_};
}

void WebGateway::Impl::MoveRegion(const std::shared_ptr<Connection>& connection,
                                  const Region& region) {
  absl::MutexLock lock(&moves_mu_);
  auto [it, added] =
      pending_moves_.try_emplace(connection.get(), connection, region);
  if (added) {
    move_order_.push_back(connection.get());
  } else {
    it->second.second = region;
  }
}

void WebGateway::Impl::MoveRegions() {
  for (;;) {
    std::shared_ptr<Connection> connection;
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
      connection = it->second.first.lock();
      region = it->second.second;
      pending_moves_.erase(it);
    }
    if (connection == nullptr) continue;  // Closed meanwhile.
    connection->PostRegionMoved(connection->SetRegion(*region));
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
  std::vector<std::shared_ptr<Connection>> open;
  {
    absl::MutexLock lock(&connections_mu_);
    for (auto& [id, weak] : connections_) {
      if (std::shared_ptr<Connection> connection = weak.lock()) {
        open.push_back(connection);
      }
    }
  }
  for (const std::shared_ptr<Connection>& connection : open) {
    connection->StopMirrors();
  }
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
int WebGateway::foxglove_port() const { return impl_->foxglove_port(); }
GatewayStats WebGateway::stats() const { return impl_->stats(); }

}  // namespace xform::web
