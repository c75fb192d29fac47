// Copyright 2026 The xform Authors.

#include "server/service/request_reader.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace xform::server {
namespace {

using google::protobuf::internal::WireFormatLite;

absl::Status Malformed(const google::protobuf::MessageLite& request) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the request is not a valid ", request.GetTypeName(), " message"));
}

// How many times top-level field `field` occurs, length-delimited, in the
// message in `bytes`; stops counting past `limit`. Bytes that do not scan are
// left for the parser to refuse.
size_t CountField(const grpc::ByteBuffer& bytes, int field, size_t limit) {
  grpc::ByteBuffer copy(bytes);  // The reader wants it mutable; slices shared.
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  size_t count = 0;
  while (count <= limit) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (WireFormatLite::GetTagFieldNumber(tag) == field &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      ++count;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  return count;
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          google::protobuf::MessageLite* request) {
  grpc::ByteBuffer copy(bytes);
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !request->ParseFromZeroCopyStream(&reader)) {
    return Malformed(*request);
  }
  return absl::OkStatus();
}

absl::Status ParseApplyRequest(const grpc::ByteBuffer& bytes,
                               size_t max_commands, v1::ApplyRequest* request) {
  const size_t commands =
      CountField(bytes, v1::ApplyRequest::kCommandsFieldNumber, max_commands);
  if (commands > max_commands) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a batch holds at most ", max_commands,
                     " commands (--max_commands); each command is itself a "
                     "list of entities"));
  }
  return ParseRequest(bytes, request);
}

void SerializeResponse(const google::protobuf::MessageLite& response,
                       grpc::ByteBuffer* bytes) {
  bool own_buffer = false;
  grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(
      response, bytes, &own_buffer);
}

}  // namespace xform::server
