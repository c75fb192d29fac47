// Copyright 2026 The xform Authors.

#include "tools/process_stats.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace xform::tools {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(
      values.size() - 1,
      static_cast<size_t>(p * static_cast<double>(values.size())))];
}

double CpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string field;
  // utime and stime are fields 14 and 15; the command (field 2) of the
  // processes measured here has no spaces.
  for (int k = 1; k <= 13; ++k) stat >> field;
  long utime = 0, stime = 0;
  stat >> utime >> stime;
  return static_cast<double>(utime + stime) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

double RssMegabytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      return std::atof(line.c_str() + 6) / 1024.0;
    }
  }
  return 0;
}

}  // namespace xform::tools
