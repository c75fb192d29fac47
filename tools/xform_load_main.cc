// Copyright 2026 The xform Authors.
//
// xform-load: the test-client driver. Builds a world of a chosen shape and
// size in xformd, runs W writers moving K entities per frame at R Hz and S
// subscribers for a while, then reports what the subscribers got: frames,
// entity updates per second, publish-to-receive latency, bytes per update,
// and the server's CPU and memory (from /proc, when the server is local).
//
// Three ways to get the same frames to the same S subscribers, side by side
// (--mode=all runs them one after another on one world):
//   stream  xform's own: each subscriber keeps a Mirror over a Subscribe
//           stream and is sent only what moved.
//   poll    each subscriber reads the whole world every frame (Read).
//   redis   a relay mirrors the world once and PUBLISHes each frame's moves
//           (the same 56 bytes an entity) to a local redis-server; each
//           subscriber SUBSCRIBEs with hiredis.
// --stall_s makes one subscriber stop reading for that long mid-run, to show
// what each way does to a consumer that falls behind.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "hiredis/hiredis.h"
#include "nlohmann/json.hpp"
#include "tools/process_stats.h"
#include "tools/scenes.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/v1/xform.grpc.pb.h"

extern char** environ;

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "xformd address");
ABSL_FLAG(std::string, xformd, "",
          "Start this xformd binary on --server's port for the run (and "
          "measure it); otherwise use a running one");
