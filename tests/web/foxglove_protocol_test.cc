// Copyright 2026 The xform Authors.
//
// foxglove.websocket.v1 as xform-web reads and writes it: each client op
// read exactly, everything else refused with the right code; the Message
// Data header byte by byte.

#include "tools/web/foxglove_protocol.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace xform::web::foxglove_ws {
namespace {

using ::testing::ElementsAre;

TEST(FoxgloveProtocolTest, ReadsTheOpsItServes) {
  absl::StatusOr<ClientOp> op = ParseClientOp(
      R"({"op":"subscribe","subscriptions":[{"id":0,"channelId":3},)"
      R"({"id":4294967295,"channelId":1}]})");
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->kind, ClientOp::Kind::kSubscribe);
  ASSERT_EQ(op->subscribe.size(), 2u);
  EXPECT_EQ(op->subscribe[0].channel_id, 3u);
  EXPECT_EQ(op->subscribe[1].id, 4294967295u);

  op = ParseClientOp(R"({"op":"unsubscribe","subscriptionIds":[0,7]})");
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_THAT(op->unsubscribe, ElementsAre(0u, 7u));

  op = ParseClientOp(
      R"({"op":"setParameters","id":"r1","parameters":)"
      R"([{"name":"xform.region","value":"sphere:0,0,0,1"},{"name":"n","value":2}]})");
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->request_id, "r1");
  ASSERT_EQ(op->set.size(), 2u);
  EXPECT_EQ(op->set[0].text, "sphere:0,0,0,1");
  EXPECT_EQ(op->set[1].number, 2.0);

  op = ParseClientOp(R"({"op":"getParameters","parameterNames":[]})");
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->kind, ClientOp::Kind::kGetParameters);
}

TEST(FoxgloveProtocolTest, RefusesWhatItDoesNotReadExactly) {
  for (
      const char* text : {
          "",
          "not json",
          "[]",
          R"({"op":1})",
          R"({"no":"op"})",
          R"({"op":"subscribe"})",
          R"({"op":"subscribe","subscriptions":[{"id":-1,"channelId":1}]})",
          R"({"op":"subscribe","subscriptions":[{"id":1.5,"channelId":1}]})",
          R"({"op":"subscribe","subscriptions":[{"id":4294967296,"channelId":1}]})",
          R"({"op":"subscribe","subscriptions":[{"id":1}]})",
          R"({"op":"unsubscribe","subscriptionIds":["1"]})",
          R"({"op":"setParameters","parameters":[{"value":1}]})",
          R"({"op":"setParameters","parameters":[{"name":"a","value":[1]}]})",
      }) {
    EXPECT_EQ(ParseClientOp(text).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
  std::string many = R"({"op":"unsubscribe","subscriptionIds":[0)";
  for (size_t i = 0; i < kMaxListInOp; ++i) many += ",0";
  EXPECT_EQ(ParseClientOp(many + "]}").status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* op :
       {"advertise", "unadvertise", "subscribeParameterUpdates", "fetchAsset",
        "subscribeConnectionGraph"}) {
    EXPECT_EQ(ParseClientOp(nlohmann::json{{"op", op}}.dump()).status().code(),
              absl::StatusCode::kUnimplemented)
        << op;
  }
}

TEST(FoxgloveProtocolTest, MessageDataHeaderIsLittleEndian) {
  std::string out = "old";
  StartMessageData(0x04030201, 0x0c0b0a0908070605, &out);
  EXPECT_EQ(out, std::string("\x01\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"
                             "\x0b\x0c",
                             kMessageDataHeader));
}

TEST(FoxgloveProtocolTest, SubprotocolAmongOthersAndSchemasInBase64) {
  EXPECT_TRUE(OffersSubprotocol("foxglove.websocket.v1"));
  EXPECT_TRUE(OffersSubprotocol("x, foxglove.websocket.v1 ,y"));
  EXPECT_FALSE(OffersSubprotocol("foxglove.websocket.v2"));
  EXPECT_FALSE(OffersSubprotocol(""));
  const nlohmann::json advertise = nlohmann::json::parse(AdvertiseJson(
      {Channel{.id = 1, .topic = "/t", .schema_name = "S", .schema = "ab"}}));
  EXPECT_EQ(advertise["channels"][0]["schema"], "YWI=");
  EXPECT_EQ(advertise["channels"][0]["encoding"], "protobuf");
}

}  // namespace
}  // namespace xform::web::foxglove_ws
