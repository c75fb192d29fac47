// Copyright 2026 The xform Authors.
//
// ReflectionService: gRPC server reflection (grpc.reflection.v1alpha), so
// that grpcurl and the like can call xformd without its .proto files. It
// answers from the descriptors compiled into this process, and only about
// the services it is given and the files they need (list_services,
// file_by_filename, file_containing_symbol, file_containing_extension,
// all_extension_numbers_of_type; anything else, or a name not found, gets
// an error_response and the stream goes on).
//
// Under xformd's access control: every request on a stream is a call, so
// it is authenticated as one (Gatekeeper::Authenticate, which charges
// calls_per_second), and answered only for a principal with some role on
// some world; otherwise the stream ends UNAUTHENTICATED or
// PERMISSION_DENIED. Asking for each request, rather than once, means a
// reload that takes a token away ends its reflection stream at its next
// request. Without --auth_file the policy is open to all, so is this.
//
// Why not Debian's libgrpc++_reflection: once linked it registers its
// service on every server from a static initializer, so not asking for it
// (--reflection=off) changed nothing, and it cannot be asked who calls.
//
// Costs: a request is a hash lookup in the descriptor pool and the
// serialization of the files it names (tens of KB). Thread-safe.

#ifndef XFORM_SERVER_SERVICE_REFLECTION_SERVICE_H_
#define XFORM_SERVER_SERVICE_REFLECTION_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "google/protobuf/descriptor.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/service/gatekeeper.h"

namespace xform::server {

class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;

  // `services`: fully-qualified names of the services to describe (this
  // one's is added). `gatekeeper` decides who may ask; it must outlive
  // the service.
  ReflectionService(std::vector<std::string> services,
                    std::shared_ptr<Gatekeeper> gatekeeper);

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

  // The answer to one request, without the access check.
  Response Answer(const Request& request) const;

 private:
  class Stream;

  // `file` (if it is one the services need) and the files it imports, each
  // once, into `response`; NOT_FOUND otherwise.
  void AddFiles(const google::protobuf::FileDescriptor* file,
                Response* response) const;

  const google::protobuf::DescriptorPool& pool_;
  const std::shared_ptr<Gatekeeper> gatekeeper_;
  std::vector<std::string> services_;
  // The files the services are defined in, and what they import.
  absl::flat_hash_set<const google::protobuf::FileDescriptor*> files_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_REFLECTION_SERVICE_H_
