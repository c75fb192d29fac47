// Copyright 2026 The xform Authors.
//
// The compact encoding, both directions: its error bounds, that a long run
// of deltas, wholes and resyncs never drifts, its size on motion like a
// game's, and that hostile bytes are refused without harm.

#include "xform/v1/compact_moves.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "glm/gtc/quaternion.hpp"
#include "glm/mat3x3.hpp"
#include "gtest/gtest.h"
#include "xform/transform.h"
#include "xform/v1/wire.h"

namespace xform::v1 {
namespace {

constexpr float kPrecision = 0.001f;
constexpr double kMaxRotationErrorDegrees = 0.01;

Matrix3x4 MatrixOf(const glm::vec3& position, const glm::quat& rotation,
                   const glm::vec3& scale) {
  const glm::mat3 r = glm::mat3_cast(rotation);
  Matrix3x4 m;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m.m[4 * i + j] = r[j][i] * scale[j];
    m.m[4 * i + 3] = position[i];
  }
  return m;
}

// The rotation of a matrix without shear.
glm::quat RotationOf(const Matrix3x4& m) {
  glm::vec3 col[3];
  for (int j = 0; j < 3; ++j) {
    col[j] = glm::normalize(glm::vec3(m.m[j], m.m[4 + j], m.m[8 + j]));
  }
  return glm::normalize(glm::quat_cast(glm::mat3(col[0], col[1], col[2])));
}

// In doubles, and from the chord, not acos of a dot near 1: a float's
// rounding there alone is 0.04 degree.
double AngleDegrees(const glm::quat& a, const glm::quat& b) {
  const glm::dquat x(a), y(b);
  const double sign = glm::dot(x, y) < 0 ? -1 : 1;
  const double chord = glm::length(x - sign * y);
  return 4 * std::asin(std::min(1.0, chord / 2)) * 180 / 3.14159265358979;
}

struct Errors {
  double position = 0;  // Largest, in units.
  double rotation = 0;  // Largest, in degrees.
  double scale = 0;     // Largest, relative.
};

void Measure(const Matrix3x4& truth, const Matrix3x4& got, Errors& e) {
  for (int i = 0; i < 3; ++i) {
    e.position = std::max<double>(
        e.position, std::abs(truth.m[4 * i + 3] - got.m[4 * i + 3]));
    const float s =
        glm::length(glm::vec3(truth.m[i], truth.m[4 + i], truth.m[8 + i]));
    const float t =
        glm::length(glm::vec3(got.m[i], got.m[4 + i], got.m[8 + i]));
    e.scale = std::max<double>(e.scale, std::abs(s - t) / s);
  }
  e.rotation =
      std::max(e.rotation, AngleDegrees(RotationOf(truth), RotationOf(got)));
}

glm::quat RandomRotation(std::mt19937& rng) {
  std::normal_distribution<float> n;
  return glm::normalize(glm::quat(n(rng), n(rng), n(rng), n(rng)));
}

TEST(PoseQuantizerTest, ErrorsStayWithinTheirBounds) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  const PoseQuantizer quantizer(kPrecision);
  Errors e;
  for (int k = 0; k < 200'000; ++k) {
    const Matrix3x4 m = MatrixOf(
        {u(rng) * 500, u(rng) * 500, u(rng) * 500}, RandomRotation(rng),
        {std::exp2(u(rng) * 4), std::exp2(u(rng) * 4), std::exp2(u(rng) * 4)});
    const std::optional<QuantizedPose> q = quantizer.Quantize(m);
    ASSERT_TRUE(q.has_value()) << k;
    Measure(m, quantizer.Dequantize(*q), e);
  }
  std::printf("largest errors: position %.3g, rotation %.3g deg, scale %.3g\n",
              e.position, e.rotation, e.scale);
  // Half a step, and a float's rounding at 500 units (3e-5).
  EXPECT_LE(e.position, kPrecision / 2 + 1e-4);
  EXPECT_LE(e.rotation, kMaxRotationErrorDegrees);
  EXPECT_LE(e.scale, 2e-5);
}

