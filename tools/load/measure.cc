// Copyright 2026 The xform Authors.

#include "tools/load/measure.h"

#include <unistd.h>

#include <algorithm>

namespace xform::load {

void Recorder::StartMeasuring(absl::Time stall_at, absl::Duration stall) {
  absl::MutexLock lock(&mu_);
  measuring_ = true;
  measuring_since_ = absl::Now();
  stall_at_ = stall_at;
  stall_ = stall;
}

void Recorder::StopMeasuring() {
  absl::MutexLock lock(&mu_);
  measuring_ = false;
}

void Recorder::MaybeStall() {
  absl::Duration stall;
  {
    absl::MutexLock lock(&mu_);
    if (!received_.stalled || stalled_done_ || !measuring_ ||
        absl::Now() < stall_at_) {
      return;
    }
    stalled_done_ = true;
    stall = stall_;
  }
  absl::SleepFor(stall);
  absl::MutexLock lock(&mu_);
  stall_end_ = absl::Now();
}

void Recorder::Record(absl::Span<const double> ages_ms, uint64_t frames,
                      uint64_t updates, uint64_t bytes,
                      std::optional<absl::Time> published,
                      std::optional<double> arrived_ms) {
  absl::MutexLock lock(&mu_);
  if (!measuring_ || (published && *published < measuring_since_)) return;
  // Not split for the stalled subscriber, whose latency is reported apart.
  if (arrived_ms && !received_.stalled) {
    received_.arrived_ms.push_back(*arrived_ms);
  }
  ++received_.messages;
  received_.frames += frames;
  received_.updates += updates;
  received_.bytes += bytes;
  received_.latency_ms.insert(received_.latency_ms.end(), ages_ms.begin(),
                              ages_ms.end());
  const double age = ages_ms.empty() ? 0 : ages_ms.front();
  if (!stalled_done_) {
    for (double a : ages_ms)
      before_stall_max_ms_ = std::max(before_stall_max_ms_, a);
  }
  if (stall_end_ == absl::InfinitePast() || caught_up_) return;
  if (received_.backlog_messages++ == 0) {
    received_.first_after_stall_ms = age;
  }
  // Current again: data as young as it was before the stall (a poller's
  // is never younger than its poll takes), or younger than a few frames.
  if (age < std::max(50.0, before_stall_max_ms_)) {
    caught_up_ = true;
    received_.catch_up_ms =
        absl::ToDoubleMilliseconds(absl::Now() - stall_end_);
  }
}

void Recorder::RecordSnapshot(uint64_t updates, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (!measuring_) return;
  ++received_.snapshot_messages;
  received_.snapshot_updates += updates;
  received_.snapshot_bytes += bytes;
}

void Recorder::Disconnected() {
  absl::MutexLock lock(&mu_);
  ++received_.disconnects;
}

uint64_t Recorder::messages() {
  absl::MutexLock lock(&mu_);
  return received_.messages;
}

Received Recorder::Take() {
  absl::MutexLock lock(&mu_);
  received_.pid = getpid();
  return received_;
}

void AckLog::Add(absl::Time at, uint64_t entities) {
  absl::MutexLock lock(&mu_);
  acks_.push_back({at, entities});
}

uint64_t AckLog::AgesBetween(absl::Time after, absl::Time upto, absl::Time now,
                             std::vector<double>* ages_ms) {
  absl::MutexLock lock(&mu_);
  uint64_t entities = 0;
  for (auto it =
           std::upper_bound(acks_.begin(), acks_.end(), after,
                            [](absl::Time t, const Ack&a) { return t < a.at; });
       it != acks_.end() && it->at <= upto; ++it) {
    ages_ms->push_back(absl::ToDoubleMilliseconds(now - it->at));
    entities += it->entities;
  }
  return entities;
}

void AckLog::Clear() {
  absl::MutexLock lock(&mu_);
  acks_.clear();
}

}  // namespace xform::load
