// Copyright 2026 The xform Authors.

#include "server/replication/burst_budget.h"

#include <memory>
#include <utility>

namespace xform::server {

// Gives its bytes back when the burst's last part goes.
class BurstBudget::Claim {
 public:
  Claim(std::shared_ptr<BurstBudget> budget, size_t bytes)
      : budget_(std::move(budget)), bytes_(bytes) {}
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  ~Claim() {
    std::lock_guard lock(budget_->mu_);
    budget_->claimed_ -= bytes_;
    --budget_->claims_;
  }

 private:
  const std::shared_ptr<BurstBudget> budget_;
  const size_t bytes_;
};

std::shared_ptr<const void> BurstBudget::TryClaim(size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (claims_ > 0 && claimed_ + bytes > bytes_) return nullptr;
    claimed_ += bytes;
    ++claims_;
  }
  return std::make_shared<const Claim>(shared_from_this(), bytes);
}

size_t BurstBudget::claimed() const {
  std::lock_guard lock(mu_);
  return claimed_;
}

}  // namespace xform::server
