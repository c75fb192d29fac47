// Copyright 2026 The xform Authors.

#include "server/storage/storage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "server/base/log.h"
#include "server/storage/snapshot_file.h"
#include "xform/v1/wire.h"

namespace xform::server {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kWorldPrefix = "w_";
constexpr absl::string_view kJournalPrefix = "journal-";
constexpr absl::string_view kSnapshotPrefix = "snapshot-";
// How often the keeper looks for syncs and snapshots due.
constexpr absl::Duration kKeepInterval = absl::Milliseconds(250);

std::string FileName(absl::string_view prefix, uint64_t seq) {
  return absl::StrFormat("%s%016x", prefix, seq);
}

// The seq of a file named `prefix` + 16 hex digits; false for another name
// (a snapshot's .tmp, say).
bool ParseFileName(const std::string& name, absl::string_view prefix,
                   uint64_t* seq) {
  if (name.size() != prefix.size() + 16 || !absl::StartsWith(name, prefix)) {
    return false;
  }
  return absl::SimpleHexAtoi(absl::string_view(name).substr(prefix.size()),
                             seq);
}

absl::Status FsError(absl::string_view what, const std::string& path,
                     const std::error_code& error) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", error.message()));
}

// The files of one world's directory, by kind, in seq order.
struct WorldFiles {
  std::vector<uint64_t> journals;
  std::vector<uint64_t> snapshots;
};

absl::StatusOr<WorldFiles> ListWorldFiles(const std::string& dir) {
  WorldFiles files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    uint64_t seq = 0;
    if (ParseFileName(name, kJournalPrefix, &seq)) {
      files.journals.push_back(seq);
    } else if (ParseFileName(name, kSnapshotPrefix, &seq)) {
      files.snapshots.push_back(seq);
    } else {
      fs::remove(entry.path(), error);  // A snapshot's temporary.
    }
  }
  if (error) return FsError("cannot list", dir, error);
  std::sort(files.journals.begin(), files.journals.end());
  std::sort(files.snapshots.begin(), files.snapshots.end());
  return files;
}

}  // namespace

std::string DescribeDurability(const StorageOptions& options) {
  const char* fsync = options.fsync == FsyncPolicy::kAlways ? "always"
                      : options.fsync == FsyncPolicy::kNo   ? "no"
                                                            : "everysec";
  const std::string every =
      options.snapshot_every_bytes > 0
          ? absl::StrCat(options.snapshot_every_bytes, " journal bytes")
          : absl::FormatDuration(options.snapshot_every_time);
  return absl::StrCat("--fsync=", fsync, ", a snapshot every ", every);
}

