// Copyright 2026 The xform Authors.

#include "server/edge/stream_reset_scan.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/http2_frames.h"

namespace xform::server {
namespace {

using ::xform::testing::Http2CallHeaders;
using ::xform::testing::Http2Frame;
using ::xform::testing::Http2RapidResets;

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

// A flood is counted wherever the unread bytes start, mid-frame included:
// every reset from the first whole one on.
TEST(StreamResetScanTest, AFloodIsCountedFromAnywhereInIt) {
  const std::string headers = Http2CallHeaders("/xform.v1.Xform/ListWorlds");
  uint32_t stream = 1;
  const std::string flood = Http2RapidResets(headers, 300, &stream);
  const size_t pair = flood.size() / 300;  // HEADERS, then a 13-byte reset.
  EXPECT_EQ(CountStreamResets(flood), 300);
  for (size_t start :
       {size_t{1}, size_t{5}, pair - 13, pair - 12, pair + 3, 50 * pair + 7}) {
    // The resets whose header starts at or after `start`.
    int expected = 0;
    for (size_t at = pair - 13; at < flood.size(); at += pair) {
      if (at >= start) ++expected;
    }
    EXPECT_EQ(CountStreamResets(flood.substr(start)), expected)
        << "from byte " << start;
    // And wherever they stop: a partial last frame is no break.
    EXPECT_EQ(CountStreamResets(flood.substr(start, flood.size() - start - 5)),
              expected - 1)
        << "from byte " << start;
  }
}

// An honest client's bytes hold no chain of resets: HEADERS and DATA
// frames, whatever the payloads, even payloads holding reset frames' exact
// bytes by the dozen (a chance match breaks off at the payload's next
// bytes). A single cancel among them is one.
TEST(StreamResetScanTest, HonestBytesHoldNoFlood) {
  std::mt19937 rng(7);
  const std::string headers = Http2CallHeaders("/xform.v1.Xform/Apply");
  uint32_t fake_stream = 1;
  const std::string fakes = Http2RapidResets("", 10, &fake_stream);
  std::string honest;
  for (uint32_t stream = 1; stream < 100; stream += 2) {
    honest += Http2Frame(1, 4, stream, headers);
    std::string payload = RandomBytes(rng, 2000);
    payload += fakes;                    // 10 resets' and 10 empty HEADERS'
    payload += std::string(20, '\xff');  // bytes, then no header's.
    payload += RandomBytes(rng, 3000);
    honest += Http2Frame(0, stream % 4 == 3 ? 1 : 0, stream, payload);
  }
  for (size_t start : {0, 1, 9, 4000, 100'000}) {
    EXPECT_EQ(CountStreamResets(honest.substr(start)), 0)
        << "from byte " << start;
  }
  honest += Http2Frame(3, 0, 101, std::string("\0\0\0\x08", 4));
  honest += Http2Frame(1, 4, 103, headers);
  EXPECT_EQ(CountStreamResets(honest), 1);
  // Random bytes, and none at all.
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(CountStreamResets(RandomBytes(rng, 65536)), 0);
  }
  EXPECT_EQ(CountStreamResets(""), 0);
  EXPECT_EQ(CountStreamResets(std::string(65536, '\0')), 0);
}

// Only a client's cancel counts: a reset with flags, another length, an
// even (server's) stream or the reserved bit set is not one.
TEST(StreamResetScanTest, OnlyAClientsResetCounts) {
  const std::string code("\0\0\0\x08", 4);
  EXPECT_EQ(CountStreamResets(Http2Frame(3, 0, 5, code)), 1);
  EXPECT_EQ(CountStreamResets(Http2Frame(3, 1, 5, code)), 0);
  EXPECT_EQ(CountStreamResets(Http2Frame(3, 0, 5, code + "x")), 0);
  EXPECT_EQ(CountStreamResets(Http2Frame(3, 0, 4, code)), 0);
  EXPECT_EQ(CountStreamResets(Http2Frame(3, 0, 0x80000005u, code)), 0);
}

}  // namespace
}  // namespace xform::server
