// Copyright 2026 The xform Authors.
//
// Redirects: a write sent to a node of a cluster that does not write the
// world is refused FAILED_PRECONDITION, and the status carries the node
// that does (its name and address) as a payload, which the service sends
// as the trailing metadata xform-owner-node and xform-owner-address
// (proto/xform/v1/xform.proto, "Redirects"); the client library goes
// there. While no node writes it, its writes are UNAVAILABLE, marked to be
// tried again shortly (TryAgainShortly).

#ifndef XFORM_SERVER_CLUSTER_VIEW_REDIRECT_H_
#define XFORM_SERVER_CLUSTER_VIEW_REDIRECT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/base/log.h"

namespace xform::server {

inline constexpr absl::string_view kRedirectPayload =
    "type.xform.dev/xform.Redirect";
inline constexpr char kOwnerNodeMetadata[] = "xform-owner-node";
inline constexpr char kOwnerAddressMetadata[] = "xform-owner-address";

struct Redirect {
  std::string node;
  std::string address;
};

// `what` (a world's writes, a drain) is done at `to`, not here.
inline absl::Status RedirectTo(absl::string_view what, const Redirect& to) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat(what, " are taken at node ", Quoted(to.node), " (",
                   to.address, "), not here"));
  status.SetPayload(kRedirectPayload,
                    absl::Cord(absl::StrCat(to.node, "\n", to.address)));
  return status;
}

// UNAVAILABLE for a while that the client is told to wait out (a world
// whose writer is being replaced): with the trailing metadata
// xform-try-again, so that a client retries it even at a single address.
inline constexpr absl::string_view kTryAgainPayload =
    "type.xform.dev/xform.TryAgain";
inline constexpr char kTryAgainMetadata[] = "xform-try-again";

inline absl::Status TryAgainShortly(absl::string_view why) {
  absl::Status status =
      absl::UnavailableError(absl::StrCat(why, "; try again shortly"));
  status.SetPayload(kTryAgainPayload, absl::Cord("1"));
  return status;
}

inline bool SaysTryAgain(const absl::Status& status) {
  return status.GetPayload(kTryAgainPayload).has_value();
}

inline std::optional<Redirect> RedirectOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kRedirectPayload);
  if (!payload) return std::nullopt;
  const std::string text(*payload);
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  return Redirect{text.substr(0, newline), text.substr(newline + 1)};
}

}  // namespace xform::server

#endif  // XFORM_SERVER_CLUSTER_VIEW_REDIRECT_H_
