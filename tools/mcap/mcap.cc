// Copyright 2026 The xform Authors.

#include "tools/mcap/mcap.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace xform::mcap {
namespace {

static_assert(std::endian::native == std::endian::little,
              "MCAP is little-endian, as the machine's memory");

constexpr absl::string_view kMagic("\x89MCAP0\r\n", 8);

enum Opcode : uint8_t {
  kHeader = 0x01,
  kFooter = 0x02,
  kSchema = 0x03,
  kChannel = 0x04,
  kMessage = 0x05,
  kChunk = 0x06,
  kMessageIndex = 0x07,
  kChunkIndex = 0x08,
  kStatistics = 0x0B,
  kSummaryOffset = 0x0E,
  kDataEnd = 0x0F,
};
constexpr size_t kRecordHeaderBytes = 9;  // Opcode, u64 length.

// Appends little-endian values and MCAP's length-prefixed strings.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out_.append(raw, sizeof(T));
    return *this;
  }
  Bytes& String(absl::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
    return *this;
  }
  Bytes& Raw(absl::string_view s) {
    out_.append(s.data(), s.size());
    return *this;
  }
  const std::string& str() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string Record(Opcode opcode, absl::string_view content) {
  Bytes record;
  record.Put<uint8_t>(opcode).Put<uint64_t>(content.size()).Raw(content);
  return record.Take();
}

uint32_t Crc32(uint32_t crc, absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()),
            static_cast<uInt>(bytes.size())));
}

// Reads little-endian values and MCAP strings from a span, refusing to run
// past its end.
class Reader {
 public:
  Reader(absl::string_view bytes, uint64_t base) : bytes_(bytes), base_(base) {}

  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool Take(uint64_t n, absl::string_view* out) {
    if (bytes_.size() - at_ < n) return false;
    *out = bytes_.substr(at_, n);
    at_ += n;
    return true;
  }
  bool String(std::string* out) {
    uint32_t n = 0;
    absl::string_view s;
    if (!Get(&n) || !Take(n, &s)) return false;
    out->assign(s.data(), s.size());
    return true;
  }
  absl::string_view Rest() {
    absl::string_view rest = bytes_.substr(at_);
    at_ = bytes_.size();
    return rest;
  }
  bool done() const { return at_ == bytes_.size(); }
  uint64_t offset() const { return base_ + at_; }

 private:
  absl::string_view bytes_;
  size_t at_ = 0;
  uint64_t base_;
};

absl::Status Broken(uint64_t offset, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("not an MCAP file at byte ", offset, ": ", what));
}

}  // namespace

// ---- writing -------------------------------------------------------------

absl::StatusOr<std::unique_ptr<McapWriter>> McapWriter::Open(
    const std::string& path, WriterOptions options) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot write ", path));
  }
  std::unique_ptr<McapWriter> writer(new McapWriter(file, std::move(options)));
  Bytes header;
  header.String(writer->options_.profile).String("xform");
  if (absl::Status s = writer->Put(kMagic); !s.ok()) return s;
  if (absl::Status s = writer->Put(Record(kHeader, header.str())); !s.ok()) {
    return s;
  }
  return writer;
}

McapWriter::McapWriter(std::FILE* file, WriterOptions options)
    : file_(file), options_(std::move(options)) {}

McapWriter::~McapWriter() {
  if (!closed_) Close().IgnoreError();
}

absl::Status McapWriter::Put(absl::string_view bytes) {
  if (!broken_.ok()) return broken_;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    broken_ = absl::DataLossError("writing the MCAP file failed");
    return broken_;
  }
  data_crc_ = Crc32(data_crc_, bytes);
  offset_ += bytes.size();
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> McapWriter::AddSchema(absl::string_view name,
                                               absl::string_view encoding,
                                               absl::string_view data) {
  const auto id = static_cast<uint16_t>(schema_records_.size() + 1);
  Bytes schema;
  schema.Put<uint16_t>(id).String(name).String(encoding).String(data);
  schema_records_.push_back(Record(kSchema, schema.str()));
  if (absl::Status s = Put(schema_records_.back()); !s.ok()) return s;
  return id;
}

