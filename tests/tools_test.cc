// Copyright 2026 The xform Authors.
//
// xformctl and xform-load as processes, against a real server on loopback:
// what they print (text and --json), and their exit codes.

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/access/access_policy.h"
#include "server/service/gatekeeper.h"
#include "tests/loopback_server.h"

namespace xform {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

struct Ran {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `command` through the shell, capturing stdout and stderr.
Ran RunShell(const std::string& command) {
  const std::string err_file =
      absl::StrCat(testing::TempDir(), "/tools_test_stderr_", getpid());
  Ran ran;
  FILE* pipe = popen(absl::StrCat(command, " 2>", err_file).c_str(), "r");
  if (pipe == nullptr) return ran;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    ran.out.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  ran.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream text;
  text << err.rdbuf();
  ran.err = text.str();
  return ran;
}

class ToolsTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start(server::Limits{})); }

  Ran Ctl(const std::string& args) {
    return RunShell(absl::StrCat(XFORMCTL_PATH, " --server=", server_.address(),
                                 " ", args));
  }

  server::LoopbackServer server_;
};

TEST_F(ToolsTest, XformctlManagesWorldsAndEntities) {
  Ran made = Ctl("worlds create w --mode=driven --json");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(Json::parse(made.out)["mode"], "driven");

  ASSERT_EQ(Ctl("entities create w 1 --position=1,2,3").exit_code, 0);
  ASSERT_EQ(Ctl("entities create w 2 --parent=1 --scale=2,2,2").exit_code, 0);
  ASSERT_EQ(Ctl("entities set w 1 --position=5,0,0 --end_frame").exit_code, 0);
  Ran got = Ctl("entities get w 2 --json");
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const Json entity = Json::parse(got.out);
  EXPECT_EQ(entity["parent"], 1);
  EXPECT_EQ(entity["world"][3], 5.0);  // x translation: the parent's.
  EXPECT_EQ(entity["world"][0], 2.0);  // Its own scale.

  ASSERT_EQ(Ctl("entities link w 2 0 --keep_world").exit_code, 0);
  EXPECT_EQ(Json::parse(Ctl("entities get w 2 --json").out)["parent"], 0);
  ASSERT_EQ(Ctl("entities destroy w 1").exit_code, 0);

  Ran listed = Ctl("worlds list --json");
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_EQ(Json::parse(listed.out)["worlds"][0]["entities"], 1);
  EXPECT_THAT(Ctl("worlds info w").out, HasSubstr("driven"));
  EXPECT_EQ(Ctl("worlds delete w").exit_code, 0);
}

