// Copyright 2026 The xform Authors.
//
// xformctl: worlds, entities and live subscriptions of an xformd server from
// the command line, for people (aligned text) and scripts (--json: one JSON
// object per result or per streamed message). Errors print the server's
// status code and message and exit 1; usage errors exit 2.

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/access/access_policy.h"
#include "tools/client_flags.h"
#include "tools/ctl_format.h"
#include "tools/ctl_record.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/region.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "xformd address, or a cluster's nodes' addresses, comma-separated");
ABSL_FLAG(double, timeout_s, 10, "Deadline of each call, and of connecting");
ABSL_FLAG(bool, json, false, "Print JSON (one object per line)");
// worlds create
ABSL_FLAG(std::string, mode, "tick", "worlds create: tick or driven");
ABSL_FLAG(double, tick_hz, 0, "worlds create: tick rate (0: server default)");
ABSL_FLAG(std::string, time_model, "hold",
          "worlds create: hold (an entity is known until the world's newest "
          "stamp) or tf2 (only to its own newest sample)");
// entities
ABSL_FLAG(uint64_t, parent, 0, "entities create: the parent (0: a root)");
ABSL_FLAG(std::string, position, "", "x,y,z");
ABSL_FLAG(std::string, rotation, "", "a unit quaternion x,y,z,w");
ABSL_FLAG(std::string, scale, "", "x,y,z");
ABSL_FLAG(bool, keep_children, false,
          "entities destroy: children go to the parent, keeping their world");
ABSL_FLAG(bool, keep_world, false,
          "entities link: keep the world transform (default: the local)");
ABSL_FLAG(bool, subtree, false, "entities get: the entity and all below it");
ABSL_FLAG(std::string, name, "",
          "entities create: the entity's name (unique in its world)");
ABSL_FLAG(bool, end_frame, false, "writes: publish a frame (driven worlds)");
ABSL_FLAG(int64_t, stamp, 0,
          "writes: when the poses were true, in ns on the world's writers' "
          "clock (0: the server's Unix time)");
ABSL_FLAG(int64_t, at, 0,
          "lookup, entities get: the stamp to look up at, in ns (lookup: 0 "
          "is the latest every link is known at)");
ABSL_FLAG(absl::Duration, wait, absl::ZeroDuration(),
          "lookup: how long the server may wait for data newer than it "
          "holds");
// watch
ABSL_FLAG(std::string, entities, "", "watch: only these ids (a,b,c)");
ABSL_FLAG(std::string, subtrees, "", "watch: only the subtrees of these ids");
ABSL_FLAG(std::string, region, "",
          "watch: only what is in this region: box:x0,y0,z0,x1,y1,z1 or "
          "sphere:x,y,z,r, each with ,margin=M if wanted");
ABSL_FLAG(double, rate_hz, 0, "watch: at most this many messages a second");
ABSL_FLAG(int, frames, 0, "watch: stop after this many frames (0: never)");
ABSL_FLAG(bool, verbose, false, "watch: print every change, not only counts");
// record, play
ABSL_FLAG(std::string, out, "", "record: the MCAP file to write");
ABSL_FLAG(std::string, world, "", "play: the world to write into");
ABSL_FLAG(double, rate, 1,
          "play: times the recorded pace (0: as fast as the server answers)");
ABSL_FLAG(bool, restamp, false,
          "play: stamp batches with the server's clock, not the recording's");

