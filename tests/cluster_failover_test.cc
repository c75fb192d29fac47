// Copyright 2026 The xform Authors.
//
// xformd nodes of a cluster (--cluster), as processes beside real
// nats-server processes (tests/xform_cluster.h): every node a replica,
// exact bit for bit; writes sent to any node reaching the one that writes
// the world; a writer lost (kill -9), paused past its lease, or drained,
// and another taking over with no acknowledged batch lost or applied twice;
// a subscriber whose node dies resuming on another.

#include <nats/nats.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/acknowledged_writes.h"
#include "tests/wait_until.h"
#include "tests/xform_cluster.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/world.h"

namespace xform {
namespace {

using testing::Differs;
using testing::RandomBatches;
using testing::Settle;
using testing::ThreeWriters;
using testing::WaitUntilSame;
using testing::Writer;
using testing::XformCluster;

// Writes `batches` random batches (creates, destroys, links, moves) to
// `w`'s world through `client`, keeping its model.
void WriteBatches(Client& client, Writer& w, int batches) {
  for (int i = 0; i < batches; ++i) {
    World next = w.model;
    std::vector<Command> batch = w.random.Next(next, 12);
    absl::StatusOr<uint64_t> frame = client.Apply(
        w.world, batch, {.end_frame = w.options.mode == FrameMode::kDriven});
    ASSERT_TRUE(frame.ok()) << frame.status();
    ASSERT_GE(*frame, w.last_frame) << "frames went back";
    w.last_frame = *frame;
    w.model = std::move(next);
    ++w.acknowledged;
  }
}

// What node `client` answers to lookups of every entity of `model` in the
// world's origin, at the latest stamp and at stamps between the writer's
// batches (their stamps the writer's clock gave them, carried by the log):
// each pose's bytes or its error, one line each.
std::string LookupAnswers(Client& client, const std::string& world,
                          const World& model) {
  std::string answers;
  model.ForEach([&](EntityId e, EntityId, const Matrix3x4&) {
    absl::StatusOr<TimedPose> latest = client.LookupTransform(world, 0, e);
    absl::StrAppend(&answers, e, ": ", latest.status().ToString());
    if (!latest.ok()) return;
    for (const Stamp back : {Stamp{0}, Stamp{1'000'000}, Stamp{37'000'000}}) {
      absl::StatusOr<TimedPose> then =
          client.LookupTransform(world, 0, e, {.stamp = latest->stamp - back});
      absl::StrAppend(&answers, " | ", then.status().ToString());
      if (then.ok()) {
        absl::StrAppend(&answers, " ",
                        absl::BytesToHexString(absl::string_view(
                            reinterpret_cast<const char*>(&then->pose),
                            sizeof then->pose)));
      }
    }
    absl::StrAppend(&answers, "\n");
  });
  return answers;
}

TEST(ClusterFailoverTest, EveryNodeIsAnExactReplicaAndWritesGoToTheWriter) {
  XformCluster cluster(3, 3);
  std::unique_ptr<Client> first = cluster.ClientOf(0);
  ASSERT_NE(first, nullptr) << cluster.Logs();
  std::vector<Writer> writers = ThreeWriters();
  for (Writer& w : writers) {
    ASSERT_TRUE(first->CreateWorld(w.world, w.options).ok());
  }
  // Written through node 2, which does not write them: each batch is
  // redirected to node 0, transparently.
  std::unique_ptr<Client> third = cluster.ClientOf(2);
  ASSERT_NE(third, nullptr);
  // A region view on node 2, a replica, as on any node (margin 0: its
  // membership is the positions' alone).
  MirrorOptions region_view;
  region_view.world = writers[1].world;
  region_view.region = *Region::Sphere({0, 0, 0}, 10);
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(*third, region_view);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  for (Writer& w : writers) {
    ASSERT_NO_FATAL_FAILURE(WriteBatches(*third, w, 150)) << cluster.Logs();
  }
  // It holds the entities of the writer's model inside the region, bit for
  // bit; moved on node 2, those inside the new one.
  const auto region_view_differs = [&](const Region& region) {
    std::string differs;
    for (const absl::Time deadline = absl::Now() + absl::Seconds(20);
         absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(20))) {
      std::vector<EntityId> ids;
      std::vector<Matrix3x4> matrices;
      (*mirror)->CopyAll(&ids, &matrices);
      std::vector<EntityId> inside;
      writers[1].model.ForEach([&](EntityId e, EntityId, const Matrix3x4& m) {
        if (region.Inside(m.translation())) inside.push_back(e);
      });
      differs =
          absl::StrCat("holds ", ids.size(), ", the region ", inside.size());
      if (ids.size() != inside.size()) continue;
      std::sort(inside.begin(), inside.end());
      differs = "";
      for (size_t k = 0; k < ids.size() && differs.empty(); ++k) {
        const Matrix3x4 expected = *writers[1].model.WorldMatrix(ids[k]);
        if (!std::binary_search(inside.begin(), inside.end(), ids[k]) ||
            std::memcmp(&matrices[k], &expected, sizeof expected) != 0) {
          differs = absl::StrCat("entity ", ids[k], " differs");
        }
      }
      if (differs.empty()) break;
    }
    return differs;
  };
  EXPECT_EQ(region_view_differs(region_view.region.value()), "");
  std::vector<EntityId> held;
  std::vector<Matrix3x4> matrices;
  (*mirror)->CopyAll(&held, &matrices);
  EXPECT_GT(held.size(), 0u);  // A view of some of the world, not all.
  EXPECT_LT(held.size(), writers[1].model.size());
  const Region moved = *Region::Sphere({6, -4, 2}, 9);
  ASSERT_TRUE((*mirror)->SetRegion(moved).ok());
  EXPECT_EQ(region_view_differs(moved), "");
  EXPECT_EQ((*mirror)->resyncs(), 0);
  for (int node = 0; node < cluster.size(); ++node) {
    std::unique_ptr<Client> client = cluster.ClientOf(node);
    ASSERT_NE(client, nullptr);
    for (Writer& w : writers) {
      EXPECT_EQ(WaitUntilSame(*client, w.world, w.model), "")
          << "node " << node << ", world " << w.world << "\n"
          << cluster.Logs();
      absl::StatusOr<WorldInfo> info = client->GetWorld(w.world);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->writer_node, "node0");
      EXPECT_EQ(info->writer_address, cluster.Address(0));
      EXPECT_EQ(info->answered_by, XformCluster::Name(node));
    }
  }
  // Every replica holds the writer's history, bit for bit: the same
  // lookups get the same answers on every node.
  std::unique_ptr<Client> writer_node = cluster.ClientOf(0);
  const std::string expected =
      LookupAnswers(*writer_node, writers[0].world, writers[0].model);
  EXPECT_NE(expected.find("OK"), std::string::npos);
  for (int node = 1; node < cluster.size(); ++node) {
    std::unique_ptr<Client> client = cluster.ClientOf(node);
    EXPECT_EQ(LookupAnswers(*client, writers[0].world, writers[0].model),
              expected)
        << "node " << node;
  }
  absl::StatusOr<std::vector<NodeInfo>> nodes = third->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].name, "node0");
  EXPECT_EQ((*nodes)[0].worlds_owned, 3u);
  EXPECT_EQ((*nodes)[2].worlds_served, 3u);
}