ABSL_FLAG(int, server_pid, 0, "The running xformd's pid, to read its CPU/RSS");
ABSL_FLAG(std::string, world, "load", "World to build (replaced if present)");
ABSL_FLAG(std::string, shape, "scene", "wide, scene or chains");
ABSL_FLAG(int, entities, 100'000, "World size");
ABSL_FLAG(int, writers, 1, "Writers (W), each its own connection");
ABSL_FLAG(int, move, 1000, "Entities moved per frame (K), over all writers");
ABSL_FLAG(double, move_percent, 0, "Or: this percent of the world per frame");
ABSL_FLAG(double, hz, 60, "Frames per second (R)");
ABSL_FLAG(int, subscribers, 4, "Subscribers (S)");
ABSL_FLAG(double, stall_s, 0,
          "One subscriber stops reading for this long, a third of the way in");
ABSL_FLAG(double, seconds, 10, "Measured seconds per mode");
ABSL_FLAG(std::string, mode, "stream", "stream, poll, redis, or all");
ABSL_FLAG(std::string, redis_server, "redis-server",
          "redis mode: start this redis-server on --redis_port");
ABSL_FLAG(int, redis_port, 6390, "redis mode: the port");
ABSL_FLAG(bool, json, false, "Print the report as JSON");

namespace xform::load {

// xform-load's worlds go to 4M entities: the xformd it spawns, and its own
// channels, take messages this large.
constexpr int kLoadMaxMessageBytes = 256 << 20;
namespace {

using Json = nlohmann::json;
using ::xform::tools::CpuSeconds;
using ::xform::tools::Percentile;
using ::xform::tools::RssMegabytes;

// ---------------------------------------------------------------------------
// Measurements.

// What one subscriber received while measuring.
struct Received {
  std::vector<double> latency_ms;  // One per message (poll: per write seen).
  uint64_t messages = 0;
  uint64_t frames = 0;   // Frames covered, folded ones included.
  uint64_t updates = 0;  // Entity updates delivered.
  uint64_t bytes = 0;
  // The stalled subscriber: how old the first data after the stall was, how
  // long until it was current again, and what it had to wade through.
  bool stalled = false;
  double first_after_stall_ms = 0;
  double catch_up_ms = 0;
  uint64_t backlog_messages = 0;
  uint64_t disconnects = 0;
};

// Shared by a subscriber's receiving thread and the report.
class Recorder {
 public:
  explicit Recorder(bool stalls) { received_.stalled = stalls; }

  void StartMeasuring(absl::Time stall_at, absl::Duration stall) {
    absl::MutexLock lock(&mu_);
    measuring_ = true;
    stall_at_ = stall_at;
    stall_ = stall;
  }
  void StopMeasuring() {
    absl::MutexLock lock(&mu_);
    measuring_ = false;
  }

  // Called by the receiver before it handles a message: sleeps through the
  // stall once, if this subscriber is the one that stalls.
  void MaybeStall() {
    absl::Duration stall;
    {
      absl::MutexLock lock(&mu_);
      if (!received_.stalled || stalled_done_ || !measuring_ ||
          absl::Now() < stall_at_) {
        return;
      }
      stalled_done_ = true;
      stall = stall_;
    }
    absl::SleepFor(stall);
    absl::MutexLock lock(&mu_);
    stall_end_ = absl::Now();
  }

  // One message: its age at arrival for each of `ages`, and what it carried.
  void Record(absl::Span<const double> ages_ms, uint64_t frames,
              uint64_t updates, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    if (!measuring_) return;
    ++received_.messages;
    received_.frames += frames;
    received_.updates += updates;
    received_.bytes += bytes;
    received_.latency_ms.insert(received_.latency_ms.end(), ages_ms.begin(),
                                ages_ms.end());
    const double age = ages_ms.empty() ? 0 : ages_ms.front();
    if (!stalled_done_) {
      for (double a : ages_ms)
        before_stall_max_ms_ = std::max(before_stall_max_ms_, a);
    }
    if (stall_end_ == absl::InfinitePast() || caught_up_) return;
    if (received_.backlog_messages++ == 0) {
      received_.first_after_stall_ms = age;
    }
    // Current again: data as young as it was before the stall (a poller's
    // is never younger than its poll takes), or younger than a few frames.
    if (age < std::max(50.0, before_stall_max_ms_)) {
      caught_up_ = true;
      received_.catch_up_ms =
          absl::ToDoubleMilliseconds(absl::Now() - stall_end_);
    }
  }
  void Disconnected() {
    absl::MutexLock lock(&mu_);
    ++received_.disconnects;
  }

  uint64_t messages() {
    absl::MutexLock lock(&mu_);
    return received_.messages;
  }
  Received Take() {
    absl::MutexLock lock(&mu_);
    return received_;
  }

 private:
  absl::Mutex mu_;
  Received received_ ABSL_GUARDED_BY(mu_);
  bool measuring_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stall_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Duration stall_ ABSL_GUARDED_BY(mu_);
  bool stalled_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stall_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool caught_up_ ABSL_GUARDED_BY(mu_) = false;
  double before_stall_max_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

// When each writer's batches were acknowledged, so a poller can tell how old
// the changes it reads are.
class AckLog {
 public:
  void Add(absl::Time at, uint64_t entities) {
    absl::MutexLock lock(&mu_);
    acks_.push_back({at, entities});
  }
  // Ages at `now` of the batches acknowledged in (after, upto], and the
  // entities they set.
  uint64_t AgesBetween(absl::Time after, absl::Time upto, absl::Time now,
                       std::vector<double>* ages_ms) {
    absl::MutexLock lock(&mu_);
    uint64_t entities = 0;
    for (auto it = std::upper_bound(
             acks_.begin(), acks_.end(), after,
             [](absl::Time t, const Ack&a) { return t < a.at; });
         it != acks_.end() && it->at <= upto; ++it) {
      ages_ms->push_back(absl::ToDoubleMilliseconds(now - it->at));
      entities += it->entities;
    }
    return entities;
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    acks_.clear();
  }

 private:
  struct Ack {
    absl::Time at;
    uint64_t entities;
  };
  absl::Mutex mu_;
  std::vector<Ack> acks_ ABSL_GUARDED_BY(mu_);  // In time order.
};

// ---------------------------------------------------------------------------
// Subscribers, one class per way of receiving.

class Subscriber {
 public:
  explicit Subscriber(bool stalls) : recorder_(stalls) {}
  virtual ~Subscriber() = default;
  // True once it holds the world and is receiving.
  virtual bool Ready() = 0;
  Recorder& recorder() { return recorder_; }

 protected:
  Recorder recorder_;
};

// xform's way: a Mirror; its thread records each message (and stalls).
class StreamSubscriber final : public Subscriber {
 public:
  StreamSubscriber(const ClientOptions& options, const std::string& world,
                   bool stalls)
      : Subscriber(stalls) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) return;  // Never ready: the run times out and says so.
    client_ = *std::move(client);
    MirrorOptions mirror;
    mirror.world = world;
    mirror.on_update = [this](const MirrorUpdate& u) {
      if (u.snapshot) return;
      recorder_.MaybeStall();
      // Its age when the consumer gets to it: after a stall, not on arrival.
      const double age = absl::ToDoubleMilliseconds(absl::Now() - u.published);
      recorder_.Record({&age, 1}, 1 + u.frames_skipped, u.moved.size(),
                       u.bytes);
    };
    mirror_ = *Mirror::Start(*client_, std::move(mirror));
  }
  bool Ready() override { return mirror_ != nullptr && mirror_->synced(); }

 private:
  std::unique_ptr<Client> client_;
  std::unique_ptr<Mirror> mirror_;
};

// The polling baseline: the whole world, every frame, in chunks the server's
// message limit allows.
class PollSubscriber final : public Subscriber {
 public:
  PollSubscriber(const std::string& address, const std::string& world,
                 const std::vector<EntityId>& ids, double hz, AckLog& acks,
                 bool stalls)
      : Subscriber(stalls),
        world_(world),
        ids_(ids),
        acks_(acks),
        period_(absl::Seconds(1 / hz)) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kLoadMaxMessageBytes);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stub_ = v1::Xform::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args));
    thread_ = std::thread([this] { Run(); });
  }
  ~PollSubscriber() override {
    stop_ = true;
    thread_.join();
  }
  bool Ready() override { return polled_once_; }

 private:
  // 104 bytes an entity in a ReadResponse; stay well under 4 MB.
  static constexpr size_t kChunk = 30'000;

  void Run() {
    absl::Time last_start = absl::Now();
    for (absl::Time next = absl::Now(); !stop_; next += period_) {
      recorder_.MaybeStall();
      const absl::Time start = absl::Now();
      uint64_t bytes = 0;
      bool ok = true;
      for (size_t first = 0; first < ids_.size() && ok; first += kChunk) {
        v1::ReadRequest request;
        request.set_world(world_);
        const size_t last = std::min(ids_.size(), first + kChunk);
        request.mutable_entity()->Add(ids_.begin() + first,
                                      ids_.begin() + last);
        v1::ReadResponse response;
        grpc::ClientContext context;
        ok = stub_->Read(&context, request, &response).ok();
        bytes += response.ByteSizeLong();
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
  std::unique_ptr<v1::Xform::Stub> stub_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> polled_once_{false};
};

// Redis payload: publish time (int64 ns), count, ids, 12 floats each.
constexpr char kChannel[] = "xform-load";

class RedisSubscriber final : public Subscriber {
 public:
  RedisSubscriber(int port, bool stalls) : Subscriber(stalls), port_(port) {
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
    // A renderer would copy the matrices out; so does this.
    matrices_.resize(count);
    const char* floats = data + 12 + 8 * size_t{count};
    if (floats + 48 * size_t{count} > data + size) return;
    std::memcpy(matrices_.data(), floats, 48 * size_t{count});
    const double age = absl::ToDoubleMilliseconds(
        absl::Now() - absl::FromUnixNanos(published_ns));
    recorder_.Record({&age, 1}, 1, count, size);
  }

  const int port_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> subscribed_{false};
  std::vector<Matrix3x4> matrices_;
};

// Mirrors the world once and publishes each frame's moves to Redis.
class RedisRelay {
 public:
  RedisRelay(const ClientOptions& options, const std::string& world, int port)
      : redis_(redisConnect("127.0.0.1", port)) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) return;
    client_ = *std::move(client);
    MirrorOptions mirror;
    mirror.world = world;
    mirror.on_update = [this](const MirrorUpdate& u) {
      if (u.snapshot) return;
      const uint32_t count = static_cast<uint32_t>(u.moved.size());
      const int64_t now = absl::ToUnixNanos(absl::Now());
      payload_.resize(12 + 56 * size_t{count});
      std::memcpy(payload_.data(), &now, 8);
      std::memcpy(payload_.data() + 8, &count, 4);
      std::memcpy(payload_.data() + 12, u.moved.data(), 8 * size_t{count});
      std::memcpy(payload_.data() + 12 + 8 * size_t{count},
                  u.moved_world.data(), 48 * size_t{count});
      freeReplyObject(redisCommand(redis_, "PUBLISH %s %b", kChannel,
                                   payload_.data(), payload_.size()));
    };
    mirror_ = *Mirror::Start(*client_, std::move(mirror));
  }
  ~RedisRelay() {
    mirror_.reset();  // Stops the callbacks before the connection goes.
    redisFree(redis_);
  }
  bool ok() const { return redis_ != nullptr && redis_->err == 0; }
  bool Ready() const { return mirror_ != nullptr && mirror_->synced(); }

 private:
  redisContext* redis_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Mirror> mirror_;
  std::vector<char> payload_;
};