namespace xform {
namespace {

using ctl::AddUpdateDetail;
using ctl::Floats;
using ctl::Json;
using ctl::ToJson;
using ctl::ToText;
using ctl::UpdateJson;
using ctl::UpdateText;

constexpr int kServerError = 1;
constexpr int kUsageError = 2;

class Ctl;
struct Command;
int UsageError(absl::string_view what, absl::string_view command);
// The command named `name`, or null.
const Command* Find(absl::string_view name);

int Fail(const absl::Status& status) {
  if (absl::GetFlag(FLAGS_json)) {
    Json j = {{"error", absl::StatusCodeToString(status.code())},
              {"message", std::string(status.message())}};
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  } else {
    std::fprintf(stderr, "error: %s: %s\n",
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
  }
  return kServerError;
}

void Print(const Json& json, const std::string& text) {
  std::printf("%s\n",
              absl::GetFlag(FLAGS_json) ? json.dump().c_str() : text.c_str());
  std::fflush(stdout);
}

bool ParseFloats(absl::string_view text, size_t count, float* out) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.size() != count) return false;
  for (size_t i = 0; i < count; ++i) {
    if (!absl::SimpleAtof(parts[i], &out[i])) return false;
  }
  return true;
}

bool ParseIds(absl::string_view text, std::vector<EntityId>* ids) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    EntityId id;
    if (!absl::SimpleAtoi(part, &id)) return false;
    ids->push_back(id);
  }
  return true;
}

// Applies --position/--rotation/--scale over `t`; false on a malformed one.
bool OverrideTransform(Transform* t, std::string* error) {
  const std::string position = absl::GetFlag(FLAGS_position);
  const std::string rotation = absl::GetFlag(FLAGS_rotation);
  const std::string scale = absl::GetFlag(FLAGS_scale);
  float v[4];
  if (!position.empty()) {
    if (!ParseFloats(position, 3, v)) {
      *error = "--position takes x,y,z";
      return false;
    }
    t->position = {v[0], v[1], v[2]};
  }
  if (!rotation.empty()) {
    if (!ParseFloats(rotation, 4, v)) {
      *error = "--rotation takes a quaternion x,y,z,w";
      return false;
    }
    t->rotation = glm::quat(v[3], v[0], v[1], v[2]);
  }
  if (!scale.empty()) {
    if (!ParseFloats(scale, 3, v)) {
      *error = "--scale takes x,y,z";
      return false;
    }
    t->scale = {v[0], v[1], v[2]};
  }
  return true;
}

// The command line after the flags: the command's words, then its operands.
struct Invocation {
  std::string command;  // "worlds create", "watch", ...
  std::vector<std::string> operands;
};

class Ctl {
 public:
  explicit Ctl(Client& client) : client_(client) {}

  // Runs the command `in` names, checking its operands first.
  int Run(const Invocation& in);

  // The commands, each run by one of these (see kCommands).
  int WorldsList(const std::vector<std::string>&) {
    absl::StatusOr<std::vector<WorldInfo>> worlds = client_.ListWorlds();
    if (!worlds.ok()) return Fail(worlds.status());
    Json all = Json::array();
    std::string text;
    for (const WorldInfo& w : *worlds) {
      all.push_back(ToJson(w));
      absl::StrAppend(&text, text.empty() ? "" : "\n", ToText(w));
    }
    Print({{"worlds", all}}, worlds->empty() ? "(no worlds)" : text);
    return 0;
  }

  int WorldsCreate(const std::vector<std::string>& args) {
    WorldOptions options;
    const std::string mode = absl::GetFlag(FLAGS_mode);
    if (mode == "tick") {
      options.mode = FrameMode::kTick;
    } else if (mode == "driven") {
      options.mode = FrameMode::kDriven;
    } else {
      return UsageError("--mode is tick or driven", "worlds create");
    }
    options.tick_hz = absl::GetFlag(FLAGS_tick_hz);
    const std::string time_model = absl::GetFlag(FLAGS_time_model);
    if (time_model == "tf2") {
      options.time_model = TimeModel::kTf2;
    } else if (time_model != "hold") {
      return UsageError("--time_model is hold or tf2", "worlds create");
    }
    return PrintWorld(client_.CreateWorld(args[0], options));
  }

  int WorldsInfo(const std::vector<std::string>& args) {
    return PrintWorld(client_.GetWorld(args[0]));
  }

