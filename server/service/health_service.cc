// Copyright 2026 The xform Authors.

#include "server/service/health_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/edge/peer_address.h"

namespace xform::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream: one write in flight, the latest status sent after it
// when it changed meanwhile. gRPC may run a reaction inline in the thread
// that calls StartWrite or Finish, so those are made with no lock held; the
// watcher keeps itself alive until OnDone.
class HealthService::Watcher final
    : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService& service, std::string name, Seat seat)
      : service_(service), name_(std::move(name)), seat_(std::move(seat)) {}

  void Hold(std::shared_ptr<Watcher> self) { self_ = std::move(self); }
  const std::string& name() const { return name_; }

  // Sends `status` unless it was the last sent.
  void Notify(ServingStatus status) {
    {
      absl::MutexLock lock(&mu_);
      latest_ = status;
      if (writing_ || finishing_ || sent_ == status) return;
      writing_ = true;
      sent_ = status;
      response_.set_status(status);
    }
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    bool again = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) finishing_ = true;
      if (!finishing_ && latest_ != sent_) {
        again = writing_ = true;
        sent_ = latest_;
        response_.set_status(latest_);
      }
    }
    if (again) {
      StartWrite(&response_);
    } else {
      FinishIfEnding(grpc::Status(grpc::StatusCode::CANCELLED, "broken"));
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      finishing_ = true;
    }
    FinishIfEnding(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    service_.Leave(this, seat_);
    self_.reset();  // May delete this: the last statement.
  }

 private:
  // Finishes once, when ending and no write is in flight.
  void FinishIfEnding(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (!finishing_ || writing_ || finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  HealthService& service_;
  const std::string name_;
  const Seat seat_;
  std::shared_ptr<Watcher> self_;
  HealthCheckResponse response_;  // The write in flight's.
  absl::Mutex mu_;
  ServingStatus latest_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  ServingStatus sent_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

// A Watch refused at its start.
class RefusedWatch final
    : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

HealthService::HealthService(HealthOptions options) : options_(options) {}

HealthService::~HealthService() = default;

HealthService::ServingStatus HealthService::StatusOfLocked(
    const std::string& service) const {
  const auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second && !shut_down_ ? HealthCheckResponse::SERVING
                                   : HealthCheckResponse::NOT_SERVING;
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  std::vector<std::shared_ptr<Watcher>> told;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    serving_[service] = serving;
    for (const auto& [raw, weak] : watchers_) {
      if (raw->name() != service) continue;
      if (auto watcher = weak.lock()) told.push_back(std::move(watcher));
    }
  }
  const ServingStatus status =
      serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  for (const auto& watcher : told) watcher->Notify(status);
}

void HealthService::Shutdown() {
  std::vector<std::shared_ptr<Watcher>> told;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (const auto& [raw, weak] : watchers_) {
      if (auto watcher = weak.lock()) told.push_back(std::move(watcher));
    }
  }
  for (const auto& watcher : told) {
    watcher->Notify(HealthCheckResponse::NOT_SERVING);
  }
}

int HealthService::watches() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(watchers_.size());
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request,
    HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ServingStatus status;
  {
    absl::MutexLock lock(&mu_);
    status = StatusOfLocked(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "no such service"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  Seat seat{.connection = context->peer(),
            .client = ClientOfPeer(context->peer())};
  std::shared_ptr<Watcher> watcher;
  ServingStatus status;
  {
    absl::MutexLock lock(&mu_);
    int& on_connection = per_connection_[seat.connection];
    int& from_address = per_address_[seat.client];
    if (on_connection >= options_.max_watches_per_connection ||
        from_address >= options_.max_watches_per_address) {
      const bool connection_full =
          on_connection >= options_.max_watches_per_connection;
      if (on_connection == 0) per_connection_.erase(seat.connection);
      if (from_address == 0) per_address_.erase(seat.client);
      return new RefusedWatch(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          connection_full
              ? absl::StrCat("at most ", options_.max_watches_per_connection,
                             " health Watch streams on one connection "
                             "(--max_health_watches_per_connection)")
              : absl::StrCat("at most ", options_.max_watches_per_address,
                             " health Watch streams from one address "
                             "(--max_health_watches_per_address)")));
    }
    ++on_connection;
    ++from_address;
    watcher = std::make_shared<Watcher>(*this, request->service(), seat);
    watcher->Hold(watcher);
    watchers_.emplace(watcher.get(), watcher);
    status = StatusOfLocked(request->service());
  }
  watcher->Notify(status);
  return watcher.get();
}

void HealthService::Leave(Watcher* watcher, const Seat& seat) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
  if (--per_connection_[seat.connection] == 0) {
    per_connection_.erase(seat.connection);
  }
  if (--per_address_[seat.client] == 0) per_address_.erase(seat.client);
}

}  // namespace xform::server
