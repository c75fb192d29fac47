// Copyright 2026 The xform Authors.

#include "xform/v1/wire.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <variant>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "xform/v1/compact_moves.h"

namespace xform::v1 {
namespace {

absl::Status Malformed(int index, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("command ", index, ": ", what));
}

// Set-local and set-world commands: ids, and 10 floats of TRS per id.
template <typename Op>
absl::Status AppendTransformOps(
    int index, absl::string_view what,
    const google::protobuf::RepeatedField<uint64_t>& entities,
    const google::protobuf::RepeatedField<float>& values,
    std::vector<xform::Command>* commands) {
  if (values.size() != kTrsFloats * entities.size()) {
    return Malformed(index, absl::StrCat(what, ": 10 floats per entity"));
  }
  for (int i = 0; i < entities.size(); ++i) {
    commands->push_back(
        Op{entities.Get(i), TransformFromWire(values.data() + kTrsFloats * i)});
  }
  return absl::OkStatus();
}

}  // namespace

Transform TransformFromWire(const float* f) {
  Transform t;
  t.position = {f[0], f[1], f[2]};
  t.rotation = glm::quat(f[6], f[3], f[4], f[5]);  // glm takes (w, x, y, z).
  t.scale = {f[7], f[8], f[9]};
  return t;
}

void AppendTransform(const Transform& t,
                     google::protobuf::RepeatedField<float>* out) {
  for (float f :
       {t.position.x, t.position.y, t.position.z, t.rotation.x, t.rotation.y,
        t.rotation.z, t.rotation.w, t.scale.x, t.scale.y, t.scale.z}) {
    out->Add(f);
  }
}

Matrix3x4 MatrixFromWire(const float* f) {
  Matrix3x4 m;
  std::copy_n(f, kMatrixFloats, m.m.begin());
  return m;
}

void AppendEntityState(const EntityState& state, ReadResponse* response) {
  response->add_entity(state.entity);
  response->add_parent(state.parent);
  AppendTransform(state.local, response->mutable_local());
  response->mutable_world()->Add(state.world.m.begin(), state.world.m.end());
}

void AppendStampNanos(int64_t stamp, std::string* serialized_request) {
  google::protobuf::io::StringOutputStream stream(serialized_request);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
      ApplyRequest::kStampNanosFieldNumber,
      google::protobuf::internal::WireFormatLite::WIRETYPE_VARINT));
  coded.WriteVarint64(static_cast<uint64_t>(stamp));
}

void AppendTimedPose(EntityId source, const xform::TimedPose& pose,
                     LookupTransformResponse* response) {
  TimedPose& out = *response->add_poses();
  out.set_source(source);
  out.mutable_pose()->Add(pose.pose.m.begin(), pose.pose.m.end());
  out.set_stamp_nanos(pose.stamp);
  out.set_oldest_used_nanos(pose.oldest_used);
  out.set_newest_used_nanos(pose.newest_used);
}

absl::StatusOr<std::vector<xform::TimedPose>> TimedPosesFromWire(
    const LookupTransformResponse& response) {
  std::vector<xform::TimedPose> out;
  out.reserve(response.poses_size());
  for (const TimedPose& pose : response.poses()) {
    if (pose.pose_size() != kMatrixFloats) {
      return absl::InternalError("malformed TimedPose from the server");
    }
    out.push_back({.pose = MatrixFromWire(pose.pose().data()),
                   .stamp = pose.stamp_nanos(),
                   .oldest_used = pose.oldest_used_nanos(),
                   .newest_used = pose.newest_used_nanos()});
  }
  return out;
}

absl::StatusOr<std::vector<EntityState>> EntityStatesFromWire(
    const ReadResponse& response) {
  const int n = response.entity_size();
  if (response.parent_size() != n || response.local_size() != kTrsFloats * n ||
      response.world_size() != kMatrixFloats * n) {
    return absl::InternalError("malformed ReadResponse from the server");
  }
  std::vector<EntityState> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].entity = response.entity(i);
    out[i].parent = response.parent(i);
    out[i].local = TransformFromWire(response.local().data() + kTrsFloats * i);
    out[i].world = MatrixFromWire(response.world().data() + kMatrixFloats * i);
  }
  return out;
}

void StreamStatsToWire(const xform::StreamStats& stats, StreamStats* out) {
  out->set_messages(stats.messages);
  out->set_bytes(stats.bytes);
  out->set_frames_folded(stats.frames_folded);
  out->set_frames_folded_by_rate_limit(stats.frames_folded_by_rate_limit);
  out->set_views_resent_whole(stats.views_resent_whole);
  out->set_kept_view_snapshots(stats.kept_view_snapshots);
  out->set_streams_cut_off(stats.streams_cut_off);
  out->set_subscribers_in_snapshot(stats.subscribers_in_snapshot);
}