absl::StatusOr<uint16_t> McapWriter::AddChannel(
    uint16_t schema_id, absl::string_view topic,
    absl::string_view message_encoding,
    const std::map<std::string, std::string>& metadata) {
  const auto id = static_cast<uint16_t>(channel_records_.size() + 1);
  Bytes pairs;
  for (const auto& [key, value] : metadata) pairs.String(key).String(value);
  Bytes channel;
  channel.Put<uint16_t>(id)
      .Put<uint16_t>(schema_id)
      .String(topic)
      .String(message_encoding)
      .String(pairs.str());
  channel_records_.push_back(Record(kChannel, channel.str()));
  channel_ids_.push_back(id);
  if (absl::Status s = Put(channel_records_.back()); !s.ok()) return s;
  return id;
}

absl::Status McapWriter::Write(uint16_t channel_id, uint32_t sequence,
                               uint64_t log_time, uint64_t publish_time,
                               absl::string_view data) {
  if (channel_id == 0 || channel_id > channel_ids_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("no channel ", channel_id));
  }
  if (chunk_.empty()) chunk_start_ = chunk_end_ = log_time;
  chunk_start_ = std::min(chunk_start_, log_time);
  chunk_end_ = std::max(chunk_end_, log_time);
  chunk_index_[channel_id].emplace_back(log_time, chunk_.size());
  Bytes message;
  message.Put<uint16_t>(channel_id)
      .Put<uint32_t>(sequence)
      .Put<uint64_t>(log_time)
      .Put<uint64_t>(publish_time)
      .Raw(data);
  chunk_ += Record(kMessage, message.str());
  message_start_ =
      message_count_ == 0 ? log_time : std::min(message_start_, log_time);
  message_end_ = std::max(message_end_, log_time);
  ++message_count_;
  ++channel_counts_[channel_id];
  if (chunk_.size() >= options_.chunk_bytes) return FlushChunk();
  return broken_;
}

absl::Status McapWriter::FlushChunk() {
  if (chunk_.empty()) return broken_;
  std::string compressed(ZSTD_compressBound(chunk_.size()), '\0');
  const size_t size =
      ZSTD_compress(compressed.data(), compressed.size(), chunk_.data(),
                    chunk_.size(), options_.zstd_level);
  if (ZSTD_isError(size)) {
    return absl::InternalError(absl::StrCat("zstd: ", ZSTD_getErrorName(size)));
  }
  compressed.resize(size);
  Bytes chunk;
  chunk.Put<uint64_t>(chunk_start_)
      .Put<uint64_t>(chunk_end_)
      .Put<uint64_t>(chunk_.size())
      .Put<uint32_t>(Crc32(0, chunk_))
      .String("zstd")
      .Put<uint64_t>(compressed.size())
      .Raw(compressed);
  const uint64_t chunk_offset = offset_;
  if (absl::Status s = Put(Record(kChunk, chunk.str())); !s.ok()) return s;
  const uint64_t chunk_length = offset_ - chunk_offset;
  // One message index per channel, after the chunk.
  Bytes index_offsets;
  const uint64_t indexes_offset = offset_;
  for (const auto& [channel, entries] : chunk_index_) {
    Bytes pairs;
    for (const auto& [time, at] : entries) {
      pairs.Put<uint64_t>(time).Put<uint64_t>(at);
    }
    Bytes index;
    index.Put<uint16_t>(channel).String(pairs.str());
    index_offsets.Put<uint16_t>(channel).Put<uint64_t>(offset_);
    if (absl::Status s = Put(Record(kMessageIndex, index.str())); !s.ok()) {
      return s;
    }
  }
  Bytes chunk_index;
  chunk_index.Put<uint64_t>(chunk_start_)
      .Put<uint64_t>(chunk_end_)
      .Put<uint64_t>(chunk_offset)
      .Put<uint64_t>(chunk_length)
      .String(index_offsets.str())
      .Put<uint64_t>(offset_ - indexes_offset)
      .String("zstd")
      .Put<uint64_t>(compressed.size())
      .Put<uint64_t>(chunk_.size());
  chunk_index_records_.push_back(Record(kChunkIndex, chunk_index.str()));
  chunk_.clear();
  chunk_index_.clear();
  return absl::OkStatus();
}

absl::Status McapWriter::Close() {
  if (closed_) return broken_;
  absl::Cleanup close_file = [this] {
    closed_ = true;
    if (std::fclose(file_) != 0 && broken_.ok()) {
      broken_ = absl::DataLossError("closing the MCAP file failed");
    }
  };
  if (absl::Status s = FlushChunk(); !s.ok()) return s;
  Bytes data_end;
  data_end.Put<uint32_t>(data_crc_);
  if (absl::Status s = Put(Record(kDataEnd, data_end.str())); !s.ok()) {
    return s;
  }
  return WriteSummary();
}