  int WorldsSubscribers(const std::vector<std::string>& args) {
    absl::StatusOr<std::vector<SubscriberInfo>> subscribers =
        client_.ListSubscribers(args[0]);
    if (!subscribers.ok()) return Fail(subscribers.status());
    const absl::Time now = absl::Now();
    Json all = Json::array();
    std::string text;
    for (const SubscriberInfo& s : *subscribers) {
      all.push_back(ToJson(s));
      absl::StrAppend(&text, text.empty() ? "" : "\n", ToText(s, now));
    }
    Print({{"subscribers", all}},
          subscribers->empty() ? "(no subscribers)" : text);
    return 0;
  }

  int WorldsSkipRecord(const std::vector<std::string>& args) {
    uint64_t record = 0;
    if (!absl::SimpleAtoi(args[1], &record) || record == 0) {
      return UsageError(absl::StrCat("not a record number: ", args[1]),
                        "worlds skip-record");
    }
    if (absl::Status s = client_.SkipRecord(args[0], record); !s.ok()) {
      return Fail(s);
    }
    Print({{"world", args[0]}, {"skipped_record", record}},
          absl::StrCat("skipped record ", record, " of ", args[0]));
    return 0;
  }

  int WorldsDelete(const std::vector<std::string>& args) {
    if (absl::Status s = client_.DeleteWorld(args[0]); !s.ok()) return Fail(s);
    Print({{"deleted", args[0]}}, absl::StrCat("deleted ", args[0]));
    return 0;
  }

  int EntitiesCreate(const std::vector<std::string>& args) {
    CreateOp op{ids_[0], absl::GetFlag(FLAGS_parent), {}};
    std::string error;
    if (!OverrideTransform(&op.local, &error)) {
      return UsageError(error, "entities create");
    }
    std::vector<std::pair<EntityId, std::string>> names;
    if (!absl::GetFlag(FLAGS_name).empty()) {
      names.emplace_back(op.entity, absl::GetFlag(FLAGS_name));
    }
    return Write(args[0], {op}, absl::StrCat("created ", op.entity),
                 std::move(names));
  }

  int EntitiesRename(const std::vector<std::string>& args) {
    return Write(args[0], {}, absl::StrCat("renamed ", ids_[0]),
                 {{ids_[0], args[2]}});
  }

  int EntitiesDestroy(const std::vector<std::string>& args) {
    DestroyOp op{ids_[0], absl::GetFlag(FLAGS_keep_children)
                              ? DestroyMode::kReparentChildren
                              : DestroyMode::kSubtree};
    return Write(args[0], {op}, absl::StrCat("destroyed ", op.entity));
  }

  int EntitiesLink(const std::vector<std::string>& args) {
    LinkOp op{ids_[0], ids_[1],
              absl::GetFlag(FLAGS_keep_world) ? LinkMode::kKeepWorld
                                              : LinkMode::kKeepLocal};
    return Write(args[0], {op},
                 absl::StrCat("linked ", op.entity, " under ", op.parent));
  }

  // Reads the local, changes the parts given, writes it back. Not atomic
  // against another writer of the same entity: the last write wins.
  int EntitiesSet(const std::vector<std::string>& args) {
    absl::StatusOr<std::vector<EntityState>> read =
        client_.Read(args[0], {ids_[0]});
    if (!read.ok()) return Fail(read.status());
    SetLocalOp op{ids_[0], (*read)[0].local};
    std::string error;
    if (!OverrideTransform(&op.local, &error)) {
      return UsageError(error, "entities set");
    }
    return Write(args[0], {op}, absl::StrCat("set ", op.entity));
  }

  int EntitiesGet(const std::vector<std::string>& args) {
    const Stamp at = absl::GetFlag(FLAGS_at);
    absl::StatusOr<std::vector<EntityState>> read =
        at != 0 ? client_.ReadAt(args[0], ids_, at)
        : absl::GetFlag(FLAGS_subtree) && ids_.size() == 1
            ? client_.ReadSubtree(args[0], ids_[0])
            : client_.Read(args[0], ids_);
    if (!read.ok()) return Fail(read.status());
    for (const EntityState& e : *read) {
      const std::vector<float> local = Floats(e.local);
      Print({{"entity", e.entity},
             {"parent", e.parent},
             {"local", local},
             {"world", e.world.m}},
            absl::StrFormat(
                "%u parent %u\n  local  position %g %g %g  rotation %g %g %g "
                "%g  scale %g %g %g\n  world  %s",
                e.entity, e.parent, local[0], local[1], local[2], local[3],
                local[4], local[5], local[6], local[7], local[8], local[9],
                absl::StrJoin(e.world.m, " ")));
    }
    return 0;
  }

