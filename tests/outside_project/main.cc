// Copyright 2026 The xform Authors.
//
// Built against the installed xform package. Given a server address, makes a
// world, writes to it and reads it back through a Mirror; exits 0 when the
// mirror agrees with what was written.

#include <cstdio>

#include "xform/client.h"
#include "xform/mirror.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: outside HOST:PORT\n");
    return 2;
  }
  xform::ClientOptions options;
  options.address = argv[1];
  auto client = xform::Client::Connect(options);
  if (!client.ok()) return 1;
  if (!(*client)
           ->CreateWorld("outside", {.mode = xform::FrameMode::kDriven})
           .ok()) {
    return 1;
  }
  xform::Transform at;
  at.position = {1, 2, 3};
  if (!(*client)
           ->Apply("outside", {xform::CreateOp{7, xform::kNoEntity, at}},
                   {.end_frame = true})
           .ok()) {
    return 1;
  }
  auto mirror = xform::Mirror::Start(**client, {.world = "outside"});
  if (!mirror.ok() || !(*mirror)->WaitForSync(absl::Seconds(10))) return 1;
  absl::StatusOr<xform::Matrix3x4> world = (*mirror)->WorldMatrix(7);
  if (!world.ok() || world->translation() != glm::vec3(1, 2, 3)) return 1;
  std::printf("outside project: mirrored entity 7 at (1, 2, 3)\n");
  return 0;
}
