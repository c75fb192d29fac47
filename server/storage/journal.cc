// Copyright 2026 The xform Authors.

#include "server/storage/journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/storage/crc32c.h"
#include "xform/v1/wire.h"

namespace xform::server {

absl::Status ReplayBatch(absl::string_view batch, World& world,
                         WorldNames& names, std::string* write_id,
                         int64_t* newest_stamp) {
  v1::ApplyRequest request;
  if (!request.ParseFromArray(batch.data(), static_cast<int>(batch.size()))) {
    return absl::DataLossError("a batch that does not parse");
  }
  if (write_id != nullptr) *write_id = request.write_id();
  if (newest_stamp != nullptr) {
    *newest_stamp = std::max(*newest_stamp, request.stamp_nanos());
  }
  absl::StatusOr<std::vector<Command>> commands =
      v1::ToCommands(request, std::numeric_limits<size_t>::max());
  absl::StatusOr<WorldNames::Prepared> named =
      names.Prepare(request, world, std::numeric_limits<size_t>::max());
  absl::Status applied = !commands.ok() ? commands.status()
                         : !named.ok()  ? named.status()
                                        : world.Apply(*commands);
  if (!applied.ok()) {
    return absl::DataLossError(
        absl::StrCat("a logged batch no longer applies: ", applied.message()));
  }
  names.Commit(*named, world);
  return absl::OkStatus();
}
namespace {

// The formats are little-endian; so is every machine xformd runs on.
static_assert(std::endian::native == std::endian::little);
template <typename T>
T Load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}
template <typename T>
void Store(char* p, T value) {
  std::memcpy(p, &value, sizeof value);
}

std::string ErrnoText(int error) { return std::strerror(error); }

absl::Status Unavailable(const std::string& path, absl::string_view what,
                         int error) {
  return absl::UnavailableError(
      absl::StrCat("journal ", path, ": ", what, ": ", ErrnoText(error)));
}

// The CRC of a record: its type and frame (the header's last 9 bytes), then
// its payload.
uint32_t RecordCrc(const char* type_and_frame, absl::string_view payload) {
  return ExtendCrc32c(Crc32c(absl::string_view(type_and_frame, 9)), payload);
}

// Closes the descriptor on every path out of a scan.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::string EncodeRecord(RecordType type, uint64_t frame,
                         absl::string_view payload) {
  std::string out(kRecordHeaderBytes + payload.size(), '\0');
  char* p = out.data();
  Store<uint32_t>(p, static_cast<uint32_t>(payload.size()));
  p[8] = static_cast<char>(type);
  Store<uint64_t>(p + 9, frame);
  std::memcpy(p + kRecordHeaderBytes, payload.data(), payload.size());
  Store<uint32_t>(p + 4, RecordCrc(p + 8, payload));
  Store<uint32_t>(p + 17, Crc32c(absl::string_view(p, 17)));
  return out;
}

namespace {

// A file mapped read-only, whole (populated at once: faulting a big journal
// in page by page costs more than reading it), unmapped on every path out
// of a scan.
class MappedFile {
 public:
  // Null data for an empty file.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path) {
    Descriptor file{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (file.fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ", path, ": ", ErrnoText(errno)));
    }
    struct stat st {};
    if (fstat(file.fd, &st) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot stat ", path, ": ", ErrnoText(errno)));
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size == 0) return std::make_unique<MappedFile>(nullptr, 0);
    void* mapped =
        mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd, 0);
    if (mapped == MAP_FAILED) {
      return absl::UnavailableError(
          absl::StrCat("cannot map ", path, ": ", ErrnoText(errno)));
    }
    madvise(mapped, size, MADV_SEQUENTIAL);
    return std::make_unique<MappedFile>(static_cast<const char*>(mapped), size);
  }

  MappedFile(const char* data, uint64_t size) : data_(data), size_(size) {}
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
  }
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const char* const data_;
  const uint64_t size_;
};

