// Copyright 2026 The xform Authors.

#include "server/base/build_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace xform::server {
namespace {

// The pool's threads' nice value (0 is normal, 19 the lowest priority).
constexpr int kNice = 10;

}  // namespace

BuildPool::BuildPool(int threads) {
  for (int k = 0; k < std::max(threads, 1); ++k) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "xform-build");  // For top and perf.
      // Bulk work: when the cores are busy, the threads that carry calls and
      // publish frames go first. Raising one's own nice needs no privilege.
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kNice);
      Work();
    });
  }
}

BuildPool::~BuildPool() {
  std::deque<absl::AnyInvocable<void() &&>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(tasks_);
  }
  for (std::thread& thread : threads_) thread.join();
  // `dropped` is destroyed here, outside the lock: a task may own the last
  // reference to something whose destructor posts or locks.
}

void BuildPool::Post(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  tasks_.push_back(std::move(task));
}

bool BuildPool::Ready() const { return stopping_ || !tasks_.empty(); }

void BuildPool::Work() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BuildPool::Ready));
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace xform::server
