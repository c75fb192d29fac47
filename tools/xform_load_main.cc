// Copyright 2026 The xform Authors.
//
// xform-load: the test-client driver. Builds a world of a chosen shape and
// size in xformd, runs W writers moving K entities per frame at R Hz and S
// subscribers for a while, then reports what the subscribers got: frames,
// entity updates per second, publish-to-receive latency, bytes per update,
// and the server's CPU and memory (from /proc, when the server is local).
//
// Three ways to get the same frames to the same S subscribers, side by side
// (--mode=all runs them one after another on one world): stream, poll and
// redis (tools/load/transports.h). --stall_s makes one subscriber stop
// reading for that long mid-run, to show what each way does to a consumer
// that falls behind.
//
// This file is the flags and the processes the run starts (xformd with
// --xformd, redis-server); tools/load/ the rest: the run (load_run.h), what
// it measures (measure.h), the ways of subscribing (transports.h), the
// report (report.h).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/client_flags.h"
#include "tools/load/load_run.h"
#include "tools/load/report.h"
#include "tools/load/spawn.h"
#include "tools/load/subscriber_process.h"
#include "tools/scenes.h"
#include "xform/internal/release_mutexes.h"
#include "xform/region.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "xformd address");
ABSL_FLAG(std::string, xformd, "",
          "Start this xformd binary on --server's port for the run (and "
          "measure it); otherwise use a running one");
ABSL_FLAG(std::string, xformd_args, "",
          "More flags for the xformd that --xformd starts, space-separated "
          "(--fanout_threads=1, say)");
ABSL_FLAG(std::string, subscriber_server, "",
          "Stream subscribers' addresses, if not --server's: a cluster's "
          "nodes, subscriber s starting at the (s mod n)th");
ABSL_FLAG(int, server_pid, 0, "The running xformd's pid, to read its CPU/RSS");
ABSL_FLAG(std::string, world, "load", "World to build (replaced if present)");
ABSL_FLAG(std::string, shape, "scene",
          "wide, scene, chains, or city (roots over 1 km x 1 km, y up, "
          "moving at 10 m/s along the ground: for --region)");
