// Copyright 2026 The xform Authors.
//
// What xform-web and a browser say to each other, apart from the network:
// a tab's query (/ws?world=W&subtrees=1,2&region=...&rate=10), the name
// a Host header gives, the control messages a tab's page sends, and the
// worlds' list the page is given; and the gateway's own --listen. Each
// reader refuses what it does not read exactly.

#ifndef XFORM_TOOLS_WEB_PAGE_PROTOCOL_H_
#define XFORM_TOOLS_WEB_PAGE_PROTOCOL_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xform/client.h"
#include "xform/region.h"
#include "xform/transform.h"

namespace xform::web {

inline constexpr size_t kMaxWorldName = 256;
inline constexpr size_t kMaxSubtrees = 1024;

// What a tab asks for in
// /ws?world=W&subtrees=1,2&region=sphere:x,y,z,r&rate=10.
struct TabQuery {
  std::string world;
  std::vector<EntityId> subtrees;
  std::optional<Region> region;
  double max_rate_hz = 0;  // rate=: at most this many messages a second.
};

// The highest rate= a tab may ask for; 0 (or none) is every frame.
inline constexpr double kMaxTabRateHz = 1000;

// The query after '?': INVALID_ARGUMENT naming the first bad parameter.
// A tab must name its world.
absl::StatusOr<TabQuery> ParseTabQuery(absl::string_view query);
// The same with the world optional (a Foxglove client's: the one world to
// advertise, when given).
absl::StatusOr<TabQuery> ParseViewQuery(absl::string_view query);

// The name a Host header gives, lowercased, without its port or an IPv6
// literal's brackets: "Viewer.Example:8080" is "viewer.example", "[::1]:80"
// is "::1".
std::string HostName(absl::string_view host);

// A control message from a tab's page: {"ack": frame} (a binary message
// drawn), {"pause": true|false}, or {"region": "sphere:x,y,z,r"} (its view
// moved). nullopt for anything else.
struct TabControl {
  enum class Kind { kAck, kPause, kRegion };
  Kind kind = Kind::kAck;
  bool pause = false;
  std::string region;
};
std::optional<TabControl> ParseTabControl(absl::string_view text);

// /api/worlds: the worlds xformd listed (name, entities, frame, tick
// rate), or why it could not.
std::string WorldsJson(const absl::StatusOr<std::vector<WorldInfo>>& worlds);

// --listen=HOST:PORT: the host as an address to parse ("localhost" is
// 127.0.0.1; an IPv6 literal without its brackets) and the port.
struct ListenAddress {
  std::string host;
  int port = 0;
};
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen);

}  // namespace xform::web

#endif  // XFORM_TOOLS_WEB_PAGE_PROTOCOL_H_
