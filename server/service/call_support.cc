// Copyright 2026 The xform Authors.

#include "server/service/call_support.h"

#include <algorithm>
#include <optional>

#include "server/cluster/view/redirect.h"
#include "server/service/service.h"
#include "xform/v1/wire.h"

namespace xform::server {

// Who is calling, once the server is ready: UNAVAILABLE while --data_dir's
// worlds are being recovered (health says NOT_SERVING then too).
absl::StatusOr<Caller> Admit(const WorldHost& host, Gatekeeper& gatekeeper,
                             const grpc::CallbackServerContext& context,
                             absl::string_view method) {
  if (!host.ready()) {
    return absl::UnavailableError(
        "the server is recovering its worlds from disk; try again shortly");
  }
  return gatekeeper.Authenticate(context, method);
}

// The world `name` for a caller with `role` on it: PERMISSION_DENIED before
// the look-up, so that a refusal says nothing of whether the world exists;
// then NOT_FOUND.
absl::StatusOr<std::shared_ptr<HostedWorld>> WorldFor(
    const WorldHost& host, const Caller& caller, Role role,
    absl::string_view name, absl::string_view method) {
  if (absl::Status allowed = caller.Require(role, name, method);
      !allowed.ok()) {
    return allowed;
  }
  return host.Get(name);
}

// A refusal that names where to go instead, or says to wait (redirect.h):
// said in the trailing metadata too, for clients to follow without parsing
// text.
void AddRedirect(grpc::CallbackServerContext& context,
                 const absl::Status& status) {
  if (const std::optional<Redirect> to = RedirectOf(status)) {
    context.AddTrailingMetadata(kOwnerNodeMetadata, to->node);
    context.AddTrailingMetadata(kOwnerAddressMetadata, to->address);
  } else if (SaysTryAgain(status)) {
    context.AddTrailingMetadata(kTryAgainMetadata, "1");
  }
}

// What a caller is told of a world: its info, and in a cluster where it is
// written and served.
v1::WorldInfo InfoOf(const WorldHost& host, const HostedWorld& world) {
  v1::WorldInfo info = world.Info();
  if (const ClusterView* cluster = host.cluster()) {
    const PlacementView placement = cluster->Placement(world.name());
    v1::WorldPlacement& out = *info.mutable_placement();
    out.set_owner_node(placement.owner_node);
    out.set_owner_address(placement.owner_address);
    for (const std::string& node : placement.serving_nodes) {
      out.add_serving_nodes(node);
    }
    out.set_answered_by(cluster->node_name());
    out.set_unconfirmed_ms(static_cast<uint64_t>(
        absl::ToInt64Milliseconds(placement.unconfirmed)));
    out.set_wedged(placement.wedged);
    out.set_wedged_record(placement.wedged_record);
  }
  return info;
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const absl::Status& status) {
  AddRedirect(*context, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// Counts a call that ended with `status` against its caller (`caller`, or
// null before it was known) when it was refused (see refusal_guard.h).
void NoteRefusal(RefusalGuard* refusals,
                 const grpc::CallbackServerContext& context,
                 const absl::Status& status, const Caller* caller,
                 size_t request_bytes) {
  // A redirect (a write sent to a node that does not write the world) is
  // no fault of an honest client's.
  if (refusals == nullptr || !RefusalGuard::IsRefusal(status.code()) ||
      RedirectOf(status).has_value()) {
    return;
  }
  const bool credited =
      caller != nullptr && caller->credential->kind != Credential::Kind::kNone;
  refusals->Refused(credited ? absl::string_view(caller->name()) : "",
                    context.peer(), request_bytes, absl::Now());
}

// Done, once the refusal (if it is one) is counted.
grpc::ServerUnaryReactor* Done(RefusalGuard* refusals,
                               grpc::CallbackServerContext* context,
                               const absl::Status& status, const Caller* caller,
                               size_t request_bytes) {
  NoteRefusal(refusals, *context, status, caller, request_bytes);
  return Done(context, status);
}

// One write batch, Apply's or ApplyStream's, by `caller`: the frame it
// lands in. Refused before anything applies when the caller lacks the write
// role on its world or is over a write quota.
// The world's name goes to `world`, once the request parses.
absl::StatusOr<uint64_t> ApplyBatch(WorldHost& host, const Caller& caller,
                                    const grpc::ByteBuffer& bytes,
                                    std::string* world_name) {
  v1::ApplyRequest request;
  if (absl::Status parsed =
          ParseApplyRequest(bytes, host.limits().max_commands, &request);
      !parsed.ok()) {
    return parsed;
  }
  if (world_name != nullptr) *world_name = request.world();
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      WorldFor(host, caller, kWrite, request.world(), "Apply");
  if (!world.ok()) return world.status();
  Limits limits = host.limits();
  if (caller.quotas().has_max_entities_per_world()) {
    limits.max_entities_per_world =
        std::min<size_t>(limits.max_entities_per_world,
                         caller.quotas().max_entities_per_world());
  }
  if (absl::Status rate =
          caller.usage->TakeWrite(caller.quotas(), v1::EntitiesNamed(request),
                                  caller.usage->clock().Now());
      !rate.ok()) {
    return rate;
  }
  return (*world)->Apply(request, limits);
}

}  // namespace xform::server
