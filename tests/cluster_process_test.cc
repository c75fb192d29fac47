// Copyright 2026 The xform Authors.
//
// xformd with --cluster, as processes beside real nats-server processes
// (tests/nats_cluster.h), the log's side: a NATS server lost while a world
// is written loses no acknowledged write and stalls it for a failover at
// most; a batch over the NATS payload limit is split and put together
// again; worlds of any name come back; NATS's TLS and tokens. The nodes'
// side (replicas, failover, a paused writer, the crash loop) is
// cluster_failover_test.cc.

#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/acknowledged_writes.h"
#include "tests/nats_cluster.h"
#include "tests/xformd_process.h"
#include "xform/client.h"
#include "xform/world.h"

namespace xform {
namespace {

using testing::ConnectReady;
using testing::NatsCluster;
using testing::Settle;
using testing::ThreeWriters;
using testing::Write;
using testing::Writer;
using testing::Xformd;

std::vector<std::string> NodeFlags(const std::string& cluster,
                                   const std::string& node, int replicas,
                                   const std::string& snapshot_every) {
  return {absl::StrCat("--cluster=", cluster),
          absl::StrCat("--node_name=", node),
          absl::StrCat("--cluster_replicas=", replicas),
          absl::StrCat("--snapshot_every=", snapshot_every)};
}

// The NATS server that leads a stream, as JetStream says.
std::string StreamLeader(const std::string& url, const std::string& stream) {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  std::string leader;
  if (natsConnection_ConnectTo(&nc, url.c_str()) != NATS_OK) return leader;
  if (natsConnection_JetStream(&js, nc, nullptr) == NATS_OK) {
    jsStreamInfo* info = nullptr;
    if (js_GetStreamInfo(&info, js, stream.c_str(), nullptr, nullptr) ==
            NATS_OK &&
        info->Cluster != nullptr && info->Cluster->Leader != nullptr) {
      leader = info->Cluster->Leader;
    }
    jsStreamInfo_Destroy(info);
    jsCtx_Destroy(js);
  }
  natsConnection_Destroy(nc);
  return leader;
}

TEST(ClusterTest, LosingTheLeadingNatsServerLosesNoAcknowledgedWrite) {
  NatsCluster nats(3);
  Xformd server(NodeFlags(nats.Urls(), "writer", 3, "64MiB"));
  std::unique_ptr<Client> client = ConnectReady(server.address());
  ASSERT_NE(client, nullptr) << server.Log();
  Writer w{.world = "w",
           .options = {.mode = FrameMode::kDriven},
           .random = testing::RandomBatches(7, 1)};
  ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  const std::string stream =
      absl::StrCat("XFORM_LOG_", absl::BytesToHexString(w.world));
  // Batches one after another, each acknowledged before the next; the
  // longest wait for one is the stall.
  absl::Duration longest;
  absl::Time killed = absl::InfiniteFuture();
  int leader = -1;
  int after_kill = 0;
  for (const absl::Time end = absl::Now() + absl::Seconds(20);
       absl::Now() < end;) {
    if (leader < 0 && w.acknowledged == 100) {
      const std::string name = StreamLeader(nats.Url(0), stream);
      for (int i = 0; i < nats.size(); ++i) {
        if (NatsCluster::Name(i) == name) leader = i;
      }
      ASSERT_GE(leader, 0) << "no leader for " << stream;
      nats.Kill(leader);
      killed = absl::Now();
    }
    World next = w.model;
    std::vector<Command> batch = w.random.Next(next, 12);
    w.pending = batch;
    const absl::Time sent = absl::Now();
    absl::StatusOr<uint64_t> frame =
        client->Apply(w.world, batch, {.end_frame = true});
    ASSERT_TRUE(frame.ok()) << frame.status() << " after " << w.acknowledged
                            << " batches; " << server.Log();
    longest = std::max(longest, absl::Now() - sent);
    w.model = std::move(next);
    w.pending.reset();
    ++w.acknowledged;
    if (absl::Now() > killed && ++after_kill >= 100) break;
  }
  ASSERT_GE(after_kill, 100) << "writes did not resume: " << server.Log();
  server.Kill();
  // Another node holds every acknowledged batch. The killed server comes
  // back first: on a loaded machine, JetStream on the two left took over
  // 30 s to answer a new consumer (a CI run), which is its failover, not
  // what this test measures.
  nats.Restart(leader);
  Xformd next(NodeFlags(nats.Urls(), "reader", 3, "64MiB"));
  std::unique_ptr<Client> reader = ConnectReady(next.address());
  ASSERT_NE(reader, nullptr) << next.Log();
  bool landed = false;
  EXPECT_EQ(Settle(*reader, w, &landed), "");
  std::printf(
      "leader %s killed after 100 batches; %llu acknowledged; the longest "
      "wait for one %s\n",
      NatsCluster::Name(leader).c_str(),
      static_cast<unsigned long long>(w.acknowledged),
      absl::FormatDuration(longest).c_str());
  EXPECT_LT(longest, absl::Seconds(15));
}

// A lease that expired while its writer could not renew it (the writer
// paused, or the NATS server leading the lease bucket lost: a CI run's
// stall) is taken again by its writer when no other node took it: the
// writer never steps down, and its next write is acknowledged at once.
TEST(ClusterTest, ALoneWriterWhoseLeaseExpiredTakesItBack) {
  NatsCluster nats(3);
  Xformd server(NodeFlags(nats.Urls(), "writer", 3, "64MiB"));
  std::unique_ptr<Client> client = ConnectReady(server.address());
  ASSERT_NE(client, nullptr) << server.Log();
  Writer w{.world = "w",
           .options = {.mode = FrameMode::kDriven},
           .random = testing::RandomBatches(9, 1)};
  ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
  const auto write = [&](int batches) {
    for (int i = 0; i < batches; ++i) {
      World next = w.model;
      std::vector<Command> batch = w.random.Next(next, 12);
      absl::StatusOr<uint64_t> frame =
          client->Apply(w.world, batch, {.end_frame = true});
      ASSERT_TRUE(frame.ok()) << frame.status() << "; " << server.Log();
      w.model = std::move(next);
      ++w.acknowledged;
    }
  };
  ASSERT_NO_FATAL_FAILURE(write(20));
  // Paused past its 2 s lease: the lease's entry expires meanwhile.
  server.Signal(SIGSTOP);
  absl::SleepFor(absl::Seconds(3));  // The fault: a pause longer than 2 s.
  server.Signal(SIGCONT);
  ASSERT_TRUE(server.WaitForLog("taken again", absl::Seconds(10)))
      << server.Log();
  const absl::Time resumed = absl::Now();
  ASSERT_NO_FATAL_FAILURE(write(20));
  const absl::Duration took = absl::Now() - resumed;
  EXPECT_EQ(server.Log().find("no longer written here"), std::string::npos)
      << server.Log();
  bool landed = false;
  EXPECT_EQ(Settle(*client, w, &landed), "");
  std::printf("lease taken again; 20 batches after it in %s\n",
              absl::FormatDuration(took).c_str());
}

TEST(ClusterTest, ABatchOverThePayloadLimitIsSplitAndJoinedAgain) {
  NatsCluster nats(1, {.max_payload = 128 << 10});
  Writer w{.world = "big",
           .options = {.mode = FrameMode::kDriven},
           .random = testing::RandomBatches(9, 100'000)};
  {
    Xformd server(NodeFlags(nats.Url(0), "a", 1, "1MiB"));
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr) << server.Log();
    ASSERT_TRUE(client->CreateWorld(w.world, w.options).ok());
    // 20,000 creates: about 1.4 MB, a dozen messages of 124 KB.
    std::vector<Command> creates;
    for (EntityId e = 1; e <= 20'000; ++e) {
      Transform local;
      local.position = {static_cast<float>(e), 0.5f, -1.0f / e};
      creates.push_back(CreateOp{e, e > 1 && e % 10 != 0 ? e - 1 : 0, local});
    }
    ASSERT_TRUE(client->Apply(w.world, creates, {.end_frame = true}).ok());
    ASSERT_TRUE(w.model.Apply(creates).ok());
    w.random.Adopt(w.model);
    // Then small batches, past a snapshot (1 MB: chunks too).
    for (int i = 0; i < 20; ++i) {
      World next = w.model;
      std::vector<Command> batch = w.random.Next(next, 12);
      ASSERT_TRUE(client->Apply(w.world, batch, {.end_frame = true}).ok());
      w.model = std::move(next);
    }
    ASSERT_TRUE(server.WaitForLog("snapshot at log", absl::Seconds(10)))
        << server.Log();
    server.Kill();
  }
  Xformd server(NodeFlags(nats.Url(0), "b", 1, "1MiB"));
  std::unique_ptr<Client> client = ConnectReady(server.address());
  ASSERT_NE(client, nullptr) << server.Log();
  bool landed = false;
  EXPECT_EQ(Settle(*client, w, &landed), "") << server.Log();
}

// Names a stream's directory could not hold in hex (128 bytes: 256 hex
// digits), those either side of where the key turns to a hash, and names
// of dots, which NATS subjects split on, come back as they were created.
TEST(ClusterTest, WorldsOfAnyNameComeBack) {
  NatsCluster nats(1);
  const std::vector<std::string> names = {
      std::string(128, 'w'), std::string(96, 'x'), std::string(97, 'x'),
      "a.b-c_D", ".."};
  {
    Xformd server(NodeFlags(nats.Url(0), "a", 1, "64MiB"));
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr) << server.Log();
    for (const std::string& name : names) {
      ASSERT_TRUE(client->CreateWorld(name, {.mode = FrameMode::kDriven}).ok())
          << name;
      ASSERT_TRUE(
          client->Apply(name, {CreateOp{7, 0, {}}}, {.end_frame = true}).ok());
    }
    server.Kill();
  }
  Xformd server(NodeFlags(nats.Url(0), "b", 1, "64MiB"));
  std::unique_ptr<Client> client = ConnectReady(server.address());
  ASSERT_NE(client, nullptr) << server.Log();
  for (const std::string& name : names) {
    absl::StatusOr<WorldInfo> info = client->GetWorld(name);
    ASSERT_TRUE(info.ok()) << name << ": " << info.status();
    EXPECT_EQ(info->entities, 1u);
  }
  absl::StatusOr<std::vector<WorldInfo>> all = client->ListWorlds();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), names.size());
}

