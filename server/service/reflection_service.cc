// Copyright 2026 The xform Authors.

#include "server/service/reflection_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/service/service.h"

namespace xform::server {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

namespace {

// The file and everything it imports, into `files`.
void Gather(const FileDescriptor* file,
            absl::flat_hash_set<const FileDescriptor*>* files) {
  if (!files->insert(file).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    Gather(file->dependency(i), files);
  }
}

void SetError(grpc::StatusCode code, absl::string_view message,
              ReflectionService::Response* response) {
  auto* error = response->mutable_error_response();
  error->set_error_code(code);
  error->set_error_message(std::string(message));
}

// A principal may reflect if it may do anything at all.
bool HasSomeRole(const Principal& principal) {
  for (const Principal::Grant& grant : principal.grants) {
    if (grant.roles != 0 && !grant.worlds.empty()) return true;
  }
  return false;
}

}  // namespace

// One reflection stream: a request read, authenticated, answered; then the
// next. gRPC may run a reaction inline in the thread that starts an
// operation, and each reaction starts the next, so the stream holds no lock.
class ReflectionService::Stream final
    : public grpc::ServerBidiReactor<Request, Response> {
 public:
  Stream(const ReflectionService& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client is done asking.
      Finish(grpc::Status::OK);
      return;
    }
    absl::StatusOr<Caller> caller =
        service_.gatekeeper_->Authenticate(*context_, "ServerReflectionInfo");
    if (caller.ok() && !HasSomeRole(*caller->principal)) {
      caller = caller->usage->Refused(
          "ServerReflectionInfo",
          absl::PermissionDeniedError(absl::StrCat(
              "principal '", caller->name(),
              "' has no role on any world, which reflection needs")));
    }
    if (!caller.ok()) {
      Finish(ToGrpc(caller.status()));
      return;
    }
    response_ = service_.Answer(request_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionService& service_;
  grpc::CallbackServerContext* const context_;
  Request request_;
  Response response_;
};

ReflectionService::ReflectionService(std::vector<std::string> services,
                                     std::shared_ptr<Gatekeeper> gatekeeper)
    : pool_(*google::protobuf::DescriptorPool::generated_pool()),
      gatekeeper_(std::move(gatekeeper)),
      services_(std::move(services)) {
  services_.emplace_back(
      grpc::reflection::v1alpha::ServerReflection::service_full_name());
  for (const std::string& name : services_) {
    if (const auto* service = pool_.FindServiceByName(name)) {
      Gather(service->file(), &files_);
    }
  }
}

grpc::ServerBidiReactor<ReflectionService::Request,
                        ReflectionService::Response>*
ReflectionService::ServerReflectionInfo(grpc::CallbackServerContext* context) {
  return new Stream(*this, context);
}

void ReflectionService::AddFiles(const FileDescriptor* file,
                                 Response* response) const {
  if (file == nullptr || !files_.contains(file)) {
    SetError(grpc::StatusCode::NOT_FOUND, "not found", response);
    return;
  }
  // The file first, then what it imports, each once.
  absl::flat_hash_set<const FileDescriptor*> seen;
  std::vector<const FileDescriptor*> pending = {file};
  auto* out = response->mutable_file_descriptor_response();
  while (!pending.empty()) {
    const FileDescriptor* next = pending.back();
    pending.pop_back();
    if (!seen.insert(next).second) continue;
    google::protobuf::FileDescriptorProto proto;
    next->CopyTo(&proto);
    proto.SerializeToString(out->add_file_descriptor_proto());
    for (int i = next->dependency_count() - 1; i >= 0; --i) {
      pending.push_back(next->dependency(i));
    }
  }
}

ReflectionService::Response ReflectionService::Answer(
    const Request& request) const {
  Response response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  switch (request.message_request_case()) {
    case Request::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(
            name);
      }
      break;
    case Request::kFileByFilename:
      AddFiles(pool_.FindFileByName(request.file_by_filename()), &response);
      break;
    case Request::kFileContainingSymbol:
      AddFiles(pool_.FindFileContainingSymbol(request.file_containing_symbol()),
               &response);
      break;
    case Request::kFileContainingExtension: {
      const Descriptor* type = pool_.FindMessageTypeByName(
          request.file_containing_extension().containing_type());
      const FieldDescriptor* extension =
          type == nullptr
              ? nullptr
              : pool_.FindExtensionByNumber(
                    type,
                    request.file_containing_extension().extension_number());
      AddFiles(extension == nullptr ? nullptr : extension->file(), &response);
      break;
    }
    case Request::kAllExtensionNumbersOfType: {
      const Descriptor* type =
          pool_.FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr || !files_.contains(type->file())) {
        SetError(grpc::StatusCode::NOT_FOUND, "not found", &response);
        break;
      }
      std::vector<const FieldDescriptor*> extensions;
      pool_.FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const FieldDescriptor* extension : extensions) {
        numbers->add_extension_number(extension->number());
      }
      break;
    }
    case Request::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::INVALID_ARGUMENT,
               "the request asks for nothing", &response);
      break;
  }
  return response;
}

}  // namespace xform::server
