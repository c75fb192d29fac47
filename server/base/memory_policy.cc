// Copyright 2026 The xform Authors.

#include "server/base/memory_policy.h"

#include <malloc.h>

namespace xform::server {

void ConfigureHeap() { mallopt(M_MMAP_THRESHOLD, 8 << 20); }

void ReturnFreeHeap() { malloc_trim(0); }

}  // namespace xform::server