// A node that learns of a world created elsewhere names its writer from
// its first answer; one whose writer's lease goes unrenewed (the writer
// paused) says "try again" rather than sending writes there, until another
// node writes the world (issue 71).
TEST(ClusterFailoverTest, NodesNameALiveWriterOrNone) {
  XformCluster cluster(1, 2);
  std::unique_ptr<Client> first = cluster.ClientOf(0);
  std::unique_ptr<Client> second = cluster.ClientOf(1);
  ASSERT_NE(first, nullptr) << cluster.Logs();
  ASSERT_NE(second, nullptr) << cluster.Logs();
  ASSERT_TRUE(first->CreateWorld("fresh", {.mode = FrameMode::kDriven}).ok());
  absl::StatusOr<WorldInfo> info;
  EXPECT_TRUE(WaitUntil(
      [&] {
        info = second->GetWorld("fresh");
        return !absl::IsNotFound(info.status());
      },
      absl::Seconds(20), "node1 to know the world"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->writer_node, "node0") << "its first answer";
  ASSERT_TRUE(
      second->Apply("fresh", {CreateOp{1, 0, {}}}, {.end_frame = true}).ok());
  // The writer paused: node1 stops naming it before its lease (1 s)
  // expires, then names itself once it took the world.
  cluster.node(0).Signal(SIGSTOP);
  const absl::Time paused = absl::Now();
  std::vector<std::string> named;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(20);
       absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(10))) {
    info = second->GetWorld("fresh");
    if (!info.ok()) continue;
    if (named.empty() || named.back() != info->writer_node) {
      named.push_back(info->writer_node);
      std::printf("%s after the pause: writer '%s'\n",
                  absl::FormatDuration(absl::Now() - paused).c_str(),
                  info->writer_node.c_str());
    }
    if (info->writer_node == "node1") break;
  }
  cluster.node(0).Signal(SIGCONT);
  EXPECT_EQ(named, (std::vector<std::string>{"node0", "", "node1"}))
      << cluster.Logs();
}

// Writes random batches to `w`'s world through `client` (which fails over
// between the nodes) until `stop`, keeping its model; the longest any batch
// took to be acknowledged goes to `longest`. A batch that fails after the
// client's failover time is left in flight (`pending`) and ends it.
void WriteUntil(Client& client, Writer& w, const std::atomic<bool>& stop,
                absl::Duration& longest, std::atomic<uint64_t>& written) {
  std::unique_ptr<BatchWriter> stream;
  if (w.streamed) {
    absl::StatusOr<std::unique_ptr<BatchWriter>> opened =
        client.OpenWriter(w.world);
    ASSERT_TRUE(opened.ok());
    stream = *std::move(opened);
  }
  while (!stop.load()) {
    World next = w.model;
    std::vector<Command> batch = w.random.Next(next, 12);
    w.pending = batch;
    const ApplyOptions options{.end_frame =
                                   w.options.mode == FrameMode::kDriven};
    const absl::Time sent = absl::Now();
    absl::StatusOr<uint64_t> frame =
        stream != nullptr ? stream->Write(batch, options)
                          : client.Apply(w.world, batch, options);
    if (!frame.ok()) {
      ADD_FAILURE() << w.world << ": " << frame.status();
      return;
    }
    longest = std::max(longest, absl::Now() - sent);
    EXPECT_GE(*frame, w.last_frame) << w.world << ": frames went back";
    // An end_frame batch ended its frame: the next is in a later one.
    if (options.end_frame && w.last_frame != 0) {
      EXPECT_GT(*frame, w.last_frame)
          << w.world << ": batch acknowledged in frame " << *frame
          << " after frame " << w.last_frame;
    }
    w.last_frame = *frame;
    w.model = std::move(next);
    w.pending.reset();
    ++w.acknowledged;
    written.fetch_add(1);
  }
}

