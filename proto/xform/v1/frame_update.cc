// Copyright 2026 The xform Authors.

#include "xform/v1/frame_update.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "google/protobuf/wire_format_lite.h"

namespace xform::v1 {

FrameUpdateWriter::FrameUpdateWriter(uint64_t frame, absl::Time time,
                                     int64_t stamp_nanos, size_t max_bytes,
                                     bool snapshot, uint32_t first_part)
    : frame_(frame),
      time_nanos_(absl::ToUnixNanos(time)),
      stamp_nanos_(stamp_nanos),
      max_bytes_(std::max<size_t>(max_bytes, kEntryBytes)),
      snapshot_(snapshot),
      first_part_(first_part) {}

void FrameUpdateWriter::Reserve(size_t n) {
  if (parts_.empty()) Start();
  n = std::min(n, room() / kEntryBytes);
  FrameUpdate& u = Part();
  const auto more = [](auto* field, size_t count) {
    field->Reserve(field->size() + static_cast<int>(count));
  };
  more(u.mutable_created(), n);
  more(u.mutable_created_parent(), n);
  more(u.mutable_moved(), n);
  more(u.mutable_moved_world(), 12 * n);
}

void FrameUpdateWriter::Destroyed(absl::Span<const EntityId> entities) {
  while (!entities.empty()) {
    const size_t n = Fit(kIdBytes, entities.size());
    Part().mutable_destroyed()->Add(entities.begin(), entities.begin() + n);
    entities.remove_prefix(n);
  }
}

void FrameUpdateWriter::Created(EntityId e, EntityId parent,
                                const Matrix3x4& world) {
  Fit(3 * kIdBytes + kMatrixBytes, 1);
  FrameUpdate& u = Part();
  u.add_created(e);
  u.add_created_parent(parent);
  u.add_moved(e);
  u.mutable_moved_world()->Add(world.m.begin(), world.m.end());
}

void FrameUpdateWriter::Reparented(EntityId e, EntityId parent) {
  Fit(2 * kIdBytes, 1);
  FrameUpdate& u = Part();
  u.add_reparented(e);
  u.add_reparented_parent(parent);
}

void FrameUpdateWriter::Moved(EntityId e, const Matrix3x4& world) {
  Moved({&e, 1}, world.m.data());
}

void FrameUpdateWriter::Moved(absl::Span<const EntityId> entities,
                              const float* worlds) {
  while (!entities.empty()) {
    const size_t n = Fit(kIdBytes + kMatrixBytes, entities.size());
    FrameUpdate& u = Part();
    u.mutable_moved()->Add(entities.begin(), entities.begin() + n);
    u.mutable_moved_world()->Add(worlds, worlds + 12 * n);
    entities.remove_prefix(n);
    worlds += 12 * n;
  }
}

std::vector<FrameUpdate> FrameUpdateWriter::Finish(uint64_t frames_skipped,
                                                   bool last) {
  if (parts_.empty()) Start();
  if (last) {
    parts_.back().set_last_part(true);
    parts_.back().set_frames_skipped(frames_skipped);
    if (snapshot_) parts_.back().set_snapshot_done(true);
  }
  std::vector<FrameUpdate> out;
  out.reserve(parts_.size());
  for (FrameUpdate& part : parts_) out.push_back(std::move(part));
  parts_.clear();
  return out;
}

size_t FrameUpdateWriter::Fit(size_t bytes, size_t count) {
  if (parts_.empty() || used_ + bytes > max_bytes_) Start();
  const size_t n = std::min(count, (max_bytes_ - used_) / bytes);
  used_ += n * bytes;
  return n;
}

void FrameUpdateWriter::Start() {
  FrameUpdate& u = parts_.emplace_back();
  u.set_frame(frame_);
  u.set_server_time_unix_nanos(time_nanos_);
  u.set_stamp_nanos(stamp_nanos_);
  u.set_snapshot(snapshot_);
  u.set_part(first_part_ + static_cast<uint32_t>(parts_.size() - 1));
  used_ = 0;
}

Matrix3x4 FrameUpdateReader::moved_world(int k) const {
  Matrix3x4 m;
  CopyMovedWorld(k, m);
  return m;
}

const std::byte* WireMovedWorlds::MatrixElsewhere(size_t begin,
                                                  MatrixBytes& scratch) const {
  if (cursor_ >= pieces_.size() || pieces_[cursor_].begin > begin) {
    cursor_ = 0;
  }
  while (pieces_[cursor_].begin + pieces_[cursor_].size <= begin) ++cursor_;
  const Piece& piece = pieces_[cursor_];
  size_t offset = begin - piece.begin;
  if (offset + sizeof(MatrixBytes) <= piece.size) return piece.data + offset;
  // Split between pieces: gathered.
  size_t copied = 0;
  for (size_t i = cursor_; copied < sizeof(MatrixBytes); ++i, offset = 0) {
    const size_t n =
        std::min(sizeof(MatrixBytes) - copied, pieces_[i].size - offset);
    std::memcpy(scratch.data() + copied, pieces_[i].data + offset, n);
    copied += n;
  }
  return scratch.data();
}

void WireMovedWorlds::CopyTo(float* to) const {
  std::byte* const out = reinterpret_cast<std::byte*>(to);
  for (const Piece& piece : pieces_) {
    std::memcpy(out + piece.begin, piece.data, piece.size);
  }
}

void WireMovedWorlds::AppendTo(
    google::protobuf::RepeatedField<float>& to) const {
  const int old_size = to.size();
  to.Resize(old_size + static_cast<int>(floats()), 0.0f);
  CopyTo(to.mutable_data() + old_size);
}

void WireMovedWorlds::Clear() {
  pieces_.clear();
  bytes_ = 0;
  cursor_ = 0;
}

void WireMovedWorlds::Add(const void* data, size_t size) {
  pieces_.push_back({static_cast<const std::byte*>(data), bytes_, size});
  bytes_ += size;
}

namespace {

absl::Status NotParsed() {
  return absl::DataLossError("a message that does not parse");
}

// A ZeroCopyInputStream's bytes in order, a byte or a run at a time.
class ByteScanner {
 public:
  explicit ByteScanner(google::protobuf::io::ZeroCopyInputStream& in)
      : in_(in) {}

