// Copyright 2026 The xform Authors.
//
// The xformd binary as a process: it serves, answers health, and on SIGTERM
// ends its subscriber streams cleanly and exits 0.

#include "tests/xformd_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/http2_frames.h"
#include "tests/raw_call.h"
#include "tests/raw_connection.h"
#include "tests/wait_until.h"
#include "xform/v1/xform.grpc.pb.h"

namespace {

using xform::WaitUntil;
using xform::testing::Http2CallHeaders;
using xform::testing::Http2Frame;
using xform::testing::Http2RapidResets;
using xform::testing::Xformd;
using xform::tests::ClosedByServer;
using xform::tests::ConnectFrom;
using xform::tests::Refused;
using xform::tests::WaitReadable;

grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
    absl::Duration timeout = absl::Seconds(5)) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (!health->Check(&context, request, &response).ok()) {
    return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }
  return response.status();
}

TEST(XformdProcessTest, SigtermEndsStreamsCleanlyAndExitsZero) {
  Xformd xformd({"--demo"});
  auto channel = xformd.Connect();
  {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, {}, &response).ok());
    EXPECT_EQ(response.status(),
              grpc::health::v1::HealthCheckResponse::SERVING);
  }
  auto stub = xform::v1::Xform::NewStub(channel);
  grpc::ClientContext context;
  xform::v1::SubscribeRequest request;
  request.set_world("demo");
  // The demo world appears just after the server starts serving.
  std::unique_ptr<grpc::ClientReader<xform::v1::FrameUpdate>> reader;
  xform::v1::FrameUpdate update;
  for (int attempt = 0; attempt < 100; ++attempt) {
    grpc::ClientContext info_context;
    xform::v1::GetWorldRequest get;
    get.set_name("demo");
    xform::v1::WorldInfo info;
    if (stub->GetWorld(&info_context, get, &info).ok() && info.entities() > 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  reader = stub->Subscribe(&context, request);
  int deltas = 0;
  while (deltas < 5 && reader->Read(&update)) deltas += !update.snapshot();
  ASSERT_EQ(deltas, 5);

  ASSERT_EQ(kill(xformd.pid(), SIGTERM), 0);
  while (reader->Read(&update)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(status.error_message(), "server shutting down");
  EXPECT_EQ(xformd.WaitForExit(absl::Seconds(10)), 0) << xformd.Log();
}

}  // namespace

namespace more {

using grpc::health::v1::HealthCheckResponse;

// xformd takes its plaintext connections itself (server/acceptor.h), which
// gRPC then names by descriptor ("fd:12"); what it tells an operator of a
// subscriber, in ListSubscribers and in its log, is the client's address.
TEST(XformdProcessTest, SubscribersAreNamedByTheirAddress) {
  Xformd xformd({});
  auto stub = xform::v1::Xform::NewStub(xformd.Connect());
  {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest create;
    create.set_name("w");
    xform::v1::WorldInfo info;
    ASSERT_TRUE(stub->CreateWorld(&context, create, &info).ok());
  }
  grpc::ClientContext context;
  xform::v1::SubscribeRequest request;
  request.set_world("w");
  auto reader = stub->Subscribe(&context, request);
  xform::v1::FrameUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  grpc::ClientContext list_context;
  xform::v1::ListSubscribersRequest list;
  list.set_world("w");
  xform::v1::ListSubscribersResponse listed;
  ASSERT_TRUE(stub->ListSubscribers(&list_context, list, &listed).ok());
  ASSERT_EQ(listed.subscribers_size(), 1);
  const std::string& peer = listed.subscribers(0).peer();
  EXPECT_EQ(peer.rfind("ipv4:127.0.0.1:", 0), 0u) << peer;
  EXPECT_NE(xformd.Log().find(absl::StrCat("joined from ", peer)),
            std::string::npos)
      << xformd.Log();
  context.TryCancel();
}

TEST(XformdProcessTest, HealthAnswersForTheServerAndTheXformService) {
  Xformd xformd({});
  auto channel = xformd.Connect();
  EXPECT_EQ(Health(channel, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(channel, "xform.v1.Xform"), HealthCheckResponse::SERVING);
}

// Writers waiting for their next batch end at once with UNAVAILABLE, and an
// idle connection does not hold the process for the grace period.
TEST(XformdProcessTest, SigtermEndsWritersAtOnceAndExitsWhenCallsDrain) {
  Xformd xformd({"--shutdown_grace_ms=30000"});
  auto channel = xformd.Connect();
  auto idle = xformd.Connect();  // A second connection that makes no calls.
  auto stub = xform::v1::Xform::NewStub(channel);
  {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest create;
    create.set_name("w");
    create.set_mode(xform::v1::FRAME_MODE_DRIVEN);
    xform::v1::WorldInfo info;
    ASSERT_TRUE(stub->CreateWorld(&context, create, &info).ok());
  }
  grpc::ClientContext context;
  auto writer = stub->ApplyStream(&context);
  xform::v1::ApplyRequest batch;
  batch.set_world("w");
  batch.add_commands()->mutable_create()->add_entity(1);
  ASSERT_TRUE(writer->Write(batch));
  xform::v1::ApplyResponse answer;
  ASSERT_TRUE(writer->Read(&answer));

  const absl::Time signalled = absl::Now();
  ASSERT_EQ(kill(xformd.pid(), SIGTERM), 0);
  EXPECT_FALSE(writer->Read(&answer));
  const grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_NE(status.error_message().find("1 batches applied"), std::string::npos)
      << status.error_message();
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(2));
  EXPECT_EQ(xformd.WaitForExit(absl::Seconds(3)), 0) << xformd.Log();
}

TEST(XformdProcessTest, SighupKeepsServingAndSigquitStopsCleanly) {
  Xformd xformd({});
  auto channel = xformd.Connect();
  ASSERT_EQ(kill(xformd.pid(), SIGHUP), 0);
  ASSERT_TRUE(xformd.WaitForLog("SIGHUP: no --auth_file", absl::Seconds(10)))
      << xformd.Log();
  EXPECT_EQ(Health(channel, ""), HealthCheckResponse::SERVING);
  ASSERT_EQ(kill(xformd.pid(), SIGQUIT), 0);
  EXPECT_EQ(xformd.WaitForExit(absl::Seconds(5)), 0) << xformd.Log();
}

TEST(XformdProcessTest, BadFlagsAreAUsageError) {
  for (const std::string flag :
       {"--tick_hz=0", "--tick_hz=0.001", "--tick_hz=nan", "--tick_hz=5000",
        "--max_message_bytes=0", "--write_timeout_ms=0", "--build_threads=0",
        "--build_threads=65", "--max_worlds=0", "--keepalive_ms=-1",
        "--snapshot_burst_mb=0", "--snapshot_burst_mb=1048577",
        "--fanout_threads=-1", "--fanout_threads=65",
        "--max_connections_per_address=-1",
        "--max_cancels_per_connection_per_second=-1",
        "--cut_off_penalty_ms=-1"}) {
    Xformd xformd({flag});
    EXPECT_EQ(xformd.WaitForExit(absl::Seconds(10)), 2) << flag;
    const std::string name = flag.substr(0, flag.find('='));
    EXPECT_NE(xformd.Log().find(name), std::string::npos)
        << flag << ": " << xformd.Log();
  }
}

// A demo's flags are checked only when the demo runs (issue 71: a low
// --max_entities refused to start, naming a demo flag nobody had set).
TEST(XformdProcessTest, ADemosFlagsMatterOnlyWithTheDemo) {
  Xformd small({"--max_entities=1000"});
  EXPECT_EQ(Health(small.Connect(), ""), HealthCheckResponse::SERVING)
      << small.Log();
  Xformd demo({"--max_entities=1000", "--demo"});
  EXPECT_EQ(demo.WaitForExit(absl::Seconds(10)), 2) << demo.Log();
  EXPECT_NE(demo.Log().find("--demo_city_entities"), std::string::npos)
      << demo.Log();
}

// gRPC 1.51's own listener stops accepting for good after one EMFILE; the
// server must stay reachable after a flood of connections uses its limit.
TEST(XformdProcessTest, ServesAgainAfterAFloodOfConnectionsAtTheFileLimit) {
  Xformd xformd({}, "ulimit -n 256;");
  ASSERT_EQ(Health(xformd.Connect(), ""), HealthCheckResponse::SERVING);
  const int port = std::stoi(xformd.address().substr(10));
  std::vector<int> flood;
  for (int k = 0; k < 400; ++k) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    flood.push_back(fd);
  }
  // Refused past its address's share (one address here, so before the
  // descriptors run out).
  ASSERT_TRUE(
      xformd.WaitForLog("refused: its address holds", absl::Seconds(10)))
      << xformd.Log();
  for (int fd : flood) close(fd);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Health(xformd.Connect(), "", absl::Seconds(5)),
            HealthCheckResponse::SERVING)
      << xformd.Log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// One host cannot keep every other out by holding every connection slot:
// before --max_connections_per_address, 100 silent connections from
// 127.0.0.2 took all 64 and the health check from 127.0.0.1 was refused.
// Now 127.0.0.2 gets its half, 32, the rest of its connections are closed at
// once, and once it closes one it may connect again.
TEST(XformdProcessTest, OneAddressCannotTakeEveryConnection) {
  Xformd xformd({"--max_connections=64"});
  ASSERT_FALSE(xformd.address().empty()) << xformd.Log();
  const int port = std::stoi(xformd.address().substr(10));
  std::vector<int> flood;
  for (int k = 0; k < 100; ++k) flood.push_back(ConnectFrom("127.0.0.2", port));
  // Each is kept (sent gRPC's SETTINGS) or closed: both are seen.
  std::vector<int> kept;
  for (int fd : flood) {
    EXPECT_TRUE(WaitReadable(fd, absl::Seconds(10)));
    if (ClosedByServer(fd)) {
      close(fd);
    } else {
      kept.push_back(fd);
    }
  }
  EXPECT_EQ(kept.size(), 32u) << xformd.Log();
  EXPECT_EQ(Health(xformd.Connect(), "", absl::Seconds(3)),
            HealthCheckResponse::SERVING)
      << xformd.Log();
  EXPECT_NE(xformd.Log().find("at most 32 from one address"), std::string::npos)
      << xformd.Log();
  EXPECT_NE(xformd.Log().find("connection from ipv4:127.0.0.2:"),
            std::string::npos)
      << xformd.Log();
  // At its limit until one of its own closes, which xformd sees when it
  // reads the close: until then, refused.
  EXPECT_TRUE(Refused("127.0.0.2", port));
  close(kept.back());
  kept.pop_back();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool refused = true;
  while (refused && absl::Now() < deadline)
    refused = Refused("127.0.0.2", port);
  EXPECT_FALSE(refused);
  for (int fd : kept) close(fd);
}

// A rapid reset attacker (CVE-2023-44487) on a connection of its own from
// `source` (127.0.0.x): an honest opening, then streams opened and
// cancelled at once, 100 at a time, until xformd closes the connection or
// `for_at_most` passes. Whether xformd closed it.
bool ResetStreamsUntilCutOff(const char* source, int port,
                             absl::Duration for_at_most) {
  const int attacker = ConnectFrom(source, port);
  std::string opening = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  opening += Http2Frame(4, 0, 0, "");  // SETTINGS
  opening += Http2Frame(4, 1, 0, "");  // the ACK of the server's
  bool cut_off =
      send(attacker, opening.data(), opening.size(), MSG_NOSIGNAL) < 0;
  const std::string headers = Http2CallHeaders("/xform.v1.Xform/ListWorlds");
  uint32_t stream = 1;
  const absl::Time give_up = absl::Now() + for_at_most;
  while (!cut_off && absl::Now() < give_up) {
    const std::string batch = Http2RapidResets(headers, 100, &stream);
    if (send(attacker, batch.data(), batch.size(), MSG_NOSIGNAL) < 0) {
      cut_off = true;
      break;
    }
    char drain[65536];
    while (recv(attacker, drain, sizeof(drain), MSG_DONTWAIT) > 0) {
    }
    cut_off = ClosedByServer(attacker);
  }
  close(attacker);
  return cut_off;
}

// HTTP/2 rapid reset (CVE-2023-44487): streams opened and cancelled at once
// never hold a stream slot, and gRPC 1.51 has no defence of its own. Before
// CallFloodGuard one such connection took xformd's healthy world from 60
// writes a second to 24 and its memory to 1 GB, and it was never closed.
// Now it is cut off once over --max_cancels_per_connection_per_second, its
// address is refused for --cut_off_penalty_ms, and others are served. (The
// look at unread resets is off, so that this is the guard's doing.)
TEST(XformdProcessTest, AConnectionResettingStreamsIsCutOff) {
  Xformd xformd({"--max_cancels_per_connection_per_second=500",
                 "--max_queued_stream_resets=0", "--cut_off_penalty_ms=3000"});
  ASSERT_FALSE(xformd.address().empty()) << xformd.Log();
  const int port = std::stoi(xformd.address().substr(10));
  EXPECT_TRUE(ResetStreamsUntilCutOff("127.0.0.2", port, absl::Seconds(20)))
      << xformd.Log();
  EXPECT_TRUE(
      xformd.WaitForLog("connection from ipv4:127.0.0.2:", absl::Seconds(5)))
      << xformd.Log();
  EXPECT_NE(xformd.Log().find("--max_cancels_per_connection_per_second"),
            std::string::npos)
      << xformd.Log();
  // Others are served; the attacker's address is refused for a while.
  EXPECT_EQ(Health(xformd.Connect(), "", absl::Seconds(3)),
            HealthCheckResponse::SERVING)
      << xformd.Log();
  EXPECT_TRUE(Refused("127.0.0.2", port)) << "not refused";
}

// The guard counts a connection's calls, not a descriptor's: a client that
// connects anew for each call (a script, a health checker) makes one call
// per connection however fast it reconnects, and is never cut off. Before,
// a connection that took a closed one's descriptor number within the second
// inherited its count, and such a client was cut off at the limit.
TEST(XformdProcessTest, AClientConnectingForEachCallIsNotCutOff) {
  Xformd xformd({"--max_cancels_per_connection_per_second=20"});
  ASSERT_FALSE(xformd.address().empty()) << xformd.Log();
  const absl::Time start = absl::Now();
  int served = 0;
  for (int k = 0; k < 60 && absl::Now() - start < absl::Seconds(1); ++k) {
    served += Health(xformd.Connect(), "") == HealthCheckResponse::SERVING;
  }
  EXPECT_GT(served, 20) << "too slow a machine to make the point";
  EXPECT_EQ(xformd.Log().find("cut off"), std::string::npos) << xformd.Log();
}

// An honest client making as many short calls as one connection carries
// (a batch a call, as a new user writes one) is never cut off, however
// many: the guard counts calls their client cancelled, not calls. Before,
// counting calls, such a client was cut off after 0.13 s at the default
// limit of 1,000 a second, and its address refused with everyone behind
// it. Up to 20,000 calls a second, 64 in flight, for 3 s.
TEST(XformdProcessTest, AClientMakingManyShortCallsOnOneConnectionIsNotCutOff) {
  Xformd xformd({});
  ASSERT_FALSE(xformd.address().empty()) << xformd.Log();
  auto channel = xformd.Connect();
  auto stub = xform::v1::Xform::NewStub(channel);
  {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest create;
    create.set_name("w");
    create.set_mode(xform::v1::FRAME_MODE_DRIVEN);
    xform::v1::WorldInfo info;
    ASSERT_TRUE(stub->CreateWorld(&context, create, &info).ok());
    grpc::ClientContext apply;
    xform::v1::ApplyRequest request;
    request.set_world("w");
    request.add_commands()->mutable_create()->add_entity(1);
    xform::v1::ApplyResponse response;
    ASSERT_TRUE(stub->Apply(&apply, request, &response).ok());
  }
  struct Calls {
    absl::Mutex mu;
    int64_t ok ABSL_GUARDED_BY(mu) = 0;
    int64_t failed ABSL_GUARDED_BY(mu) = 0;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    grpc::Status first_failure ABSL_GUARDED_BY(mu);
  } calls;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(3);
  // Each of 64 chains starts its next call as the last ends, paced to at
  // most 20,000 a second in all.
  std::function<void(int64_t)> call = [&](int64_t index) {
    const absl::Time due = start + absl::Seconds(1) * index / 20'000;
    if (absl::Now() < due) absl::SleepFor(due - absl::Now());
    auto context = std::make_shared<grpc::ClientContext>();
    auto request = std::make_shared<xform::v1::ApplyRequest>();
    auto response = std::make_shared<xform::v1::ApplyResponse>();
    request->set_world("w");
    auto* set = request->add_commands()->mutable_set_local();
    set->add_entity(1);
    for (float v : {static_cast<float>(index), 0.f, 0.f, 0.f, 0.f, 0.f, 1.f,
                    1.f, 1.f, 1.f}) {
      set->add_local(v);
    }
    stub->async()->Apply(
        context.get(), request.get(), response.get(),
        [&, context, request, response, index](grpc::Status status) {
          bool more;
          {
            absl::MutexLock lock(&calls.mu);
            if (status.ok()) {
              ++calls.ok;
            } else if (calls.failed++ == 0) {
              calls.first_failure = status;
            }
            more = absl::Now() < end && calls.failed == 0;
            if (!more) --calls.in_flight;
          }
          if (more) call(index + 64);
        });
  };
  {
    absl::MutexLock lock(&calls.mu);
    calls.in_flight = 64;
  }
  for (int64_t k = 0; k < 64; ++k) call(k);
  absl::MutexLock lock(&calls.mu);
  calls.mu.AwaitWithTimeout(absl::Condition(
                                +[](Calls* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                     c->mu) { return c->in_flight == 0; },
                                &calls),
                            absl::Seconds(30));
  const double per_second = static_cast<double>(calls.ok) /
                            absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("%lld calls served on one connection, %.0f a second\n",
              static_cast<long long>(calls.ok), per_second);
  EXPECT_EQ(calls.failed, 0) << calls.first_failure.error_message();
  EXPECT_GT(per_second, 2'000) << "too slow a machine to make the point";
  EXPECT_EQ(xformd.Log().find("cut off"), std::string::npos) << xformd.Log();
}

// Two such connections at once keep gRPC 1.51's reader from ever running
// dry, and it lets none of the streams it started reach anything above it
// until it does: before the look at unread resets, with the call guard on,
// two attackers on a slow day were never cut off while memory grew by about
// 600 MB a second (docs/security.md). Now each is cut off once 100 of its
// cancels wait unread (--max_queued_stream_resets), with the call guard off
// here so that this is the look's doing, and the server stays small.
TEST(XformdProcessTest, ConnectionsFloodingResetsAreCutOffUnread) {
  Xformd xformd({"--max_cancels_per_connection_per_second=0",
                 "--cut_off_penalty_ms=3000"});
  ASSERT_FALSE(xformd.address().empty()) << xformd.Log();
  const int port = std::stoi(xformd.address().substr(10));
  bool cut_off[2] = {false, false};
  {
    std::thread second([&] {
      cut_off[1] =
          ResetStreamsUntilCutOff("127.0.0.3", port, absl::Seconds(20));
    });
    cut_off[0] = ResetStreamsUntilCutOff("127.0.0.2", port, absl::Seconds(20));
    second.join();
  }
  EXPECT_TRUE(cut_off[0]) << xformd.Log();
  EXPECT_TRUE(cut_off[1]) << xformd.Log();
  for (const char* address : {"ipv4:127.0.0.2:", "ipv4:127.0.0.3:"}) {
    EXPECT_TRUE(xformd.WaitForLog(absl::StrCat("connection from ", address),
                                  absl::Seconds(5)))
        << xformd.Log();
  }
  EXPECT_NE(xformd.Log().find("--max_queued_stream_resets"), std::string::npos)
      << xformd.Log();
  RecordProperty("peak_rss_mb", std::to_string(xformd.PeakRssMb()));
  EXPECT_LT(xformd.PeakRssMb(), 1000) << xformd.Log();
  EXPECT_EQ(Health(xformd.Connect(), "", absl::Seconds(3)),
            HealthCheckResponse::SERVING)
      << xformd.Log();
  EXPECT_TRUE(Refused("127.0.0.3", port)) << "not refused";
}

// Requests whose parsed form would be many times their size, or that are
// larger than the server takes, are refused without the server's memory
// growing with them. Before the fix: 2.15 GB for 61 MB of empty commands;
// 1 GB buffered for a 1 GB message before gRPC refused it (it checks the size
// once the whole message is in; its memory quota stops it sooner).
TEST(XformdProcessTest, HostileRequestShapesKeepTheServerSmall) {
  Xformd xformd({});
  auto channel = xformd.Connect();
  {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest create;
    create.set_name("w");
    xform::v1::WorldInfo info;
    ASSERT_TRUE(xform::v1::Xform::NewStub(channel)
                    ->CreateWorld(&context, create, &info)
                    .ok());
  }
  xform::v1::ApplyRequest header;
  header.set_world("w");
  const std::string world = header.SerializeAsString();
  // 15 MB of empty commands (field 2, length 0), under the message limit.
  std::string empty_commands = world;
  for (int k = 0; k < 7'500'000; ++k) empty_commands.append("\x12\x00", 2);
  // The same count of commands with an empty create each.
  std::string empty_creates = world;
  for (int k = 0; k < 3'700'000; ++k)
    empty_creates.append("\x12\x02\x0a\x00", 4);
  // A subscription listing 2M entities (16 MB).
  xform::v1::SubscribeRequest subscribe;
  subscribe.set_world("w");
  for (uint64_t e = 1; e <= 1'900'000; ++e) subscribe.add_entity(e);
  const std::string huge_filter = subscribe.SerializeAsString();

  std::vector<std::thread> clients;
  std::vector<grpc::Status> statuses(5);
  clients.emplace_back([&] {
    statuses[0] = xform::tests::RawUnary(channel, "/xform.v1.Xform/Apply",
                                         empty_commands);
  });
  clients.emplace_back([&] {
    statuses[1] = xform::tests::RawUnary(
        xformd.Connect(), "/xform.v1.Xform/Apply", empty_commands);
  });
  clients.emplace_back([&] {
    statuses[2] = xform::tests::RawUnary(
        xformd.Connect(), "/xform.v1.Xform/Apply", empty_creates);
  });
  for (auto& client : clients) client.join();
  {
    // A stream: the status comes after the (refused) start.
    grpc::GenericStub generic(channel);
    grpc::ClientContext context;
    grpc::Slice slice(huge_filter);
    grpc::ByteBuffer request(&slice, 1);
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(&context, "/xform.v1.Xform/Subscribe", &cq);
    void* tag = nullptr;
    bool ok = false;
    call->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    cq.Next(&tag, &ok);
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    call->Finish(&statuses[3], reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  {
    // 1 GB, far over the 16 MB limit.
    std::string huge(size_t{1} << 30, '\0');
    statuses[4] =
        xform::tests::RawUnary(xformd.Connect(), "/xform.v1.Xform/Apply", huge);
  }
  for (int k : {0, 1, 2, 3, 4}) {
    EXPECT_EQ(statuses[k].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << k << ": " << statuses[k].error_message();
  }
  RecordProperty("peak_rss_mb", std::to_string(xformd.PeakRssMb()));
  // 210-250 MB alone here, 325 once in a CI run beside the other tests
  // (ctest -j2); the defects this guards against took 1 to 2 GB.
  EXPECT_LT(xformd.PeakRssMb(), 400) << xformd.Log();
  EXPECT_EQ(Health(channel, ""), HealthCheckResponse::SERVING);
}

}  // namespace more

namespace memory {

double RssMb(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return -1;
}

// A deleted 1M-entity world's memory goes back to the operating system.
// Measured with the loading connection closed: gRPC's buffers for a
// connection that carried big messages belong to the connection, not the
// world.
TEST(XformdProcessTest, DeletingABigWorldGivesItsMemoryBack) {
  Xformd xformd({});
  std::unique_ptr<xform::v1::Xform::Stub> stub;
  const auto reconnect = [&] {
    stub.reset();
    stub = xform::v1::Xform::NewStub(xformd.Connect());
  };
  reconnect();
  const auto create_world = [&] {
    grpc::ClientContext context;
    xform::v1::CreateWorldRequest create;
    create.set_name("big");
    create.set_mode(xform::v1::FRAME_MODE_DRIVEN);
    xform::v1::WorldInfo info;
    return stub->CreateWorld(&context, create, &info).ok();
  };
  const auto load = [&](uint64_t entities) {
    for (uint64_t first = 1; first <= entities; first += 100'000) {
      xform::v1::ApplyRequest batch;
      batch.set_world("big");
      batch.set_end_frame(true);
      auto* create = batch.add_commands()->mutable_create();
      for (uint64_t e = first; e < first + 100'000; ++e) {
        create->add_entity(e);
        create->add_parent(e % 1000 == 1 ? 0 : e - 1);
      }
      grpc::ClientContext context;
      xform::v1::ApplyResponse response;
      if (!stub->Apply(&context, batch, &response).ok()) return false;
    }
    return true;
  };
  const auto delete_world = [&] {
    grpc::ClientContext context;
    xform::v1::DeleteWorldRequest del;
    del.set_name("big");
    xform::v1::DeleteWorldResponse deleted;
    return stub->DeleteWorld(&context, del, &deleted).ok();
  };
  // A small world first, so that what serving requests keeps (gRPC's
  // buffers, threads' arenas) is in place before measuring.
  ASSERT_TRUE(create_world());
  ASSERT_TRUE(load(100'000));
  ASSERT_TRUE(delete_world());
  reconnect();
  // Measured once it holds still (what the small world freed is given back
  // within a few polls): two reads 50 ms apart within 1 MB.
  double before = RssMb(xformd.pid());
  for (int k = 0; k < 100; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double now = RssMb(xformd.pid());
    if (std::abs(now - before) < 1) break;
    before = now;
  }
  ASSERT_TRUE(create_world());
  ASSERT_TRUE(load(1'000'000));
  const double full = RssMb(xformd.pid());
  ASSERT_TRUE(delete_world());
  reconnect();
  // The world goes with its last reference, perhaps a moment later. The
  // bound: 1.25x before, or 95% of what the world took given back. On a
  // server this small (17 MB) what gRPC keeps between connections (0-14 MB
  // measured, in one thread's arena that malloc_trim finds in use) is most
  // of the ratio. Before the fix 90 MB of the world's 440 stayed.
  const double bound = before + std::max(0.25 * before, 0.05 * (full - before));
  double after = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        after = RssMb(xformd.pid());
        return after < bound;
      },
      absl::Seconds(5), "the deleted world's memory given back"));
  RecordProperty("rss_mb_before_full_after",
                 absl::StrCat(before, " ", full, " ", after));
  EXPECT_GT(full, before + 100) << "the world did not take memory";
  EXPECT_LT(after, bound) << "before " << before << " MB, full " << full
                          << " MB, after " << after;
}

}  // namespace memory
