// Copyright 2026 The xform Authors.
//
// A share of a run's stream subscribers in a process of their own, as a
// deployment's subscribers are (renderers, tools: each its own process, with
// its own gRPC readers and its own allocator). xform-load's subscribers
// otherwise share one process: every Mirror's messages are read by that
// process's two gRPC pollers, which docs/benchmarks.md ("Where the tail
// is") had left as a suspect in the tail at 64 subscribers.
//
// The parent runs xform-load again with --subscriber_process (its own flags
// after it, so the child reaches xformd as it does), and the two talk over
// the child's stdin and stdout, a line each:
//   child:  "ready"        every subscriber holds the world
//   parent: "start"        record from now
//   parent: "stop"         stop recording
//   child:  [Received...]  what each received, as JSON; then it exits.

#ifndef XFORM_TOOLS_LOAD_SUBSCRIBER_PROCESS_H_
#define XFORM_TOOLS_LOAD_SUBSCRIBER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/load/measure.h"
#include "tools/load/transports.h"
#include "xform/client.h"
#include "xform/mirror.h"

namespace xform::load {

// The parent's side: one child process.
class SubscriberProcess {
 public:
  // Starts `command` (argv; its first, a path to an executable) with pipes
  // on its stdin and stdout.
  static absl::StatusOr<std::unique_ptr<SubscriberProcess>> Start(
      const std::vector<std::string>& command);
  // Kills the child if it is still running, and reaps it.
  ~SubscriberProcess();

  // Whether the child has said "ready"; without waiting. UNAVAILABLE once
  // it has exited without saying so.
  absl::StatusOr<bool> Ready();
  void StartMeasuring();
  // Says "stop" and waits (at most 60 s) for what each subscriber received.
  absl::StatusOr<std::vector<Received>> Stop();

 private:
  SubscriberProcess(pid_t pid, int to_child, int from_child)
      : pid_(pid), to_child_(to_child), from_child_(from_child) {}
  void Say(const char* line);

  pid_t pid_;
  int to_child_;
  int from_child_;
  std::string heard_;  // What the child has written so far.
};

// The child's side, all of it: `subscribers` stream subscribers of `world`
// (as StartStreamSubscriber; the run's subscribers first, first + stride,
// ..., which place their cameras), then the exchange above on stdin and
// stdout. The process's exit code.
int ServeSubscriberProcess(const ClientOptions& options,
                           const std::string& world,
                           MirrorOptions::Encoding encoding, float precision,
                           double max_rate_hz, int subscribers, int first,
                           int stride, const std::optional<Camera>& camera);

}  // namespace xform::load

#endif  // XFORM_TOOLS_LOAD_SUBSCRIBER_PROCESS_H_
