// Copyright 2026 The xform Authors.

#include "tools/load/transports.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "hiredis/hiredis.h"
#include "xform/mirror.h"
#include "xform/v1/wire.h"

namespace xform::load {
namespace {

// xform's way: a Mirror; its thread records each message (and stalls).
class StreamSubscriber final : public Subscriber {
 public:
  StreamSubscriber(const ClientOptions& options, const std::string& world,
                   MirrorOptions::Encoding encoding, float precision,
                   double max_rate_hz, bool stalls, int index,
                   const std::optional<Camera>& camera)
      : Subscriber(stalls) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) return;  // Never ready: the run times out and says so.
    client_ = *std::move(client);
    MirrorOptions mirror;
    mirror.world = world;
    mirror.encoding = encoding;
    mirror.position_precision = precision;
    mirror.max_rate_hz = max_rate_hz;
    // Times and counts only: the copy is what it applies to.
    mirror.on_update_matrices = false;
    mirror.on_update = [this](const MirrorUpdate& u) {
      if (u.snapshot) {
        recorder_.RecordSnapshot(u.moved.size(), u.bytes);
        return;
      }
      recorder_.MaybeStall();
      // Its age when the consumer gets to it: after a stall, not on arrival.
      const double age = absl::ToDoubleMilliseconds(absl::Now() - u.published);
      recorder_.Record({&age, 1}, 1 + u.frames_skipped, u.moved.size(), u.bytes,
                       u.published,
                       absl::ToDoubleMilliseconds(u.received - u.published));
    };
    std::optional<CameraPath> path;
    if (camera) {
      path.emplace(*camera, index);
      mirror.region = path->Region();
    }
    mirror_ = *Mirror::Start(*client_, std::move(mirror));
    if (path && camera->speed > 0) {  // A still camera never moves.
      camera_ = std::thread([this, path = *path]() mutable { Move(path); });
    }
  }
  ~StreamSubscriber() override {
    stop_.Notify();
    if (camera_.joinable()) camera_.join();
  }
  bool Ready() override { return mirror_ != nullptr && mirror_->synced(); }

 private:
  // Where a camera is: it starts within `range` of its region's position,
  // seeded by the subscriber's index, and heads its own way, back and forth.
  class CameraPath {
   public:
    CameraPath(const Camera& camera, int index) : camera_(camera) {
      std::mt19937 rng(static_cast<uint32_t>(1000 + index));
      std::uniform_real_distribution<float> u(-1, 1);
      offset_ = {camera.range * u(rng), 0, camera.range * u(rng)};
      const float angle = 3.1415927f * u(rng);
      heading_ = {std::cos(angle), 0, std::sin(angle)};
    }
    xform::Region Region() const { return camera_.region.Translated(offset_); }
    void Step() {
      offset_ += heading_ * camera_.speed / static_cast<float>(camera_.hz);
      for (int axis : {0, 2}) {
        if (std::abs(offset_[axis]) > camera_.range) heading_[axis] *= -1;
      }
    }
    double hz() const { return camera_.hz; }

   private:
    Camera camera_;
    glm::vec3 offset_, heading_;
  };

  void Move(CameraPath& path) {
    const absl::Duration period = absl::Seconds(1 / path.hz());
    for (absl::Time next = absl::Now() + period;
         !stop_.WaitForNotificationWithTimeout(next - absl::Now());
         next += period) {
      path.Step();
      // Refused moves (too fast for --max_region_moves_hz) are skipped: the
      // next one carries the camera on.
      mirror_->SetRegion(path.Region()).IgnoreError();
    }
  }

  std::unique_ptr<Client> client_;
  std::unique_ptr<Mirror> mirror_;
  absl::Notification stop_;
  std::thread camera_;
};

