// Copyright 2026 The xform Authors.

#include "tools/load/load_run.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tools/load/subscriber_process.h"
#include "tools/load/transports.h"
#include "tools/process_stats.h"

namespace xform::load {

using ::xform::tools::CpuSeconds;
using ::xform::tools::RssMegabytes;

ClientOptions LoadClientOptions(ClientOptions client) {
  client.max_message_bytes = kLoadMaxMessageBytes;
  client.deadline = absl::Seconds(120);
  client.connect_timeout = absl::Seconds(20);
  // Every client on a connection of its own, as the processes it stands
  // for (a writer, each subscriber) would be. gRPC otherwise puts clients
  // with the same arguments on one; 64 Mirrors sharing one, with the
  // writer on another, fell behind and folded (docs/benchmarks.md, "Where
  // the tail is").
  client.own_connection = true;
  return client;
}

LoadRun::LoadRun(Config config)
    : config_(std::move(config)),
      options_(LoadClientOptions(config_.client)),
      subscriber_options_(options_) {
  if (!config_.subscriber_address.empty()) {
    subscriber_options_.address = config_.subscriber_address;
  }
}

absl::Status LoadRun::Build() {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  const std::vector<CreateOp> scene =
      MakeScene(config_.shape, config_.entities);
  for (const CreateOp& op : scene) {
    ids_.push_back(op.entity);
    locals_.push_back(op.local);
  }
  movable_ = Leaves(scene);
  if (config_.keep_world) {
    // The scene is the same every run: one of its size is taken as built
    // (recovered from --data_dir, say).
    absl::StatusOr<WorldInfo> info = client_->GetWorld(config_.world);
    if (info.ok() && info->entities == scene.size()) {
      Progress(absl::StrFormat("kept world '%s' of %d entities", config_.world,
                               info->entities));
      return ReadMovablePoses();
    }
  }
  const absl::Time start = absl::Now();
  if (absl::Status made = MakeWorld(scene); !made.ok()) return made;
  Progress(absl::StrFormat(
      "built %s world of %d entities (%d movable leaves) "
      "in %.1f s",
      SceneShapeName(config_.shape), config_.entities, movable_.size(),
      absl::ToDoubleSeconds(absl::Now() - start)));
  return absl::OkStatus();
}

absl::Status LoadRun::MakeWorld(const std::vector<CreateOp>& scene) {
  // NOT_FOUND is the usual answer; any other refusal is the run's, named
  // here rather than as CreateWorld's ALREADY_EXISTS after it.
  if (absl::Status deleted = client_->DeleteWorld(config_.world);
      !deleted.ok() && !absl::IsNotFound(deleted)) {
    return absl::Status(deleted.code(),
                        absl::StrCat("cannot replace world '", config_.world,
                                     "': DeleteWorld: ", deleted.message()));
  }
  if (absl::StatusOr<WorldInfo> made = client_->CreateWorld(
          config_.world,
          config_.driven
              ? WorldOptions{.mode = FrameMode::kDriven}
              : WorldOptions{.mode = FrameMode::kTick, .tick_hz = config_.hz});
      !made.ok()) {
    return made.status();
  }
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
  // A driven world publishes the scene only when a frame is closed.
  if (config_.driven) {
    if (absl::StatusOr<uint64_t> frame = client_->EndFrame(config_.world);
        !frame.ok()) {
      return frame.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadRun::Subscribers> LoadRun::StartSubscribers(
    const std::string& mode, int redis_port, MirrorOptions::Encoding encoding) {
  Subscribers started;
  if (mode == "redis") {
    started.relay = StartRedisRelay(options_, config_.world, redis_port);
    if (!started.relay->ok()) {
      return absl::UnavailableError("cannot reach redis-server");
    }
  }
  // Stream subscribers s with s % processes != 0 are in other processes
  // (the stalling one, s = 0, always here).
  const int processes = mode == "stream" ? config_.subscriber_processes : 1;
  for (int p = 1; p < processes; ++p) {
    int share = 0;
    for (int s = p; s < config_.subscribers; s += processes) ++share;
    if (share == 0) break;
    std::vector<std::string> command = config_.self;
    command[0] = "/proc/self/exe";
    command.insert(
        command.end(),
        {"--xformd=", "--subscriber_process", "--mode=stream",
         absl::StrCat(
             "--encoding=",
             encoding == MirrorOptions::Encoding::kCompact ? "compact" : "raw"),
         absl::StrCat("--subscribers=", share),
         absl::StrCat("--subscriber_process_index=", p)});
    absl::StatusOr<std::unique_ptr<SubscriberProcess>> other =
        SubscriberProcess::Start(command);
    if (!other.ok()) return other.status();
    started.others.push_back(*std::move(other));
  }
  for (int s = 0; s < config_.subscribers; s += processes) {
    const bool stalls = config_.stall_s > 0 && s == 0;
    if (mode == "stream") {
      started.here.push_back(StartStreamSubscriber(
          subscriber_options_, config_.world, encoding, config_.precision,
          config_.subscriber_hz, stalls, s, config_.camera));
    } else if (mode == "poll") {
      started.here.push_back(StartPollSubscriber(options_, config_.world, ids_,
                                                 config_.hz, acks_, stalls));
    } else {
      started.here.push_back(
          StartRedisSubscriber(redis_port, movable_.size(), stalls));
    }
  }
  return started;
}

absl::StatusOr<bool> LoadRun::Subscribers::Ready() const {
  if (relay && !relay->Ready()) return false;
  for (const auto& s : here) {
    if (!s->Ready()) return false;
  }
  for (const auto& other : others) {
    absl::StatusOr<bool> other_ready = other->Ready();
    if (!other_ready.ok() || !*other_ready) return other_ready;
  }
  return true;
}

absl::Status LoadRun::Subscribers::WaitReady() const {
  const absl::Time ready_by = absl::Now() + absl::Seconds(120);
  for (;;) {
    absl::StatusOr<bool> all_ready = Ready();
    if (!all_ready.ok()) return all_ready.status();
    if (*all_ready) return absl::OkStatus();
    if (absl::Now() > ready_by) {
      return absl::DeadlineExceededError("subscribers did not get ready");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

LoadRun::Written LoadRun::WriteFor(const std::string& mode, absl::Time start,
                                   const Subscribers& subscribers) {
  const absl::Duration duration = absl::Seconds(config_.seconds);
  std::atomic<uint64_t> frames_written{0};
  Written written;
  written.apply_ms.resize(config_.writers);
  written.entities.resize(config_.writers);
  std::vector<std::thread> writers;
  writers.reserve(config_.writers);
  for (int w = 0; w < config_.writers; ++w) {
    writers.emplace_back([&, w] {
      Write(w, start + duration, &frames_written, &written.apply_ms[w],
            &written.entities[w]);
    });
  }
  const int lookers =
      config_.lookups_per_second > 0 ? config_.lookup_clients : 0;
  written.lookup_ms.resize(lookers);
  written.lookup_errors.resize(lookers);
  written.lookup_error.resize(lookers);
  for (int c = 0; c < lookers; ++c) {
    writers.emplace_back([&, c] {
      LookUp(c, start + duration, &written.lookup_ms[c],
             &written.lookup_errors[c], &written.lookup_error[c]);
    });
  }
  for (absl::Time tick = start + absl::Seconds(1); tick < start + duration;
       tick += absl::Seconds(1)) {
    absl::SleepFor(tick - absl::Now());
    uint64_t messages = 0;
    for (const auto& s : subscribers.here) messages += s->recorder().messages();
    Progress(
        absl::StrFormat("[%s %2.0f/%.0f s] %u batches written, %u "
                        "messages received",
                        mode, absl::ToDoubleSeconds(tick - start),
                        config_.seconds, frames_written.load(), messages));
  }
  for (std::thread& t : writers) t.join();
  written.elapsed = absl::Now() - start;
  written.frames = static_cast<double>(frames_written.load()) /
                   static_cast<double>(config_.writers);
  return written;
}

absl::StatusOr<ModeResult> LoadRun::Run(const std::string& mode,
                                        pid_t redis_pid, int redis_port,
                                        MirrorOptions::Encoding encoding) {
  acks_.Clear();
  absl::StatusOr<Subscribers> subscribers =
      StartSubscribers(mode, redis_port, encoding);
  if (!subscribers.ok()) return subscribers.status();
  if (absl::Status ready = subscribers->WaitReady(); !ready.ok()) return ready;

  // xformd's counts first: read after measuring began, they would miss
  // what the subscribers received meanwhile (a frame or two on a busy box).
  // And the subscribers record only frames published after this read
  // (Recorder::Record): one published before it may have been counted
  // before it, and still be on its way (the world's build, say, published
  // after the subscribers' snapshots).
  const StreamStats streams_before = ServerStreams();
  const absl::Time start = absl::Now();
  for (auto& s : subscribers->here) {
    s->recorder().StartMeasuring(start + absl::Seconds(config_.seconds) / 3,
                                 absl::Seconds(config_.stall_s));
  }
  for (auto& other : subscribers->others) other->StartMeasuring();
  const double cpu_before =
      config_.server_pid ? CpuSeconds(config_.server_pid) : 0;
  const double redis_before = redis_pid ? CpuSeconds(redis_pid) : 0;
  const Written written = WriteFor(mode, start, *subscribers);
  absl::SleepFor(absl::Milliseconds(500));  // The last frames arrive.

  ModeResult result;
  result.mode =
      mode == "stream" && encoding == MirrorOptions::Encoding::kCompact
          ? "stream (compact)"
          : mode;
  written.Into(result);
  if (absl::Status taken = subscribers->Take(result); !taken.ok()) {
    return taken;
  }
  if (config_.server_pid) {
    result.server_cpu_ms_per_frame =
        1000 * (CpuSeconds(config_.server_pid) - cpu_before) / written.frames;
    result.server_rss_mb = RssMegabytes(config_.server_pid);
  }
  if (redis_pid) {
    result.redis_cpu_ms_per_frame =
        1000 * (CpuSeconds(redis_pid) - redis_before) / written.frames;
  }
  result.server_streams = Difference(ServerStreams(), streams_before);
  return result;
}

void LoadRun::Written::Into(ModeResult& result) const {
  result.frames_per_s = frames / absl::ToDoubleSeconds(elapsed);
  for (const std::vector<double>& one : apply_ms) {
    result.apply_ms.insert(result.apply_ms.end(), one.begin(), one.end());
  }
  for (uint64_t n : entities) {
    result.entities_per_s +=
        static_cast<double>(n) / absl::ToDoubleSeconds(elapsed);
  }
  for (size_t c = 0; c < lookup_ms.size(); ++c) {
    result.lookup_ms.insert(result.lookup_ms.end(), lookup_ms[c].begin(),
                            lookup_ms[c].end());
    result.lookup_errors += lookup_errors[c];
    if (result.lookup_error.empty()) result.lookup_error = lookup_error[c];
  }
}

void LoadRun::LookUp(int c, absl::Time end, std::vector<double>* ms,
                     uint64_t* errors, std::string* error) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
  if (!client.ok()) {
    *error = client.status().ToString();
    return;
  }
  std::mt19937 rng(1000 + c);
  const absl::Duration period =
      absl::Seconds(config_.lookup_clients / config_.lookups_per_second);
  for (absl::Time next = absl::Now(); next < end; next += period) {
    const EntityId source = 1 + rng() % static_cast<EntityId>(config_.entities);
    const Stamp at = absl::ToUnixNanos(absl::Now() - absl::Milliseconds(100));
    const absl::Time sent = absl::Now();
    absl::StatusOr<TimedPose> pose = (*client)->LookupTransform(
        config_.world, kNoEntity, source, {.stamp = at});
    ms->push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
    if (!pose.ok()) {
      ++*errors;
      if (error->empty()) *error = pose.status().ToString();
    }
    absl::SleepFor(next + period - absl::Now());
  }
}

absl::Status LoadRun::Subscribers::Take(ModeResult& result) {
  for (auto& s : here) {
    s->recorder().StopMeasuring();
    result.subscribers.push_back(s->recorder().Take());
  }
  for (auto& other : others) {
    absl::StatusOr<std::vector<Received>> received = other->Stop();
    if (!received.ok()) return received.status();
    for (Received& one : *received) {
      result.subscribers.push_back(std::move(one));
    }
  }
  return absl::OkStatus();
}

StreamStats LoadRun::Difference(const StreamStats& after,
                                const StreamStats& before) {
  return {.messages = after.messages - before.messages,
          .bytes = after.bytes - before.bytes,
          .frames_folded = after.frames_folded - before.frames_folded,
          .frames_folded_by_rate_limit = after.frames_folded_by_rate_limit -
                                         before.frames_folded_by_rate_limit,
          .views_resent_whole =
              after.views_resent_whole - before.views_resent_whole,
          .kept_view_snapshots =
              after.kept_view_snapshots - before.kept_view_snapshots,
          .streams_cut_off = after.streams_cut_off - before.streams_cut_off,
          .subscribers_in_snapshot = after.subscribers_in_snapshot};
}

StreamStats LoadRun::ServerStreams() {
  absl::StatusOr<WorldInfo> info = client_->GetWorld(config_.world);
  return info.ok() ? info->stream : StreamStats{};
}

absl::Status LoadRun::ReadMovablePoses() {
  constexpr size_t kChunk = 50'000;  // About 5 MB a response.
  for (size_t first = 0; first < movable_.size(); first += kChunk) {
    const absl::Span<const EntityId> chunk =
        absl::MakeConstSpan(movable_).subspan(first, kChunk);
    absl::StatusOr<std::vector<EntityState>> read =
        client_->Read(config_.world, chunk);
    if (!read.ok()) return read.status();
    for (const EntityState& state : *read) {
      locals_[state.entity - 1] = state.local;
    }
  }
  return absl::OkStatus();
}

std::vector<LoadRun::Motion> LoadRun::MotionsOf(
    int w, const std::vector<EntityId>& mine) const {
  // Each entity moves on from where it is, a frame's worth of its own
  // motion each time it is set: up to 1 m/s along a fixed heading (or
  // Config::move_speed's; the city's, 10 along the ground), turning
  // up to 1 rad/s about a fixed axis, as a game's objects do (not jumping
  // to random poses, which no delta encoding could follow).
  std::mt19937 rng(1234 + w);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float dt = static_cast<float>(1 / config_.hz);
  const bool city = config_.shape == SceneShape::kCity;
  const float speed = config_.move_speed > 0 ? config_.move_speed
                      : city                 ? 10.0f
                                             : 1.0f;
  std::vector<Motion> motion(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    glm::vec3 heading = glm::normalize(glm::vec3(u(rng), u(rng), u(rng)) +
                                       glm::vec3(0, 0, 0.01f));
    glm::vec3 axis = glm::normalize(glm::vec3(u(rng), u(rng), u(rng)) +
                                    glm::vec3(0.01f, 0, 0));
    float pace = u(rng);
    if (city) {  // Traffic: along the ground, turning about the vertical.
      heading = glm::normalize(glm::vec3(heading.x, 0, heading.z + 0.01f));
      axis = {0, 1, 0};
      pace = 1;
    }
    motion[i] = {locals_[mine[i] - 1], heading * (pace * speed * dt),
                 glm::angleAxis(u(rng) * dt, axis)};
  }
  return motion;
}

void LoadRun::Write(int w, absl::Time end, std::atomic<uint64_t>* written,
                    std::vector<double>* apply_ms, uint64_t* entities) {
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
  std::vector<Motion> motion = MotionsOf(w, mine);
  // The next run (mode, round) moves on from here rather than replaying
  // this one's poses, which would be no moves at first and then jumps back.
  // Writers own disjoint entities, so their stores do not race.
  absl::Cleanup keep_poses = [&] {
    for (size_t i = 0; i < mine.size(); ++i) {
      locals_[mine[i] - 1] = motion[i].pose;
    }
  };
  std::vector<Command> batch(per_frame);
  const absl::Duration period = absl::Seconds(1 / config_.hz);
  size_t cursor = 0;
  for (absl::Time next = absl::Now(); next < end; next += period) {
    for (Command& c : batch) {
      Motion& m = motion[cursor % mine.size()];
      m.pose.position += m.step;
      m.pose.rotation = glm::normalize(m.turn * m.pose.rotation);
      c = SetLocalOp{mine[cursor % mine.size()], m.pose};
      ++cursor;
    }
    const absl::Time sent = absl::Now();
    const Stamp stamp = config_.stamp ? absl::ToUnixNanos(absl::Now()) : 0;
    if (!(*writer)
             ->Write(batch, {.end_frame = config_.driven, .stamp = stamp})
             .ok()) {
      return;
    }
    const absl::Time acknowledged = absl::Now();
    apply_ms->push_back(absl::ToDoubleMilliseconds(acknowledged - sent));
    acks_.Add(acknowledged, batch.size());
    *entities += batch.size();
    ++*written;
    if (config_.max_rate) {
      next = acknowledged - period;  // The loop adds it back.
      continue;
    }
    absl::SleepFor(next + period - absl::Now());
  }
}

void Progress(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace xform::load