std::string McapWriter::StatisticsRecord() const {
  Bytes counts;
  for (const auto& [channel, count] : channel_counts_) {
    counts.Put<uint16_t>(channel).Put<uint64_t>(count);
  }
  Bytes statistics;
  statistics.Put<uint64_t>(message_count_)
      .Put<uint16_t>(static_cast<uint16_t>(schema_records_.size()))
      .Put<uint32_t>(static_cast<uint32_t>(channel_records_.size()))
      .Put<uint32_t>(0)  // Attachments.
      .Put<uint32_t>(0)  // Metadata.
      .Put<uint32_t>(static_cast<uint32_t>(chunk_index_records_.size()))
      .Put<uint64_t>(message_start_)
      .Put<uint64_t>(message_end_)
      .String(counts.str());
  return Record(kStatistics, statistics.str());
}

absl::Status McapWriter::WriteSummary() {
  // Each group's records, then where each group is, then the footer; the
  // summary's CRC runs from its start through the footer's offsets.
  const uint64_t summary_start = offset_;
  uint32_t summary_crc = 0;
  std::vector<std::string> offsets;
  const auto group =
      [&](Opcode opcode,
          const std::vector<std::string>& records) -> absl::Status {
    if (records.empty()) return absl::OkStatus();
    const uint64_t start = offset_;
    for (const std::string& record : records) {
      summary_crc = Crc32(summary_crc, record);
      if (absl::Status s = Put(record); !s.ok()) return s;
    }
    Bytes offset;
    offset.Put<uint8_t>(opcode).Put<uint64_t>(start).Put<uint64_t>(offset_ -
                                                                   start);
    offsets.push_back(Record(kSummaryOffset, offset.str()));
    return absl::OkStatus();
  };
  for (const auto& [opcode, records] :
       std::initializer_list<std::pair<Opcode, std::vector<std::string>>>{
           {kSchema, schema_records_},
           {kChannel, channel_records_},
           {kChunkIndex, chunk_index_records_},
           {kStatistics, {StatisticsRecord()}}}) {
    if (absl::Status s = group(opcode, records); !s.ok()) return s;
  }
  const uint64_t summary_offset_start = offset_;
  for (const std::string& record : offsets) {
    summary_crc = Crc32(summary_crc, record);
    if (absl::Status s = Put(record); !s.ok()) return s;
  }
  Bytes footer;
  footer.Put<uint8_t>(kFooter)
      .Put<uint64_t>(8 + 8 + 4)
      .Put<uint64_t>(summary_start)
      .Put<uint64_t>(summary_offset_start);
  summary_crc = Crc32(summary_crc, footer.str());
  footer.Put<uint32_t>(summary_crc);
  if (absl::Status s = Put(footer.str()); !s.ok()) return s;
  return Put(kMagic);
}

// ---- reading -------------------------------------------------------------