  // Sources' poses in the target's frame at a stamp (docs/time.md).
  static std::string FrameText(const Json& frame) {
    return frame.is_string() ? frame.get<std::string>() : frame.dump();
  }

  int Lookup(const std::vector<std::string>& args) {
    const LookupOptions options = {.stamp = absl::GetFlag(FLAGS_at),
                                   .timeout = absl::GetFlag(FLAGS_wait)};
    std::vector<Json> frames;
    absl::StatusOr<std::vector<TimedPose>> poses;
    if (named_frames_) {
      // Frames by name: an id stands for "e<id>", 0 for "world".
      std::vector<std::string> names;
      for (size_t i = 1; i < args.size(); ++i) {
        EntityId id;
        names.push_back(!absl::SimpleAtoi(args[i], &id) ? args[i]
                        : id == kNoEntity               ? "world"
                                          : absl::StrCat("e", id));
        frames.emplace_back(names.back());
      }
      poses = client_.LookupNamedTransforms(
          args[0], names[0], absl::MakeConstSpan(names).subspan(1), options);
    } else {
      for (EntityId id : ids_) frames.emplace_back(id);
      poses = client_.LookupTransforms(
          args[0], ids_[0], absl::MakeConstSpan(ids_).subspan(1), options);
    }
    if (!poses.ok()) return Fail(poses.status());
    for (size_t k = 0; k < poses->size(); ++k) {
      const TimedPose& pose = (*poses)[k];
      Print({{"target", frames[0]},
             {"source", frames[k + 1]},
             {"stamp_nanos", pose.stamp},
             {"oldest_used_nanos", pose.oldest_used},
             {"newest_used_nanos", pose.newest_used},
             {"pose", pose.pose.m}},
            absl::StrFormat("%s in %s at %d (samples %d..%d)\n  pose  %s",
                            FrameText(frames[k + 1]), FrameText(frames[0]),
                            pose.stamp, pose.oldest_used, pose.newest_used,
                            absl::StrJoin(pose.pose.m, " ")));
    }
    return 0;
  }

  int Watch(const std::vector<std::string>& args);
  int Record(const std::vector<std::string>& args);
  int Play(const std::vector<std::string>& args);

  int NodesList(const std::vector<std::string>&) {
    absl::StatusOr<std::vector<NodeInfo>> nodes = client_.ListNodes();
    if (!nodes.ok()) return Fail(nodes.status());
    Json all = Json::array();
    std::string text;
    for (const NodeInfo& n : *nodes) {
      all.push_back(ToJson(n));
      absl::StrAppend(&text, text.empty() ? "" : "\n", ToText(n));
    }
    Print({{"nodes", all}}, text);
    return 0;
  }

  int NodesDrain(const std::vector<std::string>& args) {
    return Drain(args[0], true);
  }
  int NodesUndrain(const std::vector<std::string>& args) {
    return Drain(args[0], false);
  }

 private:
  int Write(const std::string& world, const std::vector<xform::Command>& batch,
            const std::string& done,
            std::vector<std::pair<EntityId, std::string>> names = {}) {
    absl::StatusOr<uint64_t> frame =
        client_.Apply(world, batch,
                      {.end_frame = absl::GetFlag(FLAGS_end_frame),
                       .stamp = absl::GetFlag(FLAGS_stamp),
                       .names = std::move(names)});
    if (!frame.ok()) return Fail(frame.status());
    Print({{"ok", done}, {"frame", *frame}},
          absl::StrCat(done, " (frame ", *frame, ")"));
    return 0;
  }

