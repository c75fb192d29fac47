// Copyright 2026 The xform Authors.

#include "tools/web/page_protocol.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace xform::web {
namespace {

// %XX and '+' decoding of one query value; nullopt on a bad escape.
std::optional<std::string> DecodeQueryValue(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] != '%') {
      out += in[i];
    } else {
      if (i + 2 >= in.size()) return std::nullopt;
      int value = 0;
      for (int k = 1; k <= 2; ++k) {
        const char c = in[i + k];
        int digit;
        if (c >= '0' && c <= '9') {
          digit = c - '0';
        } else if (c >= 'a' && c <= 'f') {
          digit = c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
          digit = c - 'A' + 10;
        } else {
          return std::nullopt;
        }
        value = value * 16 + digit;
      }
      out += static_cast<char>(value);
      i += 2;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<TabQuery> ParseTabQuery(absl::string_view query) {
  absl::StatusOr<TabQuery> parsed = ParseViewQuery(query);
  if (parsed.ok() && parsed->world.empty()) {
    return absl::InvalidArgumentError("world: 1 to 256 bytes");
  }
  return parsed;
}

absl::StatusOr<TabQuery> ParseViewQuery(absl::string_view query) {
  TabQuery parsed;
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    const absl::string_view key = pair.substr(0, eq);
    std::optional<std::string> value = DecodeQueryValue(
        eq == absl::string_view::npos ? "" : pair.substr(eq + 1));
    if (!value) return absl::InvalidArgumentError("a bad %-escape");
    if (key == "world") {
      parsed.world = *std::move(value);
    } else if (key == "subtrees") {
      for (absl::string_view id :
           absl::StrSplit(*value, ',', absl::SkipEmpty())) {
        EntityId entity;
        if (!absl::SimpleAtoi(id, &entity) || entity == kNoEntity) {
          return absl::InvalidArgumentError(
              absl::StrCat("subtrees: '", id, "' is not an entity id"));
        }
        if (parsed.subtrees.size() == kMaxSubtrees) {
          return absl::InvalidArgumentError(
              absl::StrCat("subtrees: more than ", kMaxSubtrees));
        }
        parsed.subtrees.push_back(entity);
      }
    } else if (key == "region") {
      absl::StatusOr<Region> region = Region::Parse(*value);
      if (!region.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("region: ", region.status().message()));
      }
      parsed.region = *region;
    } else if (key == "rate") {
      // !(a <= b) refuses NaN too.
      if (!absl::SimpleAtod(*value, &parsed.max_rate_hz) ||
          !(parsed.max_rate_hz >= 0 && parsed.max_rate_hz <= kMaxTabRateHz)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rate: '", *value, "' is not 0 to ", kMaxTabRateHz,
                         " messages a second"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter '", key, "'"));
    }
  }
  if (parsed.world.size() > kMaxWorldName) {
    return absl::InvalidArgumentError("world: 1 to 256 bytes");
  }
  return parsed;
}

std::string HostName(absl::string_view host) {
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  return absl::AsciiStrToLower(host);
}

std::optional<TabControl> ParseTabControl(absl::string_view text) {
  const nlohmann::json message =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!message.is_object() || message.size() != 1) return std::nullopt;
  if (message.contains("ack") && message["ack"].is_number()) {
    return TabControl{.kind = TabControl::Kind::kAck};
  }
  if (message.contains("pause") && message["pause"].is_boolean()) {
    return TabControl{.kind = TabControl::Kind::kPause,
                      .pause = message["pause"].get<bool>()};
  }
  if (message.contains("region") && message["region"].is_string()) {
    return TabControl{.kind = TabControl::Kind::kRegion,
                      .region = message["region"].get<std::string>()};
  }
  return std::nullopt;
}

std::string WorldsJson(const absl::StatusOr<std::vector<WorldInfo>>& worlds) {
  nlohmann::json json = {{"worlds", nlohmann::json::array()}};
  if (!worlds.ok()) {
    json["error"] = worlds.status().ToString();
    return json.dump();
  }
  for (const WorldInfo& world : *worlds) {
    json["worlds"].push_back({{"name", world.name},
                              {"entities", world.entities},
                              {"frame", world.frame},
                              {"tick_hz", world.tick_hz}});
  }
  return json.dump();
}

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  ListenAddress address{.host = listen.substr(0, colon)};
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &address.port) ||
      address.port < 0 || address.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", listen, ": want HOST:PORT"));
  }
  std::string& host = address.host;
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 1 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  return address;
}

}  // namespace xform::web
