// Copyright 2026 The xform Authors.

#include "server/service/tls.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace xform::server {
namespace {

// How often the files are looked at again.
constexpr unsigned int kRefreshSeconds = 1;

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

absl::StatusOr<std::unique_ptr<BIO, BioFree>> Open(const std::string& path,
                                                   const char* flag) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot be read"));
  }
  return bio;
}

absl::StatusOr<std::unique_ptr<X509, X509Free>> FirstCertificate(
    const std::string& path, const char* flag) {
  auto bio = Open(path, flag);
  if (!bio.ok()) return bio.status();
  std::unique_ptr<X509, X509Free> certificate(
      PEM_read_bio_X509(bio->get(), nullptr, nullptr, nullptr));
  if (certificate == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": no PEM certificate in it"));
  }
  return certificate;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const TlsFiles& files) {
  auto certificate = FirstCertificate(files.certificate_chain, "tls_cert");
  if (!certificate.ok()) return certificate.status();
  auto key_bio = Open(files.private_key, "tls_key");
  if (!key_bio.ok()) return key_bio.status();
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio->get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", files.private_key,
                     ": no PEM private key in it (or it needs a passphrase)"));
  }
  if (X509_check_private_key(certificate->get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key=", files.private_key,
        " is not the key of --tls_cert=", files.certificate_chain));
  }
  if (!files.client_ca.empty()) {
    auto ca = FirstCertificate(files.client_ca, "tls_client_ca");
    if (!ca.ok()) return ca.status();
  }
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          files.private_key, files.certificate_chain, files.client_ca,
          kRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace xform::server
