// Copyright 2026 The xform Authors.

#include "server/base/periodic_thread.h"

#include <pthread.h>

#include <utility>

namespace xform::server {

PeriodicThread::PeriodicThread(const char* name, absl::Time first,
                               absl::AnyInvocable<absl::Time()> step)
    : step_(std::move(step)),
      thread_([this, name, first] { Run(name, first); }) {}

PeriodicThread::~PeriodicThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void PeriodicThread::Run(const char* name, absl::Time next) {
  pthread_setname_np(pthread_self(), name);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), next)) return;
    }
    next = step_();
  }
}

}  // namespace xform::server
