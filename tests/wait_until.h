// Copyright 2026 The xform Authors.
//
// WaitUntil: how a test waits for something another thread or process
// makes true (a mirror synced, a status changed, a log line written): it
// asks `condition` until it holds or `deadline` passes, and on timeout
// says what it waited for and for how long, so a failing test names the
// event that never came rather than an assertion after it.
//
//   ASSERT_TRUE(WaitUntil([&] { return mirror->synced(); }, kWait,
//                         "the mirror synced"));
//
// It asks at once, then backs off from 1 ms to 20 ms between asks: quick
// for what comes at once, cheap for what takes seconds. A condition may
// do work of its own (a kCaller mirror's Update()), since it is asked on
// the test's thread. A test never sleeps to show that nothing happened:
// it waits for a positive event that would come after it.

#ifndef XFORM_TESTS_WAIT_UNTIL_H_
#define XFORM_TESTS_WAIT_UNTIL_H_

#include <algorithm>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace xform {

inline ::testing::AssertionResult WaitUntil(absl::FunctionRef<bool()> condition,
                                            absl::Time deadline,
                                            absl::string_view what) {
  const absl::Time start = absl::Now();
  absl::Duration pause = absl::Milliseconds(1);
  while (!condition()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return ::testing::AssertionFailure()
             << "waited " << (now - start) << " for " << what;
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult WaitUntil(absl::FunctionRef<bool()> condition,
                                            absl::Duration timeout,
                                            absl::string_view what) {
  return WaitUntil(condition, absl::Now() + timeout, what);
}

}  // namespace xform

#endif  // XFORM_TESTS_WAIT_UNTIL_H_