xform::StreamStats StreamStatsFromWire(const StreamStats& stats) {
  return {.messages = stats.messages(),
          .bytes = stats.bytes(),
          .frames_folded = stats.frames_folded(),
          .frames_folded_by_rate_limit = stats.frames_folded_by_rate_limit(),
          .views_resent_whole = stats.views_resent_whole(),
          .kept_view_snapshots = stats.kept_view_snapshots(),
          .streams_cut_off = stats.streams_cut_off(),
          .subscribers_in_snapshot = stats.subscribers_in_snapshot()};
}

void SubscriberInfoToWire(const xform::SubscriberInfo& info,
                          SubscriberInfo* out) {
  out->set_id(info.id);
  out->set_peer(info.peer);
  out->set_principal(info.principal);
  out->set_subscribed_unix_nanos(absl::ToUnixNanos(info.subscribed));
  out->set_position_precision(info.position_precision);
  out->set_entities_listed(info.entities_listed);
  out->set_subtrees_listed(info.subtrees_listed);
  out->set_max_rate_hz(info.max_rate_hz);
  out->set_no_echo_client_id(info.no_echo_client_id);
  out->set_accepts_kept_view_snapshots(info.accepts_kept_view_snapshots);
  out->set_last_frame_sent(info.last_frame_sent);
  out->set_pending(info.pending);
  out->set_in_snapshot(info.in_snapshot);
  out->set_write_outstanding_nanos(
      absl::ToInt64Nanoseconds(info.write_outstanding));
  out->set_messages(info.messages);
  out->set_bytes(info.bytes);
  out->set_frames_folded(info.frames_folded);
  out->set_views_resent_whole(info.views_resent_whole);
  out->set_kept_view_snapshots(info.kept_view_snapshots);
}

xform::SubscriberInfo SubscriberInfoFromWire(const SubscriberInfo& info) {
  return {
      .id = info.id(),
      .peer = info.peer(),
      .principal = info.principal(),
      .subscribed = absl::FromUnixNanos(info.subscribed_unix_nanos()),
      .position_precision = info.position_precision(),
      .entities_listed = info.entities_listed(),
      .subtrees_listed = info.subtrees_listed(),
      .max_rate_hz = info.max_rate_hz(),
      .no_echo_client_id = info.no_echo_client_id(),
      .accepts_kept_view_snapshots = info.accepts_kept_view_snapshots(),
      .last_frame_sent = info.last_frame_sent(),
      .pending = info.pending(),
      .in_snapshot = info.in_snapshot(),
      .write_outstanding = absl::Nanoseconds(info.write_outstanding_nanos()),
      .messages = info.messages(),
      .bytes = info.bytes(),
      .frames_folded = info.frames_folded(),
      .views_resent_whole = info.views_resent_whole(),
      .kept_view_snapshots = info.kept_view_snapshots()};
}

absl::Status CheckClientId(absl::string_view id, absl::string_view field) {
  if (id.size() <= kMaxClientIdBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is at most ", kMaxClientIdBytes, " bytes, not ", id.size()));
}

absl::Status CheckWriteId(absl::string_view id) {
  if (id.size() <= kMaxWriteIdBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "write_id is at most ", kMaxWriteIdBytes, " bytes, not ", id.size()));
}

absl::StatusOr<std::optional<xform::Region>> RegionFromWire(
    const SubscribeRequest& request) {
  if (!request.has_region()) return std::nullopt;
  absl::StatusOr<xform::Region> region = RegionFromWire(request.region());
  if (!region.ok()) return region.status();
  return std::optional<xform::Region>(*region);
}

absl::StatusOr<xform::Region> RegionFromWire(const Region& region) {
  const auto& box = region.box();
  const auto& sphere = region.sphere();
  if (box.empty() == sphere.empty()) {
    return absl::InvalidArgumentError(
        "a region is a box or a sphere: give exactly one of them");
  }
  absl::StatusOr<xform::Region> made;
  if (!box.empty()) {
    if (box.size() != 6) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a region's box is 6 numbers (min x, y, z, max x, y, z), not ",
          box.size()));
    }
    made = xform::Region::Box({box[0], box[1], box[2]},
                              {box[3], box[4], box[5]}, region.margin());
  } else {
    if (sphere.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a region's sphere is 4 numbers (center x, y, z, radius), not ",
          sphere.size()));
    }
    made = xform::Region::Sphere({sphere[0], sphere[1], sphere[2]}, sphere[3],
                                 region.margin());
  }
  return made;
}