// Writers on three worlds (tick, driven, and one through ApplyStream), each
// with a client of every node, for as long as `during` runs.
struct Writing {
  Writing(XformCluster& cluster, std::vector<Writer>& writers) {
    for (size_t i = 0; i < writers.size(); ++i) {
      clients.push_back(cluster.ClientOfAll());
      EXPECT_NE(clients.back(), nullptr);
      longest.emplace_back();
      written.emplace_back(0);
    }
    for (size_t i = 0; i < writers.size(); ++i) {
      threads.emplace_back([this, i, &writers] {
        WriteUntil(*clients[i], writers[i], stop, longest[i], written[i]);
      });
    }
  }
  ~Writing() { Stop(); }
  // Waits until every writer has had `batches` more acknowledged than when
  // called; false past `timeout`.
  bool EachWrites(uint64_t batches, absl::Duration timeout) {
    std::vector<uint64_t> before;
    for (const std::atomic<uint64_t>& count : written) {
      before.push_back(count.load());
    }
    for (const absl::Time deadline = absl::Now() + timeout;
         absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(5))) {
      bool all = true;
      for (size_t i = 0; i < written.size(); ++i) {
        all &= written[i].load() >= before[i] + batches;
      }
      if (all) return true;
    }
    return false;
  }
  void Stop() {
    stop.store(true);
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<Client>> clients;
  std::deque<absl::Duration> longest;
  std::deque<std::atomic<uint64_t>> written;  // Acknowledged, per writer.
  std::vector<std::thread> threads;
};

// What a node's log says of a replica whose frame differed from its
// writer's (it then reloads): never, for a replica applies the same records
// to a deterministic core.
// Likewise a client cut off for refusals: none of the writers', which
// follow the retry pace. And a world's role changing in a way the
// diagram in cluster_node.h does not have.
std::string ForbiddenLogLines(const std::string& log) {
  std::string found;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "differs from its writer's") ||
        absl::StrContains(line, "--max_refused_mb_per_second") ||
        absl::StrContains(line, "diagram does not have")) {
      absl::StrAppend(&found, line, "\n");
    }
  }
  return found;
}

// Every live node holds each world as its writer's model, or the model and
// the batch in flight, bit for bit (waiting for replicas to catch up), and
// has published every frame a batch was acknowledged in.
void ExpectEveryNodeHolds(XformCluster& cluster, std::vector<Writer>& writers) {
  for (Writer& w : writers) {
    for (int node = 0; node < cluster.size(); ++node) {
      if (!cluster.up(node)) continue;
      std::unique_ptr<Client> client = cluster.ClientOf(node);
      ASSERT_NE(client, nullptr) << "node " << node << "\n" << cluster.Logs();
      EXPECT_EQ(ForbiddenLogLines(cluster.node(node).Log()), "")
          << "node " << node << "\n"
          << cluster.Logs();
      uint64_t published = 0;
      EXPECT_TRUE(WaitUntil(
          [&] {
            absl::StatusOr<WorldInfo> info = client->GetWorld(w.world);
            if (info.ok()) published = info->frame;
            return published >= w.last_frame;
          },
          absl::Seconds(20), "the last acknowledged frame published"));
      EXPECT_GE(published, w.last_frame)
          << "node " << node << ", world " << w.world
          << ": a batch was acknowledged in a frame never published\n"
          << cluster.Logs();
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      std::string differs;
      do {
        bool landed = false;
        Writer copy = w;
        differs = Settle(*client, copy, &landed);
        if (differs.empty()) {
          if (landed) w = std::move(copy);
          break;
        }
        absl::SleepFor(absl::Milliseconds(20));
      } while (absl::Now() < deadline);
      EXPECT_EQ(differs, "") << "node " << node << ", world " << w.world << "\n"
                             << cluster.Logs();
    }
    w.pending.reset();
  }
}

TEST(ClusterFailoverTest, AWriterKilledIsReplacedAndNoBatchIsLostOrDoubled) {
  XformCluster cluster(3, 3);
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  std::vector<Writer> writers = ThreeWriters();
  for (Writer& w : writers) {
    ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  }
  absl::StatusOr<WorldInfo> info = client->GetWorld("tick");
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->writer_node, "node0");
  {
    Writing writing(cluster, writers);
    ASSERT_TRUE(writing.EachWrites(20, absl::Seconds(20))) << cluster.Logs();
    const absl::Time killed = absl::Now();
    cluster.Kill(0);
    // Written again at another node: two more batches each (the one in
    // flight at the kill may be acknowledged by the dying node).
    const bool resumed = writing.EachWrites(2, absl::Seconds(20));
    const absl::Duration failover = absl::Now() - killed;
    ASSERT_TRUE(resumed) << cluster.Logs();
    ASSERT_TRUE(writing.EachWrites(20, absl::Seconds(20))) << cluster.Logs();
    writing.Stop();
    std::printf(
        "writes accepted on all three worlds %s after the writer's "
        "kill -9; longest acknowledgement %s, %s, %s\n",
        absl::FormatDuration(failover).c_str(),
        absl::FormatDuration(writing.longest[0]).c_str(),
        absl::FormatDuration(writing.longest[1]).c_str(),
        absl::FormatDuration(writing.longest[2]).c_str());
  }
  ExpectEveryNodeHolds(cluster, writers);
  info = client->GetWorld("tick");
  ASSERT_TRUE(info.ok());
  EXPECT_NE(info->writer_node, "node0");
  EXPECT_GE(info->frame + 1, writers[0].last_frame);
}