TEST(PoseQuantizerTest, ShearReflectionAndNonFiniteAreNotPoses) {
  const PoseQuantizer quantizer(kPrecision);
  // A parent scaled unevenly, rotating its child: shear.
  const Matrix3x4 parent =
      MatrixOf({0, 0, 0}, glm::quat(1, 0, 0, 0), {1, 2, 1});
  const Matrix3x4 child =
      MatrixOf({0, 0, 0}, glm::angleAxis(0.7f, glm::vec3(0, 0, 1)), {1, 1, 1});
  EXPECT_FALSE(quantizer.Quantize(Multiply(parent, child)).has_value());
  EXPECT_FALSE(
      quantizer.Quantize(MatrixOf({0, 0, 0}, glm::quat(1, 0, 0, 0), {-1, 1, 1}))
          .has_value());
  EXPECT_FALSE(
      quantizer.Quantize(MatrixOf({0, 0, 0}, glm::quat(1, 0, 0, 0), {0, 1, 1}))
          .has_value());
  EXPECT_FALSE(
      quantizer
          .Quantize(MatrixOf({NAN, 0, 0}, glm::quat(1, 0, 0, 0), {1, 1, 1}))
          .has_value());
  EXPECT_FALSE(
      quantizer
          .Quantize(MatrixOf({1e30f, 0, 0}, glm::quat(1, 0, 0, 0), {1, 1, 1}))
          .has_value());
}

// Deltas need a matrix to give the same integers every time it is
// quantized, whichever of QuantizeMany's lanes it lands in and whatever
// its neighbours are: poses, shear, non-finite, out of range.
TEST(PoseQuantizerTest, ManyGiveTheSameIntegersAsOne) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const PoseQuantizer quantizer(kPrecision);
  std::vector<Matrix3x4> matrices;
  for (int k = 0; k < 1000; ++k) {
    Matrix3x4 m = MatrixOf(
        {u(rng) * 5000, u(rng) * 5000, u(rng) * 5000}, RandomRotation(rng),
        {std::exp2(u(rng) * 8), std::exp2(u(rng) * 8), std::exp2(u(rng) * 8)});
    switch (k % 7) {
      case 1:
        m.m[1] += 0.1f;  // Shear.
        break;
      case 3:
        m.m[4 * (k % 3) + (k % 4)] = k % 2 ? NAN : INFINITY;
        break;
      case 5:
        m.m[3] = 1e30f;  // Beyond 2^52 precisions.
        break;
      default:
        break;
    }
    matrices.push_back(m);
  }
  std::vector<const float*> pointers;
  for (const Matrix3x4& m : matrices) pointers.push_back(m.m.data());
  for (size_t start : {0, 1, 3, 7}) {
    const absl::Span<const float* const> some =
        absl::MakeConstSpan(pointers).subspan(start);
    std::vector<std::optional<QuantizedPose>> many(some.size());
    quantizer.QuantizeMany(some, absl::MakeSpan(many));
    int poses = 0;
    for (size_t k = 0; k < some.size(); ++k) {
      const std::optional<QuantizedPose> one =
          quantizer.Quantize(matrices[start + k]);
      ASSERT_EQ(one.has_value(), many[k].has_value()) << start << " " << k;
      if (!one) continue;
      ++poses;
      EXPECT_EQ(one->position, many[k]->position) << start << " " << k;
      EXPECT_EQ(one->rotation, many[k]->rotation) << start << " " << k;
      EXPECT_EQ(one->log_scale, many[k]->log_scale) << start << " " << k;
      EXPECT_EQ(one->largest, many[k]->largest) << start << " " << k;
    }
    // Most are poses, and the others are not.
    EXPECT_GT(poses, static_cast<int>(some.size()) / 2);
    EXPECT_LT(poses, static_cast<int>(some.size()) * 6 / 7);
  }
}