  // False at the end.
  bool Next(uint8_t& byte) {
    if (at_ == end_ && !Refill()) return false;
    byte = *at_++;
    return true;
  }
  // The next `n` bytes, a run at a time, to `take(data, size)`; false
  // where the bytes end first.
  template <typename Sink>
  bool Take(size_t n, Sink take) {
    while (n > 0) {
      if (at_ == end_ && !Refill()) return false;
      const size_t run = std::min(n, static_cast<size_t>(end_ - at_));
      take(at_, run);
      at_ += run;
      n -= run;
    }
    return true;
  }
  // All the bytes left.
  template <typename Sink>
  void TakeRest(Sink take) {
    do {
      if (at_ != end_) take(at_, static_cast<size_t>(end_ - at_));
      at_ = end_;
    } while (Refill());
  }

 private:
  bool Refill() {
    const void* data;
    int size;
    while (in_.Next(&data, &size)) {
      if (size <= 0) continue;
      at_ = static_cast<const uint8_t*>(data);
      end_ = at_ + size;
      return true;
    }
    return false;
  }

  google::protobuf::io::ZeroCopyInputStream& in_;
  const uint8_t* at_ = nullptr;
  const uint8_t* end_ = nullptr;
};

}  // namespace

absl::Status ParseFrameUpdate(google::protobuf::io::ZeroCopyInputStream& in,
                              FrameUpdate& update) {
  return update.ParseFromZeroCopyStream(&in) ? absl::OkStatus() : NotParsed();
}

namespace {

using google::protobuf::internal::WireFormatLite;

// A field's bytes as read so far: its tag (5 at most) and its length or
// varint value (10).
struct FieldBytes {
  uint8_t bytes[15];
  int size = 0;

