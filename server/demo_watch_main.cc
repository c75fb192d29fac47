// Copyright 2026 The xform Authors.
//
// Subscribes to a world and prints one line per message: the frame, what it
// carries, and how long after the frame's publication it arrived.

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "xform/v1/xform.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "xformd address");
ABSL_FLAG(std::string, world, "demo", "World to watch");
ABSL_FLAG(int, frames, 0, "Stop after this many delta messages (0: never)");
ABSL_FLAG(int, wait_s, 10, "How long to wait for the server to come up");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_server),
                                     grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(
          std::chrono::system_clock::now() +
          std::chrono::seconds(absl::GetFlag(FLAGS_wait_s)))) {
    std::fprintf(stderr, "cannot reach %s\n",
                 absl::GetFlag(FLAGS_server).c_str());
    return 1;
  }
  auto stub = xform::v1::Xform::NewStub(channel);
  grpc::ClientContext context;
  xform::v1::SubscribeRequest request;
  request.set_world(absl::GetFlag(FLAGS_world));
  std::unique_ptr<grpc::ClientReader<xform::v1::FrameUpdate>> reader =
      stub->Subscribe(&context, request);
  xform::v1::FrameUpdate update;
  int deltas = 0;
  while (reader->Read(&update)) {
    const double latency_ms = absl::ToDoubleMilliseconds(
        absl::Now() - absl::FromUnixNanos(update.server_time_unix_nanos()));
    std::printf(
        "frame %llu%s: %d moved, %d created, %d destroyed, %d reparented, "
        "%.2f ms after publish%s\n",
        static_cast<unsigned long long>(update.frame()),
        update.snapshot() ? " (snapshot)" : "", update.moved_size(),
        update.created_size(), update.destroyed_size(),
        update.reparented_size(), latency_ms,
        update.frames_skipped() ? " (skipped frames)" : "");
    std::fflush(stdout);
    if (!update.snapshot() && ++deltas == absl::GetFlag(FLAGS_frames)) {
      context.TryCancel();
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    std::fprintf(stderr, "stream ended: %s\n", status.error_message().c_str());
    return 1;
  }
  return 0;
}