void RegionToWire(const xform::Region& region, v1::Region* out) {
  out->Clear();
  if (region.shape() == xform::Region::Shape::kBox) {
    for (float v : {region.min().x, region.min().y, region.min().z,
                    region.max().x, region.max().y, region.max().z}) {
      out->add_box(v);
    }
  } else {
    for (float v : {region.center().x, region.center().y, region.center().z,
                    region.radius()}) {
      out->add_sphere(v);
    }
  }
  out->set_margin(region.margin());
}

absl::Status CheckSubscribeRequest(const SubscribeRequest& request,
                                   size_t max_filter_ids) {
  if (absl::Status id =
          CheckClientId(request.no_echo_client_id(), "no_echo_client_id");
      !id.ok()) {
    return id;
  }
  if (static_cast<size_t>(request.entity_size()) + request.subtree_size() >
      max_filter_ids) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a subscription filter names at most ", max_filter_ids,
                     " entities and subtrees (--max_filter_ids)"));
  }
  if (!(request.max_rate_hz() >= 0) || request.max_rate_hz() > 1e6) {
    return absl::InvalidArgumentError("max_rate_hz must be in [0, 1e6]");
  }
  for (const auto* ids : {&request.entity(), &request.subtree()}) {
    if (std::find(ids->begin(), ids->end(), kNoEntity) != ids->end()) {
      return absl::InvalidArgumentError("entity id 0 in a subscription filter");
    }
  }
  if (request.encoding() != ENCODING_UNSPECIFIED &&
      request.encoding() != ENCODING_RAW &&
      request.encoding() != ENCODING_COMPACT) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown encoding ", request.encoding()));
  }
  if (absl::StatusOr<std::optional<xform::Region>> region =
          RegionFromWire(request);
      !region.ok()) {
    return region.status();
  }
  const float precision = request.position_precision();
  if (precision != 0 && !(precision >= kMinPositionPrecision &&
                          precision <= kMaxPositionPrecision)) {
    return absl::InvalidArgumentError(
        absl::StrCat("position_precision must be 0 (the default, ",
                     kDefaultPositionPrecision, ") or in [",
                     kMinPositionPrecision, ", ", kMaxPositionPrecision, "]"));
  }
  return absl::OkStatus();
}

float CompactPrecision(const SubscribeRequest& request) {
  if (request.encoding() != ENCODING_COMPACT) return 0;
  const float asked = request.position_precision() == 0
                          ? kDefaultPositionPrecision
                          : request.position_precision();
  int exponent;
  std::frexp(asked, &exponent);  // asked = m 2^exponent, m in [0.5, 1).
  return std::ldexp(1.0f, exponent - 1);
}

size_t EntitiesNamed(const ApplyRequest& request) {
  size_t named = 0;
  for (const Command& c : request.commands()) {
    switch (c.kind_case()) {
      case Command::kCreate:
        named += c.create().entity_size();
        break;
      case Command::kDestroy:
        named += c.destroy().entity_size();
        break;
      case Command::kLink:
        named += c.link().entity_size();
        break;
      case Command::kSetLocal:
        named += c.set_local().entity_size();
        break;
      case Command::kSetWorld:
        named += c.set_world().entity_size();
        break;
      case Command::kRename:
        named += c.rename().entity_size();
        break;
      default:
        break;
    }
  }
  return named;
}

