// Copyright 2026 The xform Authors.
//
// xform-web's gateway against a real xformd service on loopback, with real
// WebSocket clients (Beast's, synchronous) standing in for browser tabs:
// the view a tab gets, slow and stalled tabs, bad input, reconnection.

#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tools/web/gateway.h"

#pragma GCC diagnostic ignored "-Wnull-dereference"  // As in gateway.cc.
#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/loopback_server.h"
#include "tests/wait_until.h"
#include "tools/web/tab_frame.h"
#include "xform/client.h"

namespace xform::web {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using server::Limits;
using server::LoopbackServer;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

// Waits (at most kWait) until `done` holds of the gateway's counts, which
// its threads update after what a tab sees; the counts then.
GatewayStats StatsOnceTrue(const WebGateway& gateway,
                           absl::FunctionRef<bool(const GatewayStats&)> done) {
  GatewayStats stats;
  EXPECT_TRUE(WaitUntil(
      [&] {
        stats = gateway.stats();
        return done(stats);
      },
      kWait, "the gateway's counts"));
  return stats;
}

Transform At(float x, float y = 0, float z = 0) {
  Transform t;
  t.position = {x, y, z};
  return t;
}

// One decoded binary message (tab_frame.h).
struct TabFrame {
  uint32_t flags = 0;
  double frame = 0;
  double stamp_ms = 0;
  std::map<EntityId, std::pair<EntityId, Matrix3x4>> entities;
  std::vector<EntityId> destroyed;
};

TabFrame DecodeTabFrame(const std::string& bytes) {
  TabFrame decoded;
  uint32_t header[4];
  EXPECT_GE(bytes.size(), kTabFrameHeaderBytes);
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], kTabFrameMagic);
  decoded.flags = header[1];
  const size_t n = header[2], d = header[3];
  EXPECT_EQ(bytes.size(), kTabFrameHeaderBytes + 64 * n + 8 * d);
  std::memcpy(&decoded.frame, bytes.data() + 16, 8);
  std::memcpy(&decoded.stamp_ms, bytes.data() + 40, 8);
  const char* ids = bytes.data() + kTabFrameHeaderBytes;
  const char* parents = ids + 8 * n;
  const char* worlds = parents + 8 * n;
  const char* destroyed = worlds + 48 * n;
  for (size_t k = 0; k < n; ++k) {
    double id, parent;
    std::memcpy(&id, ids + 8 * k, 8);
    std::memcpy(&parent, parents + 8 * k, 8);
    Matrix3x4 world;
    std::memcpy(world.m.data(), worlds + 48 * k, 48);
    decoded.entities[static_cast<EntityId>(id)] = {
        static_cast<EntityId>(parent), world};
  }
  for (size_t k = 0; k < d; ++k) {
    double id;
    std::memcpy(&id, destroyed + 8 * k, 8);
    decoded.destroyed.push_back(static_cast<EntityId>(id));
  }
  return decoded;
}

// A browser tab as the gateway sees one: a WebSocket that keeps the view it
// is sent, and acknowledges each frame (or not: a busy page).
class FakeTab {
 public:
  // Opens /ws?<query>; false when refused.
  bool Open(int port, const std::string& query) {
    tcp::resolver resolver(ioc_);
    asio::connect(ws_.next_layer(),
                  resolver.resolve("127.0.0.1", std::to_string(port)));
    // Reads time out rather than hang a failing test.
    timeval timeout{.tv_sec = 10, .tv_usec = 0};
    setsockopt(ws_.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO,
               &timeout, sizeof(timeout));
    beast::error_code ec;
    ws_.handshake(absl::StrCat("127.0.0.1:", port), absl::StrCat("/ws?", query),
                  ec);
    return !ec;
  }

