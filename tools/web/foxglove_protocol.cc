// Copyright 2026 The xform Authors.

#include "tools/web/foxglove_protocol.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace xform::web::foxglove_ws {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

// `message[key]` as an array of at most kMaxListInOp; nullptr when it is
// missing or not one.
const json* ListOf(const json& message, const char* key) {
  const auto it = message.find(key);
  if (it == message.end() || !it->is_array() || it->size() > kMaxListInOp) {
    return nullptr;
  }
  return &*it;
}

std::optional<uint32_t> IdOf(const json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  const auto id = value.get<uint64_t>();
  if (id > std::numeric_limits<uint32_t>::max()) return std::nullopt;
  return static_cast<uint32_t>(id);
}

absl::Status ReadSubscribe(const json& message, ClientOp* op) {
  const json* list = ListOf(message, "subscriptions");
  if (list == nullptr) {
    return Bad("subscribe: subscriptions must be a list of at most 1024");
  }
  for (const json& entry : *list) {
    if (!entry.is_object() || !entry.contains("id") ||
        !entry.contains("channelId")) {
      return Bad("subscribe: each subscription needs id and channelId");
    }
    const std::optional<uint32_t> id = IdOf(entry["id"]);
    const std::optional<uint32_t> channel = IdOf(entry["channelId"]);
    if (!id || !channel) {
      return Bad("subscribe: id and channelId are 32-bit unsigned integers");
    }
    op->subscribe.push_back({.id = *id, .channel_id = *channel});
  }
  return absl::OkStatus();
}

absl::Status ReadUnsubscribe(const json& message, ClientOp* op) {
  const json* list = ListOf(message, "subscriptionIds");
  if (list == nullptr) {
    return Bad("unsubscribe: subscriptionIds must be a list of at most 1024");
  }
  for (const json& entry : *list) {
    const std::optional<uint32_t> id = IdOf(entry);
    if (!id) return Bad("unsubscribe: ids are 32-bit unsigned integers");
    op->unsubscribe.push_back(*id);
  }
  return absl::OkStatus();
}

absl::Status ReadGetParameters(const json& message, ClientOp* op) {
  const json* list = ListOf(message, "parameterNames");
  if (list == nullptr) {
    return Bad("getParameters: parameterNames must be a list of at most 1024");
  }
  for (const json& name : *list) {
    if (!name.is_string()) return Bad("getParameters: names are strings");
    op->parameter_names.push_back(name.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ReadSetParameters(const json& message, ClientOp* op) {
  const json* list = ListOf(message, "parameters");
  if (list == nullptr) {
    return Bad("setParameters: parameters must be a list of at most 1024");
  }
  for (const json& entry : *list) {
    if (!entry.is_object() || !entry.contains("name") ||
        !entry["name"].is_string()) {
      return Bad("setParameters: each parameter needs a name");
    }
    Parameter parameter{.name = entry["name"].get<std::string>()};
    const auto value = entry.find("value");
    if (value != entry.end() && value->is_string()) {
      parameter.text = value->get<std::string>();
    } else if (value != entry.end() && value->is_number()) {
      parameter.number = value->get<double>();
    } else if (value != entry.end()) {
      return Bad("setParameters: xform's parameters are strings or numbers");
    }
    op->set.push_back(std::move(parameter));
  }
  return absl::OkStatus();
}

}  // namespace

bool OffersSubprotocol(absl::string_view header) {
  for (absl::string_view offered : absl::StrSplit(header, ',')) {
    if (absl::StripAsciiWhitespace(offered) == kSubprotocol) return true;
  }
  return false;
}

std::string ServerInfoJson(absl::string_view name,
                           absl::Span<const std::string> capabilities,
                           absl::string_view session_id) {
  return json{{"op", "serverInfo"},
              {"name", name},
              {"capabilities", capabilities},
              {"sessionId", session_id}}
      .dump();
}

std::string AdvertiseJson(absl::Span<const Channel> channels) {
  json list = json::array();
  for (const Channel& channel : channels) {
    list.push_back({{"id", channel.id},
                    {"topic", channel.topic},
                    {"encoding", "protobuf"},
                    {"schemaName", channel.schema_name},
                    {"schema", absl::Base64Escape(channel.schema)}});
  }
  return json{{"op", "advertise"}, {"channels", std::move(list)}}.dump();
}

std::string UnadvertiseJson(absl::Span<const uint32_t> channel_ids) {
  return json{{"op", "unadvertise"}, {"channelIds", channel_ids}}.dump();
}

std::string StatusJson(Level level, absl::string_view message) {
  return json{{"op", "status"},
              {"level", static_cast<int>(level)},
              {"message", message}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ParameterValuesJson(absl::Span<const Parameter> parameters,
                                absl::string_view request_id) {
  json list = json::array();
  for (const Parameter& parameter : parameters) {
    json entry = {{"name", parameter.name}};
    if (parameter.text) entry["value"] = *parameter.text;
    if (parameter.number) entry["value"] = *parameter.number;
    list.push_back(std::move(entry));
  }
  json message = {{"op", "parameterValues"}, {"parameters", std::move(list)}};
  if (!request_id.empty()) message["id"] = request_id;
  return message.dump(-1, ' ', false, json::error_handler_t::replace);
}

void StartMessageData(uint32_t subscription_id, uint64_t stamp_nanos,
                      std::string* out) {
  out->assign(kMessageDataHeader, '\0');
  (*out)[0] = 0x01;
  for (int i = 0; i < 4; ++i) {
    (*out)[1 + i] = static_cast<char>(subscription_id >> (8 * i));
  }
  for (int i = 0; i < 8; ++i) {
    (*out)[5 + i] = static_cast<char>(stamp_nanos >> (8 * i));
  }
}

absl::StatusOr<ClientOp> ParseClientOp(absl::string_view text) {
  const json message = json::parse(text.begin(), text.end(), nullptr,
                                   /*allow_exceptions=*/false);
  if (!message.is_object() || !message.contains("op") ||
      !message["op"].is_string()) {
    return Bad("expected a JSON object with an op");
  }
  const std::string kind = message["op"].get<std::string>();
  ClientOp op;
  if (const auto id = message.find("id");
      id != message.end() && id->is_string()) {
    op.request_id = id->get<std::string>();
  }
  absl::Status status;
  if (kind == "subscribe") {
    op.kind = ClientOp::Kind::kSubscribe;
    status = ReadSubscribe(message, &op);
  } else if (kind == "unsubscribe") {
    op.kind = ClientOp::Kind::kUnsubscribe;
    status = ReadUnsubscribe(message, &op);
  } else if (kind == "getParameters") {
    op.kind = ClientOp::Kind::kGetParameters;
    status = ReadGetParameters(message, &op);
  } else if (kind == "setParameters") {
    op.kind = ClientOp::Kind::kSetParameters;
    status = ReadSetParameters(message, &op);
  } else {
    return absl::UnimplementedError(
        absl::StrCat("op '", kind.substr(0, 64), "' is not served here"));
  }
  if (!status.ok()) return status;
  return op;
}

}  // namespace xform::web::foxglove_ws
