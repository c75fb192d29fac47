// Copyright 2026 The xform Authors.
//
// One-line server logs to stderr: "2026-11-22T05:50:01.123Z I message".
// Debian's Abseil predates absl/log; this is all xformd needs of it.

#ifndef XFORM_SERVER_LOG_H_
#define XFORM_SERVER_LOG_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// Lets one line a second through and counts the rest, so that a caller
// refused thousands of times a second costs the log a line a second, and
// the line says how many it stands for (as Redis's ACL LOG counts repeats).
class LogThrottle {
 public:
  template <typename... Args>
  void Log(char severity, const Args&... args) {
    const absl::Time now = absl::Now();
    uint64_t held;
    {
      absl::MutexLock lock(&mu_);
      if (now < next_) {
        ++held_;
        return;
      }
      next_ = now + absl::Seconds(1);
      held = held_;
      held_ = 0;
    }
    if (held == 0) {
      server::Log(severity, args...);
    } else {
      server::Log(severity, args..., " (and ", held,
                  " more since the last such line)");
    }
  }

 private:
  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_LOG_H_
