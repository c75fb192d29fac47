// Copyright 2026 The xform Authors.
//
// One-line server logs to stderr: "2026-11-22T05:50:01.123Z I message".
// Debian's Abseil predates absl/log; this is all xformd needs of it.

#ifndef XFORM_SERVER_BASE_LOG_H_
#define XFORM_SERVER_BASE_LOG_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/clock.h"
#include "server/base/token_bucket.h"

namespace xform::server {

// `text` as one log line may hold it: C0 control characters (newlines
// among them), DEL and the backslash as \xNN, \\; and the UTF-8 forms of
// the C1 controls and the Unicode line and paragraph separators as \u{N},
// since some terminals and log viewers act on those too. Other UTF-8 stays.
// Every line Log writes goes through it, because lines carry what clients
// sent (world names, client ids, peer and certificate names, in statuses
// too): a name holding a newline could otherwise write a line of its own,
// "world 'secret' deleted by principal 'ops'" say.
inline std::string EscapeForLog(absl::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto next = [&](size_t k) {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
    };
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else if (byte == '\\') {
      out += "\\\\";
    } else if (byte == 0xc2 && next(1) >= 0x80 && next(1) <= 0x9f) {
      absl::StrAppend(&out, "\\u{", absl::Hex(next(1)), "}");  // C1.
      ++i;
    } else if (byte == 0xe2 && next(1) == 0x80 &&
               (next(2) == 0xa8 || next(2) == 0xa9)) {
      absl::StrAppend(&out, "\\u{", absl::Hex(0x2000 | (next(2) & 0x3f)), "}");
      i += 2;
    } else {
      out += static_cast<char>(byte);
    }
  }
  return out;
}

// A client-given name as statuses and log lines quote it: cut to 64
// characters, so an 8 KB name cannot push a status past gRPC's metadata
// limit.
inline std::string Quoted(absl::string_view name) {
  constexpr size_t kShown = 64;
  if (name.size() <= kShown) return absl::StrCat("'", name, "'");
  return absl::StrCat("'", name.substr(0, kShown), "...' (", name.size(),
                      " characters)");
}

// Writes "<time> <severity> <args...>" as one line, escaped (EscapeForLog).
template <typename... Args>
void Log(char severity, const Args&... args) {
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                    absl::UTCTimeZone()),
                   " ", std::string(1, severity), " ",
                   EscapeForLog(absl::StrCat(args...)), "\n");
  std::fputs(line.c_str(), stderr);
}

// Lets one line a second through and counts the rest, so that a caller
// refused thousands of times a second costs the log a line a second, and
// the line says how many it stands for (as Redis's ACL LOG counts repeats).
// Every log line the server paces is paced by one of these.
class LogThrottle {
 public:
  explicit LogThrottle(const Clock& clock = Clock::Real()) : clock_(clock) {}

  template <typename... Args>
  void Log(char severity, const Args&... args) {
    const absl::Time now = clock_.Now();
    uint64_t held;
    {
      absl::MutexLock lock(&mu_);
      if (!lines_.TryTake(/*rate=*/1, 1, now)) {
        ++held_;
        return;
      }
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
  const Clock& clock_;
  absl::Mutex mu_;
  TokenBucket lines_ ABSL_GUARDED_BY(mu_);  // A line a second.
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_BASE_LOG_H_
