// Copyright 2026 The xform Authors.
//
// One-line server logs to stderr: "2026-11-22T05:50:01.123Z I message".
// Debian's Abseil predates absl/log; this is all xformd needs of it.

#ifndef XFORM_SERVER_LOG_H_
#define XFORM_SERVER_LOG_H_

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace xform::server {

template <typename... Args>
void Log(char severity, const Args&... args) {
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                    absl::UTCTimeZone()),
                   " ", std::string(1, severity), " ", args..., "\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace xform::server

#endif  // XFORM_SERVER_LOG_H_
