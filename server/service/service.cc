// Copyright 2026 The xform Authors.

#include "server/service/service.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/base/log.h"
#include "server/cluster/view/redirect.h"
#include "server/edge/peer_address.h"
#include "server/replication/region_filter.h"
#include "server/service/apply_stream.h"
#include "server/service/call_support.h"
#include "server/service/refusal_guard.h"
#include "server/service/request_reader.h"
#include "server/service/subscribe_stream.h"
#include "xform/subscriber_info.h"
#include "xform/v1/wire.h"

namespace xform::server {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

XformService::XformService(WorldHost& host, ServiceOptions options)
    : host_(host),
      options_(std::move(options)),
      gatekeeper_(
          options_.gatekeeper != nullptr
              ? options_.gatekeeper
              : std::make_shared<Gatekeeper>(AccessPolicy::OpenToAll())),
      refusals_(options_.refusal_guard.get()),
      region_move_work_(host_.limits().max_region_move_entities_per_second,
                        "region moves' entities judged",
                        "--max_region_move_entities_per_second"),
      writers_(std::make_unique<WriterRegistry>()),
      watchdog_(std::make_unique<WriteWatchdog>(options_.write_timeout)),
      build_pool_(std::make_unique<BuildPool>(options_.build_threads)) {}

XformService::~XformService() = default;

void XformService::EndAllStreams(const absl::Status& status) {
  writers_->EndAll(status);
  host_.EndAllStreams(status);
}

grpc::ServerUnaryReactor* XformService::CreateWorld(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::CreateWorldRequest, v1::WorldInfo>(
      active_calls_, host_, *gatekeeper_, refusals_, "CreateWorld", context,
      request, response,
      [&](const Caller& caller, const v1::CreateWorldRequest& create,
          v1::WorldInfo* info) {
        if (absl::Status allowed =
                caller.Require(kAdmin, create.name(), "CreateWorld");
            !allowed.ok()) {
          return allowed;
        }
        absl::MutexLock lock(&create_mu_);
        if (caller.quotas().has_max_worlds_owned()) {
          size_t owned = 0;
          for (const auto& world : host_.List()) {
            owned += world->owner() == caller.name();
          }
          if (owned >= caller.quotas().max_worlds_owned()) {
            return caller.usage->Refused(
                "CreateWorld",
                absl::ResourceExhaustedError(absl::StrCat(
                    "principal '", caller.name(), "' owns its quota of ",
                    caller.quotas().max_worlds_owned(),
                    " worlds (max_worlds_owned)")));
          }
        }
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            host_.Create(create, caller.name());
        if (!world.ok()) return world.status();
        *info = InfoOf(host_, **world);
        Log('I', "world '", create.name(), "' created (",
            v1::FrameMode_Name(info->mode()), ", ", info->tick_hz(),
            " Hz) by principal '", caller.name(), "'");
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::ListWorlds(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ListWorldsRequest, v1::ListWorldsResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "ListWorlds", context,
      request, response,
      [&](const Caller& caller, const v1::ListWorldsRequest&,
          v1::ListWorldsResponse* list) {
        // Only what it may read: the rest it is not told exist.
        for (const auto& world : host_.List()) {
          if (caller.principal->Allows(kRead, world->name())) {
            *list->add_worlds() = InfoOf(host_, *world);
          }
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::GetWorld(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::GetWorldRequest, v1::WorldInfo>(
      active_calls_, host_, *gatekeeper_, refusals_, "GetWorld", context,
      request, response,
      [&](const Caller& caller, const v1::GetWorldRequest& get,
          v1::WorldInfo* info) {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            WorldFor(host_, caller, kRead, get.name(), "GetWorld");
        if (!world.ok()) return world.status();
        *info = InfoOf(host_, **world);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::DeleteWorld(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::DeleteWorldRequest, v1::DeleteWorldResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "DeleteWorld", context,
      request, response,
      [&](const Caller& caller, const v1::DeleteWorldRequest& del,
          v1::DeleteWorldResponse*) {
        if (absl::Status allowed =
                caller.Require(kAdmin, del.name(), "DeleteWorld");
            !allowed.ok()) {
          return allowed;
        }
        absl::Status status = host_.Delete(del.name());
        if (status.ok()) {
          Log('I', "world '", del.name(), "' deleted by principal '",
              caller.name(), "'");
        }
        return status;
      });
}

grpc::ServerUnaryReactor* XformService::ListSubscribers(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ListSubscribersRequest, v1::ListSubscribersResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "ListSubscribers", context,
      request, response,
      [&](const Caller& caller, const v1::ListSubscribersRequest& list,
          v1::ListSubscribersResponse* page) {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            WorldFor(host_, caller, kAdmin, list.world(), "ListSubscribers");
        if (!world.ok()) return world.status();
        const size_t page_size =
            list.page_size() == 0 || list.page_size() > kMaxSubscribersPerPage
                ? kMaxSubscribersPerPage
                : list.page_size();
        // One more than the page, to tell whether another follows.
        std::vector<SubscriberInfo> subscribers =
            (*world)->replicator().Subscribers(list.after_id(), page_size + 1);
        if (subscribers.size() > page_size) {
          subscribers.resize(page_size);
          page->set_next_after_id(subscribers.back().id);
        }
        for (const SubscriberInfo& info : subscribers) {
          v1::SubscriberInfoToWire(info, page->add_subscribers());
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::Apply(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes,
    grpc::ByteBuffer* response_bytes) {
  const CallHold hold(active_calls_);
  const size_t request_bytes = bytes->Length();
  absl::StatusOr<Caller> caller = Admit(host_, *gatekeeper_, *context, "Apply");
  if (!caller.ok()) {
    return Done(refusals_, context, caller.status(), nullptr, request_bytes);
  }
  // An Apply in progress is a writer, as an ApplyStream is.
  absl::StatusOr<std::unique_ptr<Usage::Ticket>> writing =
      caller->usage->Open(Usage::Stream::kWriter, *caller, nullptr);
  if (!writing.ok()) {
    return Done(refusals_, context, writing.status(), &*caller, request_bytes);
  }
  absl::StatusOr<uint64_t> frame = ApplyBatch(host_, *caller, *bytes);
  if (!frame.ok()) {
    return Done(refusals_, context, frame.status(), &*caller, request_bytes);
  }
  v1::ApplyResponse response;
  response.set_frame(*frame);
  SerializeResponse(response, response_bytes);
  return Done(context, absl::OkStatus());
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
XformService::ApplyStream(grpc::CallbackServerContext* context) {
  absl::StatusOr<Caller> caller =
      Admit(host_, *gatekeeper_, *context, "ApplyStream");
  if (!caller.ok()) {
    NoteRefusal(refusals_, *context, caller.status(), nullptr, 0);
    return RefusedApplyStream(caller.status());
  }
  return StartApplyStream(context, host_, *writers_, refusals_, active_calls_,
                          *std::move(caller));
}

grpc::ServerUnaryReactor* XformService::Read(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ReadRequest, v1::ReadResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "Read", context, request,
      response,
      [&](const Caller& caller, const v1::ReadRequest& read,
          v1::ReadResponse* out) {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world =
            WorldFor(host_, caller, kRead, read.world(), "Read");
        if (!world.ok()) return world.status();
        if (absl::Status room = caller.usage->CheckSend(
                caller.quotas(), caller.usage->clock().Now());
            !room.ok()) {
          return room;
        }
        absl::Status status = (*world)->Read(read, host_.limits(), out);
        if (status.ok() && caller.quotas().has_bytes_out_per_second()) {
          caller.usage->ChargeSent(caller.quotas(), out->ByteSizeLong(),
                                   caller.usage->clock().Now());
        }
        return status;
      });
}

grpc::ServerUnaryReactor* XformService::LookupTransform(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes,
    grpc::ByteBuffer* response_bytes) {
  // Held until the answer, which may come from another thread later.
  auto hold = std::make_shared<CallHold>(active_calls_);
  const size_t request_bytes = bytes->Length();
  absl::StatusOr<Caller> caller =
      Admit(host_, *gatekeeper_, *context, "LookupTransform");
  if (!caller.ok()) {
    return Done(refusals_, context, caller.status(), nullptr, request_bytes);
  }
  v1::LookupTransformRequest request;
  if (absl::Status parsed = ParseRequest(*bytes, &request); !parsed.ok()) {
    return Done(refusals_, context, parsed, &*caller, request_bytes);
  }
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      WorldFor(host_, *caller, kRead, request.world(), "LookupTransform");
  if (!world.ok()) {
    return Done(refusals_, context, world.status(), &*caller, request_bytes);
  }
  const auto call_deadline = context->deadline();
  const absl::Time deadline =
      call_deadline == std::chrono::system_clock::time_point::max()
          ? absl::InfiniteFuture()
          : absl::FromChrono(call_deadline);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*world)->LookupTransform(request, host_.limits(), deadline,
                            [reactor, response_bytes, hold = std::move(hold)](
                                const absl::Status& status,
                                const v1::LookupTransformResponse& response) {
                              if (status.ok())
                                SerializeResponse(response, response_bytes);
                              reactor->Finish(ToGrpc(status));
                            });
  return reactor;
}

namespace {

// RESOURCE_EXHAUSTED for a region whose cells are past --max_region_cells.
absl::Status CheckRegionCells(const std::optional<Region>& region,
                              const Limits& limits) {
  if (!region) return absl::OkStatus();
  const uint64_t cells = CellsOfRegion(*region, limits.region_cell_size);
  if (cells <= limits.max_region_cells) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "region ", region->ToString(), " covers ", cells, " cells of ",
      limits.region_cell_size, " units, past the limit of ",
      limits.max_region_cells, " (--max_region_cells)"));
}

// A valid request's subscription, as the replicator takes it.
SubscriptionOptions SubscriptionOf(const v1::SubscribeRequest& request,
                                   const Limits& limits) {
  SubscriptionOptions options;
  options.entities.assign(request.entity().begin(), request.entity().end());
  options.subtrees.assign(request.subtree().begin(), request.subtree().end());
  options.max_rate_hz = request.max_rate_hz();
  options.no_echo_client_id = request.no_echo_client_id();
  options.compact_precision = v1::CompactPrecision(request);
  options.accepts_kept_view_snapshots = request.accepts_kept_view_snapshots();
  options.resume_from_frame = request.resume_from_frame();
  options.resume_history = request.resume_history();
  options.region = *v1::RegionFromWire(request);  // Checked.
  // Snapshot chunks and deltas stay a few MB whatever the limit, and under
  // half of it.
  options.part_budget_bytes =
      std::min<size_t>(limits.max_message_bytes / 2, kDefaultPartBudgetBytes);
  return options;
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* XformService::Subscribe(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  absl::StatusOr<Caller> caller =
      Admit(host_, *gatekeeper_, *context, "Subscribe");
  const auto refuse = [&](const absl::Status& status) {
    NoteRefusal(refusals_, *context, status, caller.ok() ? &*caller : nullptr,
                bytes->Length());
    return RefusedSubscribeStream(status);
  };
  if (!caller.ok()) return refuse(caller.status());
  v1::SubscribeRequest request;
  if (absl::Status parsed = ParseRequest(*bytes, &request); !parsed.ok()) {
    return refuse(parsed);
  }
  if (absl::Status allowed =
          caller->Require(kRead, request.world(), "Subscribe");
      !allowed.ok()) {
    return refuse(allowed);
  }
  const Limits& limits = host_.limits();
  if (absl::Status valid =
          v1::CheckSubscribeRequest(request, limits.max_filter_ids);
      !valid.ok()) {
    return refuse(valid);
  }
  if (absl::Status cells =
          CheckRegionCells(*v1::RegionFromWire(request), limits);
      !cells.ok()) {
    return refuse(cells);
  }
  const size_t filter_ids =
      static_cast<size_t>(request.entity_size()) + request.subtree_size();
  if (caller->quotas().has_max_filter_ids() &&
      filter_ids > caller->quotas().max_filter_ids()) {
    return refuse(caller->usage->Refused(
        "Subscribe",
        absl::ResourceExhaustedError(absl::StrCat(
            "principal '", caller->name(), "' may name at most ",
            caller->quotas().max_filter_ids(),
            " entities and subtrees in a filter (max_filter_ids)"))));
  }
  absl::StatusOr<std::shared_ptr<HostedWorld>> world =
      host_.Get(request.world());
  if (!world.ok()) return refuse(world.status());
  if ((*world)->replicator().subscribers() >= limits.max_subscribers) {
    return refuse(absl::ResourceExhaustedError(
        absl::StrCat("world '", (*world)->name(), "' has its limit of ",
                     limits.max_subscribers, " subscribers")));
  }
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor = nullptr;
  SubscriptionOptions options = SubscriptionOf(request, limits);
  options.owner = caller->name();
  StartSubscribeStream(context, *std::move(world), std::move(options),
                       *watchdog_, *build_pool_, active_calls_, *caller,
                       &reactor);
  return reactor;
}

grpc::ServerUnaryReactor* XformService::UpdateSubscription(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::UpdateSubscriptionRequest, v1::UpdateSubscriptionResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "UpdateSubscription",
      context, request, response,
      [&](const Caller& caller, const v1::UpdateSubscriptionRequest& update,
          v1::UpdateSubscriptionResponse*) -> absl::Status {
        absl::StatusOr<std::shared_ptr<HostedWorld>> world = WorldFor(
            host_, caller, kRead, update.world(), "UpdateSubscription");
        if (!world.ok()) return world.status();
        if (!update.has_region()) {
          return absl::InvalidArgumentError(
              "UpdateSubscription names no region");
        }
        absl::StatusOr<Region> region = v1::RegionFromWire(update.region());
        if (!region.ok()) return region.status();
        const Limits& limits = host_.limits();
        if (absl::Status cells = CheckRegionCells(*region, limits);
            !cells.ok()) {
          return cells;
        }
        const absl::Time now = caller.usage->clock().Now();
        const bool credited =
            caller.credential->kind != Credential::Kind::kNone;
        return (*world)->replicator().MoveRegion(
            update.subscription_id(), caller.name(), *region,
            limits.max_region_moves_hz, now, [&](size_t entities) {
              return region_move_work_.Take(
                  credited ? absl::string_view(caller.name()) : "",
                  context->peer(), static_cast<double>(entities), now);
            });
      });
}

grpc::ServerUnaryReactor* XformService::ListNodes(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::ListNodesRequest, v1::ListNodesResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "ListNodes", context,
      request, response,
      [&](const Caller&, const v1::ListNodesRequest&,
          v1::ListNodesResponse* list) {
        const ClusterView* cluster = host_.cluster();
        if (cluster == nullptr) {
          // A single xformd: itself.
          char name[256] = {};
          gethostname(name, sizeof name - 1);
          v1::NodeInfo& self = *list->add_nodes();
          self.set_name(name);
          self.set_worlds_owned(static_cast<uint32_t>(host_.List().size()));
          self.set_worlds_served(self.worlds_owned());
          return absl::OkStatus();
        }
        absl::StatusOr<std::vector<NodeView>> nodes = cluster->Nodes();
        if (!nodes.ok()) return nodes.status();
        for (const NodeView& node : *nodes) {
          v1::NodeInfo& out = *list->add_nodes();
          out.set_name(node.name);
          out.set_address(node.address);
          out.set_draining(node.draining);
          out.set_worlds_owned(node.worlds_owned);
          out.set_worlds_served(node.worlds_served);
          out.set_started_unix_nanos(absl::ToUnixNanos(node.started));
          out.set_last_seen_ms(static_cast<uint64_t>(
              std::max<int64_t>(0, absl::ToInt64Milliseconds(node.last_seen))));
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::DrainNode(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::DrainNodeRequest, v1::DrainNodeResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "DrainNode", context,
      request, response,
      [&](const Caller& caller, const v1::DrainNodeRequest& drain,
          v1::DrainNodeResponse* out) {
        // It moves every world: the admin role on all of them.
        if (absl::Status allowed = caller.Require(kAdmin, "*", "DrainNode");
            !allowed.ok()) {
          return allowed;
        }
        ClusterView* cluster = host_.cluster();
        if (cluster == nullptr) {
          return absl::FailedPreconditionError(
              "this xformd is no node of a cluster (--cluster)");
        }
        absl::StatusOr<uint32_t> moved =
            cluster->Drain(drain.node(), !drain.undrain());
        if (!moved.ok()) return moved.status();
        out->set_worlds_moved(*moved);
        Log('I', "node '", EscapeForLog(drain.node()), "' ",
            drain.undrain() ? "undrained" : "drained", " by principal '",
            caller.name(), "'");
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* XformService::SkipRecord(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve<v1::SkipRecordRequest, v1::SkipRecordResponse>(
      active_calls_, host_, *gatekeeper_, refusals_, "SkipRecord", context,
      request, response,
      [&](const Caller& caller, const v1::SkipRecordRequest& skip,
          v1::SkipRecordResponse*) {
        if (absl::Status allowed =
                caller.Require(kAdmin, skip.world(), "SkipRecord");
            !allowed.ok()) {
          return allowed;
        }
        ClusterView* cluster = host_.cluster();
        if (cluster == nullptr) {
          return absl::FailedPreconditionError(
              "this xformd is no node of a cluster (--cluster): its worlds' "
              "journals are recovered with --recover=truncate");
        }
        absl::Status skipped = cluster->SkipRecord(skip.world(), skip.record());
        if (skipped.ok()) {
          Log('W', "world '", EscapeForLog(skip.world()), "': record ",
              skip.record(), " of its log skipped by principal '",
              caller.name(), "'");
        }
        return skipped;
      });
}

}  // namespace xform::server
