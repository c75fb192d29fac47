// Copyright 2026 The xform Authors.
//
// MCAP files (foxglove/mcap's specification, version 0x30 "0"), written and
// read to the spec with Debian's libzstd and zlib's CRC-32: what
// `xformctl record` writes and `xformctl play` reads, and what Foxglove and
// @mcap/core's indexed reader open.
//
// McapWriter writes a seekable file: the header, each schema and channel
// once, then messages in zstd-compressed chunks (at most `chunk_bytes`
// uncompressed each), each chunk followed by one message index per channel;
// at Close(), the data end, a summary (schemas, channels, statistics, chunk
// indexes), summary offsets and the footer. Messages are expected in
// log-time order (a reader that seeks by time trusts the chunk indexes'
// ranges). Memory: one chunk. Every CRC is written.
//
// McapReader reads such a file front to back (any conforming writer's,
// chunked or not, zstd or uncompressed), calling back for each schema,
// channel and message in file order, and refuses what is not one: DATA_LOSS
// naming the offset for a bad magic, a record longer than the file, a
// chunk whose CRC or sizes do not match, a message on a channel not
// declared; a chunk larger than `max_chunk_bytes` uncompressed is refused
// RESOURCE_EXHAUSTED before it is decompressed.

#ifndef XFORM_TOOLS_MCAP_MCAP_H_
#define XFORM_TOOLS_MCAP_MCAP_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xform::mcap {

struct Schema {
  uint16_t id = 0;
  std::string name;      // "foxglove.FrameTransforms"
  std::string encoding;  // "protobuf", "jsonschema"
  std::string data;      // A FileDescriptorSet, a JSON schema, ...
};

struct Channel {
  uint16_t id = 0;
  uint16_t schema_id = 0;
  std::string topic;
  std::string message_encoding;  // "protobuf", "json"
  std::map<std::string, std::string> metadata;
};

struct Message {
  uint16_t channel_id = 0;
  uint32_t sequence = 0;
  uint64_t log_time = 0;  // Nanoseconds.
  uint64_t publish_time = 0;
  absl::string_view data;  // Valid during the callback.
};

struct WriterOptions {
  size_t chunk_bytes = size_t{1} << 20;  // Uncompressed, before a flush.
  // zstd's fastest level: a recording of the 100k world, 1% moving at
  // 60 Hz, costs 10.8% of a core at 1 and 13.7% at 3, for 3% more bytes
  // (docs/benchmarks.md).
  int zstd_level = 1;
  std::string profile;  // The header's; "" for none.
};

class McapWriter {
 public:
  // Creates (or truncates) `path` and writes the magic and header.
  static absl::StatusOr<std::unique_ptr<McapWriter>> Open(
      const std::string& path, WriterOptions options = {});
  ~McapWriter();  // Closes, if Close() was not called (errors lost).
  McapWriter(const McapWriter&) = delete;
  McapWriter& operator=(const McapWriter&) = delete;

  // Ids from 1, in the order added.
  absl::StatusOr<uint16_t> AddSchema(absl::string_view name,
                                     absl::string_view encoding,
                                     absl::string_view data);
  absl::StatusOr<uint16_t> AddChannel(
      uint16_t schema_id, absl::string_view topic,
      absl::string_view message_encoding,
      const std::map<std::string, std::string>& metadata = {});
  absl::Status Write(uint16_t channel_id, uint32_t sequence, uint64_t log_time,
                     uint64_t publish_time, absl::string_view data);
  // Flushes the last chunk and writes the summary and footer.
  absl::Status Close();

  uint64_t messages() const { return message_count_; }

 private:
  McapWriter(std::FILE* file, WriterOptions options);
  absl::Status Put(absl::string_view bytes);
  absl::Status FlushChunk();
  std::string StatisticsRecord() const;
  absl::Status WriteSummary();

  std::FILE* file_;
  const WriterOptions options_;
  uint64_t offset_ = 0;
  uint32_t data_crc_ = 0;  // Of every byte before the data end.
  absl::Status broken_;
  bool closed_ = false;
  std::vector<std::string> schema_records_;
  std::vector<std::string> channel_records_;
  std::vector<uint16_t> channel_ids_;
  // The open chunk: its records, its time range, and per channel the
  // (log time, offset in the records) of each message.
  std::string chunk_;
  uint64_t chunk_start_ = 0;
  uint64_t chunk_end_ = 0;
  std::map<uint16_t, std::vector<std::pair<uint64_t, uint64_t>>> chunk_index_;
  std::vector<std::string> chunk_index_records_;
  uint64_t message_count_ = 0;
  uint64_t message_start_ = 0;
  uint64_t message_end_ = 0;
  std::map<uint16_t, uint64_t> channel_counts_;
};

struct ReaderOptions {
  uint64_t max_chunk_bytes = uint64_t{256} << 20;  // Uncompressed.
};

struct ReadCallbacks {
  std::function<absl::Status(const Schema&)> on_schema;
  std::function<absl::Status(const Channel&)> on_channel;
  std::function<absl::Status(const Message&)> on_message;
};

// Reads `path` front to back; stops at the first callback that returns an
// error, and returns it.
absl::Status ReadMcap(const std::string& path, const ReadCallbacks& callbacks,
                      ReaderOptions options = {});

}  // namespace xform::mcap

#endif  // XFORM_TOOLS_MCAP_MCAP_H_