// The records of a world's log, in order: which node wrote each, and the
// epochs begun. Read straight from JetStream.
struct LogEntry {
  std::string node;
  bool epoch = false;
};
std::vector<LogEntry> ReadLog(const std::string& nats_url,
                              const std::string& world) {
  std::vector<LogEntry> entries;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  if (natsConnection_ConnectTo(&nc, nats_url.c_str()) != NATS_OK) {
    return entries;
  }
  natsConnection_JetStream(&js, nc, nullptr);
  const std::string hex = absl::BytesToHexString(world);
  const std::string stream = absl::StrCat("XFORM_LOG_", hex);
  jsSubOptions options;
  jsSubOptions_Init(&options);
  options.Stream = stream.c_str();
  options.Ordered = true;
  natsSubscription* sub = nullptr;
  const std::string subject = absl::StrCat("xform.log.", hex);
  if (js_SubscribeSync(&sub, js, subject.c_str(), nullptr, &options, nullptr) ==
      NATS_OK) {
    natsMsg* msg = nullptr;
    while (natsSubscription_NextMsg(&msg, sub, 1000) == NATS_OK) {
      const char* node = nullptr;
      const char* epoch = nullptr;
      natsMsgHeader_Get(msg, "Xform-Node", &node);
      natsMsgHeader_Get(msg, "Xform-Epoch", &epoch);
      entries.push_back({node != nullptr ? node : "", epoch != nullptr});
      natsMsg_Destroy(msg);
    }
    natsSubscription_Destroy(sub);
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return entries;
}

// The world "w", driven, its batches random from `seed`.
Writer DrivenWorld(uint32_t seed) {
  return {.world = "w",
          .options = {.mode = FrameMode::kDriven},
          .random = RandomBatches(seed, 1)};
}

TEST(ClusterFailoverTest, AWriterPausedPastItsLeaseAppendsNothingAndFollows) {
  XformCluster cluster(3, 3);
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  Writer w = DrivenWorld(11);
  ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 50));
  // Paused past its lease, while writes go on: another node takes the
  // world (the writes wait for it), and the others say so.
  cluster.node(0).Signal(SIGSTOP);
  const absl::Time paused = absl::Now();
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 50)) << cluster.Logs();
  const absl::Duration taken = absl::Now() - paused;
  std::unique_ptr<Client> second = cluster.ClientOf(1);
  std::string successor;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(20))) {
    absl::StatusOr<WorldInfo> info = second->GetWorld(w.world);
    ASSERT_TRUE(info.ok());
    successor = info->writer_node;
    if (successor != "node0" && !successor.empty()) break;
  }
  ASSERT_NE(successor, "node0");
  ASSERT_FALSE(successor.empty());
  cluster.node(0).Signal(SIGCONT);
  // It finds out, steps down, and follows.
  EXPECT_TRUE(
      cluster.node(0).WaitForLog("no longer written here", absl::Seconds(10)))
      << cluster.node(0).Log();
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 50)) << cluster.Logs();
  for (int node = 0; node < 3; ++node) {
    std::unique_ptr<Client> each = cluster.ClientOf(node);
    EXPECT_EQ(WaitUntilSame(*each, w.world, w.model), "")
        << "node " << node << "\n"
        << cluster.Logs();
    absl::StatusOr<WorldInfo> placed = each->GetWorld(w.world);
    ASSERT_TRUE(placed.ok());
    EXPECT_EQ(placed->writer_node, successor) << "node " << node;
  }
  // The log: node0's records, then the successor's epoch and records, and
  // nothing of node0's after them.
  const std::vector<LogEntry> log = ReadLog(cluster.nats().Url(0), w.world);
  ASSERT_FALSE(log.empty());
  bool successor_began = false;
  for (const LogEntry& entry : log) {
    if (entry.epoch && entry.node == successor) successor_began = true;
    if (successor_began) {
      EXPECT_NE(entry.node, "node0") << "node0 appended after its successor";
    }
  }
  EXPECT_TRUE(successor_began);
  std::printf("paused writer replaced: 50 batches through the failover in %s\n",
              absl::FormatDuration(taken).c_str());
}

TEST(ClusterFailoverTest, ADrainedNodeHandsItsWorldsOverWithoutLosingAWrite) {
  XformCluster cluster(3, 3);
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  std::vector<Writer> writers = ThreeWriters();
  for (Writer& w : writers) {
    ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  }
  {
    Writing writing(cluster, writers);
    ASSERT_TRUE(writing.EachWrites(20, absl::Seconds(20))) << cluster.Logs();
    // Asked of node 2, which redirects the drain to node 0.
    std::unique_ptr<Client> third = cluster.ClientOf(2);
    const absl::Time asked = absl::Now();
    absl::StatusOr<uint32_t> moved = third->DrainNode("node0");
    ASSERT_TRUE(moved.ok()) << moved.status() << cluster.Logs();
    EXPECT_EQ(*moved, 3u) << cluster.Logs();
    const absl::Duration drain = absl::Now() - asked;
    ASSERT_TRUE(writing.EachWrites(20, absl::Seconds(20))) << cluster.Logs();
    writing.Stop();
    std::printf("drained in %s; longest acknowledgement meanwhile %s, %s, %s\n",
                absl::FormatDuration(drain).c_str(),
                absl::FormatDuration(writing.longest[0]).c_str(),
                absl::FormatDuration(writing.longest[1]).c_str(),
                absl::FormatDuration(writing.longest[2]).c_str());
    for (const absl::Duration& longest : writing.longest) {
      EXPECT_LT(longest, absl::Seconds(3));  // No stall past a failover.
    }
  }
  ExpectEveryNodeHolds(cluster, writers);
  for (Writer& w : writers) {
    absl::StatusOr<WorldInfo> info = client->GetWorld(w.world);
    ASSERT_TRUE(info.ok());
    EXPECT_NE(info->writer_node, "node0");
  }
  absl::StatusOr<std::vector<NodeInfo>> nodes = client->ListNodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        nodes = client->ListNodes();
        return nodes.ok() && (*nodes)[0].draining;
      },
      absl::Seconds(5), "node0 listed as draining"));
  EXPECT_TRUE((*nodes)[0].draining);
  EXPECT_EQ((*nodes)[0].worlds_owned, 0u);
  // Undrained, it may take worlds again.
  EXPECT_TRUE(client->DrainNode("node0", false).ok());
  EXPECT_EQ(client->DrainNode("node9").status().code(),
            absl::StatusCode::kNotFound);
}

