// Copyright 2026 The xform Authors.
//
// XformdConfig: everything xformd is told when it starts, read from its
// flags and checked in one place (FromFlags), in the option types of the
// parts that take them. A value out of range is a usage error naming the
// flag (xformd exits 2), never a server that misbehaves later; every flag
// and its default are in xformd_config.cc and `xformd --help`, and
// docs/limits.md says what a client sees at each limit.

#ifndef XFORM_SERVER_XFORMD_CONFIG_H_
#define XFORM_SERVER_XFORMD_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/cluster/nats_link.h"
#include "server/edge/edge.h"
#include "server/host/world_host.h"
#include "server/service/health_service.h"
#include "server/service/refusal_guard.h"
#include "server/service/service.h"
#include "server/service/tls.h"
#include "server/service/transport.h"
#include "server/storage/storage.h"

namespace xform::server {

struct XformdConfig {
  std::string listen;      // HOST:PORT.
  double tick_hz = 60;     // Tick worlds' default rate.
  int fanout_threads = 1;  // Resolved: --fanout_threads=0 is the cores.
  Limits limits;
  std::optional<StorageOptions> storage;  // --data_dir; none: in memory.
  // --cluster: the worlds' logs in NATS JetStream instead (docs/cluster.md).
  std::optional<ClusterOptions> cluster;
  std::string auth_file;        // Empty: no access control.
  bool reflection = false;      // Resolved from on, off or auto.
  std::optional<TlsFiles> tls;  // None: plaintext.
  // The edge's options but for its TLS credentials, made from `tls` at
  // start.
  EdgeOptions edge;
  TransportOptions transport;
  HealthOptions health;
  RefusalGuardOptions refusals;
  // The service's options but for the gatekeeper and the guard, which
  // xformd makes.
  ServiceOptions service;
  absl::Duration shutdown_grace;
  bool demo = false;
  uint64_t demo_city_entities = 0;  // With demo: the city's size (0: none).

  // Reads and checks every flag: the config, or every problem found, one a
  // line (INVALID_ARGUMENT).
  static absl::StatusOr<XformdConfig> FromFlags();
};

// Whether HOST:PORT names this machine's loopback only.
bool IsLoopback(absl::string_view listen);

}  // namespace xform::server

#endif  // XFORM_SERVER_XFORMD_CONFIG_H_
