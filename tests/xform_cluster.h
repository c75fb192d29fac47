// Copyright 2026 The xform Authors.
//
// An xform cluster for tests: real nats-server processes (nats_cluster.h)
// and xformd nodes on them, each on a port of its own that stays the same
// across restarts (so that a client given every node's address finds a
// node that comes back), each killed -9, paused or started again as the
// test says.

#ifndef XFORM_TESTS_XFORM_CLUSTER_H_
#define XFORM_TESTS_XFORM_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/acknowledged_writes.h"
#include "tests/nats_cluster.h"
#include "tests/wait_until.h"
#include "tests/xformd_process.h"
#include "xform/client.h"

namespace xform::testing {

class XformCluster {
 public:
  // `nats` NATS servers in a cluster, `nodes` xformd nodes (node0...),
  // node i on NATS server i % nats first; every stream on
  // min(3, nats) of them. Leases of `lease_ms`.
  XformCluster(int nats, int nodes, std::vector<std::string> flags = {},
               int lease_ms = 1000, NatsOptions nats_options = {})
      : nats_(nats, std::move(nats_options)),
        flags_(std::move(flags)),
        lease_ms_(lease_ms) {
    for (int i = 0; i < nodes; ++i) ports_.push_back(NatsCluster::FreePort());
    nodes_.resize(nodes);
    for (int i = 0; i < nodes; ++i) Start(i);
  }

  NatsCluster& nats() { return nats_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  static std::string Name(int i) { return absl::StrCat("node", i); }
  std::string Address(int i) const {
    return absl::StrCat("127.0.0.1:", ports_[i]);
  }
  // Every node's address, comma-separated, as ClientOptions takes them.
  std::string Addresses() const {
    std::vector<std::string> all;
    for (int i = 0; i < size(); ++i) all.push_back(Address(i));
    return absl::StrJoin(all, ",");
  }
  Xformd& node(int i) { return *nodes_[i]; }
  bool up(int i) const { return nodes_[i] != nullptr; }

  // Starts node i (again), its NATS URLs its own server's first.
  void Start(int i) {
    std::vector<std::string> urls;
    for (int k = 0; k < nats_.size(); ++k) {
      urls.push_back(nats_.Url((i + k) % nats_.size()));
    }
    std::vector<std::string> flags = {
        absl::StrCat("--cluster=", absl::StrJoin(urls, ",")),
        absl::StrCat("--node_name=", Name(i)),
        absl::StrCat("--listen=", Address(i)),
        absl::StrCat("--cluster_replicas=", std::min(3, nats_.size())),
        absl::StrCat("--cluster_lease_ms=", lease_ms_)};
    flags.insert(flags.end(), flags_.begin(), flags_.end());
    nodes_[i] = std::make_unique<Xformd>(flags);
  }
  void Kill(int i) {
    if (nodes_[i] != nullptr) nodes_[i]->Kill();
    nodes_[i].reset();
  }
  // Every node's log, for a failure's message.
  std::string Logs() const {
    std::string logs;
    for (int i = 0; i < size(); ++i) {
      if (nodes_[i] != nullptr) {
        absl::StrAppend(&logs, "--- ", Name(i), " ---\n", nodes_[i]->Log());
      }
    }
    return logs;
  }

  // A client of every node (failing over between them), or of node `i`
  // alone.
  std::unique_ptr<Client> ClientOfAll() const {
    return Connect(Addresses(), absl::Seconds(30), absl::Seconds(3));
  }
  std::unique_ptr<Client> ClientOf(int i) const {
    return Connect(Address(i), absl::ZeroDuration(), absl::Seconds(10));
  }

 private:
  // A call to a paused node waits out `deadline` before another is tried.
  static std::unique_ptr<Client> Connect(const std::string& addresses,
                                         absl::Duration failover,
                                         absl::Duration deadline) {
    ClientOptions options;
    options.address = addresses;
    options.own_connection = true;
    options.deadline = deadline;
    options.failover_timeout = failover;
    return ConnectWhenAnswering(options, absl::Seconds(60));
  }

  NatsCluster nats_;
  const std::vector<std::string> flags_;
  const int lease_ms_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Xformd>> nodes_;
};

// Waits until node `client` serves `world` as `model` (a replica catching
// up); what still differs at the deadline, or "".
inline std::string WaitUntilSame(Client& client, const std::string& world,
                                 const World& model,
                                 absl::Duration timeout = absl::Seconds(20)) {
  std::string differs;
  // What differs at the deadline is the caller's to report.
  static_cast<void>(WaitUntil(
      [&] {
        differs = Differs(client, world, model);
        return differs.empty();
      },
      timeout, "the node to hold the model"));
  return differs;
}

}  // namespace xform::testing

#endif  // XFORM_TESTS_XFORM_CLUSTER_H_
