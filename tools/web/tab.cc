// Copyright 2026 The xform Authors.

#include "tools/web/tab.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/web/page_protocol.h"
#include "tools/web/tab_frame.h"
#include "xform/mirror.h"

namespace xform::web {
namespace {

// A browser tab: a WebSocket and the Mirror that feeds it. Everything but
// the mirror's two callbacks runs on the tab's strand; the callbacks (on
// the mirror's thread) only note the publication time and post a wake-up,
// at most one outstanding.
class Tab : public Connection, public std::enable_shared_from_this<Tab> {
 public:
  Tab(beast::tcp_stream stream, WebGateway::Impl& gateway, uint64_t id,
      TabQuery query)
      : ws_(std::move(stream)),
        gateway_(gateway),
        id_(id),
        query_(std::move(query)),
        status_timer_(ws_.get_executor()) {}

  ~Tab() override {
    mirror_.reset();  // Joins its thread: no callback outlives the tab.
    if (paused_) gateway_.CountPaused(-1);
    gateway_.ConnectionEnded(id_, /*foxglove=*/false);
  }

  // For the gateway's region mover, which holds the tab: the mirror is
  // set before the tab reads its first message, and reset only when the
  // tab is gone or the mover has stopped.
  absl::Status SetRegion(const Region& region) override {
    return mirror_->SetRegion(region);
  }
  void PostRegionMoved(absl::Status status) override {
    asio::post(ws_.get_executor(),
               [self = shared_from_this(), status = std::move(status)] {
                 self->RegionMoved(status);
               });
  }

  void Accept(const Request& request) override {
    PrepareWebSocket(ws_, gateway_.options(),
                     gateway_.options().max_inbound_bytes);
    ws_.async_accept(request,
                     [self = shared_from_this()](beast::error_code ec) {
                       self->OnAccept(ec);
                     });
  }

  void StopMirrors() override { mirror_.reset(); }

 private:
  // On the tab's strand: what became of its latest region move.
  void RegionMoved(const absl::Status& status) {
    region_error_ =
        status.ok() ? "" : absl::StrCat("region: ", status.ToString());
    CheckStatus(/*again=*/false);
  }

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
    CloseSocket(ws_);
  }

  WebSocket ws_;
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

}  // namespace

std::shared_ptr<Connection> MakeTab(beast::tcp_stream stream,
                                    WebGateway::Impl& gateway, uint64_t id,
                                    TabQuery query) {
  return std::make_shared<Tab>(std::move(stream), gateway, id,
                               std::move(query));
}

}  // namespace xform::web
