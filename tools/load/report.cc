// Copyright 2026 The xform Authors.

#include "tools/load/report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
              {"disconnects", s.disconnects},
              {"pid", s.pid}};
    if (s.stalled) {
      j["stalled"] = {{"first_after_stall_age_ms", s.first_after_stall_ms},
                      {"catch_up_ms", s.catch_up_ms},
                      {"messages_until_current", s.backlog_messages}};
    }
    subs.push_back(j);
  }
  return {{"mode", r.mode},
          {"round", r.round},
          {"frames_per_s", r.frames_per_s},
          {"entities_written_per_s", r.entities_per_s},
          {"apply_p50_ms", Percentile(r.apply_ms, 0.5)},
          {"apply_p99_ms", Percentile(r.apply_ms, 0.99)},
          {"apply_max_ms", Percentile(r.apply_ms, 1.0)},
          {"lookups", r.lookup_ms.size()},
          {"lookup_p50_ms", Percentile(r.lookup_ms, 0.5)},
          {"lookup_p99_ms", Percentile(r.lookup_ms, 0.99)},
          {"lookup_errors", r.lookup_errors},
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

// One run's subscribers' figures, pooled: the latency of all but a stalled
// one, and what they were sent.
struct Figures {
  double p50 = 0, p99 = 0, max = 0;
  double arrived_p50 = 0, arrived_p99 = 0;  // 0 for a mode without arrivals.
  // Messages, beside the writers' frames: in tick mode a frame may hold
  // two batches, or none (and a folded message several frames).
  double messages_per_subscriber_s = 0;
  double updates_per_subscriber_s = 0;
  double bytes_per_update = 0;
  std::string stalled = "-";  // What the stalled subscriber saw.
};

Figures Summarize(const Config& c, const ModeResult& r) {
  Figures f;
  std::vector<double> latency, arrived;
  double messages = 0, updates = 0;
  uint64_t bytes = 0, count = 0;
  for (const Received& s : r.subscribers) {
    messages += static_cast<double>(s.messages);
    updates += static_cast<double>(s.updates);
    bytes += s.bytes;
    count += s.updates;
    if (s.stalled) {
      f.stalled = absl::StrFormat(
          "first data %.0f ms old; current after %.0f ms, %u messages%s",
          s.first_after_stall_ms, s.catch_up_ms, s.backlog_messages,
          s.disconnects ? absl::StrCat("; dropped ", s.disconnects, "x") : "");
    } else {
      latency.insert(latency.end(), s.latency_ms.begin(), s.latency_ms.end());
      arrived.insert(arrived.end(), s.arrived_ms.begin(), s.arrived_ms.end());
    }
  }
  f.p50 = Percentile(latency, 0.5);
  f.p99 = Percentile(latency, 0.99);
  f.max = Percentile(latency, 1.0);
  f.arrived_p50 = Percentile(arrived, 0.5);
  f.arrived_p99 = Percentile(std::move(arrived), 0.99);
  const double subscriber_s =
      static_cast<double>(r.subscribers.size()) * c.seconds;
  f.messages_per_subscriber_s = messages / subscriber_s;
  f.updates_per_subscriber_s = updates / subscriber_s;
  f.bytes_per_update =
      count ? static_cast<double>(bytes) / static_cast<double>(count) : 0.0;
  return f;
}

// The mode, and with more than one round, which round.
std::string Label(const Config& c, const ModeResult& r) {
  return c.rounds > 1 ? absl::StrCat(r.mode, " #", r.round) : r.mode;
}

// Each mode's medians over its rounds, in the order the modes first ran.
struct Medians {
  std::string mode;
  double frames_per_s = 0, p50 = 0, p99 = 0;
  double arrived_p99 = 0;  // 0 for a mode without arrivals (redis, poll).
  double server_cpu_ms_per_frame = 0, redis_cpu_ms_per_frame = 0;
  std::vector<double> p99s;  // Each round's, in the order they ran.
};

// Each run's figures, in the order of `results`: the tables and the medians
// read them, rather than pool and sort each run's samples again.
std::vector<Figures> SummarizeAll(const Config& c,
                                  const std::vector<ModeResult>& results) {
  std::vector<Figures> figures;
  figures.reserve(results.size());
  for (const ModeResult& r : results) figures.push_back(Summarize(c, r));
  return figures;
}

// `figures` as SummarizeAll gives them.
std::vector<Medians> MediansByMode(const std::vector<ModeResult>& results,
                                   const std::vector<Figures>& figures) {
  std::vector<Medians> all;
  for (const ModeResult& r : results) {
    if (std::none_of(all.begin(), all.end(),
                     [&](const Medians& m) { return m.mode == r.mode; })) {
      all.push_back({.mode = r.mode});
    }
  }
  for (Medians& m : all) {
    std::vector<double> frames, p50, arrived, cpu, redis_cpu;
    for (size_t k = 0; k < results.size(); ++k) {
      const ModeResult& r = results[k];
      if (r.mode != m.mode) continue;
      const Figures& f = figures[k];
      frames.push_back(r.frames_per_s);
      p50.push_back(f.p50);
      m.p99s.push_back(f.p99);
      arrived.push_back(f.arrived_p99);
      cpu.push_back(r.server_cpu_ms_per_frame);
      redis_cpu.push_back(r.redis_cpu_ms_per_frame);
    }
    m.frames_per_s = Percentile(frames, 0.5);
    m.p50 = Percentile(p50, 0.5);
    m.p99 = Percentile(m.p99s, 0.5);
    m.arrived_p99 = Percentile(arrived, 0.5);
    m.server_cpu_ms_per_frame = Percentile(cpu, 0.5);
    m.redis_cpu_ms_per_frame = Percentile(redis_cpu, 0.5);
  }
  return all;
}

// xformd's CPU a frame, and redis-server's beside it where there is one.
std::string CpuCell(double server_ms, double redis_ms) {
  if (server_ms <= 0) return "n/a";
  return absl::StrFormat(
      "%.2f ms%s", server_ms,
      redis_ms > 0 ? absl::StrFormat(" + redis %.2f ms", redis_ms) : "");
}

// The run: its world, writers and subscribers.
void PrintRunHeader(const Config& c) {
  std::string subscribers_note;
  if (c.subscriber_processes > 1) {
    absl::StrAppendFormat(&subscribers_note, " (stream ones in %d processes)",
                          c.subscriber_processes);
  }
  if (c.stall_s > 0) {
    absl::StrAppendFormat(&subscribers_note, ", one stalling %.1f s",
                          c.stall_s);
  }
  if (c.camera) {
    absl::StrAppendFormat(
        &subscribers_note,
        ", stream ones cameras (%s within %.0f, moving %.0f units/s, %.0f "
        "times a second)",
        c.camera->region.ToString(), c.camera->range, c.camera->speed,
        c.camera->hz);
  }
  absl::PrintF(
      "\n%s world (%s), %d entities; %d writer(s) moving %d per frame at "
      "%.0f Hz; %d subscriber(s)%s; %.0f s per mode%s\n\n",
      SceneShapeName(c.shape), c.driven ? "driven" : "tick", c.entities,
      c.writers, c.move, c.hz, c.subscribers, subscribers_note, c.seconds,
      c.rounds > 1 ? absl::StrFormat(", %d rounds", c.rounds).c_str() : "");
}

// A row a mode's run: what its subscribers got.
void PrintModeRows(const Config& c, const std::vector<ModeResult>& results,
                   const std::vector<Figures>& figures) {
  absl::PrintF(
      "| mode | frames/s written | messages/s per subscriber | updates/s per "
      "subscriber | latency p50 | p99 | max | bytes/update | server CPU/frame "
      "| server RSS | stalled subscriber "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t k = 0; k < results.size(); ++k) {
    const ModeResult& r = results[k];
    const Figures& f = figures[k];
    absl::PrintF(
        "| %s | %.1f | %.1f | %.0f | %.2f ms | %.2f ms | %.2f ms | %.1f | %s | "
        "%s | %s |\n",
        Label(c, r), r.frames_per_s, f.messages_per_subscriber_s,
        f.updates_per_subscriber_s, f.p50, f.p99, f.max, f.bytes_per_update,
        CpuCell(r.server_cpu_ms_per_frame, r.redis_cpu_ms_per_frame),
        r.server_rss_mb > 0
            ? absl::StrFormat("%.0f MB", r.server_rss_mb).c_str()
            : "n/a",
        f.stalled);
  }
}

// What snapshots carried while measuring (resyncs, or snapshots that
// keep a laggard's view), which the latency and bytes above leave out.
void PrintSnapshotLines(const Config& c,
                        const std::vector<ModeResult>& results) {
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
        Label(c, r), static_cast<double>(messages) / per_sub_s,
        static_cast<double>(updates) / per_sub_s,
        static_cast<double>(bytes) / per_sub_s / 1e6,
        static_cast<double>(all_bytes) / per_sub_s / 1e6);
  }
}

