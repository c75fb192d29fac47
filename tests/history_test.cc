// Copyright 2026 The xform Authors.
//
// What xform::History does beyond tf2 (history_tf2_test.cc holds it to tf2):
// static entities, destruction and re-creation, the memory bound, samples
// that arrive late, and what each error names.

#include "xform/history.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace xform {
namespace {

using ::testing::HasSubstr;

constexpr Stamp kMs = 1'000'000;

Transform At(float x) {
  Transform t;
  t.position = {x, 0, 0};
  return t;
}

float XOf(const absl::StatusOr<TimedPose>& found) {
  EXPECT_TRUE(found.ok()) << found.status();
  return found.ok() ? found->pose.translation().x : -1e9f;
}

TEST(HistoryTest, InterpolatesBetweenSamplesAndNamesThemUsed) {
  History history;
  history.Record(1, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.Record(1, 200 * kMs, kNoEntity, At(10), SampleKind::kSet);
  absl::StatusOr<TimedPose> found = history.Lookup(kNoEntity, 1, 150 * kMs);
  EXPECT_FLOAT_EQ(XOf(found), 5);
  EXPECT_EQ(found->oldest_used, 100 * kMs);
  EXPECT_EQ(found->newest_used, 200 * kMs);
  // Stamp 0: the newest.
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 0)), 10);
}

TEST(HistoryTest, StaticEntityHoldsFromCreationOnInOneSample) {
  History history;
  history.Record(1, 100 * kMs, kNoEntity, At(3), SampleKind::kCreate);
  history.Record(2, 100 * kMs, 1, At(1), SampleKind::kCreate);
  history.Record(2, 5000 * kMs, 1, At(2), SampleKind::kSet);
  EXPECT_EQ(history.samples(), 3u);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 90'000 * kMs)), 3);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 2, 5000 * kMs)), 5);
  // Before its creation it was not anywhere.
  EXPECT_EQ(history.Lookup(kNoEntity, 1, 50 * kMs).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(HistoryTest, DynamicEntityPastItsNewestIsNotKnownYet) {
  History history;
  history.Record(1, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.Record(1, 200 * kMs, kNoEntity, At(1), SampleKind::kSet);
  absl::Status later = history.Lookup(kNoEntity, 1, 300 * kMs).status();
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(later.message(), HasSubstr("entity 1 is known until 200000000"));
  absl::Status earlier = history.Lookup(kNoEntity, 1, 50 * kMs).status();
  EXPECT_EQ(earlier.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(earlier.message(), HasSubstr("known from 100000000"));
}

TEST(HistoryTest, HoldingToNewestAnEntityStaysUntilTheWorldsNewestStamp) {
  History history({.hold_to_newest = true});
  history.Record(1, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.Record(1, 200 * kMs, kNoEntity, At(10), SampleKind::kSet);
  history.Record(2, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.Record(2, 500 * kMs, kNoEntity, At(7), SampleKind::kSet);
  // 1 did not move after 200 ms: the batches up to 500 ms said so.
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 400 * kMs)), 10);
  absl::StatusOr<TimedPose> latest = history.Lookup(2, 1, 0);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->stamp, 500 * kMs);
  absl::Status later = history.Lookup(kNoEntity, 1, 600 * kMs).status();
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(later.message(), HasSubstr("known until 500000000"));
}

TEST(HistoryTest, ReparentIsAJumpAndOldLookupsWalkTheOldChain) {
  History history;
  history.Record(1, 100 * kMs, kNoEntity, At(100), SampleKind::kCreate);
  history.Record(2, 100 * kMs, kNoEntity, At(200), SampleKind::kCreate);
  history.Record(3, 100 * kMs, 1, At(1), SampleKind::kCreate);
  history.Record(3, 200 * kMs, 1, At(1), SampleKind::kSet);
  history.Record(3, 300 * kMs, 2, At(1), SampleKind::kLink);
  history.Record(3, 400 * kMs, 2, At(1), SampleKind::kSet);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 3, 150 * kMs)), 101);
  // Between the last sample under 1 and the first under 2: the older holds.
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 3, 250 * kMs)), 101);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 3, 350 * kMs)), 201);
}

