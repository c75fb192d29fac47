// Copyright 2026 The xform Authors.

#include "tools/web/foxglove_session.h"

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/foxglove/transforms.h"
#include "tools/web/foxglove_protocol.h"
#include "xform/mirror.h"

namespace xform::web {
namespace {

using foxglove_ws::ClientOp;
using foxglove_ws::Level;
using foxglove_ws::Parameter;

constexpr char kRegionParameter[] = "xform.region";

// A world's two channels: ids 2k+1 (transforms) and 2k+2 (scene) for the
// k-th world this connection advertised.
enum class ChannelKind { kTransforms = 0, kScene = 1 };

// A world this client subscribed to: its Mirror and who reads it. The
// Mirror is shared with the region mover, which may hold it a moment
// longer.
struct Feed {
  std::shared_ptr<Mirror> mirror;
  // Set on the mirror's thread when a frame arrives.
  std::shared_ptr<std::atomic<bool>> behind =
      std::make_shared<std::atomic<bool>>(false);
  std::optional<uint32_t> subscription[2];  // By ChannelKind.
  bool whole = true;  // The next messages list the whole view.
  // The scale each drawn entity's cube was sent with.
  absl::flat_hash_map<EntityId, glm::vec3> drawn_scales;
  std::string last_status;  // The mirror's, as last reported.
  std::string world;
  uint64_t last_frame = 0;  // The frame of the last message sent.
  foxglove_io::TransformsEncoder encoder;

