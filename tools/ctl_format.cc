// Copyright 2026 The xform Authors.

#include "tools/ctl_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace xform::ctl {

const char* ModeName(FrameMode mode) {
  switch (mode) {
    case FrameMode::kTick:
      return "tick";
    case FrameMode::kDriven:
      return "driven";
    case FrameMode::kServerDefault:
      break;
  }
  return "default";
}

Json ToJson(const StreamStats& s) {
  return {{"messages", s.messages},
          {"bytes", s.bytes},
          {"frames_folded", s.frames_folded},
          {"frames_folded_by_rate_limit", s.frames_folded_by_rate_limit},
          {"views_resent_whole", s.views_resent_whole},
          {"kept_view_snapshots", s.kept_view_snapshots},
          {"streams_cut_off", s.streams_cut_off},
          {"subscribers_in_snapshot", s.subscribers_in_snapshot}};
}

Json ToJson(const WorldInfo& w) {
  Json json = {{"name", w.name},
               {"mode", ModeName(w.mode)},
               {"tick_hz", w.tick_hz},
               {"entities", w.entities},
               {"frame", w.frame},
               {"subscribers", w.subscribers},
               {"stream", ToJson(w.stream)},
               {"history",
                {{"window_seconds", absl::ToDoubleSeconds(w.history.window)},
                 {"time_model",
                  w.history.time_model == TimeModel::kTf2 ? "tf2" : "hold"},
                 {"newest_stamp_nanos", w.history.newest_stamp},
                 {"samples", w.history.samples},
                 {"bytes", w.history.bytes},
                 {"refused_old", w.history.refused_old},
                 {"waiting_lookups", w.history.waiting_lookups}}}};
  if (!w.answered_by.empty()) {
    json["cluster"] = {
        {"writer_node", w.writer_node},
        {"writer_address", w.writer_address},
        {"serving_nodes", w.serving_nodes},
        {"answered_by", w.answered_by},
        {"unconfirmed_ms", absl::ToInt64Milliseconds(w.unconfirmed)}};
    if (!w.wedged.empty()) {
      json["cluster"]["wedged"] = w.wedged;
      json["cluster"]["wedged_record"] = w.wedged_record;
    }
  }
  return json;
}

Json ToJson(const NodeInfo& n) {
  return {{"name", n.name},
          {"address", n.address},
          {"draining", n.draining},
          {"worlds_owned", n.worlds_owned},
          {"worlds_served", n.worlds_served},
          {"started_unix_ms", absl::ToUnixMillis(n.started)},
          {"last_seen_ms", absl::ToInt64Milliseconds(n.last_seen)}};
}

std::string ToText(const NodeInfo& n) {
  return absl::StrFormat("%-16s %-24s %3u worlds written, %3u served%s", n.name,
                         n.address.empty() ? "-" : n.address, n.worlds_owned,
                         n.worlds_served, n.draining ? "  (draining)" : "");
}

Json ToJson(const SubscriberInfo& s) {
  return {
      {"id", s.id},
      {"peer", s.peer},
      {"principal", s.principal},
      {"subscribed_unix_ms", absl::ToUnixMillis(s.subscribed)},
      {"position_precision", s.position_precision},
      {"entities_listed", s.entities_listed},
      {"subtrees_listed", s.subtrees_listed},
      {"max_rate_hz", s.max_rate_hz},
      {"no_echo_client_id", s.no_echo_client_id},
      {"accepts_kept_view_snapshots", s.accepts_kept_view_snapshots},
      {"last_frame_sent", s.last_frame_sent},
      {"pending", s.pending},
      {"in_snapshot", s.in_snapshot},
      {"write_outstanding_ms", absl::ToDoubleMilliseconds(s.write_outstanding)},
      {"messages", s.messages},
      {"bytes", s.bytes},
      {"frames_folded", s.frames_folded},
      {"views_resent_whole", s.views_resent_whole},
      {"kept_view_snapshots", s.kept_view_snapshots}};
}

std::string ToText(const SubscriberInfo& s, absl::Time now) {
  std::string asked = s.position_precision > 0
                          ? absl::StrFormat("compact %g", s.position_precision)
                          : "raw";
  if (s.entities_listed + s.subtrees_listed == 0) {
    absl::StrAppend(&asked, ", whole world");
  } else {
    absl::StrAppend(&asked, ", ", s.entities_listed, " entities and ",
                    s.subtrees_listed, " subtrees");
  }
  if (s.max_rate_hz > 0) absl::StrAppend(&asked, ", ", s.max_rate_hz, " Hz");
  if (!s.no_echo_client_id.empty()) {
    absl::StrAppend(&asked, ", no echo of '", s.no_echo_client_id, "'");
  }
  if (s.accepts_kept_view_snapshots) absl::StrAppend(&asked, ", keeps views");
  std::string stands = absl::StrFormat("frame %u, %u entities owed",
                                       s.last_frame_sent, s.pending);
  if (s.in_snapshot) absl::StrAppend(&stands, ", in a snapshot");
  if (s.write_outstanding > absl::ZeroDuration()) {
    absl::StrAppend(&stands, ", a write waiting ",
                    absl::FormatDuration(absl::Trunc(s.write_outstanding,
                                                     absl::Milliseconds(1))));
  }
  return absl::StrFormat(
      "%-6u %-24s %-16s for %s: %s\n       %s; sent %u messages, %.1f MB, "
      "%u frames folded, views resent whole %u, kept %u",
      s.id, s.peer, s.principal,
      absl::FormatDuration(absl::Trunc(now - s.subscribed, absl::Seconds(1))),
      asked, stands, s.messages, static_cast<double>(s.bytes) / 1e6,
      s.frames_folded, s.views_resent_whole, s.kept_view_snapshots);
}