// What xformd says it sent, over the writers' whole run: a subscriber
// that falls behind shows here as folded frames, views sent again or a
// stream cut off, even if it catches up before the measuring ends.
void PrintServerStreamLines(const Config& c,
                            const std::vector<ModeResult>& results) {
  for (const ModeResult& r : results) {
    const StreamStats& s = r.server_streams;
    if (s.messages == 0) continue;
    absl::PrintF(
        "\n%s: xformd's streams of the world over the run: %.2f MB/s, %u "
        "messages; %u frames folded (and %u by rate limits); views resent "
        "whole %u, kept %u; %u cut off\n",
        Label(c, r), static_cast<double>(s.bytes) / c.seconds / 1e6, s.messages,
        s.frames_folded, s.frames_folded_by_rate_limit, s.views_resent_whole,
        s.kept_view_snapshots, s.streams_cut_off);
  }
}

// Where a stream's latency goes: before the message reaches the
// subscriber's process (the server, the transport) or after (its queue,
// decoding and committing).
void PrintArrivalTable(const Config& c, const std::vector<ModeResult>& results,
                       const std::vector<Figures>& figures) {
  auto has_arrivals = [](const ModeResult& r) {
    return std::any_of(r.subscribers.begin(), r.subscribers.end(),
                       [](const Received& s) { return !s.arrived_ms.empty(); });
  };
  if (std::any_of(results.begin(), results.end(), has_arrivals)) {
    absl::PrintF(
        "\n| mode | arrived p50 | arrived p99 | applied p50 | applied p99 "
        "|\n|---|---|---|---|---|\n");
  }
  for (size_t k = 0; k < results.size(); ++k) {
    const ModeResult& r = results[k];
    if (!has_arrivals(r)) continue;
    const Figures& f = figures[k];
    absl::PrintF("| %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms |\n",
                 Label(c, r), f.arrived_p50, f.arrived_p99, f.p50, f.p99);
  }
}

