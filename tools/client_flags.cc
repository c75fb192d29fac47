// Copyright 2026 The xform Authors.

#include "tools/client_flags.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, token_file, "",
          "File holding the bearer token (a principal of xformd's "
          "--auth_file) on its first line, sent as \"authorization: Bearer "
          "<token>\"");
ABSL_FLAG(std::string, token, "",
          "The bearer token itself. Any local user can read it from "
          "/proc/PID/cmdline: prefer --token_file");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of root certificates: talk TLS, verifying the server "
          "with these");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file of this client's certificate chain, for mutual TLS "
          "(with --tls_key)");
ABSL_FLAG(std::string, tls_key, "",
          "PEM file of this client's private key, for mutual TLS");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name the server's certificate must carry, when it is not the "
          "--server host");

ABSL_FLAG(std::string, encoding, "raw",
          "How a subscription's matrices come: raw (12 floats) or compact "
          "(quantized, a few bytes; see --precision)");
ABSL_FLAG(float, precision, 0,
          "compact encoding: positions to within this (0: the server's "
          "default, 0.001)");

namespace xform::tools {

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --", flag, "=", path));
  }
  std::stringstream pem;
  pem << file.rdbuf();
  return pem.str();
}

// --token_file's token, else --token's.
absl::StatusOr<std::string> TokenFlags() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) return absl::GetFlag(FLAGS_token);
  if (!absl::GetFlag(FLAGS_token).empty()) {
    return absl::InvalidArgumentError("--token and --token_file: give one");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --token_file=", path));
  }
  // Its first line, as `xformctl auth hash-token < FILE` hashes it.
  std::string token;
  std::getline(file, token);
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, " is empty"));
  }
  return token;
}

}  // namespace

absl::Status ApplyClientFlags(ClientOptions* options) {
  absl::StatusOr<std::string> token = TokenFlags();
  if (!token.ok()) return token.status();
  options->token = *std::move(token);
  options->tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_tls_key);
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  struct File {
    const char* flag;
    std::string path;
    std::string* pem;
  };
  for (const File& f :
       {File{"tls_ca", absl::GetFlag(FLAGS_tls_ca),
             &options->tls_root_certificates_pem},
        File{"tls_cert", cert, &options->tls_certificate_chain_pem},
        File{"tls_key", key, &options->tls_private_key_pem}}) {
    if (f.path.empty()) continue;
    absl::StatusOr<std::string> pem = ReadPem(f.path, f.flag);
    if (!pem.ok()) return pem.status();
    *f.pem = *std::move(pem);
    options->tls = true;
  }
  if (!options->tls_server_name.empty()) options->tls = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MirrorOptions::Encoding>> EncodingFlags() {
  std::vector<MirrorOptions::Encoding> encodings;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_encoding), ',')) {
    if (name == "raw") {
      encodings.push_back(MirrorOptions::Encoding::kRaw);
    } else if (name == "compact") {
      encodings.push_back(MirrorOptions::Encoding::kCompact);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--encoding takes raw or compact, not '", name, "'"));
    }
  }
  return encodings;
}

float PrecisionFlag() { return absl::GetFlag(FLAGS_precision); }

}  // namespace xform::tools
