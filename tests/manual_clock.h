// Copyright 2026 The xform Authors.
//
// ManualClock: a Clock (server/base/clock.h) that moves only when a test says,
// so that a rate is checked by stepping time, not by sleeping through it.

#ifndef XFORM_TESTS_MANUAL_CLOCK_H_
#define XFORM_TESTS_MANUAL_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/clock.h"

namespace xform::server {

class ManualClock final : public Clock {
 public:
  // Starts at the real time, so that times it gives read sensibly in logs.
  ManualClock() : nanos_(absl::ToUnixNanos(absl::Now())) {}

  absl::Time Now() const override {
    return absl::FromUnixNanos(nanos_.load(std::memory_order_acquire));
  }
  void Advance(absl::Duration by) {
    nanos_.fetch_add(absl::ToInt64Nanoseconds(by), std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t> nanos_;
};

}  // namespace xform::server

#endif  // XFORM_TESTS_MANUAL_CLOCK_H_
