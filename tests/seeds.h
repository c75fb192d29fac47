// Copyright 2026 The xform Authors.
//
// How many random seeds a long randomized test runs. The plain and ASan
// builds run them all; a ThreadSanitizer build runs the first few. TSan's
// 5-15x slowdown made four such tests CI's longest (up to 101 s each), and a
// race shows within the first seeds' threads as well as within later ones:
// the later seeds vary the worlds, which the plain build covers.

#ifndef XFORM_TESTS_SEEDS_H_
#define XFORM_TESTS_SEEDS_H_

#include <algorithm>
#include <cstdint>

namespace xform::testing {

constexpr uint32_t SeedsToRun(uint32_t seeds) {
#if defined(__SANITIZE_THREAD__)
  return std::min<uint32_t>(seeds, 2);
#else
  return seeds;
#endif
}

}  // namespace xform::testing

#endif  // XFORM_TESTS_SEEDS_H_