// A Mirror on one node, the node killed, 5% of the world changed while it
// is down: the Mirror resumes on another node, sent what changed, not the
// world.
TEST(ClusterFailoverTest, ASubscriberWhoseNodeDiesResumesOnAnother) {
  XformCluster cluster(3, 2);
  std::unique_ptr<Client> writer = cluster.ClientOf(0);
  ASSERT_NE(writer, nullptr) << cluster.Logs();
  ASSERT_TRUE(writer->CreateWorld("scene", {.mode = FrameMode::kDriven}).ok());
  World model;
  std::vector<Command> creates;
  constexpr EntityId kEntities = 20'000;
  for (EntityId e = 1; e <= kEntities; ++e) {
    Transform local;
    local.position = {static_cast<float>(e % 100), 1, static_cast<float>(e)};
    creates.push_back(CreateOp{e, e % 20 == 1 ? 0 : e - 1, local});
  }
  absl::StatusOr<uint64_t> created =
      writer->Apply("scene", creates, {.end_frame = true});
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(model.Apply(creates).ok());
  // The Mirror's client: node 1 first, then node 0.
  ClientOptions options;
  options.address = absl::StrCat(cluster.Address(1), ",", cluster.Address(0));
  options.own_connection = true;
  absl::StatusOr<std::unique_ptr<Client>> reader = Client::Connect(options);
  ASSERT_TRUE(reader.ok());
  absl::Mutex mu;
  size_t bytes = 0;
  MirrorOptions mirror_options{.world = "scene"};
  std::vector<std::string> after_kill;
  bool killed_yet = false;
  uint64_t notified = 0;
  mirror_options.on_update = [&](const MirrorUpdate& update) {
    absl::MutexLock lock(&mu);
    bytes += update.bytes;
    // A frame is told whole at its last message: a snapshot of the world
    // comes in parts (a CI run counted the first 1 MiB part as all of it).
    if (update.snapshot ? update.snapshot_done : update.last_part) {
      notified = std::max(notified, update.frame);
    }
    if (killed_yet) {
      after_kill.push_back(absl::StrCat(
          "frame ", update.frame, update.snapshot ? " snapshot" : "",
          update.keeps_view ? " keeping the view" : "", ": ", update.bytes,
          " bytes, ", update.moved.size(), " moved, ", update.created.size(),
          " created"));
    }
  };
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(**reader, mirror_options);
  ASSERT_TRUE(mirror.ok());
  ASSERT_TRUE((*mirror)->WaitForSync(absl::Seconds(20)));
  ASSERT_TRUE((*mirror)->WaitForFrame(*created, absl::Seconds(20)));
  {
    // Its callback, which counts the bytes, runs once the copy has it.
    absl::MutexLock lock(&mu);
    const auto told = [&] { return notified >= *created; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&told), absl::Seconds(20)));
  }
  // What it took to send the world: its bytes so far.
  size_t snapshot_bytes = 0;
  {
    absl::MutexLock lock(&mu);
    snapshot_bytes = std::exchange(bytes, 0);
  }
  {
    absl::MutexLock lock(&mu);
    killed_yet = true;
  }
  cluster.Kill(1);
  const absl::Time killed = absl::Now();
  // 5% of the world moved (the last of each chain of 20), in one frame,
  // while its node is gone.
  std::vector<Command> moves;
  for (EntityId e = 20; e <= kEntities; e += 20) {
    Transform local;
    local.position = {2, 3, static_cast<float>(e)};
    moves.push_back(SetLocalOp{e, local});
  }
  absl::StatusOr<uint64_t> frame =
      writer->Apply("scene", moves, {.end_frame = true});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(model.Apply(moves).ok());
  ASSERT_TRUE((*mirror)->WaitForFrame(*frame, absl::Seconds(20)))
      << cluster.Logs();
  const absl::Duration exact = absl::Now() - killed;
  std::vector<EntityId> ids;
  std::vector<Matrix3x4> worlds;
  (*mirror)->CopyAll(&ids, &worlds);
  ASSERT_EQ(ids.size(), model.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const Matrix3x4 expected = *model.WorldMatrix(ids[k]);
    ASSERT_EQ(std::memcmp(&worlds[k], &expected, sizeof expected), 0)
        << "entity " << ids[k];
  }
  size_t resume_bytes = 0;
  {
    absl::MutexLock lock(&mu);
    resume_bytes = bytes;
  }
  EXPECT_EQ((*mirror)->resumes(), 1) << cluster.Logs();
  EXPECT_EQ((*mirror)->resyncs(), 0);
  EXPECT_LT(resume_bytes, snapshot_bytes / 10)
      << "resumed with " << resume_bytes << " bytes; the snapshot was "
      << snapshot_bytes << ": " << absl::StrJoin(after_kill, "; ");
  std::printf(
      "subscriber exact on another node %s after its node's kill -9, "
      "sent %zu bytes to resume (%.1f%% of the snapshot's %zu) for 5%% "
      "of the world changed\n",
      absl::FormatDuration(exact).c_str(), resume_bytes,
      100.0 * static_cast<double>(resume_bytes) /
          static_cast<double>(snapshot_bytes),
      snapshot_bytes);
}