namespace {

// Command `k`'s creates, one op an entity, onto `commands`.
absl::Status AppendCreates(int k, const CreateCommand& create,
                           std::vector<xform::Command>* commands) {
  const int n = create.entity_size();
  if (create.parent_size() != 0 && create.parent_size() != n) {
    return Malformed(k, "create: parent must be empty or one per entity");
  }
  if (create.local_size() != 0 && create.local_size() != kTrsFloats * n) {
    return Malformed(k, "create: local must be empty or 10 floats per entity");
  }
  for (int i = 0; i < n; ++i) {
    CreateOp op;
    op.entity = create.entity(i);
    if (create.parent_size() != 0) op.parent = create.parent(i);
    if (create.local_size() != 0) {
      op.local = TransformFromWire(create.local().data() + kTrsFloats * i);
    }
    commands->emplace_back(op);
  }
  return absl::OkStatus();
}

// Command `k`'s links, one op an entity, onto `commands`.
absl::Status AppendLinks(int k, const LinkCommand& link,
                         std::vector<xform::Command>* commands) {
  if (link.parent_size() != link.entity_size()) {
    return Malformed(k, "link: one parent per entity (0 unlinks)");
  }
  for (int i = 0; i < link.entity_size(); ++i) {
    commands->emplace_back(LinkOp{
        link.entity(i), link.parent(i),
        link.keep_world() ? LinkMode::kKeepWorld : LinkMode::kKeepLocal});
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// `wire`'s commands appended to `commands`, or why they are malformed.
absl::Status AppendWireCommands(
    const google::protobuf::RepeatedPtrField<Command>& wire,
    std::vector<xform::Command>* commands) {
  for (int k = 0; k < wire.size(); ++k) {
    const Command& c = wire.Get(k);
    switch (c.kind_case()) {
      case Command::kCreate:
        if (absl::Status s = AppendCreates(k, c.create(), commands); !s.ok()) {
          return s;
        }
        break;
      case Command::kDestroy:
        for (EntityId e : c.destroy().entity()) {
          commands->emplace_back(DestroyOp{
              e, c.destroy().keep_children() ? DestroyMode::kReparentChildren
                                             : DestroyMode::kSubtree});
        }
        break;
      case Command::kLink:
        if (absl::Status s = AppendLinks(k, c.link(), commands); !s.ok()) {
          return s;
        }
        break;
      case Command::kSetLocal:
        if (absl::Status s = AppendTransformOps<SetLocalOp>(
                k, "set_local", c.set_local().entity(), c.set_local().local(),
                commands);
            !s.ok()) {
          return s;
        }
        break;
      case Command::kSetWorld:
        if (absl::Status s = AppendTransformOps<SetWorldOp>(
                k, "set_world", c.set_world().entity(), c.set_world().world(),
                commands);
            !s.ok()) {
          return s;
        }
        break;
      case Command::kRename:
        // Names are the host's (server/host/world_names.h): the core
        // knows entities by id only.
        break;
      default:
        return Malformed(k, "empty command");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<xform::Command>> ToCommands(
    const ApplyRequest& request, size_t max_batch) {
  const size_t named = EntitiesNamed(request);
  if (named > max_batch) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the batch names ", named, " entities; the limit is ", max_batch));
  }
  std::vector<xform::Command> commands;
  commands.reserve(named);
  if (absl::Status s = AppendWireCommands(request.commands(), &commands);
      !s.ok()) {
    return s;
  }
  // (A journaled batch whose sets all came late has none to apply live.)
  // (A batch of renames only has nothing for the core.)
  const bool renames = absl::c_any_of(request.commands(), [](const Command& c) {
    return c.has_rename() && c.rename().entity_size() > 0;
  });
  if (commands.empty() && !renames && !request.end_frame() &&
      request.history_only().empty()) {
    return absl::InvalidArgumentError(
        "empty batch: no commands and no end_frame");
  }
  return commands;
}

absl::StatusOr<std::vector<xform::Command>> HistoryOnlyCommands(
    const ApplyRequest& request) {
  std::vector<xform::Command> commands;
  if (absl::Status s = AppendWireCommands(request.history_only(), &commands);
      !s.ok()) {
    return s;
  }
  return commands;
}

namespace {

// Fills one wire command from a run of core commands of one kind and mode.
struct CommandWriter {
  Command* out;

  void operator()(const CreateOp& op) {
    CreateCommand* c = out->mutable_create();
    c->add_entity(op.entity);
    c->add_parent(op.parent);
    AppendTransform(op.local, c->mutable_local());
  }
  void operator()(const DestroyOp& op) {
    DestroyCommand* c = out->mutable_destroy();
    c->add_entity(op.entity);
    c->set_keep_children(op.mode == DestroyMode::kReparentChildren);
  }
  void operator()(const LinkOp& op) {
    LinkCommand* c = out->mutable_link();
    c->add_entity(op.entity);
    c->add_parent(op.parent);
    c->set_keep_world(op.mode == LinkMode::kKeepWorld);
  }
  void operator()(const SetLocalOp& op) {
    SetLocalCommand* c = out->mutable_set_local();
    c->add_entity(op.entity);
    AppendTransform(op.local, c->mutable_local());
  }
  void operator()(const SetWorldOp& op) {
    SetWorldCommand* c = out->mutable_set_world();
    c->add_entity(op.entity);
    AppendTransform(op.world, c->mutable_world());
  }
};

// Commands that may share one wire command: the same kind, and for destroy
// and link (whose mode is one flag per wire command) the same mode.
bool SameRun(const xform::Command& a, const xform::Command& b) {
  if (a.index() != b.index()) return false;
  if (const auto* d = std::get_if<DestroyOp>(&a)) {
    return d->mode == std::get<DestroyOp>(b).mode;
  }
  if (const auto* l = std::get_if<LinkOp>(&a)) {
    return l->mode == std::get<LinkOp>(b).mode;
  }
  return true;
}

}  // namespace

void AppendCommands(absl::Span<const xform::Command> batch,
                    ApplyRequest* request) {
  Command* current = nullptr;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (current == nullptr || !SameRun(batch[i - 1], batch[i])) {
      current = request->add_commands();
    }
    std::visit(CommandWriter{current}, batch[i]);
  }
}

}  // namespace xform::v1
