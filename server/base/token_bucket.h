// Copyright 2026 The xform Authors.
//
// TokenBucket: a rate, with a burst of one second's worth. What the
// per-principal quotas (gatekeeper.h) pace themselves with.
//
// The rate is given to each call rather than kept, because a principal's
// quotas can change under an open bucket (an --auth_file reload keeps a
// principal's buckets). A bucket holds at most Capacity(rate): one second's
// worth, and at least one token. A bucket never used is full.
//
// Two ways to spend:
//   - TryTake: all of `amount` or nothing. An amount above Capacity(rate)
//     can never be taken: the caller says so (Fits), rather than let a
//     batch bigger than the bucket through whenever the bucket is full,
//     which would let a principal write max_batch a second whatever its
//     rate.
//   - Charge: `amount` whatever is there, into debt (below zero), which
//     later calls wait out (Tokens() <= 0). For costs learnt only once
//     paid, such as a message's bytes.
//
// Time is the caller's `now`, so tests step it. Not thread-safe: the owner
// locks.

#ifndef XFORM_SERVER_BASE_TOKEN_BUCKET_H_
#define XFORM_SERVER_BASE_TOKEN_BUCKET_H_

#include <algorithm>

#include "absl/time/time.h"

namespace xform::server {

class TokenBucket {
 public:
  // The most a bucket at `rate` (per second) holds.
  static double Capacity(double rate) { return std::max(rate, 1.0); }
  // Whether `amount` can ever be taken at once at `rate`.
  static bool Fits(double rate, double amount) {
    return amount <= Capacity(rate);
  }

  // Takes `amount` if the bucket holds that much at `now`; otherwise takes
  // nothing.
  bool TryTake(double rate, double amount, absl::Time now) {
    Refill(rate, now);
    if (tokens_ < amount) return false;
    tokens_ -= amount;
    return true;
  }

  // Takes `amount` at `now`, into debt if need be.
  void Charge(double rate, double amount, absl::Time now) {
    Refill(rate, now);
    tokens_ -= amount;
  }

  // What the bucket holds at `now`; negative in debt.
  double Tokens(double rate, absl::Time now) {
    Refill(rate, now);
    return tokens_;
  }

 private:
  void Refill(double rate, absl::Time now) {
    const double capacity = Capacity(rate);
    if (!used_) {
      used_ = true;
      tokens_ = capacity;
    } else {
      // A rate lowered since (a reload) caps what the bucket holds at once.
      const double elapsed = std::max(0.0, absl::ToDoubleSeconds(now - last_));
      tokens_ = std::min(capacity, tokens_ + rate * elapsed);
    }
    last_ = std::max(last_, now);
  }

  bool used_ = false;
  double tokens_ = 0;
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace xform::server

#endif  // XFORM_SERVER_BASE_TOKEN_BUCKET_H_
