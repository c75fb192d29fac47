// Copyright 2026 The xform Authors.

#include "server/storage/snapshot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/storage/crc32c.h"
#include "server/storage/journal.h"

namespace xform::server {
namespace {

static_assert(std::endian::native == std::endian::little);
static_assert(sizeof(glm::vec3) == 12 && sizeof(glm::quat) == 16);
constexpr absl::string_view kMagic("XFSNAP1\n", 8);

// Writes whole buffers to a descriptor, keeping the CRC of all written.
class CheckedWriter {
 public:
  explicit CheckedWriter(int fd) : fd_(fd) {}
  bool Write(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    crc_ = ExtendCrc32c(crc_, absl::string_view(p, n));
    while (n > 0) {
      const ssize_t k = write(fd_, p, n);
      if (k < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  template <typename T>
  bool Put(T value) {
    return Write(&value, sizeof value);
  }
  template <typename Vector>
  bool Column(const Vector& column) {
    return Write(column.data(),
                 column.size() * sizeof(typename Vector::value_type));
  }
  uint32_t crc() const { return crc_; }

 private:
  const int fd_;
  uint32_t crc_ = 0;
};

class CheckedReader {
 public:
  explicit CheckedReader(int fd) : fd_(fd) {}
  bool Read(void* data, size_t n) {
    auto* p = static_cast<char*>(data);
    char* const start = p;
    size_t left = n;
    while (left > 0) {
      const ssize_t k = read(fd_, p, left);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      p += k;
      left -= static_cast<size_t>(k);
    }
    crc_ = ExtendCrc32c(crc_, absl::string_view(start, n));
    return true;
  }
  template <typename T>
  bool Get(T* value) {
    return Read(value, sizeof *value);
  }
  template <typename Vector>
  bool Column(size_t n, Vector* column) {
    column->resize(n);
    return Read(column->data(), n * sizeof(typename Vector::value_type));
  }
  uint32_t crc() const { return crc_; }

 private:
  const int fd_;
  uint32_t crc_ = 0;
};

}  // namespace

absl::Status WriteSnapshotFile(const std::string& path, absl::string_view info,
                               const WorldImage& image) {
  const std::string temporary = path + ".tmp";
  const int fd =
      open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", temporary, ": ", std::strerror(errno)));
  }
  CheckedWriter out(fd);
  bool ok = out.Write(kMagic.data(), kMagic.size()) &&
            out.Put(static_cast<uint32_t>(info.size())) &&
            out.Write(info.data(), info.size()) && out.Put(image.frame) &&
            out.Put(static_cast<uint64_t>(image.size())) &&
            out.Column(image.entity) && out.Column(image.parent) &&
            out.Column(image.position) && out.Column(image.rotation) &&
            out.Column(image.scale);
  ok = ok && out.Put(out.crc()) && fdatasync(fd) == 0;
  const int error = errno;
  close(fd);
  if (!ok) {
    unlink(temporary.c_str());
    return absl::UnavailableError(absl::StrCat(
        "cannot write snapshot ", temporary, ": ", std::strerror(error),
        error == ENOSPC ? " (the disk is full)" : ""));
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    unlink(temporary.c_str());
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", temporary, ": ", std::strerror(rename_error)));
  }
  return SyncDirectory(path.substr(0, path.rfind('/')));
}

absl::Status ReadSnapshotFile(const std::string& path, std::string* info,
                              WorldImage* image) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  fstat(fd, &st);
  const auto size = static_cast<uint64_t>(st.st_size);
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  CheckedReader in(fd);
  const auto bad = [&](absl::string_view why) {
    close(fd);
    return absl::DataLossError(
        absl::StrCat("snapshot ", path, " is not whole: ", why));
  };
  char magic[8];
  uint32_t info_size = 0;
  if (!in.Read(magic, sizeof magic) || kMagic != absl::string_view(magic, 8)) {
    return bad("not a snapshot file of this version");
  }
  if (!in.Get(&info_size) || info_size > size) return bad("a bad header");
  info->resize(info_size);
  uint64_t n = 0;
  if (!in.Read(info->data(), info_size) || !in.Get(&image->frame) ||
      !in.Get(&n)) {
    return bad("a bad header");
  }
  constexpr uint64_t kEntityBytes = 8 + 4 + 12 + 16 + 12;
  const uint64_t header = kMagic.size() + 4 + info_size + 8 + 8;
  if (size < header + 4 || n > (size - header) / kEntityBytes ||
      header + n * kEntityBytes + 4 != size) {
    return bad(absl::StrCat(size, " bytes for ", n, " entities"));
  }
  if (!in.Column(n, &image->entity) || !in.Column(n, &image->parent) ||
      !in.Column(n, &image->position) || !in.Column(n, &image->rotation) ||
      !in.Column(n, &image->scale)) {
    return bad("cut short");
  }
  const uint32_t want = in.crc();
  uint32_t crc = 0;
  if (!in.Get(&crc) || crc != want) return bad("its CRC does not match");
  close(fd);
  return absl::OkStatus();
}

namespace {

template <typename T>
void Append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename Vector>
void AppendColumn(std::string& out, const Vector& column) {
  out.append(reinterpret_cast<const char*>(column.data()),
             column.size() * sizeof(typename Vector::value_type));
}

template <typename Vector>
void TakeColumn(absl::string_view& in, size_t n, Vector* column) {
  const size_t bytes = n * sizeof(typename Vector::value_type);
  column->resize(n);
  std::memcpy(column->data(), in.data(), bytes);
  in.remove_prefix(bytes);
}

}  // namespace

std::string EncodeSnapshot(absl::string_view info, const WorldImage& image) {
  constexpr size_t kEntityBytes = 8 + 4 + 12 + 16 + 12;
  std::string out;
  out.reserve(kMagic.size() + 4 + info.size() + 16 +
              image.size() * kEntityBytes + 4);
  out.append(kMagic.data(), kMagic.size());
  Append(out, static_cast<uint32_t>(info.size()));
  out.append(info.data(), info.size());
  Append(out, image.frame);
  Append(out, static_cast<uint64_t>(image.size()));
  AppendColumn(out, image.entity);
  AppendColumn(out, image.parent);
  AppendColumn(out, image.position);
  AppendColumn(out, image.rotation);
  AppendColumn(out, image.scale);
  Append(out, ExtendCrc32c(0, out));
  return out;
}

absl::Status DecodeSnapshot(absl::string_view bytes, absl::string_view what,
                            std::string* info, WorldImage* image) {
  const auto bad = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("snapshot ", what, " is not whole: ", why));
  };
  constexpr uint64_t kEntityBytes = 8 + 4 + 12 + 16 + 12;
  if (bytes.size() < kMagic.size() + 4 + 16 + 4 ||
      bytes.substr(0, kMagic.size()) != kMagic) {
    return bad("not a snapshot of this version");
  }
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (crc != ExtendCrc32c(0, bytes.substr(0, bytes.size() - 4))) {
    return bad("its CRC does not match");
  }
  // The body, between the magic and the CRC.
  absl::string_view in =
      bytes.substr(kMagic.size(), bytes.size() - 4 - kMagic.size());
  uint32_t info_size = 0;
  std::memcpy(&info_size, in.data(), 4);
  in.remove_prefix(4);
  if (uint64_t{info_size} + 16 > in.size()) return bad("a bad header");
  info->assign(in.data(), info_size);
  in.remove_prefix(info_size);
  uint64_t n = 0;
  std::memcpy(&image->frame, in.data(), 8);
  std::memcpy(&n, in.data() + 8, 8);
  in.remove_prefix(16);
  if (n > in.size() / kEntityBytes || n * kEntityBytes != in.size()) {
    return bad(absl::StrCat(bytes.size(), " bytes for ", n, " entities"));
  }
  TakeColumn(in, n, &image->entity);
  TakeColumn(in, n, &image->parent);
  TakeColumn(in, n, &image->position);
  TakeColumn(in, n, &image->rotation);
  TakeColumn(in, n, &image->scale);
  return absl::OkStatus();
}

}  // namespace xform::server
