// Copyright 2026 The xform Authors.
//
// BuildPool: a few threads that make subscribers' messages (a snapshot's
// next part, a filtered or slow subscriber's pending changes), so that
// gRPC's callback threads, which also carry every call's reactions and
// HTTP/2 writes (clamp(cores / 2, 2, 16) of them in gRPC 1.51), only ever
// start writes of messages made already, and one world's join storm does not
// hold up another world's calls.
//
// Tasks run in the order posted. A stream posts the making of its next
// message only when its previous write is done, so streams take turns a
// message at a time. Pending tasks are dropped, not run, on destruction.
//
// Thread-safe.

#ifndef XFORM_SERVER_BASE_BUILD_POOL_H_
#define XFORM_SERVER_BASE_BUILD_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace xform::server {

class BuildPool {
 public:
  explicit BuildPool(int threads);
  BuildPool(const BuildPool&) = delete;
  BuildPool& operator=(const BuildPool&) = delete;
  ~BuildPool();

  void Post(absl::AnyInvocable<void() &&> task);

 private:
  void Work();
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_BASE_BUILD_POOL_H_