// ---------------------------------------------------------------------------
// The run.

// Starts `command`; with `quiet`, its stdout goes to /dev/null.
pid_t Spawn(const std::vector<std::string>& command, bool quiet = false) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                     O_WRONLY, 0);
  }
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& arg : command) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error =
      posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : 0;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

struct Config {
  std::string address;
  std::string world;
  SceneShape shape;
  int entities;
  int writers;
  int move;
  double hz;
  int subscribers;
  double stall_s;
  double seconds;
  pid_t server_pid;
};

struct ModeResult {
  std::string mode;
  double frames_per_s = 0;  // Written.
  std::vector<Received> subscribers;
  double server_cpu_ms_per_frame = 0;
  double server_rss_mb = 0;
  double redis_cpu_ms_per_frame = 0;
};

class LoadRun {
 public:
  explicit LoadRun(Config config) : config_(std::move(config)) {
    options_.address = config_.address;
    options_.max_message_bytes = kLoadMaxMessageBytes;
    options_.deadline = absl::Seconds(120);
    options_.connect_timeout = absl::Seconds(20);
  }

  absl::Status Build() {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    client_->DeleteWorld(config_.world).IgnoreError();
    if (absl::StatusOr<WorldInfo> made = client_->CreateWorld(
            config_.world, {.mode = FrameMode::kTick, .tick_hz = config_.hz});
        !made.ok()) {
      return made.status();
    }
    const std::vector<CreateOp> scene =
        MakeScene(config_.shape, config_.entities);
    for (const CreateOp& op : scene) ids_.push_back(op.entity);
    movable_ = Leaves(scene);
    const absl::Time start = absl::Now();
    constexpr size_t kBatch = 50'000;  // About 3 MB a request.
    for (size_t first = 0; first < scene.size(); first += kBatch) {
      std::vector<Command> batch(
          scene.begin() + first,
          scene.begin() + std::min(scene.size(), first + kBatch));
      if (absl::StatusOr<uint64_t> frame = client_->Apply(config_.world, batch);
          !frame.ok()) {
        return frame.status();
      }
    }
    Progress(absl::StrFormat(
        "built %s world of %d entities (%d movable leaves) "
        "in %.1f s",
        SceneShapeName(config_.shape), config_.entities, movable_.size(),
        absl::ToDoubleSeconds(absl::Now() - start)));
    return absl::OkStatus();
  }