absl::Status ParseSnapshotEvery(absl::string_view value,
                                StorageOptions* options) {
  options->snapshot_every_bytes = 0;
  options->snapshot_every_time = absl::InfiniteDuration();
  absl::Duration every;
  if (absl::ParseDuration(value, &every) && every > absl::ZeroDuration()) {
    options->snapshot_every_time = every;
    return absl::OkStatus();
  }
  const std::string lower = absl::AsciiStrToLower(value);
  absl::string_view number = lower;
  uint64_t unit = 1;
  for (const auto& [suffix, bytes] : {std::pair{"kib", uint64_t{1} << 10},
                                      {"mib", uint64_t{1} << 20},
                                      {"gib", uint64_t{1} << 30},
                                      {"kb", uint64_t{1000}},
                                      {"mb", uint64_t{1000000}},
                                      {"gb", uint64_t{1000000000}},
                                      {"b", uint64_t{1}}}) {
    if (absl::ConsumeSuffix(&number, suffix)) {
      unit = bytes;
      break;
    }
  }
  uint64_t count = 0;
  if (!absl::SimpleAtoi(number, &count) || count == 0 ||
      count > std::numeric_limits<uint64_t>::max() / unit) {
    return absl::InvalidArgumentError(
        "--snapshot_every takes journal bytes (64MiB, 500MB) or a time "
        "(300s, 10m)");
  }
  options->snapshot_every_bytes = count * unit;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

FileWorldLog::FileWorldLog(std::string dir, std::string stored_world,
                           const StorageOptions& options, uint64_t seq,
                           std::shared_ptr<JournalWriter> journal)
    : dir_(std::move(dir)),
      stored_world_(std::move(stored_world)),
      options_(options),
      seq_(seq),
      journal_(std::move(journal)),
      journal_start_(kRecordHeaderBytes + stored_world_.size()) {}

absl::StatusOr<WorldLog::Acknowledgement> FileWorldLog::Append(
    uint64_t frame, absl::string_view batch) {
  std::shared_ptr<JournalWriter> journal;
  {
    absl::MutexLock lock(&mu_);
    journal = journal_;
  }
  if (absl::Status s =
          journal->Append(EncodeRecord(RecordType::kBatch, frame, batch));
      !s.ok()) {
    return s;
  }
  const uint64_t end = journal->end();
  // On disk to `end`, by --fsync=always's rule (at once otherwise).
  return Acknowledgement([journal = std::move(journal), end]() {
    return journal->WaitDurable(end);
  });
}

absl::Status FileWorldLog::Sync() {
  std::shared_ptr<JournalWriter> journal;
  {
    absl::MutexLock lock(&mu_);
    journal = journal_;
  }
  return journal->Sync();
}

void FileWorldLog::SnapshotFailed(absl::Time now) {
  absl::MutexLock lock(&mu_);
  retry_after_ = now + kSnapshotRetryDelay;
}

uint64_t FileWorldLog::JournalEnd() const {
  absl::MutexLock lock(&mu_);
  return journal_->end();
}

bool FileWorldLog::Journaled() const {
  absl::MutexLock lock(&mu_);
  return journal_->end() > journal_start_ || !journal_->broken().ok();
}

bool FileWorldLog::SnapshotDue(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (now < retry_after_) return false;
  if (!journal_->broken().ok()) return true;
  const uint64_t journaled = journal_->end() - journal_start_;
  if (journaled == 0) return false;
  return (options_.snapshot_every_bytes > 0 &&
          journaled >= options_.snapshot_every_bytes) ||
         now - last_snapshot_ >= options_.snapshot_every_time;
}

absl::StatusOr<FileWorldLog::NextJournal> FileWorldLog::Prepare() {
  uint64_t seq;
  {
    absl::MutexLock lock(&mu_);
    seq = seq_ + 1;
  }
  const std::string path =
      absl::StrCat(dir_, "/", FileName(kJournalPrefix, seq));
  std::error_code ignored;
  fs::remove(path, ignored);  // Left by a snapshot that failed.
  absl::StatusOr<std::unique_ptr<JournalWriter>> next = JournalWriter::Create(
      path, options_.fsync, EncodeRecord(RecordType::kWorld, 0, stored_world_));
  if (!next.ok()) return next.status();
  NextJournal journal;
  journal.seq = seq;
  journal.next = *std::move(next);
  return journal;
}

void FileWorldLog::Switch(NextJournal& next) {
  absl::MutexLock lock(&mu_);
  next.previous = std::move(journal_);
  journal_ = next.next;
  seq_ = next.seq;
  last_snapshot_ = absl::Now();
}

absl::Status FileWorldLog::Finish(const NextJournal& next,
                                  const WorldImage& image,
                                  const std::string& stored) {
  // Until the snapshot is whole on disk, recovery needs the previous
  // journal: its tail goes to disk first (a no-op when it is broken: the
  // snapshot then replaces what it could not keep).
  next.previous->Sync().IgnoreError();
  const std::string path =
      absl::StrCat(dir_, "/", FileName(kSnapshotPrefix, next.seq));
  if (absl::Status s = WriteSnapshotFile(path, stored, image); !s.ok()) {
    return s;
  }
  absl::StatusOr<WorldFiles> files = ListWorldFiles(dir_);
  if (!files.ok()) return files.status();
  std::error_code error;
  for (uint64_t seq : files->journals) {
    if (seq < next.seq) {
      fs::remove(absl::StrCat(dir_, "/", FileName(kJournalPrefix, seq)), error);
    }
  }
  for (uint64_t seq : files->snapshots) {
    if (seq < next.seq) {
      fs::remove(absl::StrCat(dir_, "/", FileName(kSnapshotPrefix, seq)),
                 error);
    }
  }
  return SyncDirectory(dir_);
}

FileWorldLog::Copied FileWorldLog::CopyAndSwitch(SnapshotSource& world,
                                                 WorldImage& image,
                                                 NextJournal& next) {
  // (A batch taken back, which is not journaled, may still have moved
  // instances: the relocation count says so.)
  Copied copied;
  size_t half = 0;
  size_t size_then = 0;
  uint64_t journal_end = 0;
  uint64_t relocated = 0;
  world.WithWorldLocked([&](const World& w) {
    const absl::Time locked = absl::Now();
    size_then = w.size();
    half = size_then / 2;
    journal_end = JournalEnd();
    relocated = w.stats().relocated;
    w.CopyImage(&image, 0, half);
    copied.held = absl::Now() - locked;
  });
  world.WithWorldLocked([&](const World& w) {
    const absl::Time locked = absl::Now();
    if (JournalEnd() == journal_end && w.size() == size_then &&
        w.stats().relocated == relocated) {
      w.CopyImage(&image, half, w.size());
    } else {
      copied.whole_again = true;
      w.CopyImage(&image);
    }
    config::StoredWorld stored;
    stored.ParseFromString(stored_world_);
    PutNames(world, stored);
    stored.SerializeToString(&copied.stored);
    Switch(next);
    copied.held = std::max(copied.held, absl::Now() - locked);
  });
  return copied;
}

absl::Status FileWorldLog::Snapshot(SnapshotSource& world) {
  const absl::Time start = absl::Now();
  absl::StatusOr<NextJournal> next = Prepare();
  if (!next.ok()) return next.status();
  // Faulted in before the lock, with room to grow: copying into fresh
  // memory under the lock would cost its page faults there (2 ms a MB).
  WorldImage image;
  size_t size = 0;
  world.WithWorldLocked([&](const World& w) { size = w.size(); });
  image.Resize(size + size / 8 + 1024);
  const Copied copied = CopyAndSwitch(world, image, *next);
  if (absl::Status s = Finish(*next, image, copied.stored); !s.ok()) return s;
  Log('I', "world ", Quoted(world.name()), ": snapshot of ", image.size(),
      " entities at frame ", image.frame, " in ",
      absl::FormatDuration(absl::Now() - start), " (world locked ",
      absl::FormatDuration(copied.held), " at most",
      copied.whole_again ? ", copied whole: a batch came between the halves"
                         : "",
      ")");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

Storage::Storage(StorageOptions options, int lock_fd)
    : options_(std::move(options)), lock_fd_(lock_fd) {}

Storage::~Storage() {
  keeper_.reset();
  close(lock_fd_);
}

std::string Storage::WorldsDir() const { return options_.data_dir + "/worlds"; }

std::string Storage::WorldDir(absl::string_view name) const {
  return absl::StrCat(WorldsDir(), "/", kWorldPrefix, name);
}

absl::StatusOr<std::unique_ptr<Storage>> Storage::Open(StorageOptions options) {
  const std::string& root = options.data_dir;
  std::error_code error;
  for (const std::string& dir : {root, root + "/worlds", root + "/trash"}) {
    fs::create_directories(dir, error);
    if (error) return FsError("cannot create", dir, error);
  }
  const std::string lock_path = root + "/LOCK";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir ", root, " is in use by another xformd (",
                     lock_path, " is locked)"));
  }
  // Worlds deleted before a crash.
  for (const fs::directory_entry& entry :
       fs::directory_iterator(root + "/trash", error)) {
    fs::remove_all(entry.path(), error);
  }
  return std::unique_ptr<Storage>(new Storage(std::move(options), fd));
}