TEST(HistoryTest, DestroyedEntityIsNotConnectedAfterAndKnownBefore) {
  History history({.window_nanos = 1000 * kMs});
  history.Record(1, 100 * kMs, kNoEntity, At(1), SampleKind::kCreate);
  history.RecordDestroy(1, 200 * kMs);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 150 * kMs)), 1);
  absl::Status after = history.Lookup(kNoEntity, 1, 250 * kMs).status();
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after.message(), HasSubstr("destroyed at 200000000"));
  // Created again: a new history.
  history.Record(1, 300 * kMs, kNoEntity, At(7), SampleKind::kCreate);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 350 * kMs)), 7);
  EXPECT_EQ(history.Lookup(kNoEntity, 1, 150 * kMs).status().code(),
            absl::StatusCode::kOutOfRange);
  // A destroyed entity's history goes once its destruction leaves the window.
  history.Record(2, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.RecordDestroy(2, 400 * kMs);
  history.Record(3, 1500 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  EXPECT_EQ(history.Lookup(kNoEntity, 2, 300 * kMs).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(history.entities(), 2u);
}

TEST(HistoryTest, LateSampleFillsHistoryInOrder) {
  History history;
  history.Record(1, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.Record(1, 300 * kMs, kNoEntity, At(30), SampleKind::kSet);
  history.Record(1, 200 * kMs, kNoEntity, At(100), SampleKind::kSet);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 200 * kMs)), 100);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 250 * kMs)), 65);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 0)), 30);
  // A second sample at a stamp replaces the first.
  history.Record(1, 200 * kMs, kNoEntity, At(20), SampleKind::kSet);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 200 * kMs)), 20);
  EXPECT_EQ(history.samples(), 3u);
}

TEST(HistoryTest, LateScaleAndParentChangesKeepLaterSamplesAsThey_Were) {
  History history;
  Transform big = At(0);
  big.scale = glm::vec3(2);
  history.Record(9, 100 * kMs, kNoEntity, At(50), SampleKind::kCreate);
  history.Record(1, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  history.Record(1, 300 * kMs, kNoEntity, At(0), SampleKind::kSet);
  history.Record(1, 200 * kMs, 9, big, SampleKind::kLink);  // Late.
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 200 * kMs)), 50);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 300 * kMs)), 0);
  absl::StatusOr<TimedPose> scaled = history.Lookup(kNoEntity, 1, 200 * kMs);
  ASSERT_TRUE(scaled.ok());
  EXPECT_FLOAT_EQ(scaled->pose(0, 0), 2);
  EXPECT_FLOAT_EQ(history.Lookup(kNoEntity, 1, 300 * kMs)->pose(0, 0), 1);
}

TEST(HistoryTest, WindowPrunesAndRefusesSamplesOlderThanIt) {
  History history({.window_nanos = 100 * kMs});
  for (Stamp t = 1; t <= 1000; ++t) {
    history.Record(1, t * kMs, kNoEntity, At(static_cast<float>(t)),
                   t == 1 ? SampleKind::kCreate : SampleKind::kSet);
  }
  EXPECT_EQ(history.Lookup(kNoEntity, 1, 850 * kMs).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_FLOAT_EQ(XOf(history.Lookup(kNoEntity, 1, 950 * kMs)), 950);
  // Storage stays within a quarter of the window's samples: tracks do not
  // double as they grow, and drop what left the window in place.
  EXPECT_LE(history.samples(), 101u * 5 / 4);
  history.Record(1, 500 * kMs, kNoEntity, At(0), SampleKind::kSet);
  EXPECT_EQ(history.refused_old(), 1u);
}

TEST(HistoryTest, MemoryBoundShrinksTheWindow) {
  History unbounded({.window_nanos = 10'000 * kMs});
  History bounded({.window_nanos = 10'000 * kMs, .max_bytes = 256 << 10});
  for (Stamp t = 1; t <= 2000; ++t) {
    for (EntityId e = 1; e <= 20; ++e) {
      const SampleKind kind = t == 1 ? SampleKind::kCreate : SampleKind::kSet;
      unbounded.Record(e, t * kMs, kNoEntity, At(1), kind);
      bounded.Record(e, t * kMs, kNoEntity, At(1), kind);
    }
  }
  EXPECT_GT(unbounded.MemoryBytes(), size_t{1} << 20);
  EXPECT_LE(bounded.MemoryBytes(), size_t{256} << 10);
  EXPECT_LT(bounded.window(), 10'000 * kMs);
  EXPECT_GT(bounded.window(), 100 * kMs);
  EXPECT_EQ(bounded.Lookup(kNoEntity, 1, 2000 * kMs - bounded.window() - kMs)
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
}

TEST(HistoryTest, UnknownEntityIsNotFound) {
  History history;
  history.Record(1, 100 * kMs, kNoEntity, At(0), SampleKind::kCreate);
  absl::Status missing = history.Lookup(1, 2, 100 * kMs).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("entity 2"));
}

}  // namespace
}  // namespace xform