// The record at `at`, checked, or why it is bad (`bad`), with where it
// claims to end (`next`): the end of the file when it is cut short, where
// it starts when its header cannot be trusted.
struct RecordAt {
  JournalRecord record{};
  std::string bad;
  uint64_t next = 0;
};
RecordAt ReadRecordAt(const char* data, uint64_t size, uint64_t at) {
  RecordAt found{.next = size};
  const uint64_t left = size - at;
  if (left < kRecordHeaderBytes) {
    found.bad = absl::StrCat("a record header cut short (", left, " bytes)");
    return found;
  }
  // A length that is wrong would read as a record cut short by the end of
  // the file: the header's own CRC tells the two apart.
  if (Load<uint32_t>(data + at + 17) !=
      Crc32c(absl::string_view(data + at, 17))) {
    found.bad = "a record header whose CRC does not match";
    found.next = at;
    return found;
  }
  const uint32_t length = Load<uint32_t>(data + at);
  const auto type = static_cast<uint8_t>(data[at + 8]);
  if (length > kMaxRecordPayload) {
    found.bad = absl::StrCat("a record length of ", length);
    found.next = at;
    return found;
  }
  if (length > left - kRecordHeaderBytes) {
    found.bad = absl::StrCat("a record of ", length, " bytes cut short at ",
                             left - kRecordHeaderBytes);
    return found;
  }
  found.next = at + kRecordHeaderBytes + length;
  const absl::string_view payload(data + at + kRecordHeaderBytes, length);
  if (RecordCrc(data + at + 8, payload) != Load<uint32_t>(data + at + 4)) {
    found.bad = "a record whose CRC does not match";
  } else if (type != static_cast<uint8_t>(RecordType::kWorld) &&
             type != static_cast<uint8_t>(RecordType::kBatch)) {
    found.bad = absl::StrCat("a record of unknown type ", type);
  } else {
    found.record = {.type = static_cast<RecordType>(type),
                    .frame = Load<uint64_t>(data + at + 9),
                    .payload = payload,
                    .offset = at};
  }
  return found;
}

// Whether a bad record at `at`, claiming to end at `next`, is torn, what a
// crash in mid-write leaves: nothing but zeros (space the file system
// allocated but never got the data for) follows where it starts or where
// it claims to end.
bool IsTorn(const char* data, uint64_t size, uint64_t at, uint64_t next) {
  const auto zeros_from = [&](uint64_t from) {
    return std::all_of(data + std::min(from, size), data + size,
                       [](char c) { return c == 0; });
  };
  return next >= size || zeros_from(at) || (next > at && zeros_from(next));
}

}  // namespace

absl::StatusOr<JournalScan> ScanJournal(
    const std::string& path, bool truncate_corrupt,
    absl::FunctionRef<absl::Status(const JournalRecord&)> visit) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const char* data = (*file)->data();
  const uint64_t size = (*file)->size();
  JournalScan scan;
  scan.file_size = size;
  for (uint64_t at = 0; at < size;) {
    RecordAt found = ReadRecordAt(data, size, at);
    if (!found.bad.empty()) {
      const bool torn = IsTorn(data, size, at, found.next);
      const std::string where =
          absl::StrCat(path, " at offset ", at, " of ", size, ": ", found.bad);
      if (!torn && !truncate_corrupt) {
        return absl::DataLossError(absl::StrCat(
            "journal corrupt: ", where,
            ", with more records after it; start with --recover=truncate to "
            "drop it and everything after it"));
      }
      scan.dropped = absl::StrCat(torn ? "a torn last record" : "corruption",
                                  " dropped (", size - at, " bytes): ", where);
      break;
    }
    if (absl::Status s = visit(found.record); !s.ok()) {
      const std::string where =
          absl::StrCat(path, " at offset ", at, ": ", s.message());
      if (!absl::IsDataLoss(s) || !truncate_corrupt) {
        return absl::Status(s.code(), where);
      }
      scan.dropped =
          absl::StrCat("corruption dropped (", size - at, " bytes): ", where);
      break;
    }
    ++scan.records;
    at = found.next;
    scan.valid_end = at;
  }
  return scan;
}

// ---------------------------------------------------------------------------

JournalWriter::JournalWriter(std::string path, int fd, FsyncPolicy policy,
                             uint64_t end)
    : path_(std::move(path)),
      fd_(fd),
      policy_(policy),
      end_(end),
      synced_end_(end) {}

JournalWriter::~JournalWriter() { close(fd_); }