// The crash loop: writers on three worlds (one through ApplyStream), each
// with a model of what was acknowledged; each cycle kills -9, at random,
// the node writing a world, a NATS server, or both at once (a machine:
// node i runs beside NATS server i), and starts them again. After each,
// every world on every node equals its model (or its model and the batch
// in flight) bit for bit, no frame went back, and no batch applied twice
// (a batch sent again is its model's next: applied twice, the world would
// differ). XFORM_CLUSTER_CYCLES sets the cycles (4, for CI;
// tools/cluster_crash_loop.sh runs 100).
TEST(ClusterFailoverTest, CrashLoop) {
  int cycles = 3;
  if (const char* env = std::getenv("XFORM_CLUSTER_CYCLES")) {
    cycles = std::max(1, std::atoi(env));
  }
  // Refusals held to 1 MiB a second (16 small calls): the writers follow
  // the retry pace of docs/wire.md through every failover, and must never
  // be cut off for it (issue 71).
  XformCluster cluster(
      3, 3, {"--snapshot_every=16KiB", "--max_refused_mb_per_second=1"});
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  std::vector<Writer> writers = ThreeWriters();
  for (Writer& w : writers) {
    ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  }
  // XFORM_CLUSTER_SEED: another sequence of kills (tools/
  // cluster_crash_loop.sh runs several).
  const char* seed = std::getenv("XFORM_CLUSTER_SEED");
  std::mt19937 random(seed != nullptr ? std::atoi(seed) : 63);
  int killed[3] = {0, 0, 0};  // Writers, NATS servers, machines.
  absl::Duration longest;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    {
      Writing writing(cluster, writers);
      // A random amount written before the kill (about a second's worth).
      ASSERT_TRUE(writing.EachWrites(100 + random() % 200, absl::Seconds(30)))
          << cluster.Logs();
      // Who writes a world now: that node (and its NATS server) goes.
      absl::StatusOr<WorldInfo> info =
          client->GetWorld(writers[random() % writers.size()].world);
      ASSERT_TRUE(info.ok()) << info.status();
      int node = 0;
      while (node < cluster.size() &&
             XformCluster::Name(node) != info->writer_node) {
        ++node;
      }
      if (node == cluster.size()) node = static_cast<int>(random() % 3);
      const int what = static_cast<int>(random() % 3);
      const int server = what == 1 ? static_cast<int>(random() % 3) : node;
      std::printf("cycle %d: kill -9 %s\n", cycle,
                  what == 0 ? absl::StrCat("node", node).c_str()
                  : what == 1
                      ? absl::StrCat("NATS server n", server).c_str()
                      : absl::StrCat("node", node, " and NATS server n", server)
                            .c_str());
      if (what != 1) {
        EXPECT_EQ(ForbiddenLogLines(cluster.node(node).Log()), "")
            << "node " << node << ", before its kill:\n"
            << cluster.node(node).Log();
        cluster.Kill(node);
      }
      if (what != 0) cluster.nats().Kill(server);
      ++killed[what];
      absl::SleepFor(absl::Milliseconds(1500 + random() % 1000));
      if (what != 0) cluster.nats().Restart(server);
      if (what != 1) cluster.Start(node);
      ASSERT_TRUE(writing.EachWrites(5, absl::Seconds(30))) << cluster.Logs();
      writing.Stop();
      for (const absl::Duration& each : writing.longest) {
        longest = std::max(longest, each);
      }
    }
    ASSERT_FALSE(::testing::Test::HasFailure()) << "cycle " << cycle << "\n"
                                                << cluster.Logs();
    ASSERT_NO_FATAL_FAILURE(ExpectEveryNodeHolds(cluster, writers))
        << "cycle " << cycle;
    ASSERT_FALSE(::testing::Test::HasFailure()) << "cycle " << cycle;
    // One failure at a time: the next waits until every NATS server has
    // caught up (in a CI run a stream had no leader for over 30 s when a
    // second server was killed before the first restarted had).
    for (int server = 0; server < cluster.nats().size(); ++server) {
      ASSERT_TRUE(cluster.nats().WaitCurrent(server, absl::Seconds(60)))
          << "NATS server n" << server << " not current\n"
          << cluster.nats().Log(server);
    }
  }
  uint64_t acknowledged = 0;
  for (const Writer& w : writers) acknowledged += w.acknowledged;
  std::printf(
      "crash loop: %d cycles (%d writers, %d NATS servers, %d machines "
      "killed -9), %llu batches acknowledged, every node exact after each; "
      "the longest acknowledgement %s\n",
      cycles, killed[0], killed[1], killed[2],
      static_cast<unsigned long long>(acknowledged),
      absl::FormatDuration(longest).c_str());
  EXPECT_GT(acknowledged, 100u);
}

// --- Faults.

TEST(ClusterFaultTest, NatsUnreachableAtStartIsWaitedForThenNamed) {
  testing::NatsCluster nats(1);
  nats.Kill(0);
  // Too short a wait: it gives up, saying why.
  testing::Xformd impatient({absl::StrCat("--cluster=", nats.Url(0)),
                             "--cluster_replicas=1",
                             "--cluster_connect_timeout_ms=1000"});
  EXPECT_NE(impatient.WaitForExit(absl::Seconds(20)), 0);
  EXPECT_TRUE(absl::StrContains(
      impatient.Log(), "cannot connect to the cluster's NATS servers within"))
      << impatient.Log();
  // A patient one serves once NATS comes (xformd listens once connected).
  std::thread comes([&nats] {
    absl::SleepFor(absl::Seconds(1));
    nats.Restart(0);
  });
  testing::Xformd patient({absl::StrCat("--cluster=", nats.Url(0)),
                           "--cluster_replicas=1", "--node_name=patient"});
  comes.join();
  std::unique_ptr<Client> client = testing::ConnectReady(patient.address());
  ASSERT_NE(client, nullptr) << patient.Log();
  EXPECT_TRUE(client->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
}

TEST(ClusterFaultTest,
     NatsLostMidRunRefusesWritesAndServesReadsSayingHowStale) {
  XformCluster cluster(1, 2, {"--cluster_write_timeout_ms=2000"});
  std::unique_ptr<Client> writer = cluster.ClientOf(0);
  ASSERT_NE(writer, nullptr) << cluster.Logs();
  Writer w = DrivenWorld(17);
  ASSERT_TRUE(writer->CreateWorld(w.world, w.options).ok());
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*writer, w, 30));
  std::unique_ptr<Client> reader = cluster.ClientOf(1);
  ASSERT_EQ(WaitUntilSame(*reader, w.world, w.model), "");
  cluster.nats().Kill(0);
  // Writes: refused UNAVAILABLE, each batch whole or not at all.
  World next = w.model;
  std::vector<Command> batch = w.random.Next(next, 12);
  w.pending = batch;
  absl::StatusOr<uint64_t> refused =
      writer->Apply(w.world, batch, {.end_frame = true});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
  // Reads go on, on both nodes, saying how long since they heard from the
  // log, which grows.
  for (Client* client : {writer.get(), reader.get()}) {
    absl::StatusOr<WorldInfo> info;
    EXPECT_TRUE(WaitUntil(
        [&] {
          info = client->GetWorld(w.world);
          return !info.ok() || info->unconfirmed >= absl::Seconds(1);
        },
        absl::Seconds(10), "a second unconfirmed"));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_GE(info->unconfirmed, absl::Seconds(1)) << info->answered_by;
    absl::StatusOr<std::vector<EntityState>> read =
        client->ReadSubtree(w.world, 1);
    EXPECT_TRUE(read.ok() || absl::IsNotFound(read.status())) << read.status();
  }
  // NATS back: writes again, and every node as the log has it. The refused
  // batch may be in the log (stored, its acknowledgement lost): a frame
  // written through the log after it marks how far a node must have read
  // before it says whether it is.
  cluster.nats().Restart(0);
  std::unique_ptr<Client> again = cluster.ClientOfAll();
  uint64_t barrier = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (barrier == 0 && absl::Now() < deadline) {
    absl::StatusOr<uint64_t> frame =
        again->Apply(w.world, {}, {.end_frame = true});
    if (frame.ok()) {
      barrier = *frame;
    } else {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  ASSERT_NE(barrier, 0u) << cluster.Logs();
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<WorldInfo> info = reader->GetWorld(w.world);
        return info.ok() && info->frame >= barrier;
      },
      deadline, "the reader at the barrier's frame"))
      << cluster.Logs();
  bool landed = false;
  ASSERT_EQ(Settle(*reader, w, &landed), "") << cluster.Logs();
  w.pending.reset();
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*again, w, 20)) << cluster.Logs();
  for (int node = 0; node < 2; ++node) {
    std::unique_ptr<Client> each = cluster.ClientOf(node);
    EXPECT_EQ(WaitUntilSame(*each, w.world, w.model), "") << "node " << node;
  }
}