TEST_F(ToolsTest, XformctlStampsWritesAndLooksUpAtAStamp) {
  ASSERT_EQ(Ctl("worlds create w --mode=driven").exit_code, 0);
  ASSERT_EQ(
      Ctl("entities create w 1 --position=0,1,0 --stamp=1000000000").exit_code,
      0);
  ASSERT_EQ(Ctl("entities create w 2 --parent=1 --position=1,0,0 "
                "--stamp=1000000000")
                .exit_code,
            0);
  ASSERT_EQ(
      Ctl("entities set w 1 --position=4,1,0 --stamp=2000000000").exit_code, 0);
  Ran looked = Ctl("lookup w 0 2 --at=1500000000 --json");
  ASSERT_EQ(looked.exit_code, 0) << looked.err;
  const Json pose = Json::parse(looked.out);
  EXPECT_EQ(pose["stamp_nanos"], 1500000000);
  EXPECT_FLOAT_EQ(pose["pose"][3].get<float>(), 3.0f);  // (0 + 4) / 2 + 1.
  Ran then = Ctl("entities get w 2 --at=1250000000 --json");
  ASSERT_EQ(then.exit_code, 0) << then.err;
  EXPECT_FLOAT_EQ(Json::parse(then.out)["world"][3].get<float>(), 2.0f);
  Ran later = Ctl("lookup w 0 2 --at=3000000000 --wait=100ms");
  EXPECT_EQ(later.exit_code, 1);
  EXPECT_THAT(later.err, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(later.err, HasSubstr("known until 2000000000"));
  EXPECT_THAT(Ctl("worlds info w").out, HasSubstr("10s window"));
}

TEST_F(ToolsTest, XformctlErrorsCarryTheServersStatus) {
  Ran missing = Ctl("worlds info nope");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND"));
  ASSERT_EQ(Ctl("worlds create w").exit_code, 0);
  Ran cycle_free = Ctl("entities link w 5 9");
  EXPECT_EQ(cycle_free.exit_code, 1);
  EXPECT_THAT(cycle_free.err, HasSubstr("NOT_FOUND"));
  Ran nan = Ctl("entities create w 1 --position=nan,0,0 --json");
  EXPECT_EQ(nan.exit_code, 1);
  EXPECT_EQ(Json::parse(nan.err)["error"], "INVALID_ARGUMENT");
  EXPECT_EQ(Ctl("entities create w x").exit_code, 2);
  EXPECT_EQ(Ctl("frobnicate").exit_code, 2);
  Ran unreachable =
      RunShell(absl::StrCat(XFORMCTL_PATH,
                            " --server=127.0.0.1:1 --timeout_s=0.3 "
                            "worlds list"));
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_THAT(unreachable.err, HasSubstr("UNAVAILABLE"));
}

TEST_F(ToolsTest, XformctlHasHelpForEveryCommand) {
  Ran all = RunShell(absl::StrCat(XFORMCTL_PATH, " --help"));
  EXPECT_EQ(all.exit_code, 0);
  for (const char* command :
       {"worlds list", "worlds create", "worlds info", "worlds subscribers",
        "worlds delete", "entities create", "entities destroy", "entities link",
        "entities set", "entities get", "watch"}) {
    EXPECT_THAT(all.out, HasSubstr(command));
    Ran one = RunShell(absl::StrCat(XFORMCTL_PATH, " ", command, " --help"));
    EXPECT_EQ(one.exit_code, 0);
    EXPECT_THAT(one.out, HasSubstr(absl::StrCat("xformctl ", command)));
  }
}

TEST_F(ToolsTest, XformctlWatchPrintsALinePerFrame) {
  ASSERT_EQ(Ctl("worlds create w --mode=driven").exit_code, 0);
  ASSERT_EQ(Ctl("entities create w 1 --end_frame").exit_code, 0);
  std::atomic<bool> watched_enough{false};
  std::thread writer([&] {
    // Frames keep coming until the watcher has had its three.
    for (int i = 0; i < 500 && !watched_enough; ++i) {
      Ctl(absl::StrCat("entities set w 1 --position=", i, ",0,0 --end_frame"));
    }
  });
  Ran watched = Ctl("watch w --frames=3 --json --verbose");
  watched_enough = true;
  writer.join();
  ASSERT_EQ(watched.exit_code, 0) << watched.err;
  std::istringstream lines(watched.out);
  std::string line;
  int snapshots = 0, deltas = 0;
  while (std::getline(lines, line)) {
    const Json j = Json::parse(line);
    if (j["snapshot"]) {
      ++snapshots;
    } else {
      ++deltas;
      EXPECT_EQ(j["moved"], 1);
      EXPECT_EQ(j["moved_entities"][0]["entity"], 1);
    }
  }
  EXPECT_EQ(snapshots, 1);
  EXPECT_EQ(deltas, 3);
  // The world's stream counts, through xformctl: at least what it watched.
  const Json info = Json::parse(Ctl("worlds info w --json").out);
  EXPECT_GE(info["stream"]["messages"].get<int>(), 4);
  EXPECT_GT(info["stream"]["bytes"].get<int>(), 0);
  EXPECT_THAT(Ctl("worlds info w").out, HasSubstr("frames folded"));
}

// `worlds subscribers` lists a watcher while it watches: its peer, its
// principal, the rate it asked for, and what it was sent.
TEST_F(ToolsTest, XformctlListsAWorldsSubscribers) {
  ASSERT_EQ(Ctl("worlds create w --mode=driven").exit_code, 0);
  ASSERT_EQ(Ctl("entities create w 1 --end_frame").exit_code, 0);
  EXPECT_THAT(Ctl("worlds subscribers w").out, HasSubstr("(no subscribers)"));
  std::atomic<bool> watching{true};
  std::thread watcher([&] {
    Ctl("watch w --frames=3 --rate_hz=5");
    watching = false;
  });
  Json listed;
  std::string text;
  for (int i = 0; i < 1000 && watching; ++i) {
    Ctl(absl::StrCat("entities set w 1 --position=", i, ",0,0 --end_frame"));
    if (!listed.is_null()) continue;
    const Json page = Json::parse(Ctl("worlds subscribers w --json").out);
    if (!page["subscribers"].empty() &&
        page["subscribers"][0]["messages"].get<int>() >= 2) {
      listed = page["subscribers"][0];
      text = Ctl("worlds subscribers w").out;
    }
  }
  watcher.join();
  ASSERT_FALSE(listed.is_null()) << "the watcher was never listed";
  EXPECT_THAT(listed["peer"].get<std::string>(), HasSubstr("127.0.0.1"));
  EXPECT_EQ(listed["principal"], "anonymous");
  EXPECT_EQ(listed["max_rate_hz"], 5.0);
  EXPECT_EQ(listed["position_precision"], 0.0);
  EXPECT_GT(listed["bytes"].get<int>(), 0);
  EXPECT_THAT(text, HasSubstr("raw, whole world, 5 Hz"));
  EXPECT_THAT(text, HasSubstr("anonymous"));
  EXPECT_EQ(Ctl("worlds subscribers nope").exit_code, 1);
}

// A short run of every mode, stalling subscriber included, through the JSON
// report: every subscriber received frames, none was disconnected, and a
// stream's latency splits at the message's arrival.
TEST_F(ToolsTest, XformLoadReportsEveryMode) {
  Ran ran = RunShell(absl::StrCat(
      XFORM_LOAD_PATH, " --server=", server_.address(),
      " --mode=all --shape=chains --entities=3000 --move=100 --hz=30",
      " --subscribers=2 --writers=2 --seconds=1.5 --stall_s=0.3",
      " --redis_port=", 20000 + getpid() % 20000, " --json"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const Json report = Json::parse(ran.out);
  ASSERT_EQ(report["modes"].size(), 3u);
  for (const Json& mode : report["modes"]) {
    EXPECT_GT(mode["frames_per_s"].get<double>(), 10) << mode["mode"];
    for (const Json& sub : mode["subscribers"]) {
      EXPECT_GT(sub["messages"].get<int>(), 0) << mode["mode"];
      EXPECT_GT(sub["updates"].get<int>(), 0) << mode["mode"];
      EXPECT_GT(sub["latency_p50_ms"].get<double>(), 0) << mode["mode"];
      // A stream's messages arrive before they are applied (the stalled
      // subscriber's arrivals are not split out).
      if (mode["mode"] == "stream" && !sub.contains("stalled")) {
        EXPECT_GT(sub["arrived_p50_ms"].get<double>(), 0);
        EXPECT_LE(sub["arrived_p50_ms"].get<double>(),
                  sub["latency_p50_ms"].get<double>());
      }
    }
    EXPECT_TRUE(mode["subscribers"][0].contains("stalled")) << mode["mode"];
    // xformd's count of what its streams sent, over the whole run: at
    // least what the stream subscribers received while measuring; none
    // for pollers (Redis's relay reads a stream of its own).
    const int streamed = mode["server_streams"]["messages"].get<int>();
    if (mode["mode"] == "poll") {
      EXPECT_EQ(streamed, 0);
    } else if (mode["mode"] == "stream") {
      int received = 0;
      for (const Json& sub : mode["subscribers"]) {
        received += sub["messages"].get<int>();
      }
      EXPECT_GE(streamed, received);
    } else {
      EXPECT_GT(streamed, 0) << mode["mode"];
    }
  }
}

// --rounds: the modes and encodings take turns, round after round, each
// moving the world on, and the report's medians are each mode's middle
// round.
TEST_F(ToolsTest, XformLoadRoundsTakeTurnsAndReportMedians) {
  Ran ran = RunShell(absl::StrCat(
      XFORM_LOAD_PATH, " --server=", server_.address(),
      " --mode=stream --encoding=raw,compact --rounds=3 --shape=wide",
      " --entities=3000 --move=100 --hz=30 --subscribers=2 --seconds=0.5",
      " --json"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const Json report = Json::parse(ran.out);
  EXPECT_EQ(report["rounds"], 3);
  ASSERT_EQ(report["modes"].size(), 6u);
  for (int k = 0; k < 6; ++k) {
    const Json& mode = report["modes"][k];
    EXPECT_EQ(mode["mode"], k % 2 == 0 ? "stream" : "stream (compact)");
    EXPECT_EQ(mode["round"], k / 2 + 1);
    // Each turn's writers move on from where the turn before left the
    // world; replaying its poses would be no moves at all.
    for (const Json& sub : mode["subscribers"]) {
      EXPECT_GT(sub["updates"].get<int>(), 0) << k;
    }
  }
  ASSERT_EQ(report["medians"].size(), 2u);
  for (const Json& median : report["medians"]) {
    std::vector<double> p99s =
        median["latency_p99_ms_each_round"].get<std::vector<double>>();
    ASSERT_EQ(p99s.size(), 3u) << median["mode"];
    for (double p99 : p99s) EXPECT_GT(p99, 0) << median["mode"];
    std::sort(p99s.begin(), p99s.end());
    EXPECT_EQ(median["latency_p99_ms"].get<double>(), p99s[1]);
    EXPECT_GT(median["frames_per_s"].get<double>(), 10) << median["mode"];
  }
}

// --subscriber_processes: the stream subscribers are spread over processes
// of their own, and each one's figures come back to the report as if
// recorded in it. Driven frames, each exactly one batch of 100 leaves that
// do not move twice (see XformLoadDrivenFramesAreOneBatchEach): in a tick
// world, a busy machine can land two batches in one frame.
TEST_F(ToolsTest, XformLoadSubscriberProcessesReportEverySubscriber) {
  Ran ran = RunShell(absl::StrCat(
      XFORM_LOAD_PATH, " --server=", server_.address(),
      " --mode=stream --encoding=raw,compact --frame_mode=driven",
      " --shape=wide --entities=20000 --move=100 --hz=30 --subscribers=5",
      " --subscriber_processes=3 --seconds=1 --json"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const Json report = Json::parse(ran.out);
  EXPECT_EQ(report["subscriber_processes"], 3);
  ASSERT_EQ(report["modes"].size(), 2u);
  for (const Json& mode : report["modes"]) {
    ASSERT_EQ(mode["subscribers"].size(), 5u) << mode["mode"];
    // Subscriber s in process s % 3: two here, then one and one and one.
    std::vector<int> pids;
    for (const Json& sub : mode["subscribers"]) {
      pids.push_back(sub["pid"].get<int>());
      EXPECT_GT(sub["messages"].get<int>(), 10) << mode["mode"];
      EXPECT_EQ(sub["updates"].get<int>(), 100 * sub["frames"].get<int>())
          << mode["mode"];
      EXPECT_GT(sub["latency_p99_ms"].get<double>(), 0) << mode["mode"];
      EXPECT_GT(sub["arrived_p99_ms"].get<double>(), 0) << mode["mode"];
    }
    EXPECT_EQ(pids[0], pids[1]) << mode["mode"];
    EXPECT_EQ(absl::flat_hash_set<int>(pids.begin(), pids.end()).size(), 3u)
        << mode["mode"];
  }
}

// --keep_world: a second run takes the world as the first left it, and its
// writers move the entities on from there. Starting again from the scene's
// poses, the first run's moves replayed would set each to the pose it
// already has: the run's subscribers would be sent nothing.
TEST_F(ToolsTest, XformLoadKeptWorldMovesOn) {
  const std::string command = absl::StrCat(
      XFORM_LOAD_PATH, " --server=", server_.address(),
      " --mode=stream --keep_world --shape=wide --entities=20000 --move=100",
      " --hz=30 --subscribers=1 --seconds=0.5 --json");
  for (int run = 0; run < 2; ++run) {
    Ran ran = RunShell(command);
    ASSERT_EQ(ran.exit_code, 0) << ran.err;
    const Json report = Json::parse(ran.out);
    EXPECT_GT(report["modes"][0]["subscribers"][0]["updates"].get<int>(), 0)
        << "run " << run;
  }
}

// --frame_mode=driven: every batch closes a frame, so a frame is exactly one
// batch's moves, folded frames included (as xform_replication_bench, which
// this replaced, measured).
TEST_F(ToolsTest, XformLoadDrivenFramesAreOneBatchEach) {
  Ran ran = RunShell(absl::StrCat(
      XFORM_LOAD_PATH, " --server=", server_.address(),
      // Enough leaves that none moves twice (a move to the pose it has is
      // no move).
      " --mode=stream --frame_mode=driven --shape=wide --entities=20000",
      " --move=100 --hz=30 --subscribers=2 --writers=1 --seconds=1.5 --json"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const Json report = Json::parse(ran.out);
  EXPECT_EQ(report["frame_mode"], "driven");
  const Json& mode = report["modes"][0];
  EXPECT_GT(mode["frames_per_s"].get<double>(), 10);
  for (const Json& sub : mode["subscribers"]) {
    EXPECT_GT(sub["frames"].get<int>(), 10);
    EXPECT_EQ(sub["updates"].get<int>(), 100 * sub["frames"].get<int>());
  }
}

// A limit out of range is a usage error naming the flag, not clamped.
// Every tool takes its token from a file, so that it is not on a command
// line any local user can read (/proc/PID/cmdline); its first line, as
// `xformctl auth hash-token` hashes it.
TEST(ToolsTokenTest, ToolsTakeTheirTokenFromAFile) {
  auto policy = server::AccessPolicy::Parse(absl::StrCat(
      R"({"principals": [{"name": "ops", "token_sha256": ")",
      server::Sha256Hex("ops-secret"),
      R"(", "grants": [{"roles": ["admin"], "worlds": ["*"]}]}]})"));
  ASSERT_TRUE(policy.ok()) << policy.status();
  server::LoopbackServer server;
  ASSERT_TRUE(server.Start(
      {}, {.gatekeeper = std::make_shared<server::Gatekeeper>(*policy)}));
  const std::string token_file =
      absl::StrCat(testing::TempDir(), "/tools_test_token_", getpid());
  std::ofstream(token_file) << "ops-secret\r\nnext line\n";
  const std::string empty_file = token_file + ".empty";
  std::ofstream(empty_file).flush();
  const auto ctl = [&](const std::string& flags) {
    return RunShell(absl::StrCat(XFORMCTL_PATH, " --server=", server.address(),
                                 " ", flags, " worlds create w --mode=driven"));
  };
  const Ran made = ctl("--token_file=" + token_file);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  const Ran anonymous = ctl("");
  EXPECT_EQ(anonymous.exit_code, 1);
  EXPECT_THAT(anonymous.err, HasSubstr("UNAUTHENTICATED"));
  for (const std::string& flags :
       {std::string("--token_file=/no/such/file"), "--token_file=" + empty_file,
        "--token=ops-secret --token_file=" + token_file}) {
    const Ran bad = ctl(flags);
    EXPECT_EQ(bad.exit_code, 2) << flags << ": " << bad.err;
    EXPECT_THAT(bad.err, HasSubstr("--token")) << flags;
  }
  const Ran loaded = RunShell(
      absl::StrCat(XFORM_LOAD_PATH, " --server=", server.address(),
                   " --token_file=", token_file,
                   " --world=load --entities=100 --move=10 --subscribers=1"
                   " --seconds=1"));
  EXPECT_EQ(loaded.exit_code, 0) << loaded.err;
  const Ran web = RunShell(absl::StrCat(
      XFORM_WEB_PATH, " --listen=127.0.0.1:0 --token_file=/no/such/file"));
  EXPECT_EQ(web.exit_code, 2) << web.err;
  EXPECT_THAT(web.err, HasSubstr("--token_file"));
}

TEST(XformWebTest, FlagsOutOfRangeAreAUsageError) {
  for (const std::string flag :
       {"--threads=0", "--threads=65", "--max_tabs=0", "--max_inbound_bytes=8",
        "--max_inbound_bytes=2000000", "--idle_timeout_s=0",
        "--idle_timeout_s=-5", "--foxglove_max_clients=0",
        "--foxglove_max_worlds=0", "--foxglove_max_worlds=1025"}) {
    const Ran ran =
        RunShell(absl::StrCat(XFORM_WEB_PATH, " --listen=127.0.0.1:0 ", flag));
    EXPECT_EQ(ran.exit_code, 2) << flag << ": " << ran.err;
    EXPECT_THAT(ran.err, HasSubstr(flag.substr(0, flag.find('=')))) << flag;
  }
}

}  // namespace
}  // namespace xform
