// Copyright 2026 The xform Authors.
//
// CRC32C (Castagnoli), the checksum of every journal record and snapshot
// file: the one etcd, LevelDB and ext4 use, with a hardware instruction on
// x86-64 (SSE4.2) and arm64. Debian 12 packages no library for it (its
// Abseil predates absl/crc), hence these few lines.

#ifndef XFORM_SERVER_STORAGE_CRC32C_H_
#define XFORM_SERVER_STORAGE_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace xform::server {

// The CRC32C of `crc`'s input followed by `data`; Crc32c(data) is
// ExtendCrc32c(0, data). Crc32c("123456789") == 0xe3069283.
uint32_t ExtendCrc32c(uint32_t crc, absl::string_view data);
inline uint32_t Crc32c(absl::string_view data) { return ExtendCrc32c(0, data); }

}  // namespace xform::server

#endif  // XFORM_SERVER_STORAGE_CRC32C_H_
