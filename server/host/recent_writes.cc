// Copyright 2026 The xform Authors.

#include "server/host/recent_writes.h"

#include <utility>

namespace xform::server {

std::shared_ptr<WriteOutcome> WriteOutcome::Settled() {
  static const auto* const settled = [] {
    auto outcome = std::make_shared<WriteOutcome>();
    outcome->Settle(absl::OkStatus());
    return new std::shared_ptr<WriteOutcome>(std::move(outcome));
  }();
  return *settled;
}

void WriteOutcome::Settle(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (settled_) return;
  settled_ = true;
  status_ = std::move(status);
}

absl::Status WriteOutcome::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&settled_));
  return status_;
}

const RecentWrites::Write* RecentWrites::Find(absl::string_view id) const {
  if (id.empty()) return nullptr;
  const auto it = writes_.find(id);
  return it == writes_.end() ? nullptr : &it->second;
}

void RecentWrites::Add(absl::string_view id, const Write& write) {
  if (id.empty() || capacity_ == 0) return;
  auto [it, inserted] = writes_.try_emplace(id, write);
  if (!inserted) return;
  order_.emplace_back(id);
  if (order_.size() > capacity_) {
    writes_.erase(order_.front());
    order_.pop_front();
  }
}

void RecentWrites::ForEach(
    absl::FunctionRef<void(absl::string_view id, uint64_t frame)> visit) const {
  for (const std::string& id : order_) visit(id, writes_.at(id).frame);
}

void RecentWrites::Clear() {
  writes_.clear();
  order_.clear();
}

}  // namespace xform::server
