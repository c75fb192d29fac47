// Copyright 2026 The xform Authors.
//
// The flags every tool that talks to xformd takes to reach it securely
// (--token_file or --token, --tls_ca, --tls_cert, --tls_key,
// --tls_server_name), in one
// place, and their reading into ClientOptions; and the flags of every tool
// that subscribes (--encoding, --precision), read into MirrorOptions.

#ifndef XFORM_TOOLS_CLIENT_FLAGS_H_
#define XFORM_TOOLS_CLIENT_FLAGS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xform/client.h"
#include "xform/mirror.h"

namespace xform::tools {

// Fills `options`' token and TLS fields from the flags, reading the token
// and PEM files they name; INVALID_ARGUMENT naming a flag whose file is
// unreadable (or, for --token_file, empty), --token with --token_file, or
// --tls_cert without --tls_key.
absl::Status ApplyClientFlags(ClientOptions* options);

// The encodings --encoding names (raw or compact, or a list a,b for a
// tool that compares them), or INVALID_ARGUMENT; and --precision.
absl::StatusOr<std::vector<MirrorOptions::Encoding>> EncodingFlags();
float PrecisionFlag();

}  // namespace xform::tools

#endif  // XFORM_TOOLS_CLIENT_FLAGS_H_