ABSL_FLAG(int, entities, 100'000, "World size");
ABSL_FLAG(int, writers, 1, "Writers (W), each its own connection");
ABSL_FLAG(int, move, 1000, "Entities moved per frame (K), over all writers");
ABSL_FLAG(double, move_percent, 0, "Or: this percent of the world per frame");
ABSL_FLAG(double, move_speed, 0,
          "Units a second a moved entity goes, each time it is set; 0: up to "
          "1 (the city's: 10)");
ABSL_FLAG(double, hz, 60, "Frames per second (R)");
ABSL_FLAG(std::string, frame_mode, "tick",
          "tick: the world publishes at --hz; driven: each batch closes a "
          "frame (with one writer, a frame is exactly --move entities)");
ABSL_FLAG(int, subscribers, 4, "Subscribers (S)");
ABSL_FLAG(double, subscriber_hz, 0,
          "Stream subscribers ask for at most this many messages a second "
          "(max_rate_hz), as dashboards do; 0: one a frame");
ABSL_FLAG(std::string, region, "",
          "Stream subscribers' views as moving cameras: each a region "
          "(box:x0,y0,z0,x1,y1,z1 or sphere:x,y,z,r, each [,margin=M], as "
          "xformctl takes it) moved to a start of its own within "
          "--region_range along x and z, then moving at --region_speed; "
          "e.g. sphere:500,10,500,50,margin=2 on --shape=city");
ABSL_FLAG(double, region_range, 400,
          "--region: how far from the region's own position cameras start "
          "and go, along x and z");
ABSL_FLAG(double, region_speed, 10,
          "--region: each camera's speed, units a second (0: still)");
ABSL_FLAG(double, region_hz, 0,
          "--region: how often each camera moves its region (0: --hz)");
ABSL_FLAG(bool, keep_world, false,
          "Use --world as it is when it holds --entities entities (the scene "
          "is the same every run), rather than build it again; the writers "
          "move its entities on from the poses it holds");
ABSL_FLAG(bool, max_rate, false,
          "Writers send each batch as soon as the last is acknowledged "
          "instead of at --hz: the server's write throughput");
ABSL_FLAG(double, stall_s, 0,
          "One subscriber stops reading for this long, a third of the way in");
ABSL_FLAG(bool, stamp, false,
          "Writers stamp each batch with their own clock (Unix time) "
          "instead of leaving it to the server's");
ABSL_FLAG(double, lookups_per_second, 0,
          "Clients beside the load ask LookupTransform this many times a "
          "second in all: a random entity in the world's origin at a stamp "
          "100 ms ago; their latency goes in the report");
ABSL_FLAG(int, lookup_clients, 2,
          "--lookups_per_second: over this many connections");
ABSL_FLAG(double, seconds, 10, "Measured seconds per mode");
ABSL_FLAG(int, rounds, 1,
          "Run the modes (and encodings) in turn this many times and report "
          "each mode's medians over them as well");
ABSL_FLAG(std::string, mode, "stream",
          "stream, poll, redis, a list of them (stream,redis), or all");
ABSL_FLAG(std::string, redis_server, "redis-server",
          "redis mode: start this redis-server on --redis_port");
ABSL_FLAG(int, redis_port, 6390, "redis mode: the port");
ABSL_FLAG(bool, json, false, "Print the report as JSON");
ABSL_FLAG(int, subscriber_processes, 1,
          "Stream subscribers spread over this many processes (this one and "
          "more of xform-load), as a deployment's are: each its own gRPC "
          "readers");
ABSL_FLAG(bool, subscriber_process, false,
          "Internal: be one of --subscriber_processes' others (its "
          "--subscribers of --world, with the first --encoding), told when "
          "to record on stdin, reporting on stdout");
ABSL_FLAG(int, subscriber_process_index, 0,
          "Internal: which of --subscriber_processes this one is (its "
          "subscribers' cameras are placed by the run's numbering)");

namespace xform::load {
namespace {

// Starts `command`; with `quiet`, its stdout goes to /dev/null.
pid_t StartProcess(const std::vector<std::string>& command,
                   bool quiet = false) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                     O_WRONLY, 0);
  }
  const pid_t pid = Spawn(command, &actions);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

// --region and its companions: the cameras, if any.
absl::StatusOr<std::optional<Camera>> CameraFlags() {
  const std::string region_text = absl::GetFlag(FLAGS_region);
  if (region_text.empty()) return std::nullopt;
  absl::StatusOr<Region> region = Region::Parse(region_text);
  if (!region.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--region: ", region.status().message()));
  }
  Camera camera{.region = *region,
                .range = static_cast<float>(absl::GetFlag(FLAGS_region_range)),
                .speed = static_cast<float>(absl::GetFlag(FLAGS_region_speed)),
                .hz = absl::GetFlag(FLAGS_region_hz) > 0
                          ? absl::GetFlag(FLAGS_region_hz)
                          : absl::GetFlag(FLAGS_hz)};
  if (!(camera.range >= 0 && camera.range < 1e9f) ||
      !(camera.speed >= 0 && camera.speed < 1e9f) ||
      !(camera.hz > 0 && camera.hz <= 1000)) {
    return absl::InvalidArgumentError(
        "--region_range and --region_speed must be at least 0, --region_hz "
        "at most 1000");
  }
  return camera;
}

// What the flags ask for: the run's Config, and the turns' modes and
// encodings.
struct LoadFlags {
  Config config;
  std::vector<std::string> modes;
  std::vector<MirrorOptions::Encoding> encodings;
};

// --mode's list ("all": every mode); empty if it names an unknown one.
std::vector<std::string> ModesFlag() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "all") return {"stream", "poll", "redis"};
  std::vector<std::string> modes;
  for (absl::string_view one : absl::StrSplit(mode, ',')) {
    if (one != "stream" && one != "poll" && one != "redis") return {};
    modes.emplace_back(one);
  }
  return modes;
}

