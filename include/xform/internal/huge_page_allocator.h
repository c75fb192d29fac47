// Copyright 2026 The xform Authors.
//
// An allocator for big columns: a world's, a Mirror's copy's, an id index's.
// Not part of the API: World's header names it only because its members do.

#ifndef XFORM_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
#define XFORM_INTERNAL_HUGE_PAGE_ALLOCATOR_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace xform::internal {

// Arrays at least this big are mapped on their own and asked for 2 MB pages.
inline constexpr size_t kHugePageMinimumBytes = size_t{4} << 20;

// Maps `bytes` (at least kHugePageMinimumBytes) starting on a 2 MB boundary
// and advises the kernel to back it with transparent huge pages. Throws
// std::bad_alloc when the mapping fails.
void* MapHugePageBacked(size_t bytes);
// Unmaps what MapHugePageBacked(bytes) returned.
void UnmapHugePageBacked(void* pointer, size_t bytes);

// Allocates like std::allocator, except that arrays of at least
// kMinimumBytes get 2 MB pages.
//
// A 1M-entity world's columns are 4-48 MB each, and a frame that moves a few
// percent of it, or a server encoding its moved entities, reads them at
// scattered places: on 4 KB pages nearly every such access also misses the
// TLB, and the page walk is one more cache miss. On 2 MB pages the whole
// world fits the TLB's second level. Only the pages a column covers are
// advised, so a column costs no more memory than on 4 KB pages (its tail
// beyond the last 2 MB boundary stays on 4 KB pages).
template <typename T, size_t kMinimumBytes = kHugePageMinimumBytes>
class HugePageAllocator {
 public:
  static_assert(kMinimumBytes >= kHugePageMinimumBytes);
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = HugePageAllocator<U, kMinimumBytes>;
  };

  HugePageAllocator() = default;
  template <typename U>
  explicit HugePageAllocator(
      const HugePageAllocator<U, kMinimumBytes>& /*other*/) {}

  T* allocate(size_t n) {
    if (n > std::allocator_traits<std::allocator<T>>::max_size(
                std::allocator<T>())) {
      throw std::bad_array_new_length();
    }
    const size_t bytes = n * sizeof(T);
    if (bytes < kMinimumBytes) return std::allocator<T>().allocate(n);
    return static_cast<T*>(MapHugePageBacked(bytes));
  }

  void deallocate(T* pointer, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMinimumBytes) {
      std::allocator<T>().deallocate(pointer, n);
      return;
    }
    UnmapHugePageBacked(pointer, bytes);
  }

  // Stateless: memory from one is freed by any other.
  template <typename U>
  friend bool operator==(const HugePageAllocator& /*a*/,
                         const HugePageAllocator<U, kMinimumBytes>& /*b*/) {
    return true;
  }
};

// A per-instance or per-slot column of a world (or of a copy of one).
template <typename T, size_t kMinimumBytes = kHugePageMinimumBytes>
using Column = std::vector<T, HugePageAllocator<T, kMinimumBytes>>;

}  // namespace xform::internal

#endif  // XFORM_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