  absl::StatusOr<ModeResult> Run(const std::string& mode, pid_t redis_pid,
                                 int redis_port) {
    acks_.Clear();
    std::unique_ptr<RedisRelay> relay;
    if (mode == "redis") {
      relay = std::make_unique<RedisRelay>(options_, config_.world, redis_port);
      if (!relay->ok()) {
        return absl::UnavailableError("cannot reach redis-server");
      }
    }
    std::vector<std::unique_ptr<Subscriber>> subs;
    for (int s = 0; s < config_.subscribers; ++s) {
      const bool stalls = config_.stall_s > 0 && s == 0;
      if (mode == "stream") {
        subs.push_back(std::make_unique<StreamSubscriber>(
            options_, config_.world, stalls));
      } else if (mode == "poll") {
        subs.push_back(std::make_unique<PollSubscriber>(
            config_.address, config_.world, ids_, config_.hz, acks_, stalls));
      } else {
        subs.push_back(std::make_unique<RedisSubscriber>(redis_port, stalls));
      }
    }
    const absl::Time ready_by = absl::Now() + absl::Seconds(120);
    auto ready = [&] {
      if (relay && !relay->Ready()) return false;
      for (auto& s : subs) {
        if (!s->Ready()) return false;
      }
      return true;
    };
    while (!ready()) {
      if (absl::Now() > ready_by) {
        return absl::DeadlineExceededError("subscribers did not get ready");
      }
      absl::SleepFor(absl::Milliseconds(20));
    }

    const absl::Time start = absl::Now();
    const absl::Duration duration = absl::Seconds(config_.seconds);
    for (auto& s : subs) {
      s->recorder().StartMeasuring(start + duration / 3,
                                   absl::Seconds(config_.stall_s));
    }
    const double cpu_before =
        config_.server_pid ? CpuSeconds(config_.server_pid) : 0;
    const double redis_before = redis_pid ? CpuSeconds(redis_pid) : 0;
    std::atomic<uint64_t> frames_written{0};
    std::vector<std::thread> writers;
    writers.reserve(config_.writers);
    for (int w = 0; w < config_.writers; ++w) {
      writers.emplace_back(
          [&, w] { Write(w, start + duration, &frames_written); });
    }
    for (absl::Time tick = start + absl::Seconds(1); tick < start + duration;
         tick += absl::Seconds(1)) {
      absl::SleepFor(tick - absl::Now());
      uint64_t messages = 0;
      for (auto& s : subs) messages += s->recorder().messages();
      Progress(
          absl::StrFormat("[%s %2.0f/%.0f s] %u batches written, %u "
                          "messages received",
                          mode, absl::ToDoubleSeconds(tick - start),
                          config_.seconds, frames_written.load(), messages));
    }
    for (std::thread& t : writers) t.join();
    const absl::Duration elapsed = absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(500));  // The last frames arrive.

