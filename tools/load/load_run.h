// Copyright 2026 The xform Authors.
//
// LoadRun: one xform-load run against one xformd. Build() makes the world of
// the configured shape and size; each Run(mode) then starts the subscribers
// of that mode (see transports.h), waits until they hold the world, has the
// writers move entities at the frame rate for the configured time, and
// returns what every subscriber received with the server's CPU and memory.

#ifndef XFORM_TOOLS_LOAD_LOAD_RUN_H_
#define XFORM_TOOLS_LOAD_LOAD_RUN_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "glm/gtc/quaternion.hpp"
#include "glm/vec3.hpp"
#include "tools/load/measure.h"
#include "tools/load/subscriber_process.h"
#include "tools/load/transports.h"
#include "tools/scenes.h"
#include "xform/client.h"
#include "xform/mirror.h"

namespace xform::load {

// xform-load's worlds go to 4M entities: the xformd it spawns, and its own
// channels, take messages this large.
inline constexpr int kLoadMaxMessageBytes = 256 << 20;

struct Config {
  // Where xformd is and how to reach it (address, token, TLS).
  ClientOptions client;
  // Where stream subscribers connect, if not to `client.address`: a
  // cluster's replicas, say, while the writer writes to the owner.
  std::string subscriber_address;
  std::string world;
  SceneShape shape;
  int entities;
  int writers;
  int move;  // Entities moved a frame, over all writers.
  // How fast a moved entity goes, in units a second, each time it is set;
  // 0: up to 1 along a random heading, or for the city exactly 10 along the
  // ground.
  float move_speed = 0;
  double hz;
  // A driven world, each batch closing a frame (so a frame is exactly one
  // writer's moves), instead of a world ticking at hz.
  bool driven = false;
  int subscribers;
  // Stream subscribers' views as moving cameras (transports.h), or whole.
  std::optional<Camera> camera;
  float precision = 0;  // The compact encoding's (0: the server's default).
  double subscriber_hz = 0;  // Stream subscribers' max_rate_hz (0: none).
  // Writers send each batch as soon as the last is acknowledged, not at hz
  // (the world still ticks at hz): the server's write throughput.
  bool max_rate = false;
  // A world of that name and size is used as it is, not built again.
  bool keep_world = false;
  double stall_s;  // One subscriber stops reading this long, a third in.
  double seconds;
  // Each mode runs this many times, the modes taking turns, so that a noisy
  // machine's drift falls on all of them alike; the report adds each mode's
  // medians over its runs.
  int rounds = 1;
  pid_t server_pid;  // 0: the server is not local; no CPU or RSS.
  // Stream subscribers spread over this many processes, as a deployment's
  // are: this one and xform-load run again (`self`, with its flags, as the
  // child of a SubscriberProcess), subscriber s in process s % this.
  int subscriber_processes = 1;
  std::vector<std::string> self;  // This process's command line.
  // Writers stamp their batches (Unix time) rather than the server.
  bool stamp = false;
  // LookupTransform calls a second beside the load, over lookup_clients
  // connections (0: none): a random entity in the origin's frame 100 ms
  // ago.
  double lookups_per_second = 0;
  int lookup_clients = 2;
};

// The options every client of a run connects with, from `client`'s (its
// address, token and TLS).
ClientOptions LoadClientOptions(ClientOptions client);

struct ModeResult {
  std::string mode;
  int round = 1;            // Which of Config::rounds.
  double frames_per_s = 0;  // Written.
  // Every batch's time from sent to acknowledged, over all writers, and the
  // entities they set a second.
  std::vector<double> apply_ms;
  double entities_per_s = 0;
  std::vector<Received> subscribers;
  double server_cpu_ms_per_frame = 0;
  double server_rss_mb = 0;
  double redis_cpu_ms_per_frame = 0;
  // What xformd counted its streams of the world were sent while the
  // writers ran (WorldInfo::stream, after less before; the gauge as after).
  StreamStats server_streams;
  // The lookups beside the load: each one's time, and those refused.
  std::vector<double> lookup_ms;
  uint64_t lookup_errors = 0;
  std::string lookup_error;  // The first.
};

class LoadRun {
 public:
  explicit LoadRun(Config config);