absl::StatusOr<std::shared_ptr<WorldLog>> Storage::CreateWorld(
    const config::StoredWorld& stored) {
  absl::MutexLock lock(&keep_mu_);
  const std::string worlds = WorldsDir();
  const std::string dir = WorldDir(stored.create().name());
  std::error_code error;
  fs::remove_all(dir, error);  // A create that failed half way.
  if (!fs::create_directory(dir, error) || error) {
    return FsError("cannot create", dir, error);
  }
  std::string bytes;
  stored.SerializeToString(&bytes);
  absl::StatusOr<std::unique_ptr<JournalWriter>> journal =
      JournalWriter::Create(absl::StrCat(dir, "/", FileName(kJournalPrefix, 0)),
                            options_.fsync,
                            EncodeRecord(RecordType::kWorld, 0, bytes));
  absl::Status synced = journal.ok() ? SyncDirectory(worlds) : journal.status();
  if (!synced.ok()) {
    fs::remove_all(dir, error);
    return synced;
  }
  auto log = std::make_shared<FileWorldLog>(dir, std::move(bytes), options_, 0,
                                            *std::move(journal));
  logs_[stored.create().name()] = log;
  return log;
}

absl::Status Storage::DeleteWorld(absl::string_view name) {
  absl::MutexLock lock(&keep_mu_);
  const std::string worlds = WorldsDir();
  const std::string dir = WorldDir(name);
  const std::string trash = absl::StrCat(options_.data_dir, "/trash/", name,
                                         ".", absl::ToUnixNanos(absl::Now()));
  std::error_code error;
  fs::rename(dir, trash, error);
  if (error) return FsError("cannot delete", dir, error);
  logs_.erase(name);
  if (absl::Status s = SyncDirectory(worlds); !s.ok()) return s;
  fs::remove_all(trash, error);  // Else the next start does it.
  return absl::OkStatus();
}

