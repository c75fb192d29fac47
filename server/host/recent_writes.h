// Copyright 2026 The xform Authors.
//
// RecentWrites: the write ids (ApplyRequest.write_id) of the batches a world
// applied last, so that a batch sent again (its answer was lost, its node
// failed over) is applied once. A batch found here is answered with the
// frame it landed in, once the first one's log has acknowledged it (or
// with why it never will be).
//
// The same ids come back from the log at recovery and, in a cluster, on
// every node that follows the world, so whichever node writes the world
// next knows them.
//
// Costs: Find and Add O(1); at most `capacity` ids, the oldest forgotten
// first. Not thread-safe: the world's writer lock guards it.

#ifndef XFORM_SERVER_HOST_RECENT_WRITES_H_
#define XFORM_SERVER_HOST_RECENT_WRITES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/host/world_log.h"

namespace xform::server {

// Whether a batch's log acknowledged it: settled once.
class WriteOutcome {
 public:
  // One already acknowledged (replayed, followed, or logged nowhere).
  static std::shared_ptr<WriteOutcome> Settled();

  void Settle(absl::Status status);
  // Waits until settled; what it settled with.
  absl::Status Wait();

 private:
  absl::Mutex mu_;
  bool settled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class RecentWrites {
 public:
  explicit RecentWrites(size_t capacity = kRecentWrites)
      : capacity_(capacity) {}

  struct Write {
    uint64_t frame = 0;  // The frame the batch landed in.
    std::shared_ptr<WriteOutcome> outcome;
  };
  // The batch with this id, if applied lately.
  const Write* Find(absl::string_view id) const;
  // Remembers a batch applied (an empty id: none).
  void Add(absl::string_view id, const Write& write);
  void Clear();
  size_t size() const { return writes_.size(); }
  // Each id and its frame, oldest first.
  void ForEach(absl::FunctionRef<void(absl::string_view id, uint64_t frame)>
                   visit) const;

 private:
  const size_t capacity_;
  absl::flat_hash_map<std::string, Write> writes_;
  std::deque<std::string> order_;  // Oldest first.
};

}  // namespace xform::server

#endif  // XFORM_SERVER_HOST_RECENT_WRITES_H_
