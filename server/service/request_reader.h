// Copyright 2026 The xform Authors.
//
// Turns a request's bytes into its message. xformd's methods are served raw
// (grpc::ByteBuffer) so that this, not gRPC, parses: gRPC answers bytes that
// do not parse with UNIMPLEMENTED and an empty message on unary methods, and
// on a stream it reports them as the client's half-close, which made
// ApplyStream end with OK and drop every later batch.
//
// A message's size is bounded by the transport (--max_message_bytes), but its
// parsed form need not be: every empty Command is 2 bytes on the wire and
// some 50 in memory. So the shapes that would expand are counted on the wire
// first, without allocating, and refused before anything is parsed.

#ifndef XFORM_SERVER_SERVICE_REQUEST_READER_H_
#define XFORM_SERVER_SERVICE_REQUEST_READER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "xform/v1/xform.pb.h"

namespace xform::server {

// INVALID_ARGUMENT, naming the message type, when `bytes` is not one.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          google::protobuf::MessageLite* request);

// As ParseRequest, after counting the request's commands on the wire:
// RESOURCE_EXHAUSTED, with nothing parsed, when there are more than
// `max_commands`. Cost: one pass over the bytes, no allocation.
absl::Status ParseApplyRequest(const grpc::ByteBuffer& bytes,
                               size_t max_commands, v1::ApplyRequest* request);

// Serializes a response into the raw method's output buffer.
void SerializeResponse(const google::protobuf::MessageLite& response,
                       grpc::ByteBuffer* bytes);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_REQUEST_READER_H_