  // Reads one message: binary ones are applied to the view (and
  // acknowledged when `ack`), text ones kept as the last status. False
  // when the socket ends; close_code() says how.
  bool ReadOne(bool ack = true) {
    beast::flat_buffer buffer;
    beast::error_code ec;
    ws_.read(buffer, ec);
    if (ec) {
      ended_ = true;
      return false;
    }
    const std::string bytes = beast::buffers_to_string(buffer.data());
    if (ws_.got_text()) {
      status_ = nlohmann::json::parse(bytes);
      return true;
    }
    ++messages_;
    bytes_ += bytes.size();
    const TabFrame frame = DecodeTabFrame(bytes);
    last_frame_ = frame.frame;
    last_stamp_ms_ = frame.stamp_ms;
    if (frame.flags & kTabFrameResynced) ++resyncs_;
    for (const auto& [id, value] : frame.entities) view_[id] = value;
    for (EntityId id : frame.destroyed) view_.erase(id);
    if (ack) Send(absl::StrCat("{\"ack\": ", frame.frame, "}"));
    return true;
  }

  // Reads until `done` holds (true) or the deadline (false).
  template <typename Predicate>
  bool ReadUntil(Predicate done, absl::Duration timeout = kWait) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() > deadline || !ReadOne()) return false;
    }
    return true;
  }

  void Send(const std::string& text, bool binary = false) {
    ws_.binary(binary);
    beast::error_code ec;
    ws_.write(asio::buffer(text), ec);
  }

  int close_code() const { return static_cast<int>(ws_.reason().code); }
  bool ended() const { return ended_; }
  const auto& view() const { return view_; }
  const nlohmann::json& status() const { return status_; }
  int messages() const { return messages_; }
  size_t bytes() const { return bytes_; }
  double last_frame() const { return last_frame_; }
  double last_stamp_ms() const { return last_stamp_ms_; }
  int resyncs() const { return resyncs_; }  // Messages flagged resynced.

 private:
  asio::io_context ioc_;
  websocket::stream<tcp::socket> ws_{ioc_};
  std::map<EntityId, std::pair<EntityId, Matrix3x4>> view_;
  nlohmann::json status_;
  int messages_ = 0;
  size_t bytes_ = 0;
  double last_frame_ = 0;
  double last_stamp_ms_ = 0;
  int resyncs_ = 0;
  bool ended_ = false;
};

// A plain HTTP request; the status and body. With `upgrade`, it asks for a
// WebSocket (from `origin`, when given) and returns the refusal or the 101.
// It names `host` (with the port) as its Host, as a browser at that name
// would.
std::pair<int, std::string> Get(int port, const std::string& target,
                                http::verb verb = http::verb::get,
                                bool upgrade = false,
                                const std::string& origin = "",
                                const std::string& host = "127.0.0.1") {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  tcp::resolver resolver(ioc);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::string_body> request(verb, target, 11);
  request.set(http::field::host, absl::StrCat(host, ":", port));
  if (upgrade) {
    request.set(http::field::connection, "Upgrade");
    request.set(http::field::upgrade, "websocket");
    request.set(http::field::sec_websocket_version, "13");
    request.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  }
  if (!origin.empty()) request.set(http::field::origin, origin);
  http::write(stream, request);
  beast::flat_buffer buffer;
  if (upgrade) {
    http::response<http::empty_body> response;  // A 101 has no length.
    http::response_parser<http::empty_body> parser;
    parser.skip(true);
    http::read_header(stream, buffer, parser);
    return {parser.get().result_int(), ""};
  }
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  return {response.result_int(), response.body()};
}

class WebGatewayTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start(Limits{}));
    web_root_ = std::filesystem::path(testing::TempDir()) /
                absl::StrCat("xform_web_root_", getpid());
    std::filesystem::create_directories(web_root_);
    std::ofstream(web_root_ / "index.html") << "<title>xform-web</title>";
    std::ofstream(web_root_ / "app.js") << "console.log('xform');";
    client_ = Connect();
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions options;
    options.address = server_.address();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::unique_ptr<WebGateway> StartGateway(GatewayOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.web_root = web_root_.string();
    absl::StatusOr<std::unique_ptr<WebGateway>> gateway =
        WebGateway::Start(*client_, options);
    EXPECT_TRUE(gateway.ok()) << gateway.status();
    return gateway.ok() ? *std::move(gateway) : nullptr;
  }

  // A driven world "w": root 1 with child 2, 3 under 2, and root 10.
  void MakeWorld() {
    ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
    ASSERT_TRUE(
        client_
            ->Apply(
                "w",
                {CreateOp{1, kNoEntity, At(1)}, CreateOp{2, 1, At(0, 1)},
                 CreateOp{3, 2, At(0, 0, 1)}, CreateOp{10, kNoEntity, At(-5)}},
                {.end_frame = true})
            .ok());
  }

  // The tab's view holds exactly what the server holds for those ids.
  void ExpectViewIsServer(const FakeTab& tab, size_t expected_size) {
    ASSERT_EQ(tab.view().size(), expected_size);
    std::vector<EntityId> ids;
    for (const auto& [id, value] : tab.view()) ids.push_back(id);
    absl::StatusOr<std::vector<EntityState>> read = client_->Read("w", ids);
    ASSERT_TRUE(read.ok()) << read.status();
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(tab.view().at(ids[i]).first, (*read)[i].parent) << ids[i];
      EXPECT_EQ(tab.view().at(ids[i]).second, (*read)[i].world) << ids[i];
    }
  }

  LoopbackServer server_;
  std::filesystem::path web_root_;
  std::unique_ptr<Client> client_;
};

TEST_F(WebGatewayTest, ServesThePageAndWorldListAndRefusesBadRequests) {
  MakeWorld();
  std::unique_ptr<WebGateway> gateway = StartGateway();
  const int port = gateway->port();
  EXPECT_EQ(Get(port, "/"),
            std::make_pair(200, std::string("<title>xform-web</title>")));
  EXPECT_EQ(Get(port, "/app.js").first, 200);
  EXPECT_EQ(Get(port, "/nothing").first, 404);
  EXPECT_EQ(Get(port, "/ws").first, 426);
  EXPECT_EQ(Get(port, "/", http::verb::post).first, 405);
  // The world list is refreshed each second.
  nlohmann::json worlds;
  EXPECT_TRUE(WaitUntil(
      [&] {
        worlds = nlohmann::json::parse(Get(port, "/api/worlds").second);
        return !worlds["worlds"].empty();
      },
      kWait, "the world in /api/worlds"));
  ASSERT_EQ(worlds["worlds"].size(), 1u) << worlds.dump();
  EXPECT_EQ(worlds["worlds"][0]["name"], "w");
  EXPECT_EQ(worlds["worlds"][0]["entities"], 4);

  const auto upgrade = [&](const std::string& target,
                           const std::string& origin = "") {
    return Get(port, target, http::verb::get, /*upgrade=*/true, origin).first;
  };
  EXPECT_EQ(upgrade("/ws?world="), 400);
  EXPECT_EQ(upgrade("/ws?world=w&subtrees=1,x"), 400);
  EXPECT_EQ(upgrade("/ws?world=w&colour=red"), 400);
  EXPECT_EQ(upgrade("/ws?world=w&rate=-1"), 400);
  EXPECT_EQ(upgrade("/ws?world=w&rate=nan"), 400);
  EXPECT_EQ(upgrade("/ws?world=w&rate=1001"), 400);
  EXPECT_EQ(upgrade("/ws?world=w&rate=10"), 101);
  EXPECT_EQ(upgrade("/ws?world=%zz"), 400);
  EXPECT_EQ(upgrade("/elsewhere?world=w"), 404);
  // Another site's page may not read worlds through the gateway.
  EXPECT_EQ(upgrade("/ws?world=w", "http://evil.example"), 403);
  EXPECT_EQ(upgrade("/ws?world=w", absl::StrCat("http://127.0.0.1:", port)),
            101);
  EXPECT_EQ(upgrade("/ws?world=w"), 101);  // Not a browser: no Origin.
}

