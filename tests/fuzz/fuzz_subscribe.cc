// Copyright 2026 The xform Authors.
//
// libFuzzer: SubscribeRequest bytes through the server's validation and, if
// they pass, into a Replicator over a small world, whose snapshot of the
// filtered view must end.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "server/replication/replicator.h"
#include "xform/v1/wire.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace {

class NullSink : public xform::server::UpdateSink {
 public:
  void Wake() override {}
  void Poll(absl::Time) override {}
  void End(const absl::Status&) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xform::v1::SubscribeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (!xform::v1::CheckSubscribeRequest(request, /*max_filter_ids=*/4096)
           .ok()) {
    return 0;
  }
  xform::World world;
  std::vector<xform::CreateOp> ops;
  for (xform::EntityId e = 1; e <= 64; ++e) {
    ops.push_back({e, e % 8 != 1 ? e - 1 : 0, {}});
  }
  if (!world.CreateMany(ops).ok()) std::abort();
  xform::FrameChanges changes;
  world.EndFrame(&changes);
  xform::server::Replicator replicator(/*max_pending=*/16);
  replicator.Publish(changes, absl::Now());
  xform::server::SubscriptionOptions options;
  options.entities.assign(request.entity().begin(), request.entity().end());
  options.subtrees.assign(request.subtree().begin(), request.subtree().end());
  options.max_rate_hz = request.max_rate_hz();
  options.no_echo_client_id = request.no_echo_client_id();
  options.part_budget_bytes = 512;
  const auto id =
      replicator.Subscribe(std::move(options), std::make_shared<NullSink>());
  for (int parts = 0;; ++parts) {
    auto part = replicator.Next(id, absl::Now());
    if (part == nullptr || part->message().snapshot_done()) break;
    if (parts > 10'000) std::abort();  // A snapshot that does not end.
  }
  replicator.Unsubscribe(id);
  return 0;
}