// A log scale is log2 of the scale at 1 / 65536, rounded: computed by a
// series rather than by log2f, it must stay within half a step of the
// exact value from 2^-60 to 2^60, where a float holding the log itself
// would be a quarter of a step coarse.
TEST(PoseQuantizerTest, LogScalesAreRoundedLog2) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-60, 60);
  const PoseQuantizer quantizer(kPrecision);
  double worst = 0;
  for (int k = 0; k < 100'000; ++k) {
    const float scale = static_cast<float>(std::exp2(u(rng)));
    const std::optional<QuantizedPose> q = quantizer.Quantize(
        MatrixOf({0, 0, 0}, glm::quat(1, 0, 0, 0), {scale, 1, 1 / scale}));
    ASSERT_TRUE(q.has_value()) << scale;
    const double exact = std::log2(static_cast<double>(scale)) * 65536;
    worst = std::max(worst, std::abs(q->log_scale[0] - exact));
    EXPECT_EQ(q->log_scale[1], 0);
  }
  std::printf("largest log scale error: %.4f of a step\n", worst);
  // Half a step, and the series' error (5e-8, 0.003 of a step) and the
  // column length's rounding (6e-8 relative, 0.006 of a step).
  EXPECT_LE(worst, 0.5 + 0.01);
}

// The scales a receiver rebuilds from their logs (by table, not exp2f): as
// exp2 would give them, across the range, and for a hostile peer's
// extremes something a float holds, without undefined behaviour.
TEST(PoseQuantizerTest, ScalesAreExp2OfTheirLogs) {
  const PoseQuantizer quantizer(kPrecision);
  QuantizedPose q = {};
  q.largest = 3;  // w: the identity rotation.
  for (int32_t n = -40 * 65536; n <= 40 * 65536; n += 977) {
    q.log_scale = {n, -n, n / 3};
    const Matrix3x4 m = quantizer.Dequantize(q);
    for (int j = 0; j < 3; ++j) {
      const double want = std::exp2(q.log_scale[j] / 65536.0);
      ASSERT_NEAR(m.m[5 * j] / want, 1.0, 2.5e-7) << q.log_scale[j];
    }
  }
  q.log_scale = {std::numeric_limits<int32_t>::max(),
                 std::numeric_limits<int32_t>::min(), 0};
  const Matrix3x4 m = quantizer.Dequantize(q);
  EXPECT_GE(m.m[0], 1e38f);
  EXPECT_GE(m.m[5], 0.0f);
  EXPECT_LE(m.m[5], 1e-37f);
  EXPECT_EQ(m.m[10], 1.0f);
}