absl::Status Storage::Recover(
    absl::FunctionRef<absl::Status(RecoveredWorld)> take) {
  const std::string worlds = WorldsDir();
  std::error_code error;
  std::vector<std::string> dirs;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(worlds, error)) {
    if (absl::StartsWith(entry.path().filename().string(), kWorldPrefix)) {
      dirs.push_back(entry.path().string());
    }
  }
  if (error) return FsError("cannot list", worlds, error);
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& dir : dirs) {
    absl::StatusOr<RecoveredWorld> world = RecoverWorld(dir);
    if (absl::IsNotFound(world.status())) {
      Log('W', "recovery: ", dir,
          " holds no world (its create was never acknowledged): removed");
      fs::remove_all(dir, error);
      continue;
    }
    if (!world.ok()) return world.status();
    {
      absl::MutexLock lock(&keep_mu_);
      logs_[world->stored.create().name()] =
          std::static_pointer_cast<FileWorldLog>(world->log);
    }
    if (absl::Status s = take(*std::move(world)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

// The world as of its newest snapshot, into `recovered` (its stored record
// into `stored_bytes`); the journal it starts (0 with no snapshot).
absl::StatusOr<uint64_t> ReadNewestSnapshot(const std::string& dir,
                                            const WorldFiles& files,
                                            RecoveredWorld& recovered,
                                            std::string& stored_bytes) {
  if (files.snapshots.empty()) return 0;
  const uint64_t seq = files.snapshots.back();
  const std::string path =
      absl::StrCat(dir, "/", FileName(kSnapshotPrefix, seq));
  WorldImage image;
  if (absl::Status s = ReadSnapshotFile(path, &stored_bytes, &image); !s.ok()) {
    return s;
  }
  recovered.last_frame = image.frame;
  absl::StatusOr<World> world = World::FromImage(std::move(image));
  if (!world.ok()) {
    return absl::DataLossError(
        absl::StrCat("snapshot ", path, ": ", world.status().message()));
  }
  recovered.world = *std::move(world);
  if (!recovered.stored.ParseFromString(stored_bytes)) {
    return absl::DataLossError(
        absl::StrCat("snapshot ", path, ": its world record does not parse"));
  }
  if (recovered.stored.names_size() > 0) {
    TakeNames(recovered);
    recovered.stored.SerializeToString(&stored_bytes);
  }
  return seq;
}

// One journal record replayed into `recovered`: the first, the world's
// (kept in `stored_bytes` if no snapshot gave it), or a batch.
absl::Status Replay(const JournalRecord& record, bool first,
                    RecoveredWorld& recovered, std::string& stored_bytes) {
  if (first) {
    config::StoredWorld stored;
    if (record.type != RecordType::kWorld ||
        !stored.ParseFromArray(record.payload.data(),
                               static_cast<int>(record.payload.size()))) {
      return absl::DataLossError("the first record is not the world's");
    }
    if (stored_bytes.empty()) {
      stored_bytes = std::string(record.payload);
      recovered.stored = std::move(stored);
    }
    return absl::OkStatus();
  }
  if (record.type != RecordType::kBatch) {
    return absl::DataLossError("a world record after the first");
  }
  std::string write_id;
  if (absl::Status s =
          ReplayBatch(record.payload, recovered.world, recovered.names,
                      &write_id, &recovered.newest_stamp);
      !s.ok()) {
    return s;
  }
  recovered.last_frame = std::max(recovered.last_frame, record.frame);
  ++recovered.replayed;
  // A batch sent again after the restart applies once too.
  if (!write_id.empty()) {
    recovered.write_ids.emplace_back(std::move(write_id), record.frame);
    if (recovered.write_ids.size() > 2 * kRecentWrites) {
      recovered.write_ids.erase(
          recovered.write_ids.begin(),
          recovered.write_ids.begin() + static_cast<ptrdiff_t>(kRecentWrites));
    }
  }
  return absl::OkStatus();
}

// Where the journals replayed end: appends go on from there.
struct JournalTail {
  std::string path;  // Empty: no journal held a record.
  uint64_t seq = 0;
  uint64_t end = 0;
};

// Replays the journals from `first_journal` on into `recovered`, removing
// the ones before it and, after a corrupt record (truncate_corrupt), the
// ones after it.
absl::StatusOr<JournalTail> ReplayJournals(const std::string& dir,
                                           const WorldFiles& files,
                                           uint64_t first_journal,
                                           bool truncate_corrupt,
                                           RecoveredWorld& recovered,
                                           std::string& stored_bytes) {
  JournalTail tail;
  std::error_code error;
  bool stop = false;  // Corruption dropped the rest (--recover=truncate).
  for (uint64_t seq : files.journals) {
    const std::string path =
        absl::StrCat(dir, "/", FileName(kJournalPrefix, seq));
    if (seq < first_journal || stop) {
      // Earlier ones are leftovers; later ones follow a corrupt record.
      if (stop) {
        Log('E', "recovery: ", path, " dropped: it follows a corrupt record");
      }
      fs::remove(path, error);
      continue;
    }
    bool first = true;
    absl::StatusOr<JournalScan> scan =
        ScanJournal(path, truncate_corrupt, [&](const JournalRecord& record) {
          return Replay(record, std::exchange(first, false), recovered,
                        stored_bytes);
        });
    if (!scan.ok()) return scan.status();
    if (!scan->dropped.empty()) {
      const bool corrupt = scan->dropped.rfind("corruption", 0) == 0;
      Log(corrupt ? 'E' : 'W', "recovery: ", scan->dropped);
      stop = corrupt;
    }
    if (scan->records == 0) {
      // Its first record was torn: a snapshot's new journal that never
      // took a write, or a create never acknowledged.
      fs::remove(path, error);
      continue;
    }
    tail = {.path = path, .seq = seq, .end = scan->valid_end};
  }
  return tail;
}

}  // namespace

absl::StatusOr<RecoveredWorld> Storage::RecoverWorld(const std::string& dir) {
  absl::StatusOr<WorldFiles> files = ListWorldFiles(dir);
  if (!files.ok()) return files.status();
  RecoveredWorld recovered;
  std::string stored_bytes;
  absl::Time phase = absl::Now();
  absl::StatusOr<uint64_t> first_journal =
      ReadNewestSnapshot(dir, *files, recovered, stored_bytes);
  if (!first_journal.ok()) return first_journal.status();
  recovered.snapshot_time = absl::Now() - phase;
  phase = absl::Now();
  absl::StatusOr<JournalTail> tail =
      ReplayJournals(dir, *files, *first_journal, options_.truncate_corrupt,
                     recovered, stored_bytes);
  if (!tail.ok()) return tail.status();
  if (tail->path.empty() && files->snapshots.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, " holds no world"));
  }
  // Appends go on at the journal's end; or, for a snapshot whose journal is
  // gone, in a journal begun again.
  absl::StatusOr<std::unique_ptr<JournalWriter>> journal =
      tail->path.empty()
          ? JournalWriter::Create(
                absl::StrCat(dir, "/",
                             FileName(kJournalPrefix, *first_journal)),
                options_.fsync,
                EncodeRecord(RecordType::kWorld, 0, stored_bytes))
          : JournalWriter::Reopen(tail->path, options_.fsync, tail->end);
  if (!journal.ok()) return journal.status();
  recovered.log = std::make_shared<FileWorldLog>(
      dir, stored_bytes, options_,
      tail->path.empty() ? *first_journal : tail->seq, *std::move(journal));
  recovered.world.RestartFrames(recovered.last_frame + 1);
  recovered.replay_time = absl::Now() - phase;
  return recovered;
}