TEST(ClusterFaultTest, AReplicaFarBehindReloadsAndIsExact) {
  XformCluster cluster(3, 3, {"--snapshot_every=8KiB"});
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  Writer w = DrivenWorld(19);
  ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 20));
  // Node 2 stops while the log moves on past snapshots and their purges.
  cluster.node(2).Signal(SIGSTOP);
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 400));
  cluster.node(2).Signal(SIGCONT);
  std::unique_ptr<Client> behind = cluster.ClientOf(2);
  EXPECT_EQ(WaitUntilSame(*behind, w.world, w.model), "")
      << cluster.node(2).Log();
}

// Publishes `payload` (no headers: no record of any cluster) into
// `world`'s log and snapshot subjects, as a holder of the NATS credentials
// could; whether JetStream took both.
// A JetStream context on the NATS server at `nats_url`, for the test to
// read or write a world's streams as anyone holding the credentials could.
struct JetStreamOf {
  explicit JetStreamOf(const std::string& nats_url) {
    if (natsConnection_ConnectTo(&nc, nats_url.c_str()) == NATS_OK) {
      natsConnection_JetStream(&js, nc, nullptr);
    }
  }
  ~JetStreamOf() {
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
  }
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
};

bool PublishNotOurs(const std::string& nats_url, const std::string& world) {
  JetStreamOf nats(nats_url);
  if (nats.js == nullptr) return false;
  const std::string hex = absl::BytesToHexString(world);
  bool stored = true;
  for (const std::string& subject :
       {absl::StrCat("xform.log.", hex), absl::StrCat("xform.snap.", hex)}) {
    jsPubAck* ack = nullptr;
    stored &= js_Publish(&ack, nats.js, subject.c_str(), "oops", 4, nullptr,
                         nullptr) == NATS_OK;
    jsPubAck_Destroy(ack);
  }
  return stored;
}

// A message not this cluster's in a world's streams (issue 71, item 13:
// 4 bytes published there left the world unwritable for good) is passed
// over: its writer, fenced by it, hands over or takes the world again, and
// writes go on, every node exact.
TEST(ClusterFaultTest, AMessageNotOursInAWorldsLogIsPassedOver) {
  XformCluster cluster(1, 2, {"--snapshot_every=4KiB"});
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  Writer w = DrivenWorld(23);
  ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 30));
  ASSERT_TRUE(PublishNotOurs(cluster.nats().Url(0), w.world));
  // Written on (a failover's wait at most), then exact everywhere, and
  // loaded again from its streams exact.
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 60)) << cluster.Logs();
  for (int node = 0; node < cluster.size(); ++node) {
    std::unique_ptr<Client> each = cluster.ClientOf(node);
    EXPECT_EQ(WaitUntilSame(*each, w.world, w.model), "")
        << "node " << node << "\n"
        << cluster.Logs();
  }
  EXPECT_TRUE(absl::StrContains(cluster.Logs(), "is not this cluster's"))
      << cluster.Logs();
  if (std::getenv("XFORM_TEST_LOGS") != nullptr) {
    std::printf("%s", cluster.Logs().c_str());
  }
  cluster.Kill(1);
  cluster.Start(1);
  std::unique_ptr<Client> restarted = cluster.ClientOf(1);
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(WaitUntilSame(*restarted, w.world, w.model), "")
      << cluster.node(1).Log();
}

