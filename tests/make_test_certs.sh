#!/usr/bin/env bash
# Makes the certificates the TLS tests use, with openssl, into DIR:
#   ca.pem/ca.key          a test CA
#   server.pem/server.key  xformd's, signed by ca, for xformd.test and
#                          127.0.0.1
#   client.pem/client.key  a client's, signed by ca: CN=renderer,O=xform-test
#   expired.pem/.key       a client's, signed by ca, valid only in 2020
#   other-ca.pem/.key      an unrelated CA
#   stranger.pem/.key      a client's, signed by other-ca
#   server2.pem/.key       xformd's renewed certificate, signed by other-ca
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
quiet() { "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; "$@"; exit 1; }; }

ca() {  # name subject
  quiet openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" \
    -out "$1.pem" -days 2 -subj "$2"
}
leaf() {  # name ca subject [extensions]
  quiet openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" \
    -subj "$3"
  printf '%s\n' "${4:-basicConstraints=CA:FALSE}" >"$1.ext"
  quiet openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" \
    -CAcreateserial -out "$1.pem" -days 2 -extfile "$1.ext"
}

ca ca "/O=xform-test/CN=test CA"
ca other-ca "/O=elsewhere/CN=other CA"
server_ext="subjectAltName=DNS:xformd.test,IP:127.0.0.1"
leaf server ca "/O=xform-test/CN=xformd.test" "$server_ext"
leaf server2 other-ca "/O=elsewhere/CN=xformd.test" "$server_ext"
leaf client ca "/O=xform-test/CN=renderer"
leaf stranger other-ca "/O=elsewhere/CN=renderer"

# Expired: signed with `openssl ca`, which takes explicit dates.
mkdir -p ca-db
: >ca-db/index.txt
echo 1000 >ca-db/serial
cat >ca-db/ca.cnf <<CNF
[ca]
default_ca = test
[test]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
default_md = sha256
policy = any
[any]
commonName = supplied
organizationName = optional
CNF
quiet openssl req -newkey rsa:2048 -nodes -keyout expired.key -out expired.csr \
  -subj "/O=xform-test/CN=renderer"
quiet openssl ca -batch -config ca-db/ca.cnf -cert ca.pem -keyfile ca.key \
  -in expired.csr -out expired.pem -notext \
  -startdate 20200101000000Z -enddate 20200102000000Z
