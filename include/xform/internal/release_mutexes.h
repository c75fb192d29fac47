// Copyright 2026 The xform Authors.
//
// Not part of the API: what our programs' main() calls first.
//
// Debian's Abseil is built without NDEBUG, so in every program that links
// it each absl::Mutex runs Abseil's deadlock detector: every lock records
// into one global graph under one global lock (2% of xformd's CPU
// streaming a 100k world to 16 subscribers, and a point where all threads
// meet), and a lock-order inversion aborts the process. A release build of
// ours turns it off, as a release Abseil would; debug builds and the tests
// (which never call this) keep it.

#ifndef XFORM_INTERNAL_RELEASE_MUTEXES_H_
#define XFORM_INTERNAL_RELEASE_MUTEXES_H_

#include "absl/synchronization/mutex.h"

namespace xform::internal {

inline void UseReleaseMutexes() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace xform::internal

#endif  // XFORM_INTERNAL_RELEASE_MUTEXES_H_
