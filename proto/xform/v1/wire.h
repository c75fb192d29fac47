// Copyright 2026 The xform Authors.
//
// Conversions between the wire contract (xform.v1 messages) and core types,
// shared by the two edges that speak protobuf: the server and the client
// library. The core itself never sees a message.

#ifndef XFORM_V1_WIRE_H_
#define XFORM_V1_WIRE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "xform/history.h"
#include "xform/region.h"
#include "xform/stream_stats.h"
#include "xform/subscriber_info.h"
#include "xform/transform.h"
#include "xform/v1/xform.pb.h"
#include "xform/world.h"

namespace xform::v1 {

// The longest client id (ApplyRequest.client_id, SubscribeRequest.
// no_echo_client_id), in bytes: a name, kept with every frame's writers.
inline constexpr size_t kMaxClientIdBytes = 128;
// INVALID_ARGUMENT, naming `field`, for a client id longer than that.
absl::Status CheckClientId(absl::string_view id, absl::string_view field);
// The longest write id (ApplyRequest.write_id), kept for each of a world's
// last batches: INVALID_ARGUMENT for a longer one.
inline constexpr size_t kMaxWriteIdBytes = 64;
absl::Status CheckWriteId(absl::string_view id);

// Floats per entity on the wire: a local (or world) TRS, and a world matrix.
inline constexpr int kTrsFloats = 10;
inline constexpr int kMatrixFloats = 12;

// The TRS in 10 wire floats (position, rotation x y z w, scale). Not
// validated: the world validates what it is given.
Transform TransformFromWire(const float* f);
void AppendTransform(const Transform& t,
                     google::protobuf::RepeatedField<float>* out);

// A world matrix from 12 wire floats (Matrix3x4 order).
Matrix3x4 MatrixFromWire(const float* f);

// A ReadResponse, both ways. Each entity costs this many bytes of it.
inline constexpr size_t kReadBytesPerEntity =
    8 + 8 + 4 * (kTrsFloats + kMatrixFloats);
void AppendEntityState(const EntityState& state, ReadResponse* response);
// INTERNAL when the response's arrays disagree in length.
absl::StatusOr<std::vector<EntityState>> EntityStatesFromWire(
    const ReadResponse& response);

// Appends ApplyRequest.stamp_nanos = `stamp` to a serialized ApplyRequest
// (a later field wins when it is parsed): a journaled batch that asked for
// the server's clock records the stamp it was given, without encoding the
// batch again.
void AppendStampNanos(int64_t stamp, std::string* serialized_request);

// A lookup's result (LookupTransformResponse.poses), both ways.
void AppendTimedPose(EntityId source, const xform::TimedPose& pose,
                     LookupTransformResponse* response);
absl::StatusOr<std::vector<xform::TimedPose>> TimedPosesFromWire(
    const LookupTransformResponse& response);

// A world's stream counts (WorldInfo.stream), both ways.
void StreamStatsToWire(const xform::StreamStats& stats, StreamStats* out);
xform::StreamStats StreamStatsFromWire(const StreamStats& stats);

// A subscriber's entry of ListSubscribers, both ways.
void SubscriberInfoToWire(const xform::SubscriberInfo& info,
                          SubscriberInfo* out);
xform::SubscriberInfo SubscriberInfoFromWire(const SubscriberInfo& info);

// Whether a Subscribe may start as asked, before its world is looked up:
// RESOURCE_EXHAUSTED when its filter names more than `max_filter_ids`
// entities and subtrees (--max_filter_ids), INVALID_ARGUMENT for a
// max_rate_hz outside [0, 1e6], an entity id 0 in the filter, an unknown
// encoding, a position_precision outside [2^-20, 2^10] or a region
// RegionFromWire refuses. O(filter).
absl::Status CheckSubscribeRequest(const SubscribeRequest& request,
                                   size_t max_filter_ids);
// The initial metadata of a Subscribe stream that names its subscription
// (UpdateSubscriptionRequest.subscription_id), in decimal.
inline constexpr char kSubscriptionIdMetadata[] = "xform-subscription-id";

// A request's region (nullopt: none), or INVALID_ARGUMENT naming what is
// wrong with it: neither or both of box and sphere, a count of numbers
// other than 6 or 4, or what Region refuses. O(1).
absl::StatusOr<std::optional<xform::Region>> RegionFromWire(
    const SubscribeRequest& request);
absl::StatusOr<xform::Region> RegionFromWire(const Region& region);
void RegionToWire(const xform::Region& region, v1::Region* out);
// The precision a checked request's compact encoding is served at: the
// largest power of two at or below the one asked for (its default filled
// in: 0.001 is served at 2^-10), so never coarser than asked; 0 for the raw
// encoding. Subscribers sharing a precision share one encode a frame, so a
// world encodes each frame at most 31 ways however many precisions its
// subscribers ask for (a hostile client cannot make it one per subscriber).
float CompactPrecision(const SubscribeRequest& request);

// Entities the request's commands name, counted without converting them:
// O(commands).
size_t EntitiesNamed(const ApplyRequest& request);

// The commands of an ApplyRequest, or INVALID_ARGUMENT for a malformed one
// (an empty command, arrays of mismatched lengths, an empty batch without
// end_frame), or RESOURCE_EXHAUSTED when it names more than `max_batch`
// entities.
absl::StatusOr<std::vector<xform::Command>> ToCommands(
    const ApplyRequest& request, size_t max_batch);

// A journaled batch's late sets (ApplyRequest.history_only).
absl::StatusOr<std::vector<xform::Command>> HistoryOnlyCommands(
    const ApplyRequest& request);

// Appends `batch` to `request` as wire commands, one per run of consecutive
// commands of the same kind and mode, so a batch of N set-locals travels as
// one structure-of-arrays command.
void AppendCommands(absl::Span<const xform::Command> batch,
                    ApplyRequest* request);

}  // namespace xform::v1

#endif  // XFORM_V1_WIRE_H_