  int Drain(const std::string& node, bool drain) {
    absl::StatusOr<uint32_t> moved = client_.DrainNode(node, drain);
    if (!moved.ok()) return Fail(moved.status());
    Print({{"node", node}, {"draining", drain}, {"worlds_moved", *moved}},
          drain ? absl::StrCat("drained ", node, ": ", *moved,
                               " world(s) now written at other nodes")
                : absl::StrCat(node, " may write worlds again"));
    return 0;
  }

  int PrintWorld(const absl::StatusOr<WorldInfo>& info) {
    if (!info.ok()) return Fail(info.status());
    const StreamStats& s = info->stream;
    Print(ToJson(*info),
          absl::StrFormat(
              "%s\nstreams: %u messages, %.1f MB; %u frames folded (and %u "
              "by rate limits); views resent whole %u, kept %u; %u cut off; "
              "%u subscribers in a snapshot now",
              ToText(*info), s.messages, static_cast<double>(s.bytes) / 1e6,
              s.frames_folded, s.frames_folded_by_rate_limit,
              s.views_resent_whole, s.kept_view_snapshots, s.streams_cut_off,
              s.subscribers_in_snapshot));
    return 0;
  }

  Client& client_;
  std::vector<EntityId> ids_;  // The operands after the world, as ids.
  bool named_frames_ = false;  // A lookup named a frame by name.
};

// Every command: its words, usage and help, its operands, and what runs it.
struct Command {
  const char* name;
  const char* usage;
  const char* help;
  size_t operands;
  bool variadic;  // `operands` or more.
  int (Ctl::*run)(const std::vector<std::string>&);
};