  // Reads a varint of at most `max` bytes into `v`, adding its bytes: 0
  // where the bytes end first, -1 where it is longer.
  int ReadVarint(ByteScanner& in, int max, uint64_t& v) {
    v = 0;
    for (int i = 0; i < max; ++i) {
      uint8_t byte;
      if (!in.Next(byte)) return 0;
      bytes[size++] = byte;
      v |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) return 1;
    }
    return -1;
  }
};

// What follows a field's tag, as protobuf reads it: its varint value or
// length into `field` and `length`, or, for a packed moved_world, its
// floats' bytes given to `take_moved` (`taken`). Whether the scan goes on
// past it.
template <typename TakeMoved>
absl::StatusOr<bool> ReadFieldBody(ByteScanner& bytes, uint32_t tag,
                                   FieldBytes& field, TakeMoved take_moved,
                                   uint64_t& length, bool& taken) {
  const bool moved_world = WireFormatLite::GetTagFieldNumber(tag) ==
                           FrameUpdate::kMovedWorldFieldNumber;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT:
      return field.ReadVarint(bytes, 10, length) == 1;
    case WireFormatLite::WIRETYPE_FIXED64:
      length = 8;
      return true;
    case WireFormatLite::WIRETYPE_FIXED32:
      length = 4;
      return !moved_world;
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      // As protobuf reads a size: under 2^31.
      const bool scanned =
          field.ReadVarint(bytes, 5, length) == 1 && length < (1u << 31);
      if (!scanned || !moved_world || length % 4 != 0) return scanned;
      if (!bytes.Take(length, take_moved)) return NotParsed();
      taken = true;
      return true;
    }
    default:  // Groups, and wire types that do not exist.
      return false;
  }
}

// What the scan took out came first: where more moved_world came after it
// stopped, the two are joined in that order.
void PutTakenFirst(FrameUpdate& update, WireMovedWorlds& worlds) {
  if (worlds.empty() || update.moved_world_size() == 0) return;
  google::protobuf::RepeatedField<float> all;
  worlds.AppendTo(all);
  all.Add(update.moved_world().begin(), update.moved_world().end());
  update.mutable_moved_world()->Swap(&all);
  worlds.Clear();
}

}  // namespace

// Scans the fields as protobuf's parser reads them (a tag of at most 5
// bytes, a length of at most 5 and under 2^31), taking out each packed
// moved_world and copying every other field's bytes as they are. What the
// scan does not read as protobuf surely would (a group, a wire type that
// does not exist, an unpacked moved_world, bytes that end mid-field), and
// everything after it, is copied as it is: protobuf's parse of the copy
// then decides, and takes any moved_world there. Taking a well-formed
// field out before that point changes nothing else the parse reads, so
// the result, and whether there is one, is the whole parse's.
absl::Status ParseLeavingMovedWorld(
    google::protobuf::io::ZeroCopyInputStream& in, FrameUpdate& update,
    WireMovedWorlds& worlds) {
  worlds.Clear();
  if constexpr (std::endian::native != std::endian::little) {
    return ParseFrameUpdate(in, update);
  }
  // The other fields' bytes (a raw 1M frame's ids: about 30 KB), in the
  // thread's room, kept unless a message made it big: grown from empty by
  // appends, each message reallocated and copied it several times.
  constexpr size_t kKeptRestBytes = size_t{1} << 20;
  thread_local std::string rest;
  rest.clear();
  auto copy = [](const uint8_t* data, size_t size) {
    rest.append(reinterpret_cast<const char*>(data), size);
  };
  auto add_moved = [&worlds](const uint8_t* data, size_t size) {
    worlds.Add(data, size);
  };
  ByteScanner bytes(in);
  FieldBytes field;
  while (true) {
    field.size = 0;
    uint64_t tag_read_as;
    const int tag_read = field.ReadVarint(bytes, 5, tag_read_as);
    if (tag_read == 0 && field.size == 0) break;  // The end, between fields.
    const auto tag = static_cast<uint32_t>(tag_read_as);  // As protobuf's.
    uint64_t length = 0;
    bool taken = false;
    bool scanned = tag_read == 1;  // False: the rest is copied as it is.
    if (scanned) {
      absl::StatusOr<bool> body =
          ReadFieldBody(bytes, tag, field, add_moved, length, taken);
      if (!body.ok()) return body.status();
      if (taken) continue;
      scanned = *body;
    }
    copy(field.bytes, static_cast<size_t>(field.size));
    if (!scanned) break;
    if (WireFormatLite::GetTagWireType(tag) !=
            WireFormatLite::WIRETYPE_VARINT &&
        !bytes.Take(length, copy)) {
      break;  // Cut short: protobuf refuses the copy.
    }
  }
  bytes.TakeRest(copy);
  const bool parsed = update.ParseFromString(rest);
  if (rest.capacity() > kKeptRestBytes) std::string().swap(rest);
  if (!parsed) return NotParsed();
  PutTakenFirst(update, worlds);
  return absl::OkStatus();
}

}  // namespace xform::v1
