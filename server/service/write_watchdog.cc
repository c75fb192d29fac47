// Copyright 2026 The xform Authors.

#include "server/service/write_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace xform::server {

WriteWatchdog::WriteWatchdog(absl::Duration timeout)
    : timeout_(timeout),
      period_(
          std::clamp(timeout / 10, absl::Milliseconds(10), absl::Seconds(1))),
      thread_("xform-watchdog", absl::Now() + period_,
              [this] { return CheckAll(); }) {}

WriteWatchdog::~WriteWatchdog() = default;

void WriteWatchdog::Watch(std::weak_ptr<Stream> stream) {
  absl::MutexLock lock(&mu_);
  streams_.push_back(std::move(stream));
}

absl::Time WriteWatchdog::CheckAll() {
  // Streams that went are dropped; the live ones are held while checked,
  // outside the lock, since cancelling may run a stream's reactions.
  std::vector<std::shared_ptr<Stream>> live;
  {
    absl::MutexLock lock(&mu_);
    std::erase_if(streams_, [&](const std::weak_ptr<Stream>& weak) {
      std::shared_ptr<Stream> stream = weak.lock();
      if (stream == nullptr) return true;
      live.push_back(std::move(stream));
      return false;
    });
  }
  const absl::Time now = absl::Now();
  for (const auto& stream : live) stream->CancelIfStuck(now, timeout_);
  return now +
         period_;  // Not held while waiting: a stream's end is not delayed.
}

}  // namespace xform::server