// The polling baseline: the whole world, every frame, in chunks well under
// the message limit.
class PollSubscriber final : public Subscriber {
 public:
  PollSubscriber(const ClientOptions& options, const std::string& world,
                 const std::vector<EntityId>& ids, double hz, AckLog& acks,
                 bool stalls)
      : Subscriber(stalls),
        world_(world),
        ids_(ids),
        acks_(acks),
        period_(absl::Seconds(1 / hz)) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) return;  // Never ready: the run times out and says so.
    client_ = *std::move(client);
    thread_ = std::thread([this] { Run(); });
  }
  ~PollSubscriber() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool Ready() override { return polled_once_; }

 private:
  // 104 bytes an entity in a ReadResponse: about 3 MB a call.
  static constexpr size_t kChunk = 30'000;

  void Run() {
    absl::Time last_start = absl::Now();
    for (absl::Time next = absl::Now(); !stop_; next += period_) {
      recorder_.MaybeStall();
      const absl::Time start = absl::Now();
      uint64_t bytes = 0;
      bool ok = true;
      for (size_t first = 0; first < ids_.size() && ok; first += kChunk) {
        const size_t count = std::min(kChunk, ids_.size() - first);
        absl::StatusOr<std::vector<EntityState>> states =
            client_->Read(world_, {ids_.data() + first, count});
        ok = states.ok();
        if (ok) bytes += states->size() * v1::kReadBytesPerEntity;
      }
      if (!ok) {
        recorder_.Disconnected();
        absl::SleepFor(period_);
        continue;
      }
      const absl::Time now = absl::Now();
      std::vector<double> ages;
      const uint64_t updates = acks_.AgesBetween(last_start, start, now, &ages);
      recorder_.Record(ages, 1, updates, bytes);
      last_start = start;
      polled_once_ = true;
      // A poll slower than a frame polls again at once.
      if (now < next + period_)
        absl::SleepFor(next + period_ - now);
      else
        next = now - period_;
    }
  }

  const std::string world_;
  const std::vector<EntityId>& ids_;
  AckLog& acks_;
  const absl::Duration period_;
  std::unique_ptr<Client> client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> polled_once_{false};
};

// Redis payload: xformd's publication time (int64 ns), count, ids, 12 floats
// each.
constexpr char kChannel[] = "xform-load";

class RedisSubscriber final : public Subscriber {
 public:
  RedisSubscriber(int port, size_t entities, bool stalls)
      : Subscriber(stalls), port_(port) {
    table_.reserve(entities);
    thread_ = std::thread([this] { Run(); });
  }
  ~RedisSubscriber() override {
    stop_ = true;
    thread_.join();
  }
  bool Ready() override { return subscribed_; }