    ModeResult result;
    result.mode = mode;
    const double frames = static_cast<double>(frames_written.load()) /
                          static_cast<double>(config_.writers);
    result.frames_per_s = frames / absl::ToDoubleSeconds(elapsed);
    for (auto& s : subs) {
      s->recorder().StopMeasuring();
      result.subscribers.push_back(s->recorder().Take());
    }
    if (config_.server_pid) {
      result.server_cpu_ms_per_frame =
          1000 * (CpuSeconds(config_.server_pid) - cpu_before) / frames;
      result.server_rss_mb = RssMegabytes(config_.server_pid);
    }
    if (redis_pid) {
      result.redis_cpu_ms_per_frame =
          1000 * (CpuSeconds(redis_pid) - redis_before) / frames;
    }
    return result;
  }

  static void Progress(const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  // Writer w moves its share of the movable entities, a new set each frame,
  // over its own streaming connection, at the frame rate.
  void Write(int w, absl::Time end, std::atomic<uint64_t>* written) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    if (!client.ok()) return;
    absl::StatusOr<std::unique_ptr<BatchWriter>> writer =
        (*client)->OpenWriter(config_.world);
    if (!writer.ok()) return;
    std::vector<EntityId> mine;
    for (size_t i = w; i < movable_.size(); i += config_.writers) {
      mine.push_back(movable_[i]);
    }
    const size_t per_frame = std::min<size_t>(
        mine.size(), (config_.move + config_.writers - 1) / config_.writers);
    std::mt19937 rng(1234 + w);
    std::vector<Transform> poses(64);
    for (Transform& t : poses) t = RandomTransform(rng);
    std::vector<Command> batch(per_frame);
    const absl::Duration period = absl::Seconds(1 / config_.hz);
    size_t cursor = 0;
    for (absl::Time next = absl::Now(); next < end; next += period) {
      for (Command& c : batch) {
        c = SetLocalOp{mine[cursor % mine.size()], poses[rng() % poses.size()]};
        ++cursor;
      }
      if (!(*writer)->Write(batch).ok()) return;
      acks_.Add(absl::Now(), batch.size());
      ++*written;
      absl::SleepFor(next + period - absl::Now());
    }
  }

  const Config config_;
  ClientOptions options_;
  std::unique_ptr<Client> client_;
  std::vector<EntityId> ids_;
  std::vector<EntityId> movable_;
  AckLog acks_;
};