std::vector<std::pair<std::string, std::shared_ptr<FileWorldLog>>>
Storage::Logs() {
  return LiveLogs(logs_);
}

void Storage::StartKeeping(WorldOf world_of) {
  {
    absl::MutexLock lock(&keep_mu_);
    world_of_ = std::move(world_of);
    next_sync_ = absl::Now() + absl::Seconds(1);
  }
  keeper_ = std::make_unique<PeriodicThread>(
      "xform-storage", absl::Now() + kKeepInterval, [this] { return Keep(); });
}

absl::Time Storage::Keep() {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&keep_mu_);
  const bool sync =
      options_.fsync == FsyncPolicy::kEverySecond && now >= next_sync_;
  if (sync) next_sync_ = now + absl::Seconds(1);
  for (const auto& [name, log] : Logs()) {
    if (sync) {
      if (absl::Status s = log->Sync(); !s.ok()) {
        Log('E', "world ", Quoted(name), ": ", s.message());
      }
    }
    if (log->SnapshotDue(now)) SnapshotOf(name, *log);
  }
  return now + kKeepInterval;
}

void Storage::SnapshotOf(const std::string& name, FileWorldLog& log) {
  if (world_of_ == nullptr) return;
  const std::shared_ptr<SnapshotSource> world = world_of_(name);
  if (world == nullptr) return;  // Not served (yet, or any more).
  if (absl::Status s = log.Snapshot(*world); !s.ok()) {
    log.SnapshotFailed(absl::Now());
    Log('E', "world ", Quoted(name), ": snapshot failed: ", s.message(),
        "; trying again in ",
        absl::FormatDuration(FileWorldLog::kSnapshotRetryDelay));
  }
}

void Storage::SnapshotAll() {
  keeper_.reset();
  absl::MutexLock lock(&keep_mu_);
  for (const auto& [name, log] : Logs()) {
    if (log->Journaled()) SnapshotOf(name, *log);
  }
}

}  // namespace xform::server
