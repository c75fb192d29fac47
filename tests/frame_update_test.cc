// Copyright 2026 The xform Authors.
//
// ParseLeavingMovedWorld against protobuf's own parse: the same message,
// the same refusals, however the buffers cut the bytes.

#include "xform/v1/frame_update.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "xform/v1/xform.pb.h"

namespace xform::v1 {
namespace {

FrameUpdate SomeUpdate(int moved) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> value(-1e6f, 1e6f);
  FrameUpdate u;
  u.set_frame(42);
  u.set_server_time_unix_nanos(123456789);
  u.set_last_part(true);
  u.add_created(5);
  u.add_created_parent(0);
  u.add_destroyed(9);
  for (int k = 0; k < moved; ++k) {
    u.add_moved(1000 + 3 * k);
    for (int f = 0; f < 12; ++f) u.add_moved_world(value(random));
  }
  u.set_frames_skipped(2);
  return u;
}

// Parses `bytes` served `block` bytes at a time (-1: all at once).
absl::Status ParseInBlocks(const std::string& bytes, int block,
                           FrameUpdate& update, WireMovedWorlds& worlds) {
  google::protobuf::io::ArrayInputStream in(
      bytes.data(), static_cast<int>(bytes.size()), block);
  return ParseLeavingMovedWorld(in, update, worlds);
}

TEST(ParseLeavingMovedWorldTest, ReadsWhatAParseReadsWhereverTheBuffersCut) {
  const FrameUpdate sent = SomeUpdate(300);
  const std::string bytes = sent.SerializeAsString();
  FrameUpdate expected_rest = sent;
  expected_rest.clear_moved_world();
  for (int block : {1, 3, 7, 47, 48, 49, 100, 4096, -1}) {
    SCOPED_TRACE(block);
    FrameUpdate update;
    WireMovedWorlds worlds;
    ASSERT_TRUE(ParseInBlocks(bytes, block, update, worlds).ok());
    EXPECT_EQ(update.SerializeAsString(), expected_rest.SerializeAsString());
    ASSERT_EQ(worlds.floats(), 12u * 300);

    const FrameUpdateReader reader(update, &worlds);
    ASSERT_EQ(reader.moved_size(), 300);
    // In order, then out of order (the cursor goes back).
    for (int k : {0, 1, 2, 150, 299, 7, 0, 298}) {
      const Matrix3x4 m = reader.moved_world(k);
      EXPECT_EQ(0, std::memcmp(m.m.data(), sent.moved_world().data() + 12 * k,
                               sizeof(m.m)))
          << k;
    }
    for (int k = 0; k < 300; ++k) {
      Matrix3x4 m;
      reader.CopyMovedWorld(k, m);
      ASSERT_EQ(0, std::memcmp(m.m.data(), sent.moved_world().data() + 12 * k,
                               sizeof(m.m)))
          << k;
    }

    google::protobuf::RepeatedField<float> all;
    all.Add(1.5f);
    worlds.AppendTo(all);
    ASSERT_EQ(all.size(), 1 + 12 * 300);
    EXPECT_EQ(all[0], 1.5f);
    EXPECT_EQ(0, std::memcmp(all.data() + 1, sent.moved_world().data(),
                             4 * 12 * 300));
  }
}

TEST(ParseLeavingMovedWorldTest, UnpackedWorldsAreParsedInOrder) {
  // A peer may send a repeated float unpacked, and may split it: packed,
  // then unpacked, then packed again, concatenated.
  FrameUpdate first = SomeUpdate(2);
  FrameUpdate second;
  std::string unpacked;
  {
    google::protobuf::io::StringOutputStream stream(&unpacked);
    google::protobuf::io::CodedOutputStream out(&stream);
    for (float f = 1; f <= 12; ++f) {
      out.WriteTag((FrameUpdate::kMovedWorldFieldNumber << 3) | 5);
      out.WriteLittleEndian32(absl::bit_cast<uint32_t>(f));
    }
  }
  FrameUpdate third;
  for (int f = 0; f < 12; ++f) third.add_moved_world(-f);
  third.add_moved(7);
  third.add_moved(8);
  const std::string bytes =
      first.SerializeAsString() + unpacked + third.SerializeAsString();

  FrameUpdate expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ASSERT_EQ(expected.moved_world_size(), 48);
  for (int block : {5, -1}) {
    FrameUpdate update;
    WireMovedWorlds worlds;
    ASSERT_TRUE(ParseInBlocks(bytes, block, update, worlds).ok());
    EXPECT_TRUE(worlds.empty());
    EXPECT_EQ(update.SerializeAsString(), expected.SerializeAsString());
  }
}

TEST(ParseLeavingMovedWorldTest, RefusesWhatAParseRefuses) {
  const std::string bytes = SomeUpdate(3).SerializeAsString();
  std::vector<std::string> inputs;
  // Every cut: most do not parse.
  for (size_t n = 0; n < bytes.size(); ++n)
    inputs.push_back(bytes.substr(0, n));
  // Packed floats that are not a whole number of floats.
  std::string odd;
  odd.push_back((FrameUpdate::kMovedWorldFieldNumber << 3) | 2);
  odd.push_back(5);
  odd.append(5, '\x01');
  inputs.push_back(odd);
  // A length beyond the bytes.
  inputs.push_back(odd.substr(0, 4));
  // Wire types 6 and 7, and a field number 0.
  inputs.push_back(std::string("\x0e\x01", 2));
  inputs.push_back(std::string("\x0f\x01", 2));
  inputs.push_back(std::string("\x00\x01", 2));
  // A group that never ends.
  inputs.push_back(std::string("\xa3\x01", 2));
  // A varint of 10 bytes, and of 11.
  for (size_t continued : {9, 10}) {
    std::string varint(1, '\x08');
    varint.append(continued, '\xff');
    varint.push_back('\x01');
    inputs.push_back(varint);
  }
  // A tag of 6 bytes (protobuf reads at most 5; found by fuzz_mirror).
  inputs.push_back(std::string("\x80\x85\x85\x85\x85\x40\x71\x40\x2d", 9));
  // Lengths of 6 bytes, and of 2^31, for moved_world and for another field.
  for (const char* tag : {"\x5a", "\x0a"}) {
    inputs.push_back(std::string(tag) +
                     std::string("\x84\x80\x80\x80\x80\x00", 6) +
                     std::string(4, '\x01'));
    inputs.push_back(std::string(tag) + std::string("\x80\x80\x80\x80\x08", 5) +
                     std::string(8, '\x01'));
  }
  // A tag of 5 bytes whose value is more than 32 bits: protobuf keeps the
  // low 32.
  inputs.push_back(std::string("\xda\x80\x80\x80\x70\x04", 6) +
                   std::string(4, '\x01'));
  int refused = 0;
  for (const std::string& input : inputs) {
    FrameUpdate expected;
    const bool parses = expected.ParseFromString(input);
    refused += parses ? 0 : 1;
    for (int block : {1, -1}) {
      FrameUpdate update;
      WireMovedWorlds worlds;
      const absl::Status parsed = ParseInBlocks(input, block, update, worlds);
      ASSERT_EQ(parsed.ok(), parses) << input.size() << " " << parsed;
      if (!parses) {
        EXPECT_EQ(parsed.code(), absl::StatusCode::kDataLoss);
        continue;
      }
      worlds.AppendTo(*update.mutable_moved_world());
      EXPECT_EQ(update.SerializeAsString(), expected.SerializeAsString());
    }
  }
  EXPECT_GT(refused, static_cast<int>(bytes.size()) / 2);
}

}  // namespace
}  // namespace xform::v1