// DNS rebinding: a page at evil.example whose name now resolves to this
// machine sends Host and Origin evil.example, a pair that passes an
// Origin-equals-Host check. Only names the gateway is meant to be reached
// by are answered.
TEST_F(WebGatewayTest, ARebindingPageIsRefusedOnEveryPath) {
  MakeWorld();
  GatewayOptions options;
  options.allowed_hosts = {"Viewer.Test"};
  std::unique_ptr<WebGateway> gateway = StartGateway(options);
  const int port = gateway->port();
  const auto as = [&](const std::string& host, const std::string& target,
                      bool upgrade = false) {
    return Get(port, target, http::verb::get, upgrade,
               absl::StrCat("http://", host, ":", port), host)
        .first;
  };
  for (const std::string target : {"/", "/app.js", "/api/worlds", "/ws"}) {
    EXPECT_EQ(as("evil.example", target), 403) << target;
  }
  EXPECT_EQ(as("evil.example", "/ws?world=w", /*upgrade=*/true), 403);
  EXPECT_EQ(as("localhost.evil.example", "/ws?world=w", true), 403);
  EXPECT_EQ(gateway->stats().tabs_opened, 0u);

  // The same page from the names the gateway answers to.
  for (const std::string host :
       {"localhost", "LOCALHOST", "127.0.0.1", "viewer.test", "VIEWER.test"}) {
    EXPECT_EQ(as(host, "/api/worlds"), 200) << host;
    EXPECT_EQ(as(host, "/ws?world=w", /*upgrade=*/true), 101) << host;
  }
  // An IPv6 literal in brackets is an address too.
  EXPECT_EQ(Get(port, "/", http::verb::get, false, "", "[::1]").first, 200);
}

