// Copyright 2026 The xform Authors.
//
// A world's snapshot file: its WorldImage (52 bytes an entity) after a
// header, with a CRC32C of everything at the end. Little-endian:
//
//   8 bytes   "XFSNAP1\n"
//   u32       info length, then the world's CreateWorldRequest (name, mode,
//             rate), as the journal's kWorld record holds it
//   u64       the frame open when the image was taken
//   u64       n, the entities
//   columns   entity u64[n], parent u32[n] (0xffffffff: a root),
//             position f32[3n], rotation f32[4n] (x, y, z, w), scale f32[3n]
//   u32       CRC32C of all the bytes before it
//
// A snapshot is written to a temporary name, synced, then renamed into place
// and its directory synced: a file under its final name is whole.

#ifndef XFORM_SERVER_STORAGE_SNAPSHOT_FILE_H_
#define XFORM_SERVER_STORAGE_SNAPSHOT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "xform/world_image.h"

namespace xform::server {

// Writes `path` durably (see above). UNAVAILABLE with the cause (ENOSPC) on
// an I/O error; then nothing is left at `path` or its temporary name.
absl::Status WriteSnapshotFile(const std::string& path, absl::string_view info,
                               const WorldImage& image);

// Reads `path` into `info` and `image`. DataLoss naming the file when it is
// not whole: a bad magic or version, a wrong size, a CRC that does not match.
absl::Status ReadSnapshotFile(const std::string& path, std::string* info,
                              WorldImage* image);

// The same bytes in memory: what a log kept elsewhere than in files (a
// JetStream stream, server/cluster/) stores as a snapshot. Decode returns
// DataLoss as ReadSnapshotFile does, naming `what`.
std::string EncodeSnapshot(absl::string_view info, const WorldImage& image);
absl::Status DecodeSnapshot(absl::string_view bytes, absl::string_view what,
                            std::string* info, WorldImage* image);

}  // namespace xform::server

#endif  // XFORM_SERVER_STORAGE_SNAPSHOT_FILE_H_