// A pose made a matrix (Dequantize: SSE2 on x86-64) is, to the bit, glm's
// rotation matrix of its quaternion as the format defines it (three sent
// at 1 / kRotationScale, the largest rebuilt), each column times its scale,
// beside its position in float: for every left-out component, and for
// hostile rotations whose three squares pass 1 (the largest is then 0).
TEST(PoseQuantizerTest, DequantizeIsThePosesMatrixToTheBit) {
  constexpr int kSent[4][3] = {{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}};
  std::mt19937_64 rng(19);
  const PoseQuantizer quantizer(kPrecision);
  for (int k = 0; k < 100'000; ++k) {
    QuantizedPose q;
    // A tenth past the range a sender uses.
    const int64_t bound = k % 10 == 0 ? 40'000 : 16'383;
    for (int i = 0; i < 3; ++i) {
      q.position[i] = static_cast<int64_t>(rng() >> 24) - (int64_t{1} << 39);
      q.rotation[i] = static_cast<int32_t>(
          static_cast<int64_t>(rng() % (2 * bound + 1)) - bound);
      q.log_scale[i] = static_cast<int32_t>(rng() % (8 << 16)) - (4 << 16);
    }
    q.largest = static_cast<uint8_t>(rng() % 4);
    // Its scales as Dequantize makes them (ScalesAreExp2OfTheirLogs tests
    // those): the diagonal of the identity rotation's matrix.
    QuantizedPose scales_only = {};
    scales_only.log_scale = q.log_scale;
    scales_only.largest = 3;
    const Matrix3x4 scales = quantizer.Dequantize(scales_only);
    float c[4];
    float sum = 0;
    for (int i = 0; i < 3; ++i) {
      const float v = static_cast<float>(q.rotation[i]) *
                      static_cast<float>(1 / kRotationScale);
      c[kSent[q.largest][i]] = v;
      sum += v * v;
    }
    c[q.largest] = std::sqrt(std::max(0.0f, 1.0f - sum));
    const glm::mat3 r = glm::mat3_cast(glm::quat(c[3], c[0], c[1], c[2]));
    Matrix3x4 want;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        want.m[4 * i + j] = r[j][i] * scales.m[5 * j];
      }
      want.m[4 * i + 3] =
          static_cast<float>(q.position[i] * static_cast<double>(kPrecision));
    }
    const Matrix3x4 got = quantizer.Dequantize(q);
    for (int e = 0; e < 12; ++e) {
      ASSERT_EQ(std::memcmp(&want.m[e], &got.m[e], sizeof(float)), 0)
          << "pose " << k << " (largest " << int{q.largest} << "), element "
          << e << ": " << got.m[e] << " against " << want.m[e];
    }
  }
}

// A sender and a receiver of compact messages over a long random run: the
// sender codes against what it last sent (as the server's shared frames
// do), or sends whole (folded frames), or starts a snapshot afresh (a
// resync); entities move a frame's worth, jump, are destroyed and created.
// The receiver must always be within the bounds of the truth.
TEST(CompactMovesTest, LongRunsNeverDrift) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  constexpr int kEntities = 2000;
  struct Body {
    Matrix3x4 truth;
    glm::vec3 position, step;
    glm::quat rotation, turn;
    glm::vec3 scale;
    bool alive = true;
  };
  std::vector<Body> bodies(kEntities);
  for (Body& b : bodies) {
    b.position = {u(rng) * 1000, u(rng) * 1000, u(rng) * 1000};
    b.step = glm::vec3(u(rng), u(rng), u(rng)) * 0.05f;
    b.rotation = RandomRotation(rng);
    b.turn = glm::angleAxis(u(rng) * 0.05f,
                            glm::normalize(glm::vec3(u(rng), u(rng), 1)));
    b.scale = glm::vec3(1 + 0.5f * u(rng));
    b.truth = MatrixOf(b.position, b.rotation, b.scale);
  }
  // What the sender last sent each entity, and whether the receiver holds it.
  std::vector<Matrix3x4> sent(kEntities);
  std::vector<bool> held(kEntities, false);
  CompactMovesReader reader;
  Errors e;
  uint64_t deltas_bytes = 0, deltas = 0;
  for (int frame = 1; frame <= 3000; ++frame) {
    FrameUpdate update;
    update.set_frame(frame);
    update.set_position_precision(kPrecision);
    const int what = static_cast<int>(rng() % 100);
    const bool resync = what == 0;  // A snapshot afresh: everything whole.
    const bool folded = what < 5;   // Several frames folded: whole.
    if (resync) {
      update.set_snapshot(true);
      update.set_part(0);
    }
    std::vector<int> moving;
    for (int i = 0; i < kEntities; ++i) {
      Body& b = bodies[i];
      if (!b.alive) {
        if (rng() % 50 == 0)
          b.alive = true;  // Created again, same id.
        else
          continue;
      }
      if (rng() % 200 == 0) {  // Destroyed.
        b.alive = false;
        if (!resync) update.add_destroyed(i + 1);
        held[i] = false;
        continue;
      }
      b.position += b.step;
      b.rotation = glm::normalize(b.turn * b.rotation);
      if (rng() % 500 == 0) b.position = {u(rng) * 1e4f, 0, 0};  // A jump.
      if (rng() % 300 == 0) b.scale *= 1.01f;
      b.truth = MatrixOf(b.position, b.rotation, b.scale);
      if (resync || !held[i] || rng() % 3 == 0) moving.push_back(i);
    }
    CompactMovesWriter writer(kPrecision);
    for (int i : moving) {
      const bool delta = held[i] && !folded && !resync;
      writer.Add(i + 1, bodies[i].truth.m.data(), delta ? &sent[i] : nullptr);
    }
    const std::string bytes = writer.Finish();
    update.set_compact_moved(bytes);
    ASSERT_TRUE(reader.Decode(update).ok()) << frame;
    ASSERT_EQ(update.moved_size(), static_cast<int>(moving.size()));
    if (!folded && !resync) {
      deltas_bytes += bytes.size();
      deltas += moving.size();
    }
    if (resync) std::fill(held.begin(), held.end(), false);
    for (int k = 0; k < update.moved_size(); ++k) {
      const int i = static_cast<int>(update.moved(k)) - 1;
      Matrix3x4 got;
      std::copy_n(update.moved_world().data() + 12 * k, 12, got.m.begin());
      Measure(bodies[i].truth, got, e);
      sent[i] = bodies[i].truth;
      held[i] = true;
    }
  }
  std::printf(
      "largest errors: position %.3g, rotation %.3g deg, scale %.3g; "
      "%.2f bytes a delta entry\n",
      e.position, e.rotation, e.scale,
      static_cast<double>(deltas_bytes) / static_cast<double>(deltas));
  // Positions reach 1e4, where a float's step is 1e-3: half of each.
  EXPECT_LE(e.position, kPrecision / 2 + 5e-4);
  EXPECT_LE(e.rotation, kMaxRotationErrorDegrees);
  EXPECT_LE(e.scale, 2e-5);
  // Moves of a frame's worth (5 cm, 3 degrees at most) cost under 12 bytes.
  ASSERT_GT(deltas, 0u);
  EXPECT_LE(static_cast<double>(deltas_bytes) / deltas, 12.0);
}