// ---------------------------------------------------------------------------
// The report.

Json ToJson(const ModeResult& r) {
  Json subs = Json::array();
  for (const Received& s : r.subscribers) {
    Json j = {{"messages", s.messages},
              {"frames", s.frames},
              {"updates", s.updates},
              {"bytes", s.bytes},
              {"latency_p50_ms", Percentile(s.latency_ms, 0.5)},
              {"latency_p99_ms", Percentile(s.latency_ms, 0.99)},
              {"latency_max_ms", Percentile(s.latency_ms, 1.0)},
              {"disconnects", s.disconnects}};
    if (s.stalled) {
      j["stalled"] = {{"first_after_stall_age_ms", s.first_after_stall_ms},
                      {"catch_up_ms", s.catch_up_ms},
                      {"messages_until_current", s.backlog_messages}};
    }
    subs.push_back(j);
  }
  return {{"mode", r.mode},
          {"frames_per_s", r.frames_per_s},
          {"server_cpu_ms_per_frame", r.server_cpu_ms_per_frame},
          {"server_rss_mb", r.server_rss_mb},
          {"redis_cpu_ms_per_frame", r.redis_cpu_ms_per_frame},
          {"subscribers", subs}};
}

void PrintTable(const Config& c, const std::vector<ModeResult>& results) {
  absl::PrintF(
      "\n%s world, %d entities; %d writer(s) moving %d per frame at %.0f Hz; "
      "%d subscriber(s)%s; %.0f s per mode\n\n",
      SceneShapeName(c.shape), c.entities, c.writers, c.move, c.hz,
      c.subscribers,
      c.stall_s > 0
          ? absl::StrFormat(", one stalling %.1f s", c.stall_s).c_str()
          : "",
      c.seconds);
  absl::PrintF(
      "| mode | frames/s written | updates/s per subscriber | latency p50 | "
      "p99 | max | bytes/update | server CPU/frame | server RSS | stalled "
      "subscriber |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const ModeResult& r : results) {
    std::vector<double> latency;
    double updates = 0;
    uint64_t bytes = 0, count = 0;
    std::string stalled = "-";
    for (const Received& s : r.subscribers) {
      updates += static_cast<double>(s.updates);
      bytes += s.bytes;
      count += s.updates;
      if (s.stalled) {
        stalled = absl::StrFormat(
            "first data %.0f ms old; current after %.0f ms, %u messages%s",
            s.first_after_stall_ms, s.catch_up_ms, s.backlog_messages,
            s.disconnects ? absl::StrCat("; dropped ", s.disconnects, "x")
                          : "");
      } else {
        latency.insert(latency.end(), s.latency_ms.begin(), s.latency_ms.end());
      }
    }
    const double per_sub =
        updates / static_cast<double>(r.subscribers.size()) / c.seconds;
    absl::PrintF(
        "| %s | %.1f | %.0f | %.2f ms | %.2f ms | %.2f ms | %.1f | %s | %s | "
        "%s |\n",
        r.mode, r.frames_per_s, per_sub, Percentile(latency, 0.5),
        Percentile(latency, 0.99), Percentile(latency, 1.0),
        count ? static_cast<double>(bytes) / static_cast<double>(count) : 0.0,
        r.server_cpu_ms_per_frame > 0
            ? absl::StrFormat("%.2f ms%s", r.server_cpu_ms_per_frame,
                              r.redis_cpu_ms_per_frame > 0
                                  ? absl::StrFormat(" + redis %.2f ms",
                                                    r.redis_cpu_ms_per_frame)
                                  : "")
                  .c_str()
            : "n/a",
        r.server_rss_mb > 0
            ? absl::StrFormat("%.0f MB", r.server_rss_mb).c_str()
            : "n/a",
        stalled);
  }
  std::fflush(stdout);
}