// Publishes into `world`'s log a record of this cluster's (its identity
// copied from the log's first record) that no node can apply: a batch that
// does not parse. Its sequence, or 0.
uint64_t PublishBadRecord(const std::string& nats_url,
                          const std::string& world) {
  JetStreamOf nats(nats_url);
  if (nats.js == nullptr) return 0;
  const std::string hex = absl::BytesToHexString(world);
  const std::string stream = absl::StrCat("XFORM_LOG_", hex);
  const std::string subject = absl::StrCat("xform.log.", hex);
  std::string cluster;
  natsMsg* first = nullptr;
  if (js_GetMsg(&first, nats.js, stream.c_str(), 1, nullptr, nullptr) ==
      NATS_OK) {
    const char* value = nullptr;
    if (natsMsgHeader_Get(first, "Xform-Cluster", &value) == NATS_OK) {
      cluster = value;
    }
    natsMsg_Destroy(first);
  }
  uint64_t seq = 0;
  natsMsg* msg = nullptr;
  if (!cluster.empty() && natsMsg_Create(&msg, subject.c_str(), nullptr,
                                         "\xff\xff\xff", 3) == NATS_OK) {
    natsMsgHeader_Set(msg, "Xform-Cluster", cluster.c_str());
    natsMsgHeader_Set(msg, "Xform-Frame", "1");
    jsPubAck* ack = nullptr;
    if (js_PublishMsg(&ack, nats.js, msg, nullptr, nullptr) == NATS_OK) {
      seq = ack->Sequence;
    }
    jsPubAck_Destroy(ack);
    natsMsg_Destroy(msg);
  }
  return seq;
}

grpc::health::v1::HealthCheckResponse::ServingStatus WorldsHealth(
    const std::string& address) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("xform.v1.Xform.worlds");
  grpc::health::v1::HealthCheckResponse response;
  if (!health->Check(&context, request, &response).ok()) {
    return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }
  return response.status();
}

// A record of this cluster's that no node can apply (forged by a holder of
// the NATS credentials, or a defect) wedges the world: its writes are
// refused DATA_LOSS at once rather than timing out, GetWorld names the
// record, and the node's worlds' health is NOT_SERVING; an operator's
// SkipRecord deletes it, and the world is written on, every node exact
// (issue 71, item 13).
TEST(ClusterFaultTest, AWorldWedgedOnABadRecordSaysSoUntilItIsSkipped) {
  XformCluster cluster(1, 2);
  std::unique_ptr<Client> client = cluster.ClientOfAll();
  ASSERT_NE(client, nullptr) << cluster.Logs();
  Writer w = DrivenWorld(29);
  ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 20));
  EXPECT_EQ(WorldsHealth(cluster.Address(1)),
            grpc::health::v1::HealthCheckResponse::SERVING);
  const uint64_t bad = PublishBadRecord(cluster.nats().Url(0), w.world);
  ASSERT_NE(bad, 0u);
  // Writes: DATA_LOSS, naming the record, within a failover's time.
  absl::Status refused;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(30);
       absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(50))) {
    World next = w.model;
    refused =
        client->Apply(w.world, w.random.Next(next, 4), {.end_frame = true})
            .status();
    if (absl::IsDataLoss(refused)) break;
    ASSERT_FALSE(refused.ok()) << "a batch applied past the bad record";
  }
  ASSERT_TRUE(absl::IsDataLoss(refused)) << refused << "\n" << cluster.Logs();
  EXPECT_TRUE(absl::StrContains(refused.message(), absl::StrCat(bad)))
      << refused;
  for (int node = 0; node < cluster.size(); ++node) {
    std::unique_ptr<Client> each = cluster.ClientOf(node);
    absl::StatusOr<WorldInfo> info = each->GetWorld(w.world);
    for (const absl::Time deadline = absl::Now() + absl::Seconds(20);
         info.ok() && info->wedged.empty() && absl::Now() < deadline;
         absl::SleepFor(absl::Milliseconds(50))) {
      info = each->GetWorld(w.world);
    }
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->wedged_record, bad) << "node " << node;
    EXPECT_EQ(WorldsHealth(cluster.Address(node)),
              grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  }
  // Only the record it is wedged on may be skipped.
  EXPECT_EQ(client->SkipRecord(w.world, bad + 1).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client->SkipRecord(w.world, bad).ok()) << cluster.Logs();
  // Written on, exact everywhere, healthy again.
  ASSERT_NO_FATAL_FAILURE(WriteBatches(*client, w, 20)) << cluster.Logs();
  for (int node = 0; node < cluster.size(); ++node) {
    std::unique_ptr<Client> each = cluster.ClientOf(node);
    EXPECT_EQ(WaitUntilSame(*each, w.world, w.model), "")
        << "node " << node << "\n"
        << cluster.Logs();
    EXPECT_EQ(WorldsHealth(cluster.Address(node)),
              grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

TEST(ClusterFaultTest, AnotherClustersServersAreRefusedNotMixed) {
  // Two deployments, each its own NATS server and a world named alike.
  testing::NatsCluster ours(1);
  testing::NatsCluster theirs(1);
  {
    testing::Xformd other({absl::StrCat("--cluster=", theirs.Url(0)),
                           "--cluster_replicas=1", "--node_name=other"});
    std::unique_ptr<Client> client = testing::ConnectReady(other.address());
    ASSERT_NE(client, nullptr) << other.Log();
    ASSERT_TRUE(client->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
    ASSERT_TRUE(
        client->Apply("w", {CreateOp{99, 0, {}}}, {.end_frame = true}).ok());
  }
  // A node told both deployments' servers: on ours first.
  testing::Xformd node(
      {absl::StrCat("--cluster=", ours.Url(0), ",", theirs.Url(0)),
       "--cluster_replicas=1", "--node_name=mixed"});
  std::unique_ptr<Client> client = testing::ConnectReady(node.address());
  ASSERT_NE(client, nullptr) << node.Log();
  ASSERT_TRUE(client->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  ASSERT_TRUE(
      client->Apply("w", {CreateOp{1, 0, {}}}, {.end_frame = true}).ok());
  // Ours lost: it reconnects to theirs, finds another cluster, and stops.
  ours.Kill(0);
  EXPECT_NE(node.WaitForExit(absl::Seconds(20)), -1) << node.Log();
  EXPECT_TRUE(absl::StrContains(node.Log(), "now hold another cluster"))
      << node.Log();
}

}  // namespace
}  // namespace xform
