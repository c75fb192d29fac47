// Copyright 2026 The xform Authors.
//
// Storage: xformd's --data_dir, what makes acknowledged writes survive a
// crash. Each world has a directory of its own,
//
//   <data_dir>/worlds/w_<name>/journal-<seq>    (server/storage/journal.h)
//   <data_dir>/worlds/w_<name>/snapshot-<seq> (server/storage/snapshot_file.h)
//
// seq in 16 hex digits. snapshot-N is the world as it was when journal-N
// began; the world now is the newest snapshot (or, before the first one, an
// empty world) with every journal from its seq on replayed in order. After
// snapshot-N is on disk, every file before N is removed: disk use is one
// snapshot plus the journal since it.
//
// A journal per world, not one per server: a world's snapshot rotates its
// own journal without touching another's, a deleted world's files go at
// once, recovery reads each world alone, and one world's writers never wait
// for another's fsync.
//
// Creating a world is durable once its directory and its journal's first
// record (the world's name, mode, rate, owner) are synced; deleting one
// renames its directory into <data_dir>/trash (atomic, then synced) and
// removes it. A directory without one good record is a create that was
// never acknowledged, and recovery removes it. <data_dir>/LOCK is held
// (flock) while xformd runs: a second xformd on the same directory is
// refused.

#ifndef XFORM_SERVER_STORAGE_STORAGE_H_
#define XFORM_SERVER_STORAGE_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/periodic_thread.h"
#include "server/host/world_log.h"
#include "server/storage/journal.h"
#include "xform/config/storage.pb.h"
#include "xform/world.h"
#include "xform/world_image.h"

namespace xform::server {

struct StorageOptions {
  std::string data_dir;
  FsyncPolicy fsync = FsyncPolicy::kEverySecond;
  // A world is snapshotted once its journal holds this many bytes (0: never
  // for size), or once this long has passed since its last snapshot with
  // something journaled (infinite: never for time).
  uint64_t snapshot_every_bytes = uint64_t{64} << 20;
  absl::Duration snapshot_every_time = absl::InfiniteDuration();
  // --recover=truncate: a corrupt record drops the rest of its world's
  // journal (with an error logged) instead of refusing to start.
  bool truncate_corrupt = false;
};

// One world's journal and snapshots under --data_dir: the file
// implementation of WorldLog (world_log.h).
class FileWorldLog final : public WorldLog {
 public:
  FileWorldLog(std::string dir, std::string stored_world,
               const StorageOptions& options, uint64_t seq,
               std::shared_ptr<JournalWriter> journal);

  const std::string& dir() const { return dir_; }

  // Journals one applied batch (see JournalWriter::Append); acknowledged at
  // once, or, --fsync=always, once the record is on disk (batches waiting
  // together share one fdatasync).
  absl::StatusOr<Acknowledgement> Append(uint64_t frame,
                                         absl::string_view batch) override;
  // A snapshot is three steps, so that the world's lock is held only to
  // copy it:
  //   Prepare   outside the lock: the next journal, created and synced.
  //   Switch    under the lock, with the image copied: appends go to the
  //             next journal from here on.
  //   Finish    outside the lock: the previous journal synced, the snapshot
  //             written, the files before it removed.
  // The copy is in two halves, each under the lock, so that a writer waits
  // for half a copy at most (about 3 ms at 1M entities); the halves make
  // one image when no batch was journaled between them, else the second
  // hold copies it all.
  absl::Status Snapshot(SnapshotSource& world) override;

  // The each-second sync (--fsync=everysec).
  absl::Status Sync();
  // Whether the journal has grown past --snapshot_every since the last
  // snapshot, or is broken (a snapshot starts a new one); never within
  // kSnapshotRetryDelay of a snapshot that failed (a full disk).
  bool SnapshotDue(absl::Time now) const;
  void SnapshotFailed(absl::Time now);
  static constexpr absl::Duration kSnapshotRetryDelay = absl::Seconds(5);
  // Whether anything was journaled since the last snapshot (or the start).
  bool Journaled() const;

