// Copyright 2026 The xform Authors.

#include "server/edge/stream_reset_scan.h"

#include <cstddef>
#include <cstdint>

namespace xform::server {
namespace {

constexpr size_t kHeaderBytes = 9;
// gRPC's SETTINGS_MAX_FRAME_SIZE: no client may send a larger frame.
constexpr uint32_t kMaxFrameBytes = 16 * 1024;
constexpr uint8_t kRstStream = 3;
constexpr uint8_t kLastFrameType = 9;  // CONTINUATION (RFC 9113, section 6).

struct Header {
  uint32_t length;
  uint8_t type;
  uint8_t flags;
  uint32_t stream;  // With its reserved bit.
};

Header ReadHeader(const unsigned char* p) {
  return {.length = uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2],
          .type = p[3],
          .flags = p[4],
          .stream = uint32_t{p[5]} << 24 | uint32_t{p[6]} << 16 |
                    uint32_t{p[7]} << 8 | p[8]};
}

// An RST_STREAM as a client sends one: it ends one of its own streams.
bool IsReset(const Header& h) {
  return h.type == kRstStream && h.length == 4 && h.flags == 0 &&
         (h.stream & 1) == 1 && (h.stream >> 31) == 0;
}

// A header a client may send: a known type, its length within the frame
// size, the reserved bit clear.
bool IsWellFormed(const Header& h) {
  return h.type <= kLastFrameType && h.length <= kMaxFrameBytes &&
         (h.stream >> 31) == 0;
}

}  // namespace

int CountStreamResets(absl::string_view bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  size_t at = 0;  // Where to look for a reset that starts a chain.
  while (at + kHeaderBytes <= size) {
    if (!IsReset(ReadHeader(data + at))) {
      ++at;
      continue;
    }
    int resets = 0;
    size_t frame = at;
    while (frame + kHeaderBytes <= size) {
      const Header h = ReadHeader(data + frame);
      if (!IsWellFormed(h)) break;
      if (IsReset(h)) ++resets;
      frame += kHeaderBytes + h.length;
    }
    if (frame + kHeaderBytes > size) return resets;  // It reached the end.
    // A chance match, or a chain a bad header cut: the search goes on from
    // the bad header, so nothing is walked twice. (A real chain that a chance
    // match's ran across is found again at its next reset after the break;
    // the resets before it are not counted.)
    at = frame;
  }
  return 0;
}

}  // namespace xform::server
