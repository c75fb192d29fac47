// Copyright 2026 The xform Authors.
//
// Clock: where time-based code (token buckets, log pacing) reads the time,
// so that a test steps it rather than sleeps. Clock::Real() is absl::Now().
// A part that paces takes a `const Clock&` (the real one by default) and
// keeps it; the clock must outlive it.
//
// Thread-safe: Now() may be called from any thread.

#ifndef XFORM_SERVER_BASE_CLOCK_H_
#define XFORM_SERVER_BASE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace xform::server {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The system's clock, for the life of the process.
  static const Clock& Real() {
    class RealClock final : public Clock {
     public:
      absl::Time Now() const override { return absl::Now(); }
    };
    static const Clock* const kReal = new RealClock();
    return *kReal;
  }
};

}  // namespace xform::server

#endif  // XFORM_SERVER_BASE_CLOCK_H_