// The world, its writers and subscribers, as the flags set them.
void WorkloadFlags(Config& config) {
  config.subscriber_address = absl::GetFlag(FLAGS_subscriber_server);
  config.subscriber_processes = absl::GetFlag(FLAGS_subscriber_processes);
  config.world = absl::GetFlag(FLAGS_world);
  config.entities = absl::GetFlag(FLAGS_entities);
  config.writers = absl::GetFlag(FLAGS_writers);
  config.move = absl::GetFlag(FLAGS_move);
  config.move_speed = static_cast<float>(absl::GetFlag(FLAGS_move_speed));
  if (absl::GetFlag(FLAGS_move_percent) > 0) {
    config.move = static_cast<int>(absl::GetFlag(FLAGS_move_percent) / 100 *
                                   config.entities);
  }
  config.hz = absl::GetFlag(FLAGS_hz);
  config.driven = absl::GetFlag(FLAGS_frame_mode) == "driven";
  config.subscribers = absl::GetFlag(FLAGS_subscribers);
  config.max_rate = absl::GetFlag(FLAGS_max_rate);
  config.keep_world = absl::GetFlag(FLAGS_keep_world);
  config.stall_s = absl::GetFlag(FLAGS_stall_s);
  config.subscriber_hz = absl::GetFlag(FLAGS_subscriber_hz);
  config.seconds = absl::GetFlag(FLAGS_seconds);
  config.rounds = absl::GetFlag(FLAGS_rounds);
  config.server_pid = absl::GetFlag(FLAGS_server_pid);
  config.precision = tools::PrecisionFlag();
  config.stamp = absl::GetFlag(FLAGS_stamp);
  config.lookups_per_second = absl::GetFlag(FLAGS_lookups_per_second);
  config.lookup_clients = std::max(1, absl::GetFlag(FLAGS_lookup_clients));
}

// Everything the flags say, checked in one place.
absl::StatusOr<LoadFlags> LoadFlagsFromFlags(std::vector<std::string> self) {
  LoadFlags flags;
  Config& config = flags.config;
  absl::StatusOr<std::optional<Camera>> camera = CameraFlags();
  if (!camera.ok()) return camera.status();
  config.camera = *camera;
  config.client.address = absl::GetFlag(FLAGS_server);
  if (absl::Status client = tools::ApplyClientFlags(&config.client);
      !client.ok()) {
    return client;
  }
  config.self = std::move(self);
  WorkloadFlags(config);
  const std::optional<SceneShape> shape =
      ParseSceneShape(absl::GetFlag(FLAGS_shape));
  absl::StatusOr<std::vector<MirrorOptions::Encoding>> encodings =
      tools::EncodingFlags();
  flags.modes = ModesFlag();
  const std::string frame_mode = absl::GetFlag(FLAGS_frame_mode);
  if (!shape || flags.modes.empty() || !encodings.ok() ||
      (frame_mode != "tick" && frame_mode != "driven") || config.entities < 1 ||
      config.writers < 1 || config.move < 1 || !(config.hz > 0) ||
      config.subscribers < 1 || !(config.seconds > 0) || config.rounds < 1 ||
      config.subscriber_processes < 1) {
    return absl::InvalidArgumentError("bad flags; see --help");
  }
  config.shape = *shape;
  flags.encodings = *std::move(encodings);
  return flags;
}

// --subscriber_process: this process is one of a run's subscriber
// processes, started by the run (subscriber_process.h).
int ServeAsSubscriberProcess(const Config& config) {
  const absl::StatusOr<std::vector<MirrorOptions::Encoding>> encoding =
      tools::EncodingFlags();
  if (!encoding.ok() || encoding->empty()) return 2;
  ClientOptions subscriber = LoadClientOptions(config.client);
  if (!absl::GetFlag(FLAGS_subscriber_server).empty()) {
    subscriber.address = absl::GetFlag(FLAGS_subscriber_server);
  }
  return ServeSubscriberProcess(
      subscriber, absl::GetFlag(FLAGS_world), encoding->front(),
      tools::PrecisionFlag(), absl::GetFlag(FLAGS_subscriber_hz),
      absl::GetFlag(FLAGS_subscribers),
      absl::GetFlag(FLAGS_subscriber_process_index),
      absl::GetFlag(FLAGS_subscriber_processes), config.camera);
}

// The processes a run starts beside itself: xformd (--xformd) and
// redis-server (redis mode); 0 where none. Stopped when it goes.
class Helpers {
 public:
  Helpers() = default;
  Helpers(const Helpers&) = delete;
  Helpers& operator=(const Helpers&) = delete;
  ~Helpers() {
    Stop(redis_);
    Stop(xformd_);
  }

