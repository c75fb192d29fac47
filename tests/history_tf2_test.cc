// Copyright 2026 The xform Authors.
//
// xform::History held to tf2 itself: Debian's libtf2 (ROS 1's 0.7.6
// BufferCore) and a History are fed the same stamped samples (random forests
// of chains up to 50 deep, writers at different rates delivering out of
// order, re-parents, static links), then asked the same lookups at random
// stamps, plain and advanced. Poses agree within 1e-5; every tf2 error is an
// error of ours with the matching code.

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/tf2_forest.h"
#include "tests/tf2_oracle.h"
#include "xform/history.h"

namespace xform {
namespace {

void Feed(const Sample& s, bool is_static, History* history, Tf2Oracle* tf2) {
  history->Record(s.entity, s.stamp, s.parent, s.local, s.kind);
  FeedTf2(s, is_static, tf2);
}

struct OracleCase {
  uint32_t seed;
  int entities;
  int max_depth;
  double seconds;
  bool smooth = false;
};

class HistoryVsTf2 : public testing::TestWithParam<OracleCase> {};

TEST_P(HistoryVsTf2, LookupsAgree) {
  const OracleCase c = GetParam();
  Forest forest(c.seed, c.entities, c.max_depth, c.smooth);
  History history;  // 10 s, as tf2's default.
  Tf2Oracle tf2(10.0);
  for (const Sample& s : forest.Write(c.seconds)) {
    Feed(s, forest.is_static(s.entity), &history, &tf2);
  }
  const LookupTally tally = CompareLookups(
      forest, tf2, c.seconds, 3000, 1000,
      {.plain =
           [&](EntityId target, EntityId source, Stamp stamp) {
             return history.Lookup(target, source, stamp);
           },
       .advanced =
           [&](EntityId target, Stamp t2, EntityId source, Stamp t1,
               EntityId fixed) {
             return history.Lookup(target, t2, source, t1, fixed);
           }});
  EXPECT_EQ(tally.failures, 0);
  // Both kinds of answer were exercised, not only one.
  EXPECT_GT(tally.agreed - tally.errors, 500);
  EXPECT_GT(tally.errors, 50);
  RecordProperty("agreed", tally.agreed);
  RecordProperty("errors", tally.errors);
}

INSTANTIATE_TEST_SUITE_P(
    Forests, HistoryVsTf2,
    testing::Values(OracleCase{1, 40, 10, 3.0}, OracleCase{2, 120, 50, 4.0},
                    OracleCase{3, 60, 50, 12.0},  // Past the 10 s window.
                    OracleCase{4, 200, 20, 2.0},
                    OracleCase{5, 80, 30, 3.0, /*smooth=*/true}));

}  // namespace
}  // namespace xform
