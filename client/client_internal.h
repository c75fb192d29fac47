// Copyright 2026 The xform Authors.
//
// What the Client shares with the Mirror inside the library: its nodes (a
// channel and stubs for each address), and how every call is dressed
// (deadline, token, status mapping) and tried again elsewhere.

#ifndef XFORM_CLIENT_CLIENT_INTERNAL_H_
#define XFORM_CLIENT_CLIENT_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "xform/client.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform::client_internal {

struct Channel {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Xform::Stub> stub;
  // Subscribe, with each message handed over as gRPC read it, unparsed:
  // a Mirror parses on its taker's thread, not on gRPC's (see mirror.cc).
  // Called as a bidi stream that writes its one request and closes, which
  // is a server stream on the wire; the generic stub has no other
  // callback stream for bytes.
  std::unique_ptr<
      grpc::TemplatedGenericStub<v1::SubscribeRequest, grpc::ByteBuffer>>
      subscribe_bytes;
};

// The nodes a Client talks to: a channel for each address (those it was
// given, then those redirects named that a node given lists), made when
// first used; the one calls
// go to now; the one each world's writes go to; and the write ids that
// make each batch its own. Thread-safe.
class Nodes {
 public:
  explicit Nodes(const ClientOptions& options);

  // The channel to the node at `index` (made now, the first time).
  Channel& At(size_t index);
  // Where calls go now.
  size_t current() const;
  // The node at `index` did not answer: calls go to the next address given
  // from now on; its index.
  size_t FailOver(size_t index);
  // The index of `address` (a redirect's, sent by the node at `asked`):
  // one of the addresses given or learned, or else a node that `asked`
  // lists (ListNodes), added; nullopt for any other address, where the
  // client's token must not be sent.
  std::optional<size_t> TrustedIndexOf(const std::string& address,
                                       size_t asked);
  // Where `world`'s writes go: where the last one went, or current().
  size_t WriterOf(absl::string_view world) const;
  void SetWriter(absl::string_view world, size_t index);
  // Whether several addresses were given: calls are tried again on others.
  bool several() const { return given_ > 1; }
  // A new write id (ApplyRequest.write_id): this client's, and unique.
  std::string NextWriteId();

 private:
  const ClientOptions options_;
  const std::string write_prefix_;
  std::atomic<uint64_t> writes_{0};
  size_t given_ = 0;  // The first addresses_ are the options'.
  mutable absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, size_t> writers_ ABSL_GUARDED_BY(mu_);
};

// The path of Xform.Subscribe, for subscribe_bytes.
std::string SubscribeMethod();

// The gRPC status as absl::Status: the two share code numbering.
absl::Status FromGrpc(const grpc::Status& status);

// Puts the token (if any) on `context`, and the unary deadline when
// `with_deadline`, `wait` later for a call the server may hold that long
// (a lookup waiting for data).
void Prepare(const ClientOptions& options, bool with_deadline,
             grpc::ClientContext* context,
             absl::Duration wait = absl::ZeroDuration());

// The address a refusal redirects to (the trailing metadata
// xform-owner-address), or "".
std::string RedirectOf(const grpc::ClientContext& context,
                       const grpc::Status& status);

// Whether the server asked for the call to be tried again shortly (the
// trailing metadata xform-try-again: a world whose writer is being
// replaced).
bool SaysTryAgain(const grpc::ClientContext& context);

// Whether a call that failed so may succeed at another node: a node lost
// or busy.
bool WorthRetrying(const grpc::Status& status);

}  // namespace xform::client_internal

#endif  // XFORM_CLIENT_CLIENT_INTERNAL_H_