  absl::Status Build();
  // `mode` is stream, poll or redis (then redis-server runs on redis_port,
  // as redis_pid, which may be 0 when not local); stream subscribers use
  // `encoding`.
  absl::StatusOr<ModeResult> Run(
      const std::string& mode, pid_t redis_pid, int redis_port,
      MirrorOptions::Encoding encoding = MirrorOptions::Encoding::kRaw);

 private:
  // The subscribers of one mode's run: here (Subscriber), in other
  // processes, and redis mode's relay.
  struct Subscribers {
    std::unique_ptr<RedisRelay> relay;
    std::vector<std::unique_ptr<Subscriber>> here;
    std::vector<std::unique_ptr<SubscriberProcess>> others;

    absl::StatusOr<bool> Ready() const;
    // Waits up to two minutes for them all to hold the world.
    absl::Status WaitReady() const;
    // What each received, into `result`.
    absl::Status Take(ModeResult& result);
  };
  // What the writers did over a run.
  struct Written {
    std::vector<std::vector<double>> apply_ms;   // A writer's each.
    std::vector<uint64_t> entities;              // A writer's each.
    std::vector<std::vector<double>> lookup_ms;  // A lookup client's each.
    std::vector<uint64_t> lookup_errors;
    std::vector<std::string> lookup_error;
    absl::Duration elapsed;
    double frames = 0;  // A writer's, on average.

    void Into(ModeResult& result) const;
  };
  // One moved entity: where it is, and a frame's step of its own motion.
  struct Motion {
    Transform pose;
    glm::vec3 step;
    glm::quat turn;
  };

  // A new world of `scene`, created and filled.
  absl::Status MakeWorld(const std::vector<CreateOp>& scene);
  absl::StatusOr<Subscribers> StartSubscribers(
      const std::string& mode, int redis_port,
      MirrorOptions::Encoding encoding);
  // The writers, from `start` for --seconds, with a progress line a second.
  Written WriteFor(const std::string& mode, absl::Time start,
                   const Subscribers& subscribers);
  static StreamStats Difference(const StreamStats& after,
                                const StreamStats& before);
  // Writer w's entities' motions: each moves on from where it is, a
  // frame's worth of its own motion each time it is set.
  std::vector<Motion> MotionsOf(int w, const std::vector<EntityId>& mine) const;

  // One lookup client, at its share of the rate, until `end`.
  void LookUp(int c, absl::Time end, std::vector<double>* ms, uint64_t* errors,
              std::string* error);

  // Writer w moves its share of the movable entities, a new set each frame,
  // over its own streaming connection, at the frame rate.
  // Its batches' apply times go to `apply_ms`, what they set to `entities`.
  void Write(int w, absl::Time end, std::atomic<uint64_t>* written,
             std::vector<double>* apply_ms, uint64_t* entities);

  // A kept world's movable entities are where the last run left them:
  // the writers move them on from there, not from the scene's poses.
  absl::Status ReadMovablePoses();

  // The world's stream counts as xformd reports them (zero if it cannot).
  StreamStats ServerStreams();

  const Config config_;
  ClientOptions options_;
  ClientOptions subscriber_options_;  // options_ at subscriber_address.
  std::unique_ptr<Client> client_;
  std::vector<EntityId> ids_;
  // By id - 1: the scene's, then where the last run's writers left them.
  std::vector<Transform> locals_;
  std::vector<EntityId> movable_;
  AckLog acks_;
};

// A progress line on stderr.
void Progress(const std::string& line);

}  // namespace xform::load

#endif  // XFORM_TOOLS_LOAD_LOAD_RUN_H_
