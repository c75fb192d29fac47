// Copyright 2026 The xform Authors.
//
// HTTP/2 frames written by hand, for tests that play a hostile client below
// gRPC: the frames of a rapid reset flood (CVE-2023-44487), streams opened
// and cancelled at once.

#ifndef XFORM_TESTS_HTTP2_FRAMES_H_
#define XFORM_TESTS_HTTP2_FRAMES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xform::testing {

// An HTTP/2 frame: its 9-byte header, then `payload`.
inline std::string Http2Frame(uint8_t type, uint8_t flags, uint32_t stream,
                              const std::string& payload) {
  const uint32_t length = payload.size();
  std::string frame = {
      static_cast<char>(length >> 16), static_cast<char>(length >> 8),
      static_cast<char>(length),       static_cast<char>(type),
      static_cast<char>(flags),        static_cast<char>(stream >> 24),
      static_cast<char>(stream >> 16), static_cast<char>(stream >> 8),
      static_cast<char>(stream)};
  return frame + payload;
}

// A header block for a gRPC call of `path` ("/xform.v1.Xform/ListWorlds"):
// literals never indexed, without Huffman coding, so the same block stands
// for every stream.
inline std::string Http2CallHeaders(const std::string& path) {
  std::string block;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {":method", "POST"},
           {":scheme", "http"},
           {":authority", "xformd"},
           {":path", path},
           {"content-type", "application/grpc"},
           {"te", "trailers"}}) {
    block += '\x10';
    block += static_cast<char>(name.size());
    block += name;
    block += static_cast<char>(value.size());
    block += value;
  }
  return block;
}

// `count` streams from `*stream` on (odd: a client's), each opened with
// `headers` (HEADERS, END_HEADERS) and cancelled at once (RST_STREAM,
// CANCEL); `*stream` is left at the next one.
inline std::string Http2RapidResets(const std::string& headers, int count,
                                    uint32_t* stream) {
  const std::string cancel("\0\0\0\x08", 4);
  std::string frames;
  for (int k = 0; k < count; ++k, *stream += 2) {
    frames += Http2Frame(1, 4, *stream, headers);
    frames += Http2Frame(3, 0, *stream, cancel);
  }
  return frames;
}

}  // namespace xform::testing

#endif  // XFORM_TESTS_HTTP2_FRAMES_H_