// What the writers wrote, and how long their batches took.
void PrintWriteTable(const Config& c, const std::vector<ModeResult>& results) {
  absl::PrintF(
      "\n| mode | batches/s written | entities/s written | apply p50 | "
      "apply p99 | apply max |\n|---|---|---|---|---|---|\n");
  for (const ModeResult& r : results) {
    absl::PrintF("| %s | %.1f | %.0f | %.2f ms | %.2f ms | %.2f ms |\n",
                 Label(c, r), r.frames_per_s * c.writers, r.entities_per_s,
                 Percentile(r.apply_ms, 0.5), Percentile(r.apply_ms, 0.99),
                 Percentile(r.apply_ms, 1.0));
  }
}

// The lookups beside the load, if any.
void PrintLookupTable(const Config& c, const std::vector<ModeResult>& results) {
  if (c.lookups_per_second <= 0) return;
  absl::PrintF(
      "\n| mode | lookups/s | lookup p50 | p99 | max | refused |\n"
      "|---|---|---|---|---|---|\n");
  for (const ModeResult& r : results) {
    absl::PrintF("| %s | %.0f | %.3f ms | %.3f ms | %.3f ms | %u%s |\n",
                 Label(c, r), r.lookup_ms.size() / c.seconds,
                 Percentile(r.lookup_ms, 0.5), Percentile(r.lookup_ms, 0.99),
                 Percentile(r.lookup_ms, 1.0), r.lookup_errors,
                 r.lookup_error.empty() ? "" : " (" + r.lookup_error + ")");
  }
}