const Command kCommands[] = {
    {"worlds list", "xformctl worlds list", "Lists the server's worlds.", 0,
     false, &Ctl::WorldsList},
    {"worlds create",
     "xformctl worlds create NAME [--mode=tick|driven] "
     "[--tick_hz=HZ] [--time_model=hold|tf2]",
     "Creates a world. A tick world publishes frames at its rate; a driven "
     "world when a write says --end_frame.",
     1, false, &Ctl::WorldsCreate},
    {"worlds skip-record", "xformctl worlds skip-record NAME RECORD",
     "Skips the record a cluster's wedged world cannot be loaded past (as "
     "worlds info names it), losing what it held; every node loads the "
     "world again without it. Needs the admin role on the world.",
     2, false, &Ctl::WorldsSkipRecord},
    {"worlds info", "xformctl worlds info NAME",
     "A world's mode, rate, size, last frame and subscribers, and what its "
     "streams were sent (since xformd made or loaded it).",
     1, false, &Ctl::WorldsInfo},
    {"worlds subscribers", "xformctl worlds subscribers NAME",
     "A world's subscribers: each one's peer, principal and what it asked "
     "for, the frame it was last sent, what it is owed, a write waiting, "
     "and what it was sent. Needs the admin role on the world.",
     1, false, &Ctl::WorldsSubscribers},
    {"worlds delete", "xformctl worlds delete NAME",
     "Deletes a world; its subscribers' streams end NOT_FOUND.", 1, false,
     &Ctl::WorldsDelete},
    {"entities create",
     "xformctl entities create WORLD ID [--parent=ID] [--position=x,y,z] "
     "[--rotation=x,y,z,w] [--scale=x,y,z] [--name=NAME]",
     "Creates an entity with a local transform (identity where not given).", 2,
     false, &Ctl::EntitiesCreate},
    {"entities rename", "xformctl entities rename WORLD ID NAME",
     "Names an entity (\"\" takes its name away); lookups take names.", 3,
     false, &Ctl::EntitiesRename},
    {"entities destroy", "xformctl entities destroy WORLD ID [--keep_children]",
     "Destroys an entity and its subtree, or only the entity.", 2, false,
     &Ctl::EntitiesDestroy},
    {"entities link", "xformctl entities link WORLD ID PARENT [--keep_world]",
     "Moves an entity under PARENT (0: makes it a root).", 3, false,
     &Ctl::EntitiesLink},
    {"entities set",
     "xformctl entities set WORLD ID [--position=x,y,z] [--rotation=x,y,z,w] "
     "[--scale=x,y,z]",
     "Changes the given parts of an entity's local transform.", 2, false,
     &Ctl::EntitiesSet},
    {"entities get",
     "xformctl entities get WORLD ID... [--subtree] [--at=STAMP_NS]",
     "Prints entities' parent, local transform, world matrix (at a stamp, "
     "from the world's history, with --at).",
     2, true, &Ctl::EntitiesGet},
    {"lookup",
     "xformctl lookup WORLD TARGET SOURCE... [--at=STAMP_NS] [--wait=1s]",
     "Each source's pose in the target's frame (ids, or names: an entity's, "
     "e<id>, world; 0: the world's origin) at "
     "a stamp, interpolated from the world's history as tf2's "
     "lookupTransform; --wait lets the server wait for newer data.",
     3, true, &Ctl::Lookup},
    {"watch",
     "xformctl watch WORLD [--entities=a,b] [--subtrees=a,b] "
     "[--region=box:x0,y0,z0,x1,y1,z1|sphere:x,y,z,r] [--rate_hz=HZ] "
     "[--frames=N] [--verbose] [--encoding=raw|compact] [--precision=P]",
     "Subscribes and prints a line per message: frame, counts, bytes and "
     "latency (publish to receive), or every change with --verbose. "
     "Reconnects if the stream drops.",
     1, false, &Ctl::Watch},
    {"record",
     "xformctl record WORLD --out=FILE.mcap [--frames=N] [watch's filters]",
     "Records what a subscription receives as an MCAP file Foxglove opens: "
     "foxglove.FrameTransforms on /tf, one message a frame stamped with the "
     "frame's stamp (zstd chunks, indexed). Stops after N frames, or on "
     "Ctrl-C.",
     1, false, &Ctl::Record},
    {"play", "xformctl play FILE.mcap --world=W [--rate=R] [--restamp]",
     "Writes a recording into a new or empty world, a batch a frame at the "
     "recorded pace times R (0: at once), stamped as recorded.",
     1, false, &Ctl::Play},
    {"nodes list", "xformctl nodes list",
     "A cluster's nodes: each one's address, the worlds it writes and "
     "serves, and whether it drains (a single xformd: itself).",
     0, false, &Ctl::NodesList},
    {"nodes drain", "xformctl nodes drain NODE",
     "Moves every world NODE writes to other nodes, before maintenance, with "
     "no write lost, and keeps it from taking any. Needs the admin role on "
     "every world.",
     1, false, &Ctl::NodesDrain},
    {"nodes undrain", "xformctl nodes undrain NODE",
     "Lets a drained node write worlds again.", 1, false, &Ctl::NodesUndrain},
    {"auth hash-token", "xformctl auth hash-token < token-file",
     "Prints the SHA-256 of the token on stdin (its first line), as an "
     "--auth_file's token_sha256 holds it. Reads stdin so that the token is "
     "never on a command line; needs no server.",
     0, false, nullptr},
};

// `auth hash-token`: no server, so it runs before connecting.
int HashToken() {
  std::string token;
  std::getline(std::cin, token);
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) return UsageError("no token on stdin", "auth hash-token");
  std::printf("%s\n", server::Sha256Hex(token).c_str());
  return 0;
}

