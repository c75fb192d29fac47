// Copyright 2026 The xform Authors.

#include "server/replication/fanout_pool.h"

#include <algorithm>
#include <utility>

namespace xform::server {

FanoutPool::FanoutPool(int threads) : threads_(std::max(1, threads)) {
  if (threads_ > 1) pool_ = std::make_unique<BuildPool>(threads_ - 1);
}

void FanoutPool::WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks) {
  const size_t shares = std::min<size_t>(threads_, sinks.size());
  if (shares <= 1) {
    for (auto& sink : sinks) sink->Wake();
    return;
  }
  // Dealt round-robin, so that subscribers that joined together (and sit
  // next to each other in the list) are written in parallel.
  std::vector<std::vector<std::shared_ptr<UpdateSink>>> share(shares);
  for (size_t k = 0; k < sinks.size(); ++k) {
    share[k % shares].push_back(std::move(sinks[k]));
  }
  for (size_t s = 1; s < shares; ++s) {
    pool_->Post([mine = std::move(share[s])] {
      for (const auto& sink : mine) sink->Wake();
    });
  }
  for (const auto& sink : share[0]) sink->Wake();
}

}  // namespace xform::server