int Main() {
  Config config;
  config.address = absl::GetFlag(FLAGS_server);
  config.world = absl::GetFlag(FLAGS_world);
  std::optional<SceneShape> shape = ParseSceneShape(absl::GetFlag(FLAGS_shape));
  config.entities = absl::GetFlag(FLAGS_entities);
  config.writers = absl::GetFlag(FLAGS_writers);
  config.move = absl::GetFlag(FLAGS_move);
  if (absl::GetFlag(FLAGS_move_percent) > 0) {
    config.move = static_cast<int>(absl::GetFlag(FLAGS_move_percent) / 100 *
                                   config.entities);
  }
  config.hz = absl::GetFlag(FLAGS_hz);
  config.subscribers = absl::GetFlag(FLAGS_subscribers);
  config.stall_s = absl::GetFlag(FLAGS_stall_s);
  config.seconds = absl::GetFlag(FLAGS_seconds);
  config.server_pid = absl::GetFlag(FLAGS_server_pid);
  std::vector<std::string> modes;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "all") {
    modes = {"stream", "poll", "redis"};
  } else if (mode == "stream" || mode == "poll" || mode == "redis") {
    modes = {mode};
  }
  if (!shape || modes.empty() || config.entities < 1 || config.writers < 1 ||
      config.move < 1 || !(config.hz > 0) || config.subscribers < 1 ||
      !(config.seconds > 0)) {
    std::fprintf(stderr, "xform-load: bad flags; see --help\n");
    return 2;
  }
  config.shape = *shape;

  pid_t spawned = 0;
  if (const std::string xformd = absl::GetFlag(FLAGS_xformd); !xformd.empty()) {
    spawned = Spawn({xformd, absl::StrCat("--listen=", config.address),
                     absl::StrCat("--max_message_bytes=", kLoadMaxMessageBytes),
                     absl::StrCat("--max_entities=", config.entities),
                     "--write_timeout_ms=60000"});
    if (spawned == 0) {
      std::fprintf(stderr, "cannot start %s\n", xformd.c_str());
      return 1;
    }
    config.server_pid = spawned;
  }
  pid_t redis = 0;
  const int redis_port = absl::GetFlag(FLAGS_redis_port);
  if (std::find(modes.begin(), modes.end(), "redis") != modes.end()) {
    redis = Spawn({absl::GetFlag(FLAGS_redis_server), "--port",
                   std::to_string(redis_port), "--bind", "127.0.0.1", "--save",
                   "", "--appendonly", "no", "--loglevel", "warning"},
                  /*quiet=*/true);
    if (redis == 0) {
      std::fprintf(stderr, "cannot start %s\n",
                   absl::GetFlag(FLAGS_redis_server).c_str());
      Stop(spawned);
      return 1;
    }
  }

  int exit_code = 0;
  std::vector<ModeResult> results;
  {
    LoadRun run(config);
    if (absl::Status built = run.Build(); !built.ok()) {
      std::fprintf(stderr, "building the world: %s\n",
                   built.ToString().c_str());
      exit_code = 1;
    }
    for (size_t m = 0; m < modes.size() && exit_code == 0; ++m) {
      absl::StatusOr<ModeResult> result =
          run.Run(modes[m], modes[m] == "redis" ? redis : 0, redis_port);
      if (!result.ok()) {
        std::fprintf(stderr, "%s: %s\n", modes[m].c_str(),
                     result.status().ToString().c_str());
        exit_code = 1;
        break;
      }
      results.push_back(*std::move(result));
    }
  }
  Stop(redis);
  Stop(spawned);
  if (exit_code != 0) return exit_code;

  if (absl::GetFlag(FLAGS_json)) {
    Json all = Json::array();
    for (const ModeResult& r : results) all.push_back(ToJson(r));
    std::printf("%s\n", Json{{"shape", SceneShapeName(config.shape)},
                             {"entities", config.entities},
                             {"writers", config.writers},
                             {"move", config.move},
                             {"hz", config.hz},
                             {"subscribers", config.subscribers},
                             {"stall_s", config.stall_s},
                             {"seconds", config.seconds},
                             {"modes", all}}
                            .dump(2)
                            .c_str());
  } else {
    PrintTable(config, results);
  }
  return 0;
}

}  // namespace
}  // namespace xform::load

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "xform-load: drives an xformd world with W writers and S subscribers "
      "and reports what the subscribers got.\n"
      "  xform-load --xformd=build/server/xformd --server=127.0.0.1:50061 "
      "--mode=all --stall_s=2");
  absl::ParseCommandLine(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return xform::load::Main();
}