  // Starts what `flags` need; false (said on stderr) if one did not start.
  bool Start(LoadFlags& flags) {
    Config& config = flags.config;
    if (const std::string xformd = absl::GetFlag(FLAGS_xformd);
        !xformd.empty()) {
      std::vector<std::string> command = {
          xformd, absl::StrCat("--listen=", config.client.address),
          absl::StrCat("--max_message_bytes=", kLoadMaxMessageBytes),
          absl::StrCat("--max_entities=", config.entities),
          "--write_timeout_ms=60000"};
      for (absl::string_view arg : absl::StrSplit(
               absl::GetFlag(FLAGS_xformd_args), ' ', absl::SkipEmpty())) {
        command.emplace_back(arg);
      }
      xformd_ = StartProcess(command);
      if (xformd_ == 0) {
        std::fprintf(stderr, "cannot start %s\n", xformd.c_str());
        return false;
      }
      config.server_pid = xformd_;
    }
    if (std::find(flags.modes.begin(), flags.modes.end(), "redis") ==
        flags.modes.end()) {
      return true;
    }
    redis_ = StartProcess(
        {absl::GetFlag(FLAGS_redis_server), "--port",
         std::to_string(redis_port()), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loglevel", "warning"},
        /*quiet=*/true);
    if (redis_ == 0) {
      std::fprintf(stderr, "cannot start %s\n",
                   absl::GetFlag(FLAGS_redis_server).c_str());
      return false;
    }
    return true;
  }

  pid_t redis() const { return redis_; }
  int redis_port() const { return absl::GetFlag(FLAGS_redis_port); }

 private:
  pid_t xformd_ = 0;
  pid_t redis_ = 0;
};

// One mode's turn in a round: stream mode runs once per --encoding; the
// lot, --rounds times.
struct Turn {
  std::string mode;
  MirrorOptions::Encoding encoding = MirrorOptions::Encoding::kRaw;
  int round = 1;
};

std::vector<Turn> TurnsOf(const LoadFlags& flags) {
  std::vector<Turn> turns;
  for (int round = 1; round <= flags.config.rounds; ++round) {
    for (const std::string& mode : flags.modes) {
      if (mode != "stream") {
        turns.push_back({.mode = mode, .round = round});
        continue;
      }
      for (MirrorOptions::Encoding e : flags.encodings) {
        turns.push_back({.mode = mode, .encoding = e, .round = round});
      }
    }
  }
  return turns;
}

// Builds the world and runs every turn; the results, or why not (said on
// stderr).
std::optional<std::vector<ModeResult>> RunTurns(const LoadFlags& flags,
                                                const Helpers& helpers) {
  LoadRun run(flags.config);
  if (absl::Status built = run.Build(); !built.ok()) {
    std::fprintf(stderr, "building the world: %s\n", built.ToString().c_str());
    return std::nullopt;
  }
  std::vector<ModeResult> results;
  for (const Turn& turn : TurnsOf(flags)) {
    absl::StatusOr<ModeResult> result =
        run.Run(turn.mode, turn.mode == "redis" ? helpers.redis() : 0,
                helpers.redis_port(), turn.encoding);
    if (!result.ok()) {
      std::fprintf(stderr, "%s: %s\n", turn.mode.c_str(),
                   result.status().ToString().c_str());
      return std::nullopt;
    }
    result->round = turn.round;
    results.push_back(*std::move(result));
  }
  return results;
}

int Main(std::vector<std::string> self) {
  absl::StatusOr<LoadFlags> flags = LoadFlagsFromFlags(std::move(self));
  if (!flags.ok()) {
    std::fprintf(stderr, "xform-load: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_subscriber_process)) {
    return ServeAsSubscriberProcess(flags->config);
  }
  std::optional<std::vector<ModeResult>> results;
  {
    Helpers helpers;
    if (!helpers.Start(*flags)) return 1;
    results = RunTurns(*flags, helpers);
  }
  if (!results) return 1;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ReportJson(flags->config, *results).c_str());
  } else {
    PrintTable(flags->config, *results);
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
  std::vector<std::string> self(argv, argv + argc);
  xform::internal::UseReleaseMutexes();
  signal(SIGPIPE, SIG_IGN);
  return xform::load::Main(std::move(self));
}
