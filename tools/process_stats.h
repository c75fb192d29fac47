// Copyright 2026 The xform Authors.
//
// What the measuring tools (xform-load, the benchmarks) read about a run:
// latency percentiles and another process's CPU time and memory, from /proc.
// Linux only; internal to the tools, not installed.

#ifndef XFORM_TOOLS_PROCESS_STATS_H_
#define XFORM_TOOLS_PROCESS_STATS_H_

#include <sys/types.h>

#include <vector>

namespace xform::tools {

// The value at fraction `p` (0..1) of `values` sorted; 0 when empty.
double Percentile(std::vector<double> values, double p);

// User + system CPU time `pid` has used so far, in seconds; 0 if unreadable.
double CpuSeconds(pid_t pid);

// `pid`'s resident set size now, in MiB; 0 if unreadable.
double RssMegabytes(pid_t pid);

}  // namespace xform::tools

#endif  // XFORM_TOOLS_PROCESS_STATS_H_