// NATS servers that require TLS and a token: a node that trusts their CA
// and holds the token keeps its worlds there; one with the wrong token
// gives up at start, naming NATS's refusal, within
// --cluster_connect_timeout_ms.
TEST(ClusterTest, TlsAndATokenToTheNatsServers) {
  const std::string certs =
      absl::StrCat(::testing::TempDir(), "xform_cluster_certs_", getpid());
  const std::string command =
      absl::StrCat("bash ", MAKE_TEST_CERTS, " ", certs);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  NatsCluster nats(1, {.tls_cert = certs + "/server.pem",
                       .tls_key = certs + "/server.key",
                       .token = "nats-secret"});
  const std::string token_file = certs + "/nats.token";
  const std::string wrong_file = certs + "/wrong.token";
  std::ofstream(token_file) << "nats-secret\n";
  std::ofstream(wrong_file) << "guess\n";
  std::vector<std::string> flags = NodeFlags(nats.Url(0), "a", 1, "64MiB");
  flags.push_back(absl::StrCat("--cluster_ca_file=", certs, "/ca.pem"));
  std::vector<std::string> with_token = flags;
  with_token.push_back(absl::StrCat("--cluster_token_file=", token_file));
  {
    Xformd server(with_token);
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr) << server.Log();
    ASSERT_TRUE(client->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
    ASSERT_TRUE(
        client->Apply("w", {CreateOp{7, 0, {}}}, {.end_frame = true}).ok());
    server.Kill();
  }
  {
    Xformd server(with_token);
    std::unique_ptr<Client> client = ConnectReady(server.address());
    ASSERT_NE(client, nullptr) << server.Log();
    absl::StatusOr<WorldInfo> info = client->GetWorld("w");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->entities, 1u);
  }
  std::vector<std::string> wrong = flags;
  wrong.push_back(absl::StrCat("--cluster_token_file=", wrong_file));
  wrong.push_back("--cluster_connect_timeout_ms=2000");
  Xformd refused(wrong);
  EXPECT_NE(refused.WaitForExit(absl::Seconds(20)), 0);
  EXPECT_TRUE(absl::StrContains(refused.Log(),
                                "cannot connect to the cluster's NATS servers"))
      << refused.Log();
  EXPECT_TRUE(absl::StrContains(refused.Log(), "Authorization"))
      << refused.Log();
  std::filesystem::remove_all(certs);
}

}  // namespace
}  // namespace xform