namespace {

// What reading one file keeps: the channels declared so far.
struct ReadState {
  const ReadCallbacks& callbacks;
  const ReaderOptions& options;
  std::map<uint16_t, Channel> channels;
  bool ended = false;
};

absl::Status ReadRecords(absl::string_view bytes, uint64_t base, bool in_chunk,
                         ReadState& state);

absl::Status OnSchema(Reader& r, uint64_t at, ReadState& state) {
  Schema schema;
  if (!r.Get(&schema.id) || !r.String(&schema.name) ||
      !r.String(&schema.encoding) || !r.String(&schema.data)) {
    return Broken(at, "a short schema record");
  }
  return state.callbacks.on_schema ? state.callbacks.on_schema(schema)
                                   : absl::OkStatus();
}

absl::Status OnChannel(Reader& r, uint64_t at, ReadState& state) {
  Channel channel;
  std::string pairs;
  if (!r.Get(&channel.id) || !r.Get(&channel.schema_id) ||
      !r.String(&channel.topic) || !r.String(&channel.message_encoding) ||
      !r.String(&pairs)) {
    return Broken(at, "a short channel record");
  }
  Reader metadata(pairs, 0);
  while (!metadata.done()) {
    std::string key, value;
    if (!metadata.String(&key) || !metadata.String(&value)) {
      return Broken(at, "a channel's metadata runs past its end");
    }
    channel.metadata[key] = value;
  }
  state.channels[channel.id] = channel;
  return state.callbacks.on_channel ? state.callbacks.on_channel(channel)
                                    : absl::OkStatus();
}

absl::Status OnMessage(Reader& r, uint64_t at, ReadState& state) {
  Message message;
  if (!r.Get(&message.channel_id) || !r.Get(&message.sequence) ||
      !r.Get(&message.log_time) || !r.Get(&message.publish_time)) {
    return Broken(at, "a short message record");
  }
  if (!state.channels.contains(message.channel_id)) {
    return Broken(at, absl::StrCat("a message on channel ", message.channel_id,
                                   ", which no record declared"));
  }
  message.data = r.Rest();
  return state.callbacks.on_message ? state.callbacks.on_message(message)
                                    : absl::OkStatus();
}

// A chunk's records, decompressed and checked, then read.
absl::Status OnChunk(Reader& r, uint64_t at, ReadState& state) {
  uint64_t start = 0, end = 0, size = 0, compressed_size = 0;
  uint32_t crc = 0;
  std::string compression;
  absl::string_view compressed;
  if (!r.Get(&start) || !r.Get(&end) || !r.Get(&size) || !r.Get(&crc) ||
      !r.String(&compression) || !r.Get(&compressed_size) ||
      !r.Take(compressed_size, &compressed)) {
    return Broken(at, "a short chunk record");
  }
  if (size > state.options.max_chunk_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the chunk at byte ", at, " holds ", size,
        " bytes uncompressed, more than ", state.options.max_chunk_bytes));
  }
  std::string records;
  if (compression.empty()) {
    if (compressed.size() != size) {
      return Broken(at, "an uncompressed chunk of the wrong size");
    }
    records.assign(compressed.data(), compressed.size());
  } else if (compression == "zstd") {
    records.resize(size);
    const size_t got = ZSTD_decompress(records.data(), size, compressed.data(),
                                       compressed.size());
    if (ZSTD_isError(got) || got != size) {
      return Broken(at, "a chunk that does not decompress to its size");
    }
  } else {
    return absl::UnimplementedError(
        absl::StrCat("the chunk at byte ", at, " is compressed with '",
                     compression, "' (only zstd and none are read)"));
  }
  if (crc != 0 && Crc32(0, records) != crc) {
    return Broken(at, "a chunk whose CRC does not match");
  }
  return ReadRecords(records, 0, /*in_chunk=*/true, state);
}

// The records of one span (the file's data, or a chunk's), in order.
absl::Status ReadRecords(absl::string_view bytes, uint64_t base, bool in_chunk,
                         ReadState& state) {
  Reader records(bytes, base);
  while (!records.done()) {
    const uint64_t at = records.offset();
    uint8_t opcode = 0;
    uint64_t length = 0;
    absl::string_view content;
    if (!records.Get(&opcode) || !records.Get(&length) ||
        !records.Take(length, &content)) {
      return Broken(at, "a record runs past its end");
    }
    Reader r(content, at + kRecordHeaderBytes);
    absl::Status status;
    switch (opcode) {
      case kSchema:
        status = OnSchema(r, at, state);
        break;
      case kChannel:
        status = OnChannel(r, at, state);
        break;
      case kMessage:
        status = OnMessage(r, at, state);
        break;
      case kChunk:
        status =
            in_chunk ? Broken(at, "a chunk in a chunk") : OnChunk(r, at, state);
        break;
      case kDataEnd:
        if (in_chunk) return Broken(at, "a data end in a chunk");
        state.ended = true;
        return absl::OkStatus();
      default:
        break;  // Indexes, attachments, metadata: not needed front to back.
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadMcap(const std::string& path, const ReadCallbacks& callbacks,
                      ReaderOptions options) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::string bytes;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    bytes.append(buffer, n);
  }
  std::fclose(file);
  if (!absl::StartsWith(bytes, kMagic)) {
    return Broken(0, "no MCAP magic");
  }
  ReadState state{callbacks, options};
  if (absl::Status s =
          ReadRecords(absl::string_view(bytes).substr(kMagic.size()),
                      kMagic.size(), /*in_chunk=*/false, state);
      !s.ok()) {
    return s;
  }
  if (!state.ended) {
    return Broken(bytes.size(), "no data end: a truncated file");
  }
  return absl::OkStatus();
}

}  // namespace xform::mcap