const Command* Find(absl::string_view name) {
  for (const Command& c : kCommands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Commands named by one word; the others take two ("worlds create").
bool IsOneWord(absl::string_view command) {
  return command == "watch" || command == "lookup" || command == "record" ||
         command == "play";
}

int Ctl::Run(const Invocation& in) {
  const Command* command = Find(in.command);
  if (command == nullptr) {
    return UsageError(absl::StrCat("unknown command '", in.command, "'"), "");
  }
  if (command->variadic ? in.operands.size() < command->operands
                        : in.operands.size() != command->operands) {
    return UsageError("wrong number of operands", in.command);
  }
  if (absl::StartsWith(in.command, "entities") || in.command == "lookup") {
    // A rename's last operand is the name; a lookup's frames may be names.
    const size_t ids = in.command == "entities rename" ? 2 : in.operands.size();
    for (size_t i = 1; i < ids; ++i) {
      EntityId id;
      if (!absl::SimpleAtoi(in.operands[i], &id)) {
        if (in.command == "lookup") {
          named_frames_ = true;
          continue;
        }
        return UsageError(
            absl::StrCat("'", in.operands[i], "' is not an entity id"),
            in.command);
      }
      ids_.push_back(id);
    }
  }
  return (this->*command->run)(in.operands);
}

void PrintUsage(FILE* out, absl::string_view only) {
  if (only.empty()) {
    std::fprintf(out,
                 "xformctl: drive and watch an xformd server.\n\n"
                 "Commands:\n");
  }
  for (const Command& c : kCommands) {
    if (!only.empty() && !absl::StartsWith(c.name, only)) continue;
    std::fprintf(out, "  %s\n      %s\n", c.usage, c.help);
  }
  std::fprintf(
      out,
      "\nEvery command: --server=HOST:PORT (127.0.0.1:50051) "
      "--json --token_file=FILE --tls_ca=FILE [--tls_cert=FILE --tls_key=FILE] "
      "[--tls_server_name=NAME] --timeout_s=S\n"
      "Help for one command: xformctl COMMAND --help\n");
}

int UsageError(absl::string_view what, absl::string_view command) {
  std::fprintf(stderr, "xformctl: %s\n\n", std::string(what).c_str());
  PrintUsage(stderr, command);
  return kUsageError;
}

std::atomic<bool> interrupted{false};

// watch's flags, as the options of a mirror of `world`.
absl::StatusOr<MirrorOptions> WatchOptionsFromFlags(const std::string& world) {
  MirrorOptions options;
  options.world = world;
  if (!ParseIds(absl::GetFlag(FLAGS_entities), &options.entities) ||
      !ParseIds(absl::GetFlag(FLAGS_subtrees), &options.subtrees)) {
    return absl::InvalidArgumentError(
        "--entities and --subtrees take ids a,b,c");
  }
  if (const std::string region = absl::GetFlag(FLAGS_region); !region.empty()) {
    absl::StatusOr<Region> parsed = Region::Parse(region);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--region: ", parsed.status().message()));
    }
    options.region = *parsed;
  }
  options.max_rate_hz = absl::GetFlag(FLAGS_rate_hz);
  absl::StatusOr<std::vector<MirrorOptions::Encoding>> encodings =
      tools::EncodingFlags();
  if (!encodings.ok() || encodings->size() != 1) {
    return absl::InvalidArgumentError("--encoding takes raw or compact");
  }
  options.encoding = encodings->front();
  options.position_precision = tools::PrecisionFlag();
  return options;
}

int Ctl::Watch(const std::vector<std::string>& args) {
  absl::StatusOr<MirrorOptions> parsed = WatchOptionsFromFlags(args[0]);
  if (!parsed.ok()) return UsageError(parsed.status().message(), "watch");
  MirrorOptions options = *std::move(parsed);
  const int frames = absl::GetFlag(FLAGS_frames);
  const bool verbose = absl::GetFlag(FLAGS_verbose);
  const bool json = absl::GetFlag(FLAGS_json);
  absl::Notification done;
  int deltas = 0;
  options.on_update = [&](const MirrorUpdate& u) {
    Json line = UpdateJson(u);
    std::string text = UpdateText(u);
    if (verbose) AddUpdateDetail(u, json, line, text);
    Print(line, text);
    if (!u.snapshot && ++deltas == frames && !done.HasBeenNotified()) {
      done.Notify();
    }
  };
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(client_, std::move(options));
  if (!mirror.ok()) return Fail(mirror.status());
  absl::Status last_reported;
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    if (interrupted) break;
    // A stream the server refuses or drops: say so once, keep trying.
    absl::Status status = (*mirror)->status();
    if (!status.ok() && status != last_reported && !(*mirror)->synced()) {
      std::fprintf(stderr, "stream: %s: %s (reconnecting)\n",
                   absl::StatusCodeToString(status.code()).c_str(),
                   std::string(status.message()).c_str());
      last_reported = status;
    }
  }
  return 0;
}