absl::StatusOr<std::unique_ptr<JournalWriter>> JournalWriter::Create(
    const std::string& path, FsyncPolicy policy, absl::string_view first) {
  const int fd = open(path.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable(path, "cannot create", errno);
  std::unique_ptr<JournalWriter> writer(new JournalWriter(path, fd, policy, 0));
  if (absl::Status s = writer->Append(first); !s.ok()) return s;
  if (absl::Status s = writer->Sync(); !s.ok()) return s;
  if (absl::Status s = SyncDirectory(path.substr(0, path.rfind('/')));
      !s.ok()) {
    return s;
  }
  return writer;
}

absl::StatusOr<std::unique_ptr<JournalWriter>> JournalWriter::Reopen(
    const std::string& path, FsyncPolicy policy, uint64_t valid_end) {
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return Unavailable(path, "cannot open", errno);
  std::unique_ptr<JournalWriter> writer(
      new JournalWriter(path, fd, policy, valid_end));
  if (ftruncate(fd, static_cast<off_t>(valid_end)) != 0 || fdatasync(fd) != 0) {
    return Unavailable(path, "cannot cut off its torn tail", errno);
  }
  return writer;
}

absl::Status JournalWriter::broken() const {
  if (!is_broken_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&sync_mu_);
  return broken_;
}

absl::Status JournalWriter::Break(absl::string_view why) {
  absl::MutexLock lock(&sync_mu_);
  return BreakLocked(why);
}

absl::Status JournalWriter::BreakLocked(absl::string_view why) {
  if (broken_.ok()) {
    broken_ = absl::UnavailableError(absl::StrCat(
        "journal ", path_, ": ", why,
        "; the journal refuses writes until a snapshot starts a new one"));
    is_broken_.store(true, std::memory_order_release);
  }
  return broken_;
}

absl::Status JournalWriter::Append(absl::string_view record) {
  if (absl::Status s = broken(); !s.ok()) return s;
  const uint64_t start = end_.load(std::memory_order_relaxed);
  size_t written = 0;
  int error = 0;
  while (written < record.size()) {
    const ssize_t n =
        write(fd_, record.data() + written, record.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (error == 0) {
    end_.store(start + written, std::memory_order_release);
    return absl::OkStatus();
  }
  // Nothing of the record may stay: a later record after half of this one
  // would read as corruption.
  if (written > 0 && ftruncate(fd_, static_cast<off_t>(start)) != 0) {
    return Break(absl::StrCat("a write failed and could not be undone: ",
                              ErrnoText(errno)));
  }
  return absl::UnavailableError(
      absl::StrCat("journal ", path_, ": cannot write: ", ErrnoText(error),
                   error == ENOSPC ? " (the disk is full)" : "",
                   "; the batch was not applied"));
}

absl::Status JournalWriter::WaitDurable(uint64_t end) {
  if (policy_ != FsyncPolicy::kAlways) return broken();
  return SyncTo(end);
}

absl::Status JournalWriter::Sync() { return SyncTo(this->end()); }

absl::Status JournalWriter::SyncTo(uint64_t end) {
  absl::MutexLock lock(&sync_mu_);
  // Group commit: while one caller syncs, the others wait for it, and the
  // first of them to find its record still unsynced syncs for all.
  for (;;) {
    if (!broken_.ok()) return broken_;
    if (synced_end_ >= end) return absl::OkStatus();
    if (!syncing_) break;
    sync_mu_.Await(absl::Condition(
        +[](bool* syncing) { return !*syncing; }, &syncing_));
  }
  syncing_ = true;
  const uint64_t target = this->end();
  sync_mu_.Unlock();
  const int rc = fdatasync(fd_);
  const int error = errno;
  sync_mu_.Lock();
  syncing_ = false;
  if (rc != 0) {
    // After a failed fsync the kernel may have dropped the dirty pages:
    // what is on disk is unknown, so no later record may be trusted to it.
    return BreakLocked(absl::StrCat("fdatasync failed: ", ErrnoText(error)));
  }
  synced_end_ = std::max(synced_end_, target);
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open directory ", path, ": ", ErrnoText(errno)));
  }
  const int rc = fsync(fd);
  const int error = errno;
  close(fd);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot sync directory ", path, ": ", ErrnoText(error)));
  }
  return absl::OkStatus();
}

}  // namespace xform::server