TEST_F(WebGatewayTest, ATabGetsItsViewThenOnlyWhatChanged) {
  MakeWorld();
  std::unique_ptr<WebGateway> gateway = StartGateway();
  FakeTab tab;
  ASSERT_TRUE(tab.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(tab.ReadUntil([&] { return tab.view().size() == 4; }));
  ExpectViewIsServer(tab, 4);
  EXPECT_EQ(tab.view().at(3).first, 2u);

  // 1 moves, and 2 and 3 under it; 10 stays: the next message lists only
  // those three, with the batch's stamp for the page to interpolate by.
  const int before = tab.messages();
  // Ahead of the server's clock, which stamped the creates.
  const Stamp stamp = absl::ToUnixNanos(absl::Now() + absl::Seconds(1));
  absl::StatusOr<uint64_t> frame = client_->Apply(
      "w", {SetLocalOp{1, At(4, 4)}}, {.end_frame = true, .stamp = stamp});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(tab.ReadUntil([&] { return tab.last_frame() >= *frame; }));
  EXPECT_EQ(tab.messages(), before + 1);
  ExpectViewIsServer(tab, 4);
  EXPECT_NEAR(tab.last_stamp_ms(), static_cast<double>(stamp) / 1e6, 1e-3);

  ASSERT_TRUE(client_->Apply("w", {DestroyOp{2}}, {.end_frame = true}).ok());
  ASSERT_TRUE(tab.ReadUntil([&] { return tab.view().size() == 2; }));
  ExpectViewIsServer(tab, 2);

  // A subtree filter: only 1's subtree, as the server's filter gives it.
  FakeTab subtree;
  ASSERT_TRUE(subtree.Open(gateway->port(), "world=w&subtrees=1"));
  ASSERT_TRUE(subtree.ReadUntil([&] { return subtree.view().size() == 1; }));
  EXPECT_TRUE(subtree.view().contains(1));
  ASSERT_TRUE(subtree.ReadUntil(
      [&] { return subtree.status().value("synced", false); }));
}

// A page that does not acknowledge (busy rendering) gets two messages and
// then nothing, however many frames pass; when it acknowledges it gets the
// net changes in one message. A tab whose socket is not read at all holds
// the gateway to one message. Neither slows a tab that keeps up.
TEST_F(WebGatewayTest, SlowTabsSkipFramesHoldLittleAndStallNoOne) {
  constexpr int kEntities = 20'000;
  ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  std::vector<Command> create;
  for (EntityId e = 1; e <= kEntities; ++e) {
    create.push_back(CreateOp{e, kNoEntity, At(static_cast<float>(e))});
  }
  ASSERT_TRUE(client_->Apply("w", create, {.end_frame = true}).ok());
  std::unique_ptr<WebGateway> gateway = StartGateway();

  FakeTab busy, stalled, keeping_up;
  ASSERT_TRUE(busy.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(stalled.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(keeping_up.Open(gateway->port(), "world=w"));

  // Every entity moves every frame: 1.3 MB a message.
  std::atomic<bool> stop = false;
  std::atomic<uint64_t> last_frame = 0;
  std::thread writer([&] {
    std::vector<Command> move;
    for (int step = 1; !stop; ++step) {
      move.clear();
      for (EntityId e = 1; e <= kEntities; ++e) {
        move.push_back(SetLocalOp{e, At(static_cast<float>(e), step)});
      }
      absl::StatusOr<uint64_t> frame =
          client_->Apply("w", move, {.end_frame = true});
      if (frame.ok()) last_frame = *frame;
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  // The busy page reads but never acknowledges.
  std::thread busy_reader([&] {
    while (busy.ReadOne(/*ack=*/false)) {
    }
  });
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(2)) {
    ASSERT_TRUE(keeping_up.ReadOne());
  }
  const uint64_t frames_meanwhile = last_frame.load();
  const int keeping_up_messages = keeping_up.messages();
  stop = true;
  writer.join();
  const uint64_t final_frame = last_frame.load();

  EXPECT_GE(frames_meanwhile, 20u);
  EXPECT_GE(keeping_up_messages, 10) << "a stalled tab slowed another";
  EXPECT_LE(busy.messages(), 2) << "unacknowledged messages kept coming";

  // Caught up: the keeping-up tab reaches the last frame exactly.
  ASSERT_TRUE(keeping_up.ReadUntil([&] {
    return keeping_up.last_frame() >= static_cast<double>(final_frame);
  }));
  ExpectViewIsServer(keeping_up, kEntities);

  // The stalled tab now reads: one message in flight and the net changes,
  // not a backlog of every frame.
  ASSERT_TRUE(stalled.ReadUntil([&] {
    return stalled.last_frame() >= static_cast<double>(final_frame);
  }));
  EXPECT_LE(stalled.messages(), 4);
  ExpectViewIsServer(stalled, kEntities);
  EXPECT_EQ(gateway->stats().tabs, 3);

  gateway.reset();  // Closes the busy tab's socket: its reader ends.
  busy_reader.join();
}

TEST_F(WebGatewayTest, BadInputClosesOnlyThatTab) {
  MakeWorld();
  std::unique_ptr<WebGateway> gateway =
      StartGateway({.max_inbound_bytes = 1024});
  FakeTab binary, not_json, wrong_json, too_big, good;
  for (FakeTab* tab : {&binary, &not_json, &wrong_json, &too_big, &good}) {
    ASSERT_TRUE(tab->Open(gateway->port(), "world=w"));
    ASSERT_TRUE(tab->ReadUntil([&] { return tab->view().size() == 4; }));
  }
  binary.Send("\x01\x02", /*binary=*/true);
  not_json.Send("{\"pause\": tru");
  wrong_json.Send("{\"pause\": 1, \"x\": 2}");
  too_big.Send(std::string(4096, ' '));
  for (FakeTab* tab : {&binary, &not_json, &wrong_json, &too_big}) {
    ASSERT_TRUE(tab->ReadUntil([&] { return tab->ended(); }) || tab->ended());
  }
  EXPECT_EQ(binary.close_code(), 1003);
  EXPECT_EQ(not_json.close_code(), 1008);
  EXPECT_EQ(wrong_json.close_code(), 1008);
  EXPECT_EQ(too_big.close_code(), 1009);

  absl::StatusOr<uint64_t> frame =
      client_->Apply("w", {SetLocalOp{10, At(8)}}, {.end_frame = true});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(good.ReadUntil([&] { return good.last_frame() >= *frame; }));
  ExpectViewIsServer(good, 4);
  // Counted when each tab's read ends, which for a message too big is after
  // Beast's closing handshake: the tab can see its close first.
  const GatewayStats stats = StatsOnceTrue(*gateway, [](const GatewayStats& s) {
    return s.tabs_closed_for_input == 4 && s.tabs == 1;
  });
  EXPECT_EQ(stats.tabs_closed_for_input, 4u);
  EXPECT_EQ(stats.tabs, 1);
}

// "Follow camera": a tab opened with a region is sent the entities in it;
// when the page moves its region, only what entered and left, never the
// view again. Bad regions close only the tab that sent them.
TEST_F(WebGatewayTest, ARegionTabGetsItsNeighbourhoodAndFollowsItsCamera) {
  // Entity e at x = e, on a line.
  ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  std::vector<Command> line;
  for (EntityId e = 1; e <= 100; ++e) {
    line.push_back(CreateOp{e, kNoEntity, At(static_cast<float>(e))});
  }
  ASSERT_TRUE(client_->Apply("w", line, {.end_frame = true}).ok());
  std::unique_ptr<WebGateway> gateway = StartGateway();
  const auto ids = [](const FakeTab& tab) {
    std::vector<EntityId> in;
    for (const auto& [id, value] : tab.view()) in.push_back(id);
    return in;
  };
  const auto span = [](EntityId first, EntityId last) {
    std::vector<EntityId> in;
    for (EntityId e = first; e <= last; ++e) in.push_back(e);
    return in;
  };

  FakeTab tab;
  ASSERT_TRUE(tab.Open(gateway->port(), "world=w&region=sphere:10,0,0,5"));
  ASSERT_TRUE(tab.ReadUntil([&] { return tab.view().size() == 11; }));
  EXPECT_EQ(ids(tab), span(5, 15));
  ExpectViewIsServer(tab, 11);

  // Moved 40 along: 11 leave and 11 enter, in messages that are not the
  // view resent.
  const size_t bytes_before = tab.bytes();
  const int resyncs_before = tab.resyncs();
  tab.Send(R"({"region": "sphere:50,0,0,5,margin=1"})");
  ASSERT_TRUE(tab.ReadUntil([&] { return ids(tab) == span(45, 55); }));
  ExpectViewIsServer(tab, 11);
  EXPECT_EQ(tab.resyncs(), resyncs_before);
  EXPECT_LE(tab.bytes() - bytes_before,
            kTabFrameHeaderBytes * 4 + 11 * (64 + 8));
  // Writes go on reaching it: 50 moves to x = 200 and leaves the view.
  ASSERT_TRUE(
      client_->Apply("w", {SetLocalOp{50, At(200)}}, {.end_frame = true}).ok());
  ASSERT_TRUE(tab.ReadUntil([&] { return !tab.view().contains(50); }));
  EXPECT_EQ(tab.view().size(), 10u);

  // Refused: a region in the query that is not one (400); a bad region
  // message, or one from a tab without a region (closed, 1008). The good
  // tab is not touched.
  EXPECT_EQ(Get(gateway->port(), "/ws?world=w&region=sphere:0,0,0,-1",
                http::verb::get, /*upgrade=*/true)
                .first,
            400);
  FakeTab bad_region, no_region;
  ASSERT_TRUE(
      bad_region.Open(gateway->port(), "world=w&region=box:0,0,0,1,1,1"));
  ASSERT_TRUE(no_region.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(
      no_region.ReadUntil([&] { return no_region.view().size() == 100; }));
  bad_region.Send(R"({"region": "box:1,0,0,0,0,0"})");
  no_region.Send(R"({"region": "sphere:0,0,0,1"})");
  for (FakeTab* closed : {&bad_region, &no_region}) {
    ASSERT_TRUE(closed->ReadUntil([&] { return closed->ended(); }) ||
                closed->ended());
    EXPECT_EQ(closed->close_code(), 1008);
  }
  tab.Send(R"({"region": "sphere:90,0,0,2"})");
  ASSERT_TRUE(tab.ReadUntil([&] { return ids(tab) == span(88, 92); }));
  ExpectViewIsServer(tab, 5);
}

TEST_F(WebGatewayTest, PauseHoldsFramesAndResumeSendsTheNetChange) {
  MakeWorld();
  std::unique_ptr<WebGateway> gateway = StartGateway();
  FakeTab tab;
  ASSERT_TRUE(tab.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(tab.ReadUntil([&] { return tab.view().size() == 4; }));
  tab.Send("{\"pause\": true}");
  StatsOnceTrue(*gateway,
                [](const GatewayStats& s) { return s.tabs_paused == 1; });
  const int before = tab.messages();
  const uint64_t frames_before = gateway->stats().frames_seen;
  uint64_t last = 0;
  for (int k = 0; k < 20; ++k) {
    absl::StatusOr<uint64_t> frame =
        client_->Apply("w", {SetLocalOp{10, At(k)}}, {.end_frame = true});
    ASSERT_TRUE(frame.ok());
    last = *frame;
  }
  // Resume once the tab's mirror has all 20 frames.
  StatsOnceTrue(*gateway, [&](const GatewayStats& s) {
    return s.frames_seen >= frames_before + 20;
  });
  tab.Send("{\"pause\": false}");
  ASSERT_TRUE(tab.ReadUntil([&] { return tab.last_frame() >= last; }));
  EXPECT_EQ(tab.messages() - before, 1);
  ExpectViewIsServer(tab, 4);
  EXPECT_EQ(gateway->stats().tabs_paused, 0);
}

TEST_F(WebGatewayTest, TabsPastTheLimitAreRefused) {
  MakeWorld();
  std::unique_ptr<WebGateway> gateway = StartGateway({.max_tabs = 2});
  FakeTab one, two, three;
  ASSERT_TRUE(one.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(two.Open(gateway->port(), "world=w"));
  EXPECT_EQ(Get(gateway->port(), "/ws?world=w", http::verb::get,
                /*upgrade=*/true)
                .first,
            503);
  EXPECT_FALSE(three.Open(gateway->port(), "world=w"));
}

// xformd restarts: the tab is told its mirror is reconnecting, then live
// again, with the view resynchronised.
TEST_F(WebGatewayTest, ATabSeesReconnectingAndRecovers) {
  MakeWorld();
  std::unique_ptr<WebGateway> gateway =
      StartGateway({.status_period = absl::Milliseconds(20)});
  FakeTab tab;
  ASSERT_TRUE(tab.Open(gateway->port(), "world=w"));
  ASSERT_TRUE(tab.ReadUntil([&] {
    return tab.view().size() == 4 && tab.status().value("synced", false);
  }));
  const int port = server_.port();
  server_.Stop();
  ASSERT_TRUE(
      tab.ReadUntil([&] { return !tab.status().value("synced", true); }));
  EXPECT_THAT(tab.status()["message"].get<std::string>(),
              HasSubstr("UNAVAILABLE"));

  // Back, with a different world "w": 1 elsewhere, 10 gone, 11 new.
  ASSERT_TRUE(server_.Start(Limits{}, {}, port, [](server::WorldHost& host) {
    v1::CreateWorldRequest create;
    create.set_name("w");
    create.set_mode(v1::FRAME_MODE_DRIVEN);
    std::shared_ptr<server::HostedWorld> world = *host.Create(create);
    v1::ApplyRequest apply;
    apply.set_world("w");
    apply.set_end_frame(true);
    v1::AppendCommands(
        {CreateOp{1, kNoEntity, At(9)}, CreateOp{2, 1, At(0, 1)},
         CreateOp{3, 2, At(0, 0, 1)}, CreateOp{11, kNoEntity, At(3)}},
        &apply);
    ASSERT_TRUE(world->Apply(apply, host.limits()).ok());
  }));
  ASSERT_TRUE(tab.ReadUntil([&] {
    return tab.status().value("synced", false) && tab.view().contains(11) &&
           !tab.view().contains(10);
  }));
  ExpectViewIsServer(tab, 4);
}

}  // namespace
}  // namespace xform::web
