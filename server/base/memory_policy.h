// Copyright 2026 The xform Authors.
//
// How xformd uses memory, in one place:
//   - Big blocks get mappings of their own (ConfigureHeap, at start): blocks
//     of 8 MB and more (a big world's hash tables) are mapped apart and
//     returned whole when freed. Without this glibc raises the threshold to
//     the largest block freed so far, and a deleted world's tables stay in
//     the heap. Messages (up to a few MB, made and freed many times a second
//     while snapshots stream) come from the heap rather than a fresh mapping
//     each, faulted in page by page. Keeping more of the heap free
//     (M_TRIM_THRESHOLD 64 MB) was faster still, but then a deleted 1M world
//     left 80 MB behind (XformdProcessTest.DeletingABigWorldGivesItsMemory
//     Back).
//   - Freed memory goes back to the system after a world goes
//     (ReturnFreeHeap): from the world's destructor, and once more by the
//     poller a moment later, for what the deleting connections' buffers
//     held (world_host.h).
//   - A world's columns of 4 MB and more are on 2 MB pages: the core's
//     HugePageAllocator (include/xform/internal/huge_page_allocator.h),
//     which the world's columns, the published state and a Mirror's copy
//     use. Scattered rows on 4 KB pages miss the TLB on every move.

#ifndef XFORM_SERVER_BASE_MEMORY_POLICY_H_
#define XFORM_SERVER_BASE_MEMORY_POLICY_H_

namespace xform::server {

// The heap's settings above; once, before worlds are made.
void ConfigureHeap();
// Gives the heap's free memory back to the system (malloc_trim).
void ReturnFreeHeap();

}  // namespace xform::server

#endif  // XFORM_SERVER_BASE_MEMORY_POLICY_H_
