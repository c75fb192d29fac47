// Copyright 2026 The xform Authors.
//
// PeriodicThread: a named thread that runs a step at the times the step
// itself chooses, until the object is destroyed. The server's own clocks
// (each tick world's publishing, the subscriber poll, the write watchdog)
// are each one of these.
//
// Destruction stops the thread and waits for a step under way: do not
// destroy one from its own step.

#ifndef XFORM_SERVER_BASE_PERIODIC_THREAD_H_
#define XFORM_SERVER_BASE_PERIODIC_THREAD_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace xform::server {

class PeriodicThread {
 public:
  // Runs `step` at `first`, then at each time it returns. `name` is the
  // thread's name for top and perf (at most 15 characters).
  PeriodicThread(const char* name, absl::Time first,
                 absl::AnyInvocable<absl::Time()> step);
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;
  ~PeriodicThread();

 private:
  void Run(const char* name, absl::Time next);

  absl::AnyInvocable<absl::Time()> step_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: it runs as soon as it is made.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_BASE_PERIODIC_THREAD_H_
