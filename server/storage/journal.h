// Copyright 2026 The xform Authors.
//
// A journal: one world's append-only log of what changed it since its last
// snapshot, so that a restart can rebuild it. A file is a run of records:
//
//   u32 length      the payload's bytes
//   u32 crc         CRC32C of type, frame and payload, in that order
//   u8  type        kWorld or kBatch
//   u64 frame       the world's open frame when the record was written
//   u32 header_crc  CRC32C of the 17 bytes above: a damaged length is told
//                   from a record cut short by a crash
//   payload         kWorld: the world's StoredWorld (every file starts with
//                   one, so each is self-describing); kBatch: one applied
//                   ApplyRequest, as the client's commands were encoded
//
// all little-endian. A record is written by one write(2) while the world's
// writer lock is held, so records are in apply order, and a batch is a
// record whole or not at all: a failed write is cut off again at once.
//
// Reading (ScanJournal) tells a torn tail, what a crash in the middle of a
// write leaves (a last record cut short, or followed by nothing but zeros),
// from corruption (a bad record with more data after it).
//
// Thread safety: Append from one thread at a time (the world's lock);
// WaitDurable and Sync from any thread.

#ifndef XFORM_SERVER_STORAGE_JOURNAL_H_
#define XFORM_SERVER_STORAGE_JOURNAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/host/world_names.h"
#include "xform/world.h"

namespace xform::server {

// When an appended record is forced to disk, as Redis's appendfsync means:
//   kAlways       before the batch is acknowledged (WaitDurable); batches
//                 waiting together share one fdatasync (group commit)
//   kEverySecond  by a background sync each second: power loss may take the
//                 last second; a crash of the process alone takes nothing,
//                 as every acknowledged record was written to the OS
//   kNo           when the OS chooses
enum class FsyncPolicy { kAlways, kEverySecond, kNo };

enum class RecordType : uint8_t { kWorld = 1, kBatch = 2 };

inline constexpr size_t kRecordHeaderBytes = 21;
// A record longer than this is corruption, not a batch (the message size
// limit is at most 1 GiB).
inline constexpr uint32_t kMaxRecordPayload = uint32_t{1} << 30;

// A batch as a log holds it (an ApplyRequest as its client encoded it)
// applied again to `world` and its `names` in recovery, whichever log held
// it. DataLoss when it does not parse or no longer applies.
// `write_id`, if given, takes the batch's write id (ApplyRequest.write_id);
// `newest_stamp`, if given, is raised to the batch's stamp.
absl::Status ReplayBatch(absl::string_view batch, World& world,
                         WorldNames& names, std::string* write_id = nullptr,
                         int64_t* newest_stamp = nullptr);

// A record's bytes: header and payload.
std::string EncodeRecord(RecordType type, uint64_t frame,
                         absl::string_view payload);

struct JournalRecord {
  RecordType type;
  uint64_t frame;
  absl::string_view payload;  // Valid during the visit only.
  uint64_t offset;            // Where the record starts in its file.
};

struct JournalScan {
  uint64_t records = 0;
  // Where the last good record ends: appends continue from here.
  uint64_t valid_end = 0;
  uint64_t file_size = 0;
  // Set when a torn tail (or, with truncate_corrupt, corruption) was cut:
  // what was dropped, from which offset.
  std::string dropped;
};

// Visits every good record of `path` in order. A torn tail stops the scan
// and is reported in `dropped`. A bad record with data after it is
// DataLoss naming the file and offset, unless `truncate_corrupt`, which
// stops there as for a torn tail. An error from `visit` stops the scan and
// is returned, annotated with the record's offset; DataLoss from it (a
// record that does not replay) is corruption like a bad CRC.
absl::StatusOr<JournalScan> ScanJournal(
    const std::string& path, bool truncate_corrupt,
    absl::FunctionRef<absl::Status(const JournalRecord&)> visit);

class JournalWriter {
 public:
  // A new file at `path` (which must not exist) holding `first` (a kWorld
  // record), written and synced with its directory before this returns.
  static absl::StatusOr<std::unique_ptr<JournalWriter>> Create(
      const std::string& path, FsyncPolicy policy, absl::string_view first);
  // The file at `path`, cut to `valid_end` (ScanJournal's), appended to.
  static absl::StatusOr<std::unique_ptr<JournalWriter>> Reopen(
      const std::string& path, FsyncPolicy policy, uint64_t valid_end);
  ~JournalWriter();

  const std::string& path() const { return path_; }
  // Bytes in the file.
  uint64_t end() const { return end_.load(std::memory_order_acquire); }

  // Appends `record` (EncodeRecord's) with one write. On any error nothing
  // of it stays in the file, and the error is UNAVAILABLE saying why (a full
  // disk: ENOSPC). The journal can be appended to again once the cause is
  // gone, unless cutting the partial record off failed too, or a sync
  // failed: then it is broken, and refuses every append.
  absl::Status Append(absl::string_view record);

  // kAlways: returns once the file is on disk at least up to `end`, by an
  // fdatasync of its own or one another caller is making (group commit).
  // Otherwise returns at once. UNAVAILABLE when the sync failed: the journal
  // is broken then.
  absl::Status WaitDurable(uint64_t end);
  // Syncs what was appended and not yet synced (the each-second sync, and
  // before a file is closed for good).
  absl::Status Sync();
  // Set once an append could not be undone or a sync failed.
  absl::Status broken() const;

 private:
  JournalWriter(std::string path, int fd, FsyncPolicy policy, uint64_t end);
  absl::Status SyncTo(uint64_t end);
  // Marks the journal broken (see Append) for `why`; returns the status
  // every later append gets.
  absl::Status Break(absl::string_view why);
  absl::Status BreakLocked(absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);

  const std::string path_;
  const int fd_;
  const FsyncPolicy policy_;
  std::atomic<uint64_t> end_;

  mutable absl::Mutex sync_mu_;
  uint64_t synced_end_ ABSL_GUARDED_BY(sync_mu_);
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(sync_mu_);
  std::atomic<bool> is_broken_ = false;  // broken_ is not OK.
};

// fsync of a directory: makes a file created, renamed or removed in it
// durable.
absl::Status SyncDirectory(const std::string& path);

}  // namespace xform::server

#endif  // XFORM_SERVER_STORAGE_JOURNAL_H_
