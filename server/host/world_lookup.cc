// Copyright 2026 The xform Authors.
//
// HostedWorld's time: lookups in its history, and the lookups that wait for
// data not known yet (world_host.h says when each is answered).

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/host/world_host.h"

namespace xform::server {
namespace {

bool Advanced(const v1::LookupTransformRequest& request) {
  return request.use_fixed_frame() || request.fixed_frame() != kNoEntity;
}

// The newest stamp a lookup needs data at: until the world has a batch
// that new, retrying it cannot succeed.
Stamp Needs(const v1::LookupTransformRequest& request) {
  return std::max(request.stamp_nanos(),
                  Advanced(request) ? request.target_stamp_nanos() : 0);
}

absl::Status Expired(const absl::Status& unavailable) {
  return absl::DeadlineExceededError(absl::StrCat(
      "waited for data that did not come: ", unavailable.message()));
}

}  // namespace

void HostedWorld::SetHistoryLimits(HistoryLimits limits, v1::TimeModel model) {
  limits.hold_to_newest = model != v1::TIME_MODEL_TF2;
  absl::MutexLock lock(&mu_);
  history_ = WorldHistory(limits);
}

absl::Status HostedWorld::LookupLocked(
    const v1::LookupTransformRequest& request,
    v1::LookupTransformResponse* response) const {
  response->Clear();
  const History* history = history_.history();
  if (history == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "world ", Quoted(name_), " keeps no history (--history_seconds=0)"));
  }
  for (const EntityId source : request.source()) {
    absl::StatusOr<TimedPose> pose =
        Advanced(request)
            ? history->Lookup(request.target(), request.target_stamp_nanos(),
                              source, request.stamp_nanos(),
                              request.fixed_frame())
            : history->Lookup(request.target(), source, request.stamp_nanos());
    if (!pose.ok()) return pose.status();
    v1::AppendTimedPose(source, *pose, response);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::LookupTransformRequest> HostedWorld::WithFramesResolved(
    const v1::LookupTransformRequest& named, const Limits& limits) const {
  if (static_cast<size_t>(named.source_name_size()) >
      limits.max_lookup_sources) {
    return absl::ResourceExhaustedError(absl::StrCat(
        named.source_name_size(), " sources in one lookup, past the limit of ",
        limits.max_lookup_sources, " (--max_lookup_sources)"));
  }
  v1::LookupTransformRequest request = named;
  absl::ReaderMutexLock lock(&mu_);
  if (!named.target_name().empty()) {
    absl::StatusOr<EntityId> target = names_.Resolve(named.target_name());
    if (!target.ok()) return target.status();
    request.set_target(*target);
  }
  if (!named.source_name().empty()) {
    request.clear_source();
    for (const std::string& name : named.source_name()) {
      absl::StatusOr<EntityId> source = names_.Resolve(name);
      if (!source.ok()) return source.status();
      request.add_source(*source);
    }
  }
  if (!named.fixed_frame_name().empty()) {
    absl::StatusOr<EntityId> fixed = names_.Resolve(named.fixed_frame_name());
    if (!fixed.ok()) return fixed.status();
    request.set_fixed_frame(*fixed);
    request.set_use_fixed_frame(true);
  }
  request.clear_target_name();
  request.clear_source_name();
  request.clear_fixed_frame_name();
  return request;
}

void HostedWorld::LookupTransform(const v1::LookupTransformRequest& named,
                                  const Limits& limits, absl::Time deadline,
                                  LookupDone done) {
  const bool has_names = !named.target_name().empty() ||
                         !named.source_name().empty() ||
                         !named.fixed_frame_name().empty();
  absl::StatusOr<v1::LookupTransformRequest> resolved;
  if (has_names) {
    resolved = WithFramesResolved(named, limits);
    if (!resolved.ok()) {
      done(resolved.status(), {});
      return;
    }
  }
  const v1::LookupTransformRequest& request = has_names ? *resolved : named;
  if (request.source().empty()) {
    done(absl::InvalidArgumentError("name a source to look up"), {});
    return;
  }
  if (static_cast<size_t>(request.source_size()) > limits.max_lookup_sources) {
    done(
        absl::ResourceExhaustedError(absl::StrCat(
            request.source_size(), " sources in one lookup, past the limit of ",
            limits.max_lookup_sources, " (--max_lookup_sources)")),
        {});
    return;
  }
  const absl::Time now = absl::Now();
  deadline = std::min(
      deadline, now + absl::Milliseconds(std::min(request.timeout_ms(),
                                                  limits.max_lookup_wait_ms)));
  v1::LookupTransformResponse response;
  absl::Status status;
  {
    absl::ReaderMutexLock lock(&mu_);
    status = LookupLocked(request, &response);
    if (absl::IsUnavailable(status) && deadline > now) {
      // Queued before the world's lock is released: the batch that brings
      // the data is applied after, and finds it here.
      absl::MutexLock waiting(&waiting_mu_);
      if (waiting_.size() < limits.max_waiting_lookups) {
        waiting_.emplace(Needs(request),
                         WaitingLookup{request, deadline, std::move(done)});
        waiting_count_.store(waiting_.size(), std::memory_order_release);
        return;
      }
      status = absl::ResourceExhaustedError(absl::StrCat(
          "world ", Quoted(name_), " has ", waiting_.size(),
          " lookups waiting for data, its limit (--max_waiting_lookups): ",
          status.message()));
    }
  }
  if (absl::IsUnavailable(status)) status = Expired(status);
  done(std::move(status), std::move(response));
}

void HostedWorld::AnswerWaitingLookups() {
  if (waiting_count_.load(std::memory_order_acquire) == 0) return;
  std::vector<std::tuple<LookupDone, absl::Status, v1::LookupTransformResponse>>
      answered;
  {
    absl::ReaderMutexLock lock(&mu_);
    const Stamp newest = history_.newest();
    absl::MutexLock waiting(&waiting_mu_);
    for (auto it = waiting_.begin();
         it != waiting_.end() && it->first <= newest;) {
      v1::LookupTransformResponse response;
      absl::Status status = LookupLocked(it->second.request, &response);
      if (absl::IsUnavailable(status)) {
        ++it;  // Another link is still behind.
        continue;
      }
      answered.emplace_back(std::move(it->second.done), std::move(status),
                            std::move(response));
      it = waiting_.erase(it);
    }
    waiting_count_.store(waiting_.size(), std::memory_order_release);
  }
  for (auto& [done, status, response] : answered) {
    done(std::move(status), std::move(response));
  }
}

void HostedWorld::ExpireLookups(absl::Time now) {
  if (waiting_count_.load(std::memory_order_acquire) == 0) return;
  std::vector<WaitingLookup> expired;
  {
    absl::MutexLock waiting(&waiting_mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      expired.push_back(std::move(it->second));
      it = waiting_.erase(it);
    }
    waiting_count_.store(waiting_.size(), std::memory_order_release);
  }
  for (WaitingLookup& lookup : expired) {
    // Asked once more, so that the answer names how far the data reaches
    // now (or gives it, had it come just now).
    v1::LookupTransformResponse response;
    absl::Status status;
    {
      absl::ReaderMutexLock lock(&mu_);
      status = LookupLocked(lookup.request, &response);
    }
    if (absl::IsUnavailable(status)) status = Expired(status);
    lookup.done(std::move(status), std::move(response));
  }
}

void HostedWorld::EndLookups(const absl::Status& status) {
  std::multimap<Stamp, WaitingLookup> ended;
  {
    absl::MutexLock waiting(&waiting_mu_);
    ended.swap(waiting_);
    waiting_count_.store(0, std::memory_order_release);
  }
  for (auto& [stamp, lookup] : ended) lookup.done(status, {});
}

}  // namespace xform::server
