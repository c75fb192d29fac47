// Copyright 2026 The xform Authors.
//
// FanoutPool spreads the wakes of a published frame over threads. Waking a
// caught-up subscriber starts its write, and a write's cost is mostly the
// kernel copying the message into the socket (about 0.36 ms for a
// 5,000-entity raw frame on a 2-core VM): done in turn on the publishing
// thread, 64 subscribers would take most of a 60 Hz frame. With N threads
// (--fanout_threads), the sinks are dealt into N shares: the publishing
// thread wakes one share itself, N - 1 pool threads the others, so no
// share waits for a hand-off that the publisher could do, and the
// publisher does not wait for the others.
//
// Thread-safe. Knows nothing of gRPC: it only calls UpdateSink::Wake().

#ifndef XFORM_SERVER_REPLICATION_FANOUT_POOL_H_
#define XFORM_SERVER_REPLICATION_FANOUT_POOL_H_

#include <memory>
#include <vector>

#include "server/base/build_pool.h"
#include "server/replication/replicator.h"

namespace xform::server {

class FanoutPool final : public Fanout {
 public:
  // `threads` >= 1 share each frame's wakes, the caller's included: 1 wakes
  // every sink on the publishing thread.
  explicit FanoutPool(int threads);

  void WakeAll(std::vector<std::shared_ptr<UpdateSink>> sinks) override;

 private:
  const int threads_;
  std::unique_ptr<BuildPool> pool_;  // threads_ - 1 of them; none for 1.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_FANOUT_POOL_H_
