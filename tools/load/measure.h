// Copyright 2026 The xform Authors.
//
// What xform-load measures: what each subscriber received (a Recorder per
// subscriber, fed by its receiving thread), and when the writers' batches
// were acknowledged (AckLog), from which a poller tells how old what it
// reads is.
//
// Thread-safe.

#ifndef XFORM_TOOLS_LOAD_MEASURE_H_
#define XFORM_TOOLS_LOAD_MEASURE_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace xform::load {

// What one subscriber received while measuring.
struct Received {
  std::vector<double> latency_ms;  // One per message (poll: per write seen).
  // stream only: the part of each message's latency before it reached this
  // process (publication to gRPC's read of it); the rest is the Mirror's
  // queue, parsing, decoding and committing.
  std::vector<double> arrived_ms;
  uint64_t messages = 0;
  uint64_t frames = 0;   // Frames covered, folded ones included.
  uint64_t updates = 0;  // Entity updates delivered.
  uint64_t bytes = 0;
  // stream only: snapshots' messages (a resync's, or one that keeps the
  // view), the entities they listed and their bytes; not in the above.
  uint64_t snapshot_messages = 0;
  uint64_t snapshot_updates = 0;
  uint64_t snapshot_bytes = 0;
  // The stalled subscriber: how old the first data after the stall was, how
  // long until it was current again, and what it had to wade through.
  bool stalled = false;
  double first_after_stall_ms = 0;
  double catch_up_ms = 0;
  uint64_t backlog_messages = 0;
  uint64_t disconnects = 0;
  pid_t pid = 0;  // The process it ran in (see --subscriber_processes).
};

// Shared by a subscriber's receiving thread and the report.
class Recorder {
 public:
  explicit Recorder(bool stalls) { received_.stalled = stalls; }

  // Records from now what is published from now; the stalling subscriber
  // stalls for `stall` at stall_at.
  void StartMeasuring(absl::Time stall_at, absl::Duration stall);
  void StopMeasuring();

  // Called by the receiver before it handles a message: sleeps through the
  // stall once, if this subscriber is the one that stalls.
  void MaybeStall();

  // One message: its age at arrival for each of `ages`, and what it carried;
  // for a stream's, also how old it was on reaching the process. One that
  // says when xformd published it is left out if that was before measuring
  // started: it may have been sent, and counted in xformd's stream counts,
  // before xform-load read them (a frame in flight). The clocks must agree,
  // as they must for the ages.
  void Record(absl::Span<const double> ages_ms, uint64_t frames,
              uint64_t updates, uint64_t bytes,
              std::optional<absl::Time> published = std::nullopt,
              std::optional<double> arrived_ms = std::nullopt);
  // A snapshot's message, while measuring (not timed: its parts carry the
  // frames they were made at).
  void RecordSnapshot(uint64_t updates, uint64_t bytes);
  void Disconnected();

  uint64_t messages();
  Received Take();

 private:
  absl::Mutex mu_;
  Received received_ ABSL_GUARDED_BY(mu_);
  bool measuring_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time measuring_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time stall_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Duration stall_ ABSL_GUARDED_BY(mu_);
  bool stalled_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stall_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool caught_up_ ABSL_GUARDED_BY(mu_) = false;
  double before_stall_max_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

// When each writer's batches were acknowledged.
class AckLog {
 public:
  void Add(absl::Time at, uint64_t entities);
  // Ages at `now` of the batches acknowledged in (after, upto], and the
  // entities they set.
  uint64_t AgesBetween(absl::Time after, absl::Time upto, absl::Time now,
                       std::vector<double>* ages_ms);
  void Clear();

 private:
  struct Ack {
    absl::Time at;
    uint64_t entities;
  };
  absl::Mutex mu_;
  std::vector<Ack> acks_ ABSL_GUARDED_BY(mu_);  // In time order.
};

}  // namespace xform::load

#endif  // XFORM_TOOLS_LOAD_MEASURE_H_
