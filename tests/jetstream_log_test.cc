// Copyright 2026 The xform Authors.
//
// A world's log in JetStream (server/cluster/jetstream_log.h) against a
// real nats-server: a writer fenced by another's record appends nothing
// after it, whatever its window held.

#include "server/cluster/jetstream_log.h"

#include <nats/nats.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/cluster/log_records.h"
#include "server/cluster/nats_link.h"
#include "tests/nats_cluster.h"

namespace xform::server {
namespace {

// A two-part record (over the payload's chunk) whose first part another
// writer's record fences: the second part expects a sequence that record
// took, so with the sequence alone it landed after it (the crash loop saw
// a deposed writer's frame end after its successor's epoch). It must not.
TEST(JetStreamWorldLogTest, AFencedWritersLaterPartsLandNowhere) {
  testing::NatsCluster nats(1);
  ClusterOptions options;
  options.servers = {nats.Url(0)};
  options.replicas = 1;
  options.node = std::string("writer-a");
  options.write_timeout = absl::Seconds(5);
  absl::StatusOr<std::shared_ptr<NatsLink>> link = NatsLink::Connect(options);
  ASSERT_TRUE(link.ok()) << link.status();
  const std::string key = StreamKey("w");
  ASSERT_TRUE((*link)->AddStream(LogStream(key), LogSubject(key), 1).ok());
  absl::StatusOr<uint64_t> created = (*link)->PublishSync(
      MakeMessage(
          LogSubject(key), "",
          {{kClusterHeader, (*link)->cluster()}, {"Xform-World", "created"}}),
      "created", "cannot create");
  ASSERT_TRUE(created.ok()) << created.status();
  JetStreamWorldLog log(*link, "w", "", *created, "created", options,
                        Clock::Real());
  // Another writer's record, appended after the creation.
  absl::StatusOr<uint64_t> epoch =
      (*link)->PublishSync(MakeMessage(LogSubject(key), "",
                                       {{kClusterHeader, (*link)->cluster()},
                                        {"Xform-Epoch", "2"},
                                        {"Xform-Node", "b"}}),
                           "epoch:b", "cannot begin an epoch", *created);
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  // Two parts: the first expects the creation (fenced), the second the
  // sequence the epoch took.
  std::string batch;
  batch.resize((*link)->chunk_bytes() + 10, 'x');
  absl::StatusOr<WorldLog::Acknowledgement> appended = log.Append(1, batch);
  ASSERT_TRUE(appended.ok()) << appended.status();
  const absl::Status acknowledged = (*std::move(appended))();
  EXPECT_FALSE(acknowledged.ok());
  absl::StatusOr<StreamExtent> extent = (*link)->Extent(LogStream(key));
  ASSERT_TRUE(extent.ok()) << extent.status();
  EXPECT_EQ(extent->last, *epoch)
      << "a fenced writer's part landed after the other writer's record";
}

}  // namespace
}  // namespace xform::server