 private:
  void Run() {
    while (!stop_) {
      const timeval timeout = {0, 200'000};
      redisContext* redis =
          redisConnectWithTimeout("127.0.0.1", port_, timeout);
      if (redis == nullptr || redis->err) {
        if (redis != nullptr) redisFree(redis);
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      redisSetTimeout(redis, timeout);
      freeReplyObject(redisCommand(redis, "SUBSCRIBE %s", kChannel));
      subscribed_ = true;
      while (!stop_) {
        recorder_.MaybeStall();
        void* raw = nullptr;
        if (redisGetReply(redis, &raw) != REDIS_OK) {
          if (redis->err == REDIS_ERR_IO && errno == EAGAIN) {
            redis->err = 0;  // A read timeout: look at stop_, read again.
            continue;
          }
          recorder_.Disconnected();  // Redis dropped us (buffer limit).
          break;
        }
        auto* reply = static_cast<redisReply*>(raw);
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
            reply->element[2]->type == REDIS_REPLY_STRING) {
          Handle(reply->element[2]->str, reply->element[2]->len);
        }
        freeReplyObject(reply);
      }
      redisFree(redis);
    }
  }

  void Handle(const char* data, size_t size) {
    int64_t published_ns = 0;
    uint32_t count = 0;
    if (size < 12) return;
    std::memcpy(&published_ns, data, 8);
    std::memcpy(&count, data + 8, 4);
    const char* ids = data + 12;
    const char* floats = ids + 8 * size_t{count};
    if (floats + 48 * size_t{count} > data + size) return;
    // What a Mirror does with a message: each entity's matrix into its
    // table, looked up by id.
    for (size_t k = 0; k < count; ++k) {
      EntityId e;
      std::memcpy(&e, ids + 8 * k, 8);
      std::memcpy(table_[e].m.data(), floats + 48 * k, 48);
    }
    const absl::Time published = absl::FromUnixNanos(published_ns);
    const double age = absl::ToDoubleMilliseconds(absl::Now() - published);
    recorder_.Record({&age, 1}, 1, count, size, published);
  }

  const int port_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> subscribed_{false};
  absl::flat_hash_map<EntityId, Matrix3x4> table_;
};

// Mirrors the world once and publishes each frame's moves to Redis.
class RedisRelayImpl final : public RedisRelay {
 public:
  RedisRelayImpl(const ClientOptions& options, const std::string& world,
                 int port)
      : redis_(redisConnect("127.0.0.1", port)) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) return;
    client_ = *std::move(client);
    MirrorOptions mirror;
    mirror.world = world;
    mirror.on_update = [this](const MirrorUpdate& u) {
      if (u.snapshot) return;
      const uint32_t count = static_cast<uint32_t>(u.moved.size());
      // xformd's publication time, carried through, so that a Redis
      // subscriber's latency spans what a stream subscriber's does.
      const int64_t published = absl::ToUnixNanos(u.published);
      payload_.resize(12 + 56 * size_t{count});
      std::memcpy(payload_.data(), &published, 8);
      std::memcpy(payload_.data() + 8, &count, 4);
      std::memcpy(payload_.data() + 12, u.moved.data(), 8 * size_t{count});
      std::memcpy(payload_.data() + 12 + 8 * size_t{count},
                  u.moved_world.data(), 48 * size_t{count});
      freeReplyObject(redisCommand(redis_, "PUBLISH %s %b", kChannel,
                                   payload_.data(), payload_.size()));
    };
    mirror_ = *Mirror::Start(*client_, std::move(mirror));
  }
  ~RedisRelayImpl() override {
    mirror_.reset();  // Stops the callbacks before the connection goes.
    redisFree(redis_);
  }
  bool ok() const override { return redis_ != nullptr && redis_->err == 0; }
  bool Ready() const override {
    return mirror_ != nullptr && mirror_->synced();
  }

 private:
  redisContext* redis_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Mirror> mirror_;
  std::vector<char> payload_;
};

}  // namespace

std::unique_ptr<Subscriber> StartStreamSubscriber(
    const ClientOptions& options, const std::string& world,
    MirrorOptions::Encoding encoding, float precision, double max_rate_hz,
    bool stalls, int index, const std::optional<Camera>& camera) {
  ClientOptions spread = options;
  std::vector<std::string> addresses =
      absl::StrSplit(options.address, ',', absl::SkipWhitespace());
  if (addresses.size() > 1) {
    std::rotate(
        addresses.begin(),
        addresses.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(index) %
                                                   addresses.size()),
        addresses.end());
    spread.address = absl::StrJoin(addresses, ",");
  }
  return std::make_unique<StreamSubscriber>(spread, world, encoding, precision,
                                            max_rate_hz, stalls, index, camera);
}

std::unique_ptr<Subscriber> StartPollSubscriber(
    const ClientOptions& options, const std::string& world,
    const std::vector<EntityId>& ids, double hz, AckLog& acks, bool stalls) {
  return std::make_unique<PollSubscriber>(options, world, ids, hz, acks,
                                          stalls);
}

std::unique_ptr<Subscriber> StartRedisSubscriber(int redis_port,
                                                 size_t entities, bool stalls) {
  return std::make_unique<RedisSubscriber>(redis_port, entities, stalls);
}

std::unique_ptr<RedisRelay> StartRedisRelay(const ClientOptions& options,
                                            const std::string& world,
                                            int redis_port) {
  return std::make_unique<RedisRelayImpl>(options, world, redis_port);
}

}  // namespace xform::load