std::string ToText(const WorldInfo& w) {
  std::string text = absl::StrFormat(
      "%-24s %-7s %7.1f Hz %10u entities  frame %-9u %u subscribers", w.name,
      ModeName(w.mode), w.tick_hz, w.entities, w.frame, w.subscribers);
  absl::StrAppend(
      &text, "\nhistory: ",
      w.history.window == absl::ZeroDuration()
          ? std::string("none")
          : absl::StrFormat(
                "%s window (%s), %u samples, %.1f MB, newest "
                "stamp %d, %u lookups waiting",
                absl::FormatDuration(w.history.window),
                w.history.time_model == TimeModel::kTf2 ? "tf2" : "hold",
                w.history.samples, w.history.bytes / 1e6,
                w.history.newest_stamp, w.history.waiting_lookups));
  if (!w.answered_by.empty()) {
    absl::StrAppend(&text, "  written at ",
                    w.writer_node.empty() ? "(none now)" : w.writer_node);
    if (w.unconfirmed > absl::ZeroDuration()) {
      absl::StrAppend(&text, "  (", w.answered_by, " unconfirmed for ",
                      absl::FormatDuration(w.unconfirmed), ")");
    }
    if (!w.wedged.empty()) {
      absl::StrAppend(&text, "\nWEDGED at record ", w.wedged_record, ": ",
                      w.wedged, "\n(xformctl worlds skip-record ", w.name, " ",
                      w.wedged_record, " skips it, losing what it held)");
    }
  }
  return text;
}

std::vector<float> Floats(const Transform& t) {
  return {t.position.x, t.position.y, t.position.z, t.rotation.x, t.rotation.y,
          t.rotation.z, t.rotation.w, t.scale.x,    t.scale.y,    t.scale.z};
}

Json UpdateJson(const MirrorUpdate& u) {
  return {{"frame", u.frame},
          {"snapshot", u.snapshot},
          {"keeps_view", u.keeps_view},
          {"moved", u.moved.size()},
          {"created", u.created.size()},
          {"destroyed", u.destroyed.size()},
          {"reparented", u.reparented.size()},
          {"frames_skipped", u.frames_skipped},
          {"stamp_nanos", u.stamp},
          {"bytes", u.bytes},
          {"latency_ms", absl::ToDoubleMilliseconds(u.received - u.published)}};
}

std::string UpdateText(const MirrorUpdate& u) {
  return absl::StrFormat(
      "frame %u%s: %u moved, %u created, %u destroyed, %u reparented, "
      "%.2f ms%s",
      u.frame,
      u.snapshot
          ? (u.keeps_view ? " (snapshot keeping the view)" : " (snapshot)")
          : "",
      u.moved.size(), u.created.size(), u.destroyed.size(), u.reparented.size(),
      absl::ToDoubleMilliseconds(u.received - u.published),
      u.frames_skipped ? absl::StrCat(" (", u.frames_skipped, " skipped)")
                       : "");
}

void AddUpdateDetail(const MirrorUpdate& u, bool json, Json& line,
                     std::string& text) {
  Json moved = Json::array();
  for (size_t k = 0; k < u.moved.size(); ++k) {
    const Matrix3x4 world = u.MovedWorld(k);
    const float* m = world.m.data();
    if (json) {
      moved.push_back(
          {{"entity", u.moved[k]}, {"world", std::vector<float>(m, m + 12)}});
    } else {
      absl::StrAppendFormat(&text, "\n  moved %u to %g %g %g", u.moved[k], m[3],
                            m[7], m[11]);
    }
  }
  for (size_t k = 0; k < u.created.size(); ++k) {
    absl::StrAppendFormat(&text, "\n  created %u under %u", u.created[k],
                          u.created_parent[k]);
  }
  for (EntityId e : u.destroyed) {
    absl::StrAppendFormat(&text, "\n  destroyed %u", e);
  }
  for (size_t k = 0; k < u.reparented.size(); ++k) {
    absl::StrAppendFormat(&text, "\n  reparented %u under %u", u.reparented[k],
                          u.reparented_parent[k]);
  }
  const auto ids = [](const auto& span) {
    return std::vector<EntityId>(span.begin(), span.end());
  };
  line["moved_entities"] = moved;
  line["created_entities"] = ids(u.created);
  line["created_parents"] = ids(u.created_parent);
  line["destroyed_entities"] = ids(u.destroyed);
  line["reparented_entities"] = ids(u.reparented);
  line["reparented_parents"] = ids(u.reparented_parent);
}

}  // namespace xform::ctl
