// Copyright 2026 The xform Authors.

#include "xform/internal/huge_page_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace xform::internal {
namespace {

constexpr uintptr_t kPageBytes = 4096;
constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;

uintptr_t RoundUp(uintptr_t value, uintptr_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

void* MapHugePageBacked(size_t bytes) {
  const uintptr_t length = RoundUp(bytes, kPageBytes);
  // One huge page more than needed, so that a 2 MB boundary lies within the
  // first one; what lies before it and after the column is given back.
  void* mapped = mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto first = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t start = RoundUp(first, kHugePageBytes);
  const uintptr_t lead = start - first;
  if (lead != 0) munmap(mapped, lead);
  if (kHugePageBytes - lead != 0) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): page arithmetic on mmap's.
    munmap(reinterpret_cast<void*>(start + length), kHugePageBytes - lead);
  }
#ifdef MADV_HUGEPAGE
  // Advice only: where the kernel has no huge page to give, or transparent
  // huge pages are off, the column lives on 4 KB pages as before.
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);
#endif
  return reinterpret_cast<void*>(start);  // NOLINT(performance-no-int-to-ptr)
}

void UnmapHugePageBacked(void* pointer, size_t bytes) {
  munmap(pointer, RoundUp(bytes, kPageBytes));
}

}  // namespace xform::internal