  bool subscribed() const { return subscription[0] || subscription[1]; }
};

class FoxgloveSession : public Connection,
                        public std::enable_shared_from_this<FoxgloveSession> {
 public:
  FoxgloveSession(beast::tcp_stream stream, WebGateway::Impl& gateway,
                  uint64_t id, TabQuery query)
      : ws_(std::move(stream)),
        gateway_(gateway),
        id_(id),
        query_(std::move(query)),
        region_(query_.region),
        timer_(ws_.get_executor()) {}

  ~FoxgloveSession() override {
    StopMirrors();
    gateway_.ConnectionEnded(id_, /*foxglove=*/true);
  }

  void Accept(const Request& request) override {
    PrepareWebSocket(ws_, gateway_.options(),
                     gateway_.options().foxglove_max_inbound_bytes,
                     std::string(foxglove_ws::kSubprotocol));
    ws_.async_accept(request,
                     [self = shared_from_this()](beast::error_code ec) {
                       if (!ec) self->OnAccept();
                     });
  }

  absl::Status SetRegion(const Region& region) override {
    std::vector<std::shared_ptr<Mirror>> mirrors;
    {
      absl::MutexLock lock(&mirrors_mu_);
      mirrors = mirrors_;
    }
    for (const std::shared_ptr<Mirror>& mirror : mirrors) {
      if (absl::Status status = mirror->SetRegion(region); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  void PostRegionMoved(absl::Status status) override {
    if (status.ok()) return;
    asio::post(ws_.get_executor(), [self = shared_from_this(),
                                    status = std::move(status)] {
      self->Send(Level::kError, absl::StrCat("region: ", status.ToString()));
    });
  }

  void StopMirrors() override {
    feeds_.clear();
    absl::MutexLock lock(&mirrors_mu_);
    mirrors_.clear();
  }

 private:
  void OnAccept() {
    static const std::vector<std::string> kCapabilities = {"parameters"};
    Queue(foxglove_ws::ServerInfoJson("xform-web", kCapabilities,
                                      gateway_.run_id()),
          /*binary=*/false);
    Tick();
    Read();
  }

  // Each status_period: the worlds' list, the views' states, and any
  // frame a wake-up may have missed.
  void Tick() {
    if (ended_) return;
    CheckWorlds();
    CheckMirrors();
    Write();
    timer_.expires_after(ToChrono(gateway_.options().status_period));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->Tick();
    });
  }

  void Read() {
    ws_.async_read(inbound_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->OnRead(ec);
                   });
  }

  void OnRead(beast::error_code ec) {
    if (ec) {
      // message_too_big: Beast has closed with 1009 already.
      if (ec == websocket::error::message_too_big) {
        gateway_.CountFoxgloveRefusal();
      }
      End();
      return;
    }
    if (!ws_.got_text()) {
      Refuse("binary messages (client publishing, services) are not served");
    } else {
      const std::string text = beast::buffers_to_string(inbound_.data());
      absl::StatusOr<ClientOp> op = foxglove_ws::ParseClientOp(text);
      if (op.ok()) {
        Handle(*op);
      } else {
        Refuse(op.status().ToString());
      }
    }
    inbound_.consume(inbound_.size());
    Write();
    if (!ended_) Read();
  }

  void Handle(const ClientOp& op) {
    switch (op.kind) {
      case ClientOp::Kind::kSubscribe:
        for (const foxglove_ws::Subscription& s : op.subscribe) Subscribe(s);
        break;
      case ClientOp::Kind::kUnsubscribe:
        for (uint32_t id : op.unsubscribe) Unsubscribe(id);
        break;
      case ClientOp::Kind::kGetParameters:
        Queue(foxglove_ws::ParameterValuesJson(Parameters(op.parameter_names),
                                               op.request_id),
              /*binary=*/false);
        break;
      case ClientOp::Kind::kSetParameters:
        SetParameters(op);
        break;
    }
  }

  // ---- channels -----------------------------------------------------------

  // Advertises the worlds that came since the last look, and takes back
  // (with their views) those that went.
  void CheckWorlds() {
    auto [generation, names] = gateway_.Worlds();
    if (generation == worlds_generation_) return;
    worlds_generation_ = generation;
    absl::flat_hash_set<std::string> now;
    std::vector<foxglove_ws::Channel> added;
    for (std::string& name : names) {
      if (!query_.world.empty() && name != query_.world) continue;
      now.insert(name);
      if (!advertised_.insert(name).second) continue;
      auto [it, is_new] = world_index_.try_emplace(name, worlds_.size());
      if (is_new) worlds_.push_back(name);
      for (ChannelKind kind : {ChannelKind::kTransforms, ChannelKind::kScene}) {
        added.push_back(ChannelOf(name, it->second, kind));
      }
    }
    std::vector<uint32_t> removed;
    for (auto it = advertised_.begin(); it != advertised_.end();) {
      if (now.contains(*it)) {
        ++it;
        continue;
      }
      const uint32_t k = world_index_.at(*it);
      removed.push_back(ChannelId(k, ChannelKind::kTransforms));
      removed.push_back(ChannelId(k, ChannelKind::kScene));
      DropWorld(*it);
      advertised_.erase(it++);
    }
    if (!removed.empty()) {
      Queue(foxglove_ws::UnadvertiseJson(removed), /*binary=*/false);
    }
    if (!added.empty()) {
      Queue(foxglove_ws::AdvertiseJson(added), /*binary=*/false);
    }
  }

  static uint32_t ChannelId(uint32_t k, ChannelKind kind) {
    return 2 * k + 1 + static_cast<uint32_t>(kind);
  }

  static foxglove_ws::Channel ChannelOf(const std::string& world, uint32_t k,
                                        ChannelKind kind) {
    static const std::string kTransformsSchema =
        foxglove_io::FileDescriptorSetOf(
            foxglove::FrameTransforms::descriptor());
    static const std::string kSceneSchema =
        foxglove_io::FileDescriptorSetOf(foxglove::SceneUpdate::descriptor());
    const bool transforms = kind == ChannelKind::kTransforms;
    return {
        .id = ChannelId(k, kind),
        .topic = absl::StrCat("/xform/", world, transforms ? "/tf" : "/scene"),
        .schema_name =
            transforms ? "foxglove.FrameTransforms" : "foxglove.SceneUpdate",
        .schema = transforms ? kTransformsSchema : kSceneSchema};
  }

  // The subscriptions to a world that went, and its view.
  void DropWorld(const std::string& world) {
    const auto feed = feeds_.find(world);
    if (feed == feeds_.end()) return;
    for (const std::optional<uint32_t>& id : feed->second.subscription) {
      if (id) subscriptions_.erase(*id);
    }
    ForgetMirror(feed->second.mirror);
    feeds_.erase(feed);
  }

  void Subscribe(const foxglove_ws::Subscription& s) {
    if (subscriptions_.contains(s.id)) {
      Refuse(absl::StrCat("subscription id ", s.id, " is in use"));
      return;
    }
    const uint32_t k = (s.channel_id - 1) / 2;
    if (s.channel_id == 0 || k >= worlds_.size() ||
        !advertised_.contains(worlds_[k])) {
      Refuse(absl::StrCat("no channel ", s.channel_id));
      return;
    }
    const std::string& world = worlds_[k];
    const auto kind = static_cast<ChannelKind>((s.channel_id - 1) % 2);
    Feed* feed = FeedOf(world);
    if (feed == nullptr) return;
    std::optional<uint32_t>& slot = feed->subscription[static_cast<int>(kind)];
    if (slot) {
      Refuse(absl::StrCat("channel ", s.channel_id, " is subscribed already"));
      return;
    }
    slot = s.id;
    feed->whole = true;  // The new reader needs the whole view.
    subscriptions_.emplace(s.id, s.channel_id);
  }

  // `world`'s view, started if need be; nullptr (refused) past
  // foxglove_max_worlds or when the Mirror cannot start.
  Feed* FeedOf(const std::string& world) {
    if (const auto it = feeds_.find(world); it != feeds_.end()) {
      return &it->second;
    }
    if (feeds_.size() >=
        static_cast<size_t>(gateway_.options().foxglove_max_worlds)) {
      Refuse(absl::StrCat(
          "at --foxglove_max_worlds=", gateway_.options().foxglove_max_worlds,
          " worlds subscribed"));
      return nullptr;
    }
    Feed feed;
    feed.world = world;
    absl::StatusOr<std::unique_ptr<Mirror>> mirror =
        Mirror::Start(gateway_.client(), MirrorOptionsFor(world, feed));
    if (!mirror.ok()) {
      Refuse(absl::StrCat("world ", world, ": ", mirror.status().ToString()));
      return nullptr;
    }
    feed.mirror = *std::move(mirror);
    {
      absl::MutexLock lock(&mirrors_mu_);
      mirrors_.push_back(feed.mirror);
    }
    return &feeds_.emplace(world, std::move(feed)).first->second;
  }

  MirrorOptions MirrorOptionsFor(const std::string& world, const Feed& feed) {
    MirrorOptions options;
    options.world = world;
    options.subtrees = query_.subtrees;
    options.region = region_;
    options.max_rate_hz = query_.max_rate_hz;
    options.encoding = gateway_.options().upstream_encoding;
    options.max_queued = gateway_.options().mirror_max_queued;
    options.on_update_matrices = false;
    std::weak_ptr<FoxgloveSession> weak = weak_from_this();
    auto executor = ws_.get_executor();
    WebGateway::Impl* gateway = &gateway_;
    options.on_frame = [behind = feed.behind, wake = wake_posted_, weak,
                        executor, gateway](uint64_t) {
      gateway->CountFrame();
      behind->store(true);
      if (wake->exchange(true)) return;
      asio::post(executor, [weak] {
        if (std::shared_ptr<FoxgloveSession> session = weak.lock()) {
          session->wake_posted_->store(false);
          session->Write();
        }
      });
    };
    return options;
  }

  void Unsubscribe(uint32_t id) {
    const auto it = subscriptions_.find(id);
    if (it == subscriptions_.end()) {
      Refuse(absl::StrCat("no subscription ", id));
      return;
    }
    const uint32_t channel = it->second;
    subscriptions_.erase(it);
    const auto feed = feeds_.find(worlds_[(channel - 1) / 2]);
    if (feed == feeds_.end()) return;
    feed->second.subscription[(channel - 1) % 2].reset();
    if (!feed->second.subscribed()) {
      ForgetMirror(feed->second.mirror);
      feeds_.erase(feed);
    }
  }

  void ForgetMirror(const std::shared_ptr<Mirror>& mirror) {
    absl::MutexLock lock(&mirrors_mu_);
    std::erase(mirrors_, mirror);
  }

  // ---- parameters ---------------------------------------------------------

  std::vector<Parameter> Parameters(const std::vector<std::string>& names) {
    std::vector<Parameter> all = {
        {.name = "xform.rate_hz", .number = query_.max_rate_hz},
        {.name = "xform.subtrees", .text = absl::StrJoin(query_.subtrees, ",")},
        {.name = "xform.world", .text = query_.world}};
    if (region_) {
      all.push_back({.name = kRegionParameter, .text = region_->ToString()});
    }
    if (names.empty()) return all;
    std::vector<Parameter> asked;
    for (Parameter& parameter : all) {
      if (std::find(names.begin(), names.end(), parameter.name) !=
          names.end()) {
        asked.push_back(std::move(parameter));
      }
    }
    return asked;
  }

  void SetParameters(const ClientOp& op) {
    std::vector<std::string> names;
    for (const Parameter& parameter : op.set) {
      if (parameter.name != kRegionParameter || !parameter.text) {
        Refuse(absl::StrCat("parameter ", parameter.name.substr(0, 64),
                            " is not settable (", kRegionParameter,
                            " is, as a string)"));
        continue;
      }
      if (!query_.region) {
        Refuse(
            "this connection has no region to move (open it with "
            "?region=)");
        continue;
      }
      absl::StatusOr<Region> region = Region::Parse(*parameter.text);
      if (!region.ok()) {
        Refuse(absl::StrCat("region: ", region.status().message()));
        continue;
      }
      region_ = *region;
      gateway_.MoveRegion(shared_from_this(), *region);
      names.push_back(parameter.name);
    }
    if (!op.request_id.empty()) {
      Queue(foxglove_ws::ParameterValuesJson(Parameters(names), op.request_id),
            /*binary=*/false);
    }
  }

  // ---- writing ------------------------------------------------------------

  // Each view's state when it changed: an error status for a view that
  // cannot be kept (no such world, refused), info when it is again.
  void CheckMirrors() {
    for (auto& [world, feed] : feeds_) {
      const absl::Status status = feed.mirror->status();
      std::string text =
          status.ok() ? ""
                      : absl::StrCat("world ", world, ": ", status.ToString());
      if (text == feed.last_status) continue;
      Send(text.empty() ? Level::kInfo : Level::kWarning,
           text.empty() ? absl::StrCat("world ", world, ": live") : text);
      feed.last_status = std::move(text);
    }
  }

  // Starts the next write, if none is in flight: a queued reply, else the
  // views that are behind.
  void Write() {
    if (writing_ || ended_) return;
    if (close_reason_) {
      writing_ = true;
      ws_.async_close(*close_reason_, [self = shared_from_this()](
                                          beast::error_code) { self->End(); });
      return;
    }
    if (outbox_.empty()) {
      for (auto& [world, feed] : feeds_) Encode(feed);
    }
    if (outbox_.empty()) return;
    out_ = std::move(outbox_.front());
    outbox_.pop_front();
    const bool binary = out_.binary;
    ws_.binary(binary);
    writing_ = true;
    const std::array<asio::const_buffer, 2> buffers = {
        asio::buffer(out_.head),
        out_.body ? asio::buffer(*out_.body) : asio::const_buffer()};
    ws_.async_write(buffers, [self = shared_from_this(), binary](
                                 beast::error_code ec, size_t bytes) {
      self->writing_ = false;
      if (ec) {
        self->End();
        return;
      }
      if (binary) self->gateway_.CountMessage(bytes);
      self->Write();
    });
  }

  // A view's changes (or the whole of it) as its channels' messages.
  void Encode(Feed& feed) {
    if (!feed.mirror->synced()) return;
    if (!feed.behind->exchange(false) && !feed.whole) return;
    MirrorChangedState state =
        feed.whole ? feed.mirror->TakeWholeState(/*with_parent_worlds=*/true)
                   : feed.mirror->TakeChangedState(/*with_parent_worlds=*/true);
    if (state.resynced && !feed.whole) {
      // The view was rebuilt (the world re-created, xformd restarted): the
      // client's tree is re-seeded whole.
      MirrorChangedState whole = feed.mirror->TakeWholeState(true);
      whole.destroyed.insert(whole.destroyed.end(), state.destroyed.begin(),
                             state.destroyed.end());
      state = std::move(whole);
      feed.whole = true;
    }
    const int64_t stamp =
        state.stamp > 0 ? state.stamp : absl::ToUnixNanos(absl::Now());
    if (const auto& id = feed.subscription[0]; id && !state.entities.empty()) {
      std::string head;
      foxglove_ws::StartMessageData(*id, stamp, &head);
      outbox_.push_back({.head = std::move(head),
                         .body = TransformsPayload(feed, state, stamp),
                         .binary = true});
    }
    feed.last_frame = state.frame;
    if (const auto& id = feed.subscription[1])
      EncodeScene(feed, state, *id, stamp);
    feed.whole = false;
  }

  // `state` as a FrameTransforms payload. Clients of the same view (same
  // world and subtrees, no region: a region moves) whose messages span the
  // same frames send the same transforms, so the first to encode them
  // shares them (GatewayImpl::SharedPayloads): the encoding, most of a
  // client's cost, is paid once a frame rather than once a client.
  std::shared_ptr<const std::string> TransformsPayload(
      Feed& feed, const MirrorChangedState& state, int64_t stamp) {
    std::string key;
    if (!region_) {
      key = absl::StrCat(feed.world, "\n", absl::StrJoin(query_.subtrees, ","),
                         "\n", feed.whole ? 0 : feed.last_frame, "\n",
                         state.frame, "\n", stamp);
      if (auto shared = gateway_.SharedPayload(key)) return shared;
    }
    auto payload = std::make_shared<std::string>();
    feed.encoder.Encode(state, stamp, payload.get());
    if (!key.empty()) gateway_.SharePayload(std::move(key), payload);
    return payload;
  }

  // The cubes of the entities new to the client or rescaled, and the
  // deletions of the destroyed (of all first, for a whole view).
  void EncodeScene(Feed& feed, const MirrorChangedState& state, uint32_t id,
                   int64_t stamp) {
    if (feed.whole) feed.drawn_scales.clear();
    std::vector<size_t> drawn;
    for (size_t k = 0; k < state.entities.size(); ++k) {
      const glm::vec3 scale = foxglove_io::ScaleOf(state.worlds[k]);
      auto [it, added] =
          feed.drawn_scales.try_emplace(state.entities[k], scale);
      if (added || glm::any(glm::greaterThan(glm::abs(it->second - scale),
                                             glm::vec3(1e-6f)))) {
        it->second = scale;
        drawn.push_back(k);
      }
    }
    for (EntityId e : state.destroyed) feed.drawn_scales.erase(e);
    if (drawn.empty() && state.destroyed.empty() && !feed.whole) return;
    foxglove::SceneUpdate update;
    if (feed.whole) {
      foxglove::SceneEntityDeletion* all = update.add_deletions();
      all->set_type(foxglove::SceneEntityDeletion::ALL);
      all->mutable_timestamp()->set_seconds(stamp / 1000000000);
      all->mutable_timestamp()->set_nanos(static_cast<int>(stamp % 1000000000));
    }
    update.MergeFrom(foxglove_io::SceneUpdateOf(state, stamp, drawn));
    std::string message;
    foxglove_ws::StartMessageData(id, stamp, &message);
    update.AppendToString(&message);
    outbox_.push_back({.head = std::move(message), .binary = true});
  }

  // A reply to the client; past foxglove_max_queued unwritten, the client
  // is closed instead (it sends faster than it reads).
  void Queue(std::string message, bool binary) {
    if (outbox_.size() >=
        static_cast<size_t>(gateway_.options().foxglove_max_queued)) {
      gateway_.CountFoxgloveRefusal();
      close_reason_ = websocket::close_reason(
          websocket::close_code::policy_error,
          "too many replies unread (--foxglove_max_queued)");
      return;
    }
    outbox_.push_back({.head = std::move(message), .binary = binary});
  }

  void Send(Level level, const std::string& message) {
    Queue(foxglove_ws::StatusJson(level, message), /*binary=*/false);
    Write();
  }

  void Refuse(const std::string& why) {
    gateway_.CountFoxgloveRefusal();
    Queue(foxglove_ws::StatusJson(Level::kError, why), /*binary=*/false);
  }

  void End() {
    if (ended_) return;
    ended_ = true;
    timer_.cancel();
    CloseSocket(ws_);
  }

  WebSocket ws_;
  WebGateway::Impl& gateway_;
  const uint64_t id_;
  const TabQuery query_;
  std::optional<Region> region_;  // The latest asked for.
  asio::steady_timer timer_;
  beast::flat_buffer inbound_;

  // Worlds advertised, and every world this connection ever advertised,
  // by index k (its channels' ids).
  absl::flat_hash_set<std::string> advertised_;
  std::vector<std::string> worlds_;
  absl::flat_hash_map<std::string, uint32_t> world_index_;
  uint64_t worlds_generation_ = ~uint64_t{0};
  absl::flat_hash_map<uint32_t, uint32_t> subscriptions_;  // Id: channel.
  absl::flat_hash_map<std::string, Feed> feeds_;
  // The Mirrors of feeds_, for the region mover's thread.
  absl::Mutex mirrors_mu_;
  std::vector<std::shared_ptr<Mirror>> mirrors_ ABSL_GUARDED_BY(mirrors_mu_);
  const std::shared_ptr<std::atomic<bool>> wake_posted_ =
      std::make_shared<std::atomic<bool>>(false);

  // A message: its own bytes, then a body it may share with other
  // clients (a FrameTransforms payload).
  struct Outgoing {
    std::string head;
    std::shared_ptr<const std::string> body;
    bool binary = false;
  };
  std::deque<Outgoing> outbox_;
  Outgoing out_;  // The message in flight.
  std::optional<websocket::close_reason> close_reason_;
  bool writing_ = false;
  bool ended_ = false;
};

}  // namespace

std::shared_ptr<Connection> MakeFoxgloveSession(beast::tcp_stream stream,
                                                WebGateway::Impl& gateway,
                                                uint64_t id, TabQuery query) {
  return std::make_shared<FoxgloveSession>(std::move(stream), gateway, id,
                                           std::move(query));
}

}  // namespace xform::web
