// Copyright 2026 The xform Authors.
//
// foxglove.websocket.v1 as xform-web speaks it (foxglove/ws-protocol's
// docs/spec.md): the server's JSON messages, its binary Message Data
// header, and the client's JSON messages read exactly. No sockets here:
// tools/web/foxglove_session.h is the connection that uses them.
//
// What is read of a client: subscribe, unsubscribe, getParameters and
// setParameters. Anything else (another op, client publishing, services,
// a message that is not JSON or has a field of the wrong type) is refused
// with INVALID_ARGUMENT or UNIMPLEMENTED, which the session reports as an
// error status and otherwise ignores.

#ifndef XFORM_TOOLS_WEB_FOXGLOVE_PROTOCOL_H_
#define XFORM_TOOLS_WEB_FOXGLOVE_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace xform::web::foxglove_ws {

inline constexpr absl::string_view kSubprotocol = "foxglove.websocket.v1";

// Whether a Sec-WebSocket-Protocol header (a comma-separated list) offers
// kSubprotocol.
bool OffersSubprotocol(absl::string_view header);

// ---- server to client, JSON ------------------------------------------------

// serverInfo: the server's name, what it can do ("parameters"), and an id
// of this gateway's run, so that a client can tell a restart from a
// reconnect.
std::string ServerInfoJson(absl::string_view name,
                           absl::Span<const std::string> capabilities,
                           absl::string_view session_id);

struct Channel {
  uint32_t id = 0;
  std::string topic;
  std::string schema_name;  // "foxglove.FrameTransforms"
  std::string schema;       // A FileDescriptorSet, serialized.
};
// advertise: protobuf channels, each schema in base64 as the spec asks.
std::string AdvertiseJson(absl::Span<const Channel> channels);
std::string UnadvertiseJson(absl::Span<const uint32_t> channel_ids);

enum class Level { kInfo = 0, kWarning = 1, kError = 2 };
std::string StatusJson(Level level, absl::string_view message);

// A parameter's value: xform's are strings or numbers.
struct Parameter {
  std::string name;
  std::optional<std::string> text;
  std::optional<double> number;
};
// parameterValues, with the request's id when it gave one.
std::string ParameterValuesJson(absl::Span<const Parameter> parameters,
                                absl::string_view request_id);

// ---- server to client, binary ---------------------------------------------

// Message Data: opcode 1, the subscription id (uint32) and the receive
// time (uint64 nanoseconds), little-endian. Replaces `out` with that
// 13-byte header; the caller appends the payload.
inline constexpr size_t kMessageDataHeader = 13;
void StartMessageData(uint32_t subscription_id, uint64_t stamp_nanos,
                      std::string* out);

// ---- client to server, JSON ------------------------------------------------

struct Subscription {
  uint32_t id = 0;
  uint32_t channel_id = 0;
};

struct ClientOp {
  enum class Kind { kSubscribe, kUnsubscribe, kGetParameters, kSetParameters };
  Kind kind = Kind::kSubscribe;
  std::vector<Subscription> subscribe;
  std::vector<uint32_t> unsubscribe;
  std::vector<std::string> parameter_names;  // getParameters; empty: all.
  std::vector<Parameter> set;                // setParameters.
  std::string request_id;                    // "id", when given.
};

// At most this many subscriptions, ids or parameters in one message.
inline constexpr size_t kMaxListInOp = 1024;

// One text message from a client: INVALID_ARGUMENT naming what is wrong,
// UNIMPLEMENTED for an op this server does not offer.
absl::StatusOr<ClientOp> ParseClientOp(absl::string_view text);

}  // namespace xform::web::foxglove_ws

#endif  // XFORM_TOOLS_WEB_FOXGLOVE_PROTOCOL_H_
