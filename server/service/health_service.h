// Copyright 2026 The xform Authors.
//
// HealthService: the standard gRPC health protocol (grpc.health.v1.Health),
// as xformd serves it to probes and load balancers: Check answers a
// service's status ("" is the server as a whole), Watch sends it now and at
// every change. Open to every caller, credentials or not, so that probes
// need none.
//
// xformd serves it itself rather than through gRPC's default health
// service because anyone may open Watch streams, and each holds memory
// until its client goes: 8,000 anonymous Watch streams on 8 connections took
// xformd from 18 to 148 MB, bounded only by connections x
// --max_streams_per_connection. Here they are bounded per connection and
// per client address (an IPv4 address, an IPv6 /64); past either, Watch is
// refused RESOURCE_EXHAUSTED naming the limit. Honest watchers need one
// stream per service name per channel.
//
// Costs: Check is a hash lookup; Watch's start O(1) (and one getpeername()
// for a connection the Acceptor handed over); a status change O(watchers).
// Memory: a watcher each, bounded as above.
//
// Thread-safe.

#ifndef XFORM_SERVER_SERVICE_HEALTH_SERVICE_H_
#define XFORM_SERVER_SERVICE_HEALTH_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/edge/peer_address.h"

namespace xform::server {

struct HealthOptions {
  // Watch streams one connection may hold open
  // (--max_health_watches_per_connection).
  int max_watches_per_connection = 16;
  // Watch streams one client address may hold open, over all its
  // connections (--max_health_watches_per_address).
  int max_watches_per_address = 1024;
};

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  explicit HealthService(HealthOptions options = {});
  ~HealthService() override;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // Sets `service`'s status, and sends it to its watchers when it changed.
  // A service is unknown (Check: NOT_FOUND) until first set.
  void SetServingStatus(const std::string& service, bool serving);
  // Every service NOT_SERVING, for good: later calls change nothing (as
  // gRPC's own health service does at shutdown).
  void Shutdown();

  // Watch streams open now.
  int watches() const;

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;
  // A watcher's place in the counts, to give back when it ends.
  struct Seat {
    std::string connection;  // gRPC's peer name.
    ConnectionsPerAddress::Client client;
  };

  ServingStatus StatusOfLocked(const std::string& service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Leave(Watcher* watcher, const Seat& seat);

  const HealthOptions options_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Watcher*, std::weak_ptr<Watcher>> watchers_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> per_connection_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ConnectionsPerAddress::Client, int> per_address_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_HEALTH_SERVICE_H_
