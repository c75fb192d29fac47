// Copyright 2026 The xform Authors.
//
// WriteWatchdog: finds subscriber streams whose write has been outstanding
// past --write_timeout_ms and has them cancel, from a thread of its own.
//
// It is not driven by the poll of worlds' subscribers (Replicator::Flush),
// which skips a world whose replicator is busy, so a check riding on it
// could come late exactly when the server is loaded. Here every watched stream
// is checked every period (a tenth of the timeout, within [10 ms, 1 s]), so a
// stuck write is cancelled within timeout + period. Cost: O(streams) a period,
// with no world's lock taken.
//
// Thread-safe.

#ifndef XFORM_SERVER_SERVICE_WRITE_WATCHDOG_H_
#define XFORM_SERVER_SERVICE_WRITE_WATCHDOG_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/periodic_thread.h"

namespace xform::server {

class WriteWatchdog {
 public:
  // What it watches: a stream that knows when its write started.
  class Stream {
   public:
    virtual ~Stream() = default;
    // Cancels the stream if its write has been outstanding past `timeout`.
    virtual void CancelIfStuck(absl::Time now, absl::Duration timeout) = 0;
  };

  explicit WriteWatchdog(absl::Duration timeout);
  WriteWatchdog(const WriteWatchdog&) = delete;
  WriteWatchdog& operator=(const WriteWatchdog&) = delete;
  ~WriteWatchdog();

  absl::Duration timeout() const { return timeout_; }
  absl::Duration period() const { return period_; }

  // Watches `stream` for as long as it lives: O(1), and it is dropped on the
  // first check after it goes.
  void Watch(std::weak_ptr<Stream> stream);

 private:
  // Checks every watched stream; returns when to check again.
  absl::Time CheckAll();

  const absl::Duration timeout_;
  const absl::Duration period_;
  absl::Mutex mu_;
  std::vector<std::weak_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  PeriodicThread thread_;  // Last: it checks as soon as it is made.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_WRITE_WATCHDOG_H_
