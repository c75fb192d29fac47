// Copyright 2026 The xform Authors.

#include "tools/load/report.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tools/process_stats.h"

namespace xform::load {
namespace {

using Json = nlohmann::json;
using ::xform::tools::Percentile;

Json ToJson(const ModeResult& r) {
  Json subs = Json::array();
  for (const Received& s : r.subscribers) {
    Json j = {{"messages", s.messages},
              {"frames", s.frames},
              {"updates", s.updates},
              {"bytes", s.bytes},
              {"snapshot_messages", s.snapshot_messages},
              {"snapshot_updates", s.snapshot_updates},
              {"snapshot_bytes", s.snapshot_bytes},
              {"latency_p50_ms", Percentile(s.latency_ms, 0.5)},
              {"latency_p99_ms", Percentile(s.latency_ms, 0.99)},
              {"latency_max_ms", Percentile(s.latency_ms, 1.0)},
              {"arrived_p50_ms", Percentile(s.arrived_ms, 0.5)},
              {"arrived_p99_ms", Percentile(s.arrived_ms, 0.99)},
              {"disconnects", s.disconnects}};
    if (s.stalled) {
      j["stalled"] = {{"first_after_stall_age_ms", s.first_after_stall_ms},
                      {"catch_up_ms", s.catch_up_ms},
                      {"messages_until_current", s.backlog_messages}};
    }
    subs.push_back(j);
  }
  return {{"mode", r.mode},
          {"frames_per_s", r.frames_per_s},
          {"entities_written_per_s", r.entities_per_s},
          {"apply_p50_ms", Percentile(r.apply_ms, 0.5)},
          {"apply_p99_ms", Percentile(r.apply_ms, 0.99)},
          {"server_cpu_ms_per_frame", r.server_cpu_ms_per_frame},
          {"server_rss_mb", r.server_rss_mb},
          {"redis_cpu_ms_per_frame", r.redis_cpu_ms_per_frame},
          {"server_streams",
           {{"messages", r.server_streams.messages},
            {"bytes", r.server_streams.bytes},
            {"frames_folded", r.server_streams.frames_folded},
            {"frames_folded_by_rate_limit",
             r.server_streams.frames_folded_by_rate_limit},
            {"views_resent_whole", r.server_streams.views_resent_whole},
            {"kept_view_snapshots", r.server_streams.kept_view_snapshots},
            {"streams_cut_off", r.server_streams.streams_cut_off}}},
          {"subscribers", subs}};
}

}  // namespace

void PrintTable(const Config& c, const std::vector<ModeResult>& results) {
  absl::PrintF(
      "\n%s world (%s), %d entities; %d writer(s) moving %d per frame at "
      "%.0f Hz; %d subscriber(s)%s; %.0f s per mode\n\n",
      SceneShapeName(c.shape), c.driven ? "driven" : "tick", c.entities,
      c.writers, c.move, c.hz, c.subscribers,
      c.stall_s > 0
          ? absl::StrFormat(", one stalling %.1f s", c.stall_s).c_str()
          : "",
      c.seconds);
  absl::PrintF(
      "| mode | frames/s written | updates/s per subscriber | latency p50 | "
      "p99 | max | bytes/update | server CPU/frame | server RSS | stalled "
      "subscriber |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const ModeResult& r : results) {
    std::vector<double> latency;
    double updates = 0;
    uint64_t bytes = 0, count = 0;
    std::string stalled = "-";
    for (const Received& s : r.subscribers) {
      updates += static_cast<double>(s.updates);
      bytes += s.bytes;
      count += s.updates;
      if (s.stalled) {
        stalled = absl::StrFormat(
            "first data %.0f ms old; current after %.0f ms, %u messages%s",
            s.first_after_stall_ms, s.catch_up_ms, s.backlog_messages,
            s.disconnects ? absl::StrCat("; dropped ", s.disconnects, "x")
                          : "");
      } else {
        latency.insert(latency.end(), s.latency_ms.begin(), s.latency_ms.end());
      }
    }
    const double per_sub =
        updates / static_cast<double>(r.subscribers.size()) / c.seconds;
    absl::PrintF(
        "| %s | %.1f | %.0f | %.2f ms | %.2f ms | %.2f ms | %.1f | %s | %s | "
        "%s |\n",
        r.mode, r.frames_per_s, per_sub, Percentile(latency, 0.5),
        Percentile(latency, 0.99), Percentile(latency, 1.0),
        count ? static_cast<double>(bytes) / static_cast<double>(count) : 0.0,
        r.server_cpu_ms_per_frame > 0
            ? absl::StrFormat("%.2f ms%s", r.server_cpu_ms_per_frame,
                              r.redis_cpu_ms_per_frame > 0
                                  ? absl::StrFormat(" + redis %.2f ms",
                                                    r.redis_cpu_ms_per_frame)
                                  : "")
                  .c_str()
            : "n/a",
        r.server_rss_mb > 0
            ? absl::StrFormat("%.0f MB", r.server_rss_mb).c_str()
            : "n/a",
        stalled);
  }
  // What snapshots carried while measuring (resyncs, or snapshots that
  // keep a laggard's view), which the latency and bytes above leave out.
  for (const ModeResult& r : results) {
    uint64_t messages = 0, updates = 0, bytes = 0, all_bytes = 0;
    for (const Received& s : r.subscribers) {
      messages += s.snapshot_messages;
      updates += s.snapshot_updates;
      bytes += s.snapshot_bytes;
      all_bytes += s.bytes + s.snapshot_bytes;
    }
    if (messages == 0) continue;
    const double per_sub_s =
        static_cast<double>(r.subscribers.size()) * c.seconds;
    absl::PrintF(
        "\n%s: snapshots while measuring, per subscriber: %.1f messages/s, "
        "%.0f entities/s, %.2f MB/s (all messages: %.2f MB/s)\n",
        r.mode, static_cast<double>(messages) / per_sub_s,
        static_cast<double>(updates) / per_sub_s,
        static_cast<double>(bytes) / per_sub_s / 1e6,
        static_cast<double>(all_bytes) / per_sub_s / 1e6);
  }
  // What xformd says it sent, over the writers' whole run: a subscriber
  // that falls behind shows here as folded frames, views sent again or a
  // stream cut off, even if it catches up before the measuring ends.
  for (const ModeResult& r : results) {
    const StreamStats& s = r.server_streams;
    if (s.messages == 0) continue;
    absl::PrintF(
        "\n%s: xformd's streams of the world over the run: %.2f MB/s, %u "
        "messages; %u frames folded (and %u by rate limits); views resent "
        "whole %u, kept %u; %u cut off\n",
        r.mode, static_cast<double>(s.bytes) / c.seconds / 1e6, s.messages,
        s.frames_folded, s.frames_folded_by_rate_limit, s.views_resent_whole,
        s.kept_view_snapshots, s.streams_cut_off);
  }
  // Where a stream's latency goes: before the message reaches the
  // subscriber's process (the server, the transport) or after (its queue,
  // decoding and committing).
  bool arrivals = false;
  for (const ModeResult& r : results) {
    for (const Received& s : r.subscribers) arrivals |= !s.arrived_ms.empty();
  }
  if (arrivals) {
    absl::PrintF(
        "\n| mode | arrived p50 | arrived p99 | applied p50 | applied p99 "
        "|\n|---|---|---|---|---|\n");
  }
  for (const ModeResult& r : results) {
    std::vector<double> arrived, latency;
    for (const Received& s : r.subscribers) {
      if (s.arrived_ms.empty()) continue;
      arrived.insert(arrived.end(), s.arrived_ms.begin(), s.arrived_ms.end());
      latency.insert(latency.end(), s.latency_ms.begin(), s.latency_ms.end());
    }
    if (arrived.empty()) continue;
    absl::PrintF("| %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms |\n", r.mode,
                 Percentile(arrived, 0.5), Percentile(arrived, 0.99),
                 Percentile(latency, 0.5), Percentile(latency, 0.99));
  }
  absl::PrintF(
      "\n| mode | batches/s written | entities/s written | apply p50 | "
      "apply p99 | apply max |\n|---|---|---|---|---|---|\n");
  for (const ModeResult& r : results) {
    absl::PrintF("| %s | %.1f | %.0f | %.2f ms | %.2f ms | %.2f ms |\n", r.mode,
                 r.frames_per_s * c.writers, r.entities_per_s,
                 Percentile(r.apply_ms, 0.5), Percentile(r.apply_ms, 0.99),
                 Percentile(r.apply_ms, 1.0));
  }
  std::fflush(stdout);
}

std::string ReportJson(const Config& config,
                       const std::vector<ModeResult>& results) {
  Json all = Json::array();
  for (const ModeResult& r : results) all.push_back(ToJson(r));
  return Json{{"shape", SceneShapeName(config.shape)},
              {"entities", config.entities},
              {"writers", config.writers},
              {"move", config.move},
              {"hz", config.hz},
              {"frame_mode", config.driven ? "driven" : "tick"},
              {"subscribers", config.subscribers},
              {"stall_s", config.stall_s},
              {"seconds", config.seconds},
              {"modes", all}}
      .dump(2);
}

}  // namespace xform::load
