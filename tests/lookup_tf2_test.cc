// Copyright 2026 The xform Authors.
//
// xformd's LookupTransform held to tf2 itself: the random forests of
// history_tf2_test.cc (chains up to 50 deep, writers at different rates
// delivering out of order, re-parents, static links) are written to a real
// server on loopback as stamped batches, and fed to Debian's libtf2
// BufferCore; then both are asked the same lookups at random stamps, plain
// and advanced, over gRPC. Poses agree within 1e-5 (our floats against
// tf2's doubles); every tf2 error is an error of ours with the matching code
// (a stamp past what is known: DEADLINE_EXCEEDED, as the server answers
// once it has waited).

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/loopback_server.h"
#include "tests/tf2_forest.h"
#include "tests/tf2_oracle.h"
#include "xform/client.h"

namespace xform {
namespace {

using server::Limits;
using server::LoopbackServer;

// xformd records a re-parent at its batch's stamp or the entity's newest
// sample, whichever is later (docs/time.md): history is not rewritten
// under samples that came after it, where tf2 would slot a late re-parent
// in. So the server is sent each entity's re-parents in order with that
// entity's newer samples; its late sets stay late. Each entity's samples
// keep the places they had in the delivery, re-dealt so that a re-parent
// comes before everything of the entity stamped after it.
std::vector<Sample> RelinkInOrder(std::vector<Sample> samples) {
  absl::flat_hash_map<EntityId, std::vector<size_t>> places;
  for (size_t i = 0; i < samples.size(); ++i) {
    places[samples[i].entity].push_back(i);
  }
  std::vector<Sample> out = samples;
  for (const auto& [entity, at] : places) {
    std::vector<Sample> mine;
    std::vector<Stamp> links;
    for (size_t i : at) {
      mine.push_back(samples[i]);
      if (samples[i].kind == SampleKind::kLink)
        links.push_back(samples[i].stamp);
    }
    std::sort(links.begin(), links.end());
    // Which stretch between re-parents a sample is in; a re-parent leads
    // its own, and the create comes first of all.
    const auto stretch = [&](const Sample& s) -> size_t {
      if (s.kind == SampleKind::kCreate) return 0;
      const size_t before =
          std::lower_bound(links.begin(), links.end(), s.stamp) - links.begin();
      return 1 + 2 * before + (s.kind == SampleKind::kLink ? 0 : 1);
    };
    std::stable_sort(mine.begin(), mine.end(),
                     [&](const Sample& a, const Sample& b) {
                       return stretch(a) < stretch(b);
                     });
    for (size_t k = 0; k < at.size(); ++k) out[at[k]] = mine[k];
  }
  return out;
}

// One sample as commands of a batch at its stamp.
void AddCommands(const Sample& s, std::vector<Command>* batch) {
  switch (s.kind) {
    case SampleKind::kCreate:
      batch->push_back(CreateOp{s.entity, s.parent, s.local});
      break;
    case SampleKind::kLink:
      batch->push_back(LinkOp{s.entity, s.parent});
      batch->push_back(SetLocalOp{s.entity, s.local});
      break;
    default:
      batch->push_back(SetLocalOp{s.entity, s.local});
      break;
  }
}

struct ServerCase {
  uint32_t seed;
  int entities;
  int max_depth;
  double seconds;
  bool smooth = false;
};

class LookupVsTf2 : public testing::TestWithParam<ServerCase> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start(Limits{}));  // --history_seconds=10, as tf2.
    ClientOptions options;
    options.address = server_.address();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ASSERT_TRUE(client_
                    ->CreateWorld("tf", {.mode = FrameMode::kDriven,
                                         .time_model = TimeModel::kTf2})
                    .ok());
  }

  // Writes the samples as batches, one per run of samples at one stamp.
  void Write(const std::vector<Sample>& samples) {
    std::vector<Command> batch;
    for (size_t i = 0; i < samples.size(); ++i) {
      AddCommands(samples[i], &batch);
      if (i + 1 < samples.size() && samples[i + 1].stamp == samples[i].stamp) {
        continue;
      }
      const absl::StatusOr<uint64_t> applied =
          client_->Apply("tf", batch, {.stamp = samples[i].stamp});
      ASSERT_TRUE(applied.ok()) << applied.status();
      batch.clear();
    }
  }

  LoopbackServer server_;
  std::unique_ptr<Client> client_;
};

TEST_P(LookupVsTf2, LookupsThroughXformdAgree) {
  const ServerCase c = GetParam();
  Forest forest(c.seed, c.entities, c.max_depth, c.smooth);
  Tf2Oracle tf2(10.0);
  const std::vector<Sample> samples = RelinkInOrder(forest.Write(c.seconds));
  for (const Sample& s : samples) FeedTf2(s, forest.is_static(s.entity), &tf2);
  ASSERT_NO_FATAL_FAILURE(Write(samples));

  // A stamp past what is known: DEADLINE_EXCEEDED once the server waited.
  const LookupTally tally = CompareLookups(
      forest, tf2, c.seconds, 1500, 500,
      {.plain =
           [&](EntityId target, EntityId source, Stamp stamp) {
             return client_->LookupTransform("tf", target, source,
                                             {.stamp = stamp});
           },
       .advanced =
           [&](EntityId target, Stamp t2, EntityId source, Stamp t1,
               EntityId fixed) {
             return client_->LookupTransform(
                 "tf", target, source,
                 {.stamp = t1, .fixed = fixed, .target_stamp = t2});
           },
       .future = absl::StatusCode::kDeadlineExceeded});
  EXPECT_EQ(tally.failures, 0);
  // Both kinds of answer were exercised, not only one.
  EXPECT_GT(tally.agreed - tally.errors, 300);
  EXPECT_GT(tally.errors, 30);
  RecordProperty("agreed", tally.agreed);
  RecordProperty("errors", tally.errors);
}

INSTANTIATE_TEST_SUITE_P(
    Forests, LookupVsTf2,
    testing::Values(ServerCase{11, 60, 50, 3.0},
                    ServerCase{12, 40, 10, 12.0},  // Past the 10 s window.
                    ServerCase{13, 50, 30, 3.0, /*smooth=*/true}));

}  // namespace
}  // namespace xform