int Ctl::Record(const std::vector<std::string>& args) {
  absl::StatusOr<MirrorOptions> parsed = WatchOptionsFromFlags(args[0]);
  if (!parsed.ok()) return UsageError(parsed.status().message(), "record");
  tools::RecordOptions options;
  options.out = absl::GetFlag(FLAGS_out);
  if (options.out.empty()) return UsageError("--out is required", "record");
  options.frames = absl::GetFlag(FLAGS_frames);
  options.stop = [] { return interrupted.load(); };
  options.on_started = [&] {
    Print({{"recording", args[0]}, {"out", options.out}},
          absl::StrCat("recording ", args[0], " to ", options.out));
  };
  absl::StatusOr<tools::RecordSummary> summary =
      tools::RecordWorld(client_, *std::move(parsed), options);
  if (!summary.ok()) return Fail(summary.status());
  Print({{"messages", summary->messages},
         {"transforms", summary->transforms},
         {"destroyed", summary->destroyed}},
        absl::StrCat("recorded ", summary->messages, " frames, ",
                     summary->transforms, " transforms, ", summary->destroyed,
                     " destroyed"));
  return 0;
}

int Ctl::Play(const std::vector<std::string>& args) {
  tools::PlayOptions options;
  options.world = absl::GetFlag(FLAGS_world);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.restamp = absl::GetFlag(FLAGS_restamp);
  options.stop = [] { return interrupted.load(); };
  if (options.world.empty()) return UsageError("--world is required", "play");
  if (!(options.rate >= 0 && options.rate <= 1e6)) {
    return UsageError("--rate is 0 to 1000000", "play");
  }
  absl::StatusOr<tools::PlaySummary> summary =
      tools::PlayRecording(client_, args[0], options);
  if (!summary.ok()) return Fail(summary.status());
  Print({{"messages", summary->messages},
         {"frames", summary->frames},
         {"created", summary->created}},
        absl::StrCat("played ", summary->messages, " messages as ",
                     summary->frames, " frames into ", options.world, " (",
                     summary->created, " entities created)"));
  return 0;
}

}  // namespace
}  // namespace xform

int main(int argc, char** argv) {
  // --help anywhere prints the help of the command it follows.
  std::vector<std::string> words;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "help") {
      help = true;
    } else if (!absl::StartsWith(arg, "-") && words.size() < 2) {
      words.emplace_back(arg);
    }
  }
  if (help || argc == 1) {
    std::string command = absl::StrJoin(words, " ");
    if (!words.empty() && xform::IsOneWord(words[0])) command = words[0];
    xform::PrintUsage(stdout, command);
    return argc == 1 ? xform::kUsageError : 0;
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  xform::Invocation in;
  size_t next = 1;
  if (next < positional.size()) in.command = positional[next++];
  if (!xform::IsOneWord(in.command) && next < positional.size()) {
    absl::StrAppend(&in.command, " ", positional[next++]);
  }
  for (; next < positional.size(); ++next) {
    in.operands.emplace_back(positional[next]);
  }

  if (in.command == "auth hash-token") {
    if (!in.operands.empty()) {
      return xform::UsageError("the token is read from stdin, not operands",
                               in.command);
    }
    return xform::HashToken();
  }

  xform::ClientOptions options;
  options.address = absl::GetFlag(FLAGS_server);
  options.deadline = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.connect_timeout = options.deadline;
  if (absl::Status flags = xform::tools::ApplyClientFlags(&options);
      !flags.ok()) {
    return xform::UsageError(flags.message(), "");
  }
  std::signal(SIGINT, [](int) { xform::interrupted = true; });
  absl::StatusOr<std::unique_ptr<xform::Client>> client =
      xform::Client::Connect(options);
  if (!client.ok()) return xform::Fail(client.status());
  return xform::Ctl(**client).Run(in);
}