// A single run's p99 on a noisy machine says little; the median of the
// rounds' says more, and the spread says how much.
void PrintMedians(const Config& c, const std::vector<ModeResult>& results,
                  const std::vector<Figures>& figures) {
  if (c.rounds <= 1) return;
  absl::PrintF(
      "\nMedians over %d rounds (each figure the median of the rounds')\n\n"
      "| mode | frames/s written | latency p50 | p99 | arrived p99 | server "
      "CPU/frame | p99 in each round |\n|---|---|---|---|---|---|---|\n",
      c.rounds);
  for (const Medians& m : MediansByMode(results, figures)) {
    absl::PrintF(
        "| %s | %.1f | %.2f ms | %.2f ms | %s | %s | %s |\n", m.mode,
        m.frames_per_s, m.p50, m.p99,
        m.arrived_p99 > 0 ? absl::StrFormat("%.2f ms", m.arrived_p99) : "-",
        CpuCell(m.server_cpu_ms_per_frame, m.redis_cpu_ms_per_frame),
        absl::StrJoin(m.p99s, ", ", [](std::string* out, double v) {
          absl::StrAppendFormat(out, "%.2f", v);
        }));
  }
}

}  // namespace

void PrintTable(const Config& c, const std::vector<ModeResult>& results) {
  const std::vector<Figures> figures = SummarizeAll(c, results);
  PrintRunHeader(c);
  PrintModeRows(c, results, figures);
  PrintSnapshotLines(c, results);
  PrintServerStreamLines(c, results);
  PrintArrivalTable(c, results, figures);
  PrintWriteTable(c, results);
  PrintLookupTable(c, results);
  PrintMedians(c, results, figures);
  std::fflush(stdout);
}

std::string ReportJson(const Config& config,
                       const std::vector<ModeResult>& results) {
  Json all = Json::array();
  for (const ModeResult& r : results) all.push_back(ToJson(r));
  Json medians = Json::array();
  for (const Medians& m :
       MediansByMode(results, SummarizeAll(config, results))) {
    medians.push_back({{"mode", m.mode},
                       {"frames_per_s", m.frames_per_s},
                       {"latency_p50_ms", m.p50},
                       {"latency_p99_ms", m.p99},
                       {"arrived_p99_ms", m.arrived_p99},
                       {"server_cpu_ms_per_frame", m.server_cpu_ms_per_frame},
                       {"redis_cpu_ms_per_frame", m.redis_cpu_ms_per_frame},
                       {"latency_p99_ms_each_round", m.p99s}});
  }
  return Json{{"shape", SceneShapeName(config.shape)},
              {"entities", config.entities},
              {"writers", config.writers},
              {"move", config.move},
              {"hz", config.hz},
              {"frame_mode", config.driven ? "driven" : "tick"},
              {"subscribers", config.subscribers},
              {"subscriber_processes", config.subscriber_processes},
              {"region", config.camera ? config.camera->region.ToString() : ""},
              {"region_speed", config.camera ? config.camera->speed : 0.0f},
              {"stall_s", config.stall_s},
              {"seconds", config.seconds},
              {"rounds", config.rounds},
              {"modes", all},
              {"medians", medians}}
      .dump(2);
}

}  // namespace xform::load
