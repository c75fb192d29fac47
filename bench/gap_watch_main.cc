// Copyright 2026 The xform Authors.
//
// xform_gap_watch: a GapWatch (bench_support.h) in a process of its own, for
// the process benchmarks (GapWatchProcess). It answers lines on stdin:
//   ready?   "ready" once the watched world streams
//   reset    "ok", the maxima cleared
//   report   "<gap ms> <published gap ms> <longest write ms>"
// and ends at the end of its input.
//
//   xform_gap_watch --server=127.0.0.1:50094

#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_support.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "xformd's address");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  xform::bench::GapWatch watch(absl::GetFlag(FLAGS_server));
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "ready?") {
      std::printf("ready\n");
    } else if (line == "reset") {
      watch.Reset();
      std::printf("ok\n");
    } else if (line == "report") {
      std::printf("%.1f %.1f %.1f\n", watch.MaxGapMs(),
                  watch.MaxPublishedGapMs(), watch.MaxWriteMs());
    } else {
      std::printf("?\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
