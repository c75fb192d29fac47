// Copyright 2026 The xform Authors.
//
// A writer whose poses are regular and whose arrivals are not: entity 1 of
// a driven world moves along x at --speed units a second, each batch
// stamped on a regular --hz grid of the writer's clock (Unix time) and
// sent at its stamp plus a random delay of up to --jitter_ms, as a sensor
// on a busy network would. The browser test draws it in xform-web and
// checks that it moves on screen at constant speed all the same.
//
//   jittery_writer --server=HOST:PORT --world=W [--hz=60] [--speed=2]
//       [--jitter_ms=60] [--seconds=60]
//
// Prints "writing" once the world and its entity exist; exits after
// --seconds, or 1 on a refused call.

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "xform/client.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "xformd's address");
ABSL_FLAG(std::string, world, "smooth", "The driven world to create");
ABSL_FLAG(double, hz, 60, "Batches a second, on the stamps' grid");
ABSL_FLAG(double, speed, 2, "Entity 1's speed along x, units a second");
ABSL_FLAG(double, jitter_ms, 60, "Each batch is sent up to this late");
ABSL_FLAG(double, seconds, 60, "How long to write");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  xform::ClientOptions options;
  options.address = absl::GetFlag(FLAGS_server);
  absl::StatusOr<std::unique_ptr<xform::Client>> client =
      xform::Client::Connect(options);
  const std::string world = absl::GetFlag(FLAGS_world);
  absl::Status created =
      client.ok()
          ? (*client)
                ->CreateWorld(world, {.mode = xform::FrameMode::kDriven})
                .status()
          : client.status();
  if (created.ok()) {
    created = (*client)
                  ->Apply(world, {xform::CreateOp{1, xform::kNoEntity, {}}},
                          {.end_frame = true})
                  .status();
  }
  if (!created.ok()) {
    std::fprintf(stderr, "jittery_writer: %s\n", created.ToString().c_str());
    return 1;
  }
  std::printf("writing\n");
  std::fflush(stdout);

  const absl::Duration step = absl::Seconds(1 / absl::GetFlag(FLAGS_hz));
  const absl::Duration jitter =
      absl::Milliseconds(absl::GetFlag(FLAGS_jitter_ms));
  const double speed = absl::GetFlag(FLAGS_speed);
  std::mt19937_64 random(std::random_device{}());
  std::uniform_real_distribution<double> late(0, 1);
  // After the create's stamp, which was the server's clock.
  const absl::Time start = absl::Now() + absl::Milliseconds(20);
  const absl::Time end = start + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  for (int64_t k = 0;; ++k) {
    const absl::Time stamp = start + k * step;
    if (stamp > end) return 0;
    // Pacing a writer, not waiting for an event: each batch leaves at its
    // own time, late by a random share of the jitter.
    absl::SleepFor(stamp + late(random) * jitter - absl::Now());
    xform::Transform pose;
    pose.position = {
        static_cast<float>(speed * absl::ToDoubleSeconds(stamp - start)), 0, 0};
    const absl::StatusOr<uint64_t> applied = (*client)->Apply(
        world, {xform::SetLocalOp{1, pose}},
        {.end_frame = true, .stamp = absl::ToUnixNanos(stamp)});
    if (!applied.ok()) {
      std::fprintf(stderr, "jittery_writer: %s\n",
                   applied.status().ToString().c_str());
      return 1;
    }
  }
}