TEST(CompactMovesTest, ShearGoesRawAndExact) {
  const Matrix3x4 parent =
      MatrixOf({0, 0, 0}, glm::quat(1, 0, 0, 0), {1, 2, 1});
  const Matrix3x4 sheared = Multiply(
      parent,
      MatrixOf({1, 2, 3}, glm::angleAxis(0.7f, glm::vec3(0, 0, 1)), {1, 1, 1}));
  CompactMovesWriter writer(kPrecision);
  writer.Add(9, sheared.m.data(), &sheared);
  FrameUpdate update;
  update.set_position_precision(kPrecision);
  update.set_compact_moved(writer.Finish());
  CompactMovesReader reader;
  ASSERT_TRUE(reader.Decode(update).ok());
  ASSERT_EQ(update.moved_size(), 1);
  EXPECT_EQ(update.moved(0), 9u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(update.moved_world(i), sheared.m[i]);
  EXPECT_EQ(reader.held(), 0u);  // A raw entry leaves nothing to delta on.
}

FrameUpdate Compact(const std::string& bytes) {
  FrameUpdate update;
  update.set_position_precision(kPrecision);
  update.set_compact_moved(bytes);
  return update;
}

TEST(CompactMovesTest, HostileBytesAreDataLoss) {
  const Matrix3x4 m =
      MatrixOf({1, 2, 3}, glm::angleAxis(0.3f, glm::vec3(0, 1, 0)), {1, 1, 1});
  CompactMovesWriter writer(kPrecision);
  writer.Add(5, m.m.data(), nullptr);
  writer.Add(6, m.m.data(), nullptr);
  const std::string good = writer.Finish();
  // Every cut of it.
  for (size_t n = 1; n < good.size(); ++n) {
    FrameUpdate u = Compact(good.substr(0, n));
    EXPECT_EQ(CompactMovesReader().Decode(u).code(),
              absl::StatusCode::kDataLoss)
        << n;
  }
  // Bytes after it, a count that lies, an unknown kind.
  FrameUpdate longer = Compact(good + "x");
  EXPECT_EQ(CompactMovesReader().Decode(longer).code(),
            absl::StatusCode::kDataLoss);
  FrameUpdate lying = Compact(std::string("\xff\xff\xff\x0f", 4) + good);
  EXPECT_EQ(CompactMovesReader().Decode(lying).code(),
            absl::StatusCode::kDataLoss);
  FrameUpdate kind = Compact(std::string("\x01\x05\x03", 3));
  EXPECT_EQ(CompactMovesReader().Decode(kind).code(),
            absl::StatusCode::kDataLoss);
  // A delta for an entity the reader does not hold.
  CompactMovesWriter delta(kPrecision);
  delta.Add(5, m.m.data(), &m);
  FrameUpdate orphan = Compact(delta.Finish());
  EXPECT_EQ(CompactMovesReader().Decode(orphan).code(),
            absl::StatusCode::kDataLoss);
  // An entity twice in one message.
  CompactMovesWriter twice(kPrecision);
  twice.Add(5, m.m.data(), nullptr);
  twice.Add(5, m.m.data(), nullptr);
  FrameUpdate repeated = Compact(twice.Finish());
  const absl::Status refused = CompactMovesReader().Decode(repeated);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(refused.message().find("not above"), absl::string_view::npos);
  // No precision.
  FrameUpdate no_precision = Compact(good);
  no_precision.set_position_precision(0);
  EXPECT_EQ(CompactMovesReader().Decode(no_precision).code(),
            absl::StatusCode::kDataLoss);
  // And random bytes: refused or read, never a crash (the fuzz target goes
  // further).
  std::mt19937 rng(3);
  for (int k = 0; k < 20'000; ++k) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    FrameUpdate u = Compact(bytes);
    CompactMovesReader reader;
    (void)reader.Decode(u);
  }
}

// Every length a value's varint may have (1 to 10 bytes, canonical or
// padded with 0x80s), at every distance from the end of the bytes, reads as
// written, in every kind of entry; one of 11 bytes is refused.
TEST(CompactMovesTest, VarintsOfEveryLengthReadAsWritten) {
  auto put = [](uint64_t v, int padding, std::string& out) {
    while (v >= 0x80 || padding > 0) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      if (v < 0x80) --padding;
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  std::mt19937_64 rng(11);
  for (int message = 0; message < 3000; ++message) {
    const int entries = 1 + static_cast<int>(rng() % 6);
    std::string bytes;
    put(static_cast<uint64_t>(entries), 0, bytes);
    std::vector<std::vector<int64_t>> want(entries);
    for (int k = 0; k < entries; ++k) {
      put(1, 0, bytes);  // The id: one above the last.
      // A delta without scale (6 values), with it, or a whole (9).
      const uint8_t flags = std::array<uint8_t, 3>{0, 0x10, 1}[rng() % 3];
      bytes.push_back(static_cast<char>(flags));
      const int values = flags == 0 ? 6 : 9;
      for (int v = 0; v < values; ++v) {
        // Of 0 to 64 bits, so of every length from 1 to 10 bytes.
        const int bits = static_cast<int>(rng() % 65);
        const uint64_t zigzag = bits == 0 ? 0 : rng() >> (64 - bits);
        // Now and then padded (0x80 ... 0x00): at most 10 bytes in all.
        const int length = std::max(1, (bits + 6) / 7);
        const int padding =
            rng() % 8 == 0 ? static_cast<int>(rng() % (11 - length)) : 0;
        put(zigzag, padding, bytes);
        want[k].push_back(static_cast<int64_t>(zigzag >> 1) ^
                          -static_cast<int64_t>(zigzag & 1));
      }
    }
    const FrameUpdate u = Compact(bytes);
    CompactMovesParser parser(u);
    ASSERT_TRUE(parser.Start().ok());
    ASSERT_EQ(parser.count(), static_cast<uint64_t>(entries));
    CompactMovesParser::Entry entry;
    for (int k = 0; k < entries; ++k) {
      ASSERT_TRUE(parser.Read(entry).ok()) << message << " " << k;
      for (size_t v = 0; v < want[k].size(); ++v) {
        ASSERT_EQ(entry.values[v], want[k][v])
            << message << " " << k << " " << v;
      }
    }
    EXPECT_TRUE(parser.Finish().ok());
  }
  // A varint of 11 bytes, anywhere in an entry, however far from the end.
  for (int before = 0; before < 6; ++before) {
    for (int after = 0; after < 40; after += 13) {
      // One entry: id 1, a delta, `before` values of 1, then 11 bytes.
      std::string bytes("\x01\x01\x00", 3);
      bytes.append(static_cast<size_t>(before), '\x02');
      bytes.append(10, '\x80');
      bytes.push_back('\x01');
      bytes.append(static_cast<size_t>(after), '\x02');
      const FrameUpdate u = Compact(bytes);
      CompactMovesParser parser(u);
      ASSERT_TRUE(parser.Start().ok());
      CompactMovesParser::Entry entry;
      EXPECT_EQ(parser.Read(entry).code(), absl::StatusCode::kDataLoss)
          << before << " " << after;
    }
  }
}

// Every precision a subscriber may ask for is served at most as coarse,
// at least half as fine, and at one of 31 values: a world encodes a frame
// at most 31 ways, however many distinct precisions are asked for.
TEST(CompactMovesTest, AskedPrecisionsAreServedAtFewPowersOfTwo) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> log2_precision(-20, 10);
  SubscribeRequest request;
  request.set_world("w");
  request.set_encoding(ENCODING_COMPACT);
  absl::flat_hash_set<float> served;
  for (int i = 0; i < 100'000; ++i) {
    const float asked =
        std::min(std::exp2(log2_precision(rng)), kMaxPositionPrecision);
    request.set_position_precision(std::max(asked, kMinPositionPrecision));
    ASSERT_TRUE(CheckSubscribeRequest(request, 10).ok()) << asked;
    const float precision = CompactPrecision(request);
    ASSERT_LE(precision, request.position_precision());
    ASSERT_GT(precision, request.position_precision() / 2);
    served.insert(precision);
  }
  EXPECT_LE(served.size(), 31u);
}

TEST(CompactMovesTest, SubscriptionsAskForItWithinBounds) {
  SubscribeRequest request;
  request.set_world("w");
  EXPECT_TRUE(CheckSubscribeRequest(request, 10).ok());
  EXPECT_EQ(CompactPrecision(request), 0);  // Raw.
  request.set_encoding(ENCODING_COMPACT);
  EXPECT_EQ(CompactPrecision(request), 0x1p-10f);  // The default, 0.001.
  request.set_position_precision(0.01f);
  EXPECT_TRUE(CheckSubscribeRequest(request, 10).ok());
  EXPECT_EQ(CompactPrecision(request), 0x1p-7f);  // 0.0078125.
  request.set_position_precision(0.5f);
  EXPECT_EQ(CompactPrecision(request), 0.5f);
  for (float edge : {kMinPositionPrecision, kMaxPositionPrecision}) {
    request.set_position_precision(edge);
    EXPECT_TRUE(CheckSubscribeRequest(request, 10).ok()) << edge;
    EXPECT_EQ(CompactPrecision(request), edge);
  }
  for (float bad : {-1.0f, 1e-9f, 1e9f, NAN, INFINITY}) {
    request.set_position_precision(bad);
    EXPECT_EQ(CheckSubscribeRequest(request, 10).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  request.set_position_precision(0);
  request.set_encoding(static_cast<Encoding>(77));
  EXPECT_EQ(CheckSubscribeRequest(request, 10).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace xform::v1