 private:
  struct NextJournal {
    uint64_t seq = 0;
    std::shared_ptr<JournalWriter> next;
    std::shared_ptr<JournalWriter> previous;
  };
  absl::StatusOr<NextJournal> Prepare();
  void Switch(NextJournal& next) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Finish(const NextJournal& next, const WorldImage& image,
                      const std::string& stored);
  // Bytes in the current journal: unchanged means no batch was journaled.
  uint64_t JournalEnd() const;
  // The world copied into `image` in two holds of its lock, the journal
  // switched in the second; how long the lock was held at most, and
  // whether the second hold had to copy it whole.
  struct Copied {
    absl::Duration held;
    bool whole_again = false;
    // stored_world_ with the world's names as the image has them.
    std::string stored;
  };
  Copied CopyAndSwitch(SnapshotSource& world, WorldImage& image,
                       NextJournal& next);

  const std::string dir_;
  const std::string stored_world_;  // A StoredWorld, serialized.
  const StorageOptions options_;

  mutable absl::Mutex mu_;
  uint64_t seq_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<JournalWriter> journal_ ABSL_GUARDED_BY(mu_);
  // The journal's size after its first record.
  uint64_t journal_start_ ABSL_GUARDED_BY(mu_);
  absl::Time last_snapshot_ ABSL_GUARDED_BY(mu_) = absl::Now();
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// --data_dir: every world's FileWorldLog, the file implementation of
// WorldLogStore (world_log.h).
class Storage final : public WorldLogStore {
 public:
  // Makes the directories as needed, takes the lock, empties the trash.
  static absl::StatusOr<std::unique_ptr<Storage>> Open(StorageOptions options);
  ~Storage() override;

  const StorageOptions& options() const { return options_; }

  // Rebuilds every world in the directory and hands each to `take`. The
  // first error stops it: DataLoss naming the file and offset for
  // corruption (unless truncate_corrupt), or what `take` returned.
  absl::Status Recover(
      absl::FunctionRef<absl::Status(RecoveredWorld)> take) override;
  // A new world's directory and first journal, durable when this returns.
  absl::StatusOr<std::shared_ptr<WorldLog>> CreateWorld(
      const config::StoredWorld& stored) override;
  // Removes a world's directory durably (see above).
  absl::Status DeleteWorld(absl::string_view name) override;
  // --fsync=everysec's sync each second, and --snapshot_every's snapshots,
  // on a thread of the store's, looked for every 250 ms.
  void StartKeeping(WorldOf world_of) override;
  void SnapshotAll() override;

 private:
  Storage(StorageOptions options, int lock_fd);
  // <data_dir>/worlds, and one world's directory in it (see above).
  std::string WorldsDir() const;
  std::string WorldDir(absl::string_view name) const;
  absl::StatusOr<RecoveredWorld> RecoverWorld(const std::string& dir);
  // The keeper's round: syncs and due snapshots; when to come again.
  absl::Time Keep();
  // The logs the store made that their worlds still hold, by name.
  std::vector<std::pair<std::string, std::shared_ptr<FileWorldLog>>> Logs()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keep_mu_);
  // Snapshots `log` of the world named `name`, if that world is still
  // served; logs a failure.
  void SnapshotOf(const std::string& name, FileWorldLog& log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(keep_mu_);

  const StorageOptions options_;
  const int lock_fd_;
  // Held across a snapshot, a create and a delete, so that a world is not
  // deleted (and maybe created again under its name) under its snapshot.
  absl::Mutex keep_mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<FileWorldLog>> logs_
      ABSL_GUARDED_BY(keep_mu_);
  WorldOf world_of_ ABSL_GUARDED_BY(keep_mu_);
  absl::Time next_sync_ ABSL_GUARDED_BY(keep_mu_) = absl::InfinitePast();
  std::unique_ptr<PeriodicThread> keeper_;
};

// The options as xformd's log states them: "--fsync=everysec,
// --snapshot_every=64MiB".
std::string DescribeDurability(const StorageOptions& options);

// "64MiB", "300s", "10m": --snapshot_every's value into `options`.
absl::Status ParseSnapshotEvery(absl::string_view value,
                                StorageOptions* options);

}  // namespace xform::server

#endif  // XFORM_SERVER_STORAGE_STORAGE_H_
