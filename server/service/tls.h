// Copyright 2026 The xform Authors.
//
// xformd's TLS: server credentials from a certificate chain and key on disk
// (--tls_cert, --tls_key), and for mutual TLS a CA bundle that client
// certificates must chain to (--tls_client_ca; then clients must present
// one). The files are re-read every second by gRPC's own
// FileWatcherCertificateProvider, so a renewed certificate (replaced on
// disk, with or without a SIGHUP) is served to new connections within a
// second, and open connections and streams carry on. Files that fail to
// load on a re-read leave the last good ones in use.

#ifndef XFORM_SERVER_SERVICE_TLS_H_
#define XFORM_SERVER_SERVICE_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace xform::server {

struct TlsFiles {
  std::string certificate_chain;  // PEM
  std::string private_key;        // PEM
  std::string client_ca;          // PEM; empty: no client certificates.
};

// Checks the files now, so that a mistake is a startup error naming the
// file (readable PEM, a key that matches the certificate), and returns the
// watching credentials.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const TlsFiles& files);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_TLS_H_
