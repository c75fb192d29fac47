// Copyright 2026 The xform Authors.

#include "xform/internal/huge_page_allocator.h"

#include <cstdint>
#include <numeric>

#include "gtest/gtest.h"

namespace xform::internal {
namespace {

constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;

TEST(HugePageAllocatorTest, BigColumnsStartOnAHugePageAndKeepTheirValues) {
  Column<uint32_t> column(kHugePageMinimumBytes / sizeof(uint32_t) + 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(column.data()) % kHugePageBytes, 0u);
  std::iota(column.begin(), column.end(), 0u);
  // Growing maps a new array, copies, and unmaps the old one.
  column.resize(column.size() * 3, 7u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(column.data()) % kHugePageBytes, 0u);
  const size_t first_size = kHugePageMinimumBytes / sizeof(uint32_t) + 3;
  for (size_t k = 0; k < first_size; k += 4099) ASSERT_EQ(column[k], k);
  EXPECT_EQ(column[first_size - 1], first_size - 1);
  EXPECT_EQ(column.back(), 7u);
  // And shrinking back below the threshold returns to the ordinary heap.
  column.resize(10);
  column.shrink_to_fit();
  EXPECT_EQ(column.capacity(), 10u);
  EXPECT_EQ(column[9], 9u);
}

TEST(HugePageAllocatorTest, SmallColumnsAllocateAndFreeLikeAnyVector) {
  Column<uint8_t> small(100, 1);
  small.push_back(2);
  EXPECT_EQ(small.size(), 101u);
  EXPECT_EQ(small.back(), 2);
}

// A Mirror's rows take 2 MB pages only from 16 MB (client/mirror_state.h),
// and are over-aligned: a cache line each.
TEST(HugePageAllocatorTest, AColumnMayTakeHugePagesFromABiggerSize) {
  constexpr size_t kFrom = size_t{16} << 20;
  struct alignas(64) Line {
    uint64_t words[8];
  };
  Column<Line, kFrom> under(kHugePageMinimumBytes / sizeof(Line) + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(under.data()) % alignof(Line), 0u);
  Column<Line, kFrom> over(kFrom / sizeof(Line) + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(over.data()) % kHugePageBytes, 0u);
  over.back().words[7] = 9;
  over.push_back(over.back());  // Grows: maps anew, copies, unmaps.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(over.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(over.back().words[7], 9u);
}

TEST(HugePageAllocatorTest, ImpossibleSizesThrowInsteadOfWrapping) {
  HugePageAllocator<uint64_t> allocator;
  EXPECT_THROW(allocator.allocate(SIZE_MAX / 4), std::bad_array_new_length);
}

}  // namespace
}  // namespace xform::internal
