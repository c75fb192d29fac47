#!/usr/bin/env bash
# The secrets of docker/compose.cluster.yaml and docker/k8s/: a CA, a
# certificate for the NATS servers (and their routes), the NATS client
# token xformd presents, the route password, and the NATS configuration
# that uses them. Written to DIR (default docker/cluster-secrets, which git
# ignores); never commit them.
#
#   docker/cluster_secrets.sh [DIR]
# then
#   podman-compose -f docker/compose.cluster.yaml up --build
# or, for Kubernetes, the same files as a Secret (docker/k8s/xform-cluster.yaml's
# header says how).
set -euo pipefail
dir=${1:-$(dirname "$0")/cluster-secrets}
mkdir -p "$dir"
cd "$dir"
umask 077
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=xform cluster CA" \
  -keyout ca.key -out ca.pem 2> /dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=nats" \
  -keyout nats.key -out nats.csr 2> /dev/null
# The names the NATS servers go by: compose's service names, the
# StatefulSet's pods behind its headless service, and this machine.
san="DNS:nats0,DNS:nats1,DNS:nats2,DNS:localhost,IP:127.0.0.1"
for i in 0 1 2; do san="$san,DNS:nats-$i.nats,DNS:nats-$i.nats.xform.svc.cluster.local"; done
san="$san,DNS:nats,DNS:nats.xform.svc.cluster.local"
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > san.ext
openssl x509 -req -in nats.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
  -days 365 -extfile san.ext -out nats.pem 2> /dev/null
rm -f nats.csr san.ext ca.srl
openssl rand -hex 32 > nats_token
route_password=$(openssl rand -hex 32)
# The NATS configuration, one for every server of a deployment: its name
# comes from the environment ($NATS_NAME, as the compose file and the
# StatefulSet set it); every server lists every route (its own it ignores).
nats_conf() {  # nats_conf HOST_PATTERN: routes to HOST_PATTERN with i = 0..2
  local routes=()
  for i in 0 1 2; do
    routes+=("\"nats-route://route:$route_password@${1//\{i\}/$i}:6222\"")
  done
  cat << CONF
server_name: \$NATS_NAME
listen: 0.0.0.0:4222
http: 0.0.0.0:8222
authorization { token: "$(cat nats_token)" }
tls { cert_file: "/run/secrets/nats.pem", key_file: "/run/secrets/nats.key", ca_file: "/run/secrets/ca.pem" }
jetstream { store_dir: "/var/lib/nats/jetstream" }
cluster {
  name: xform
  listen: 0.0.0.0:6222
  authorization { user: route, password: "$route_password" }
  tls { cert_file: "/run/secrets/nats.pem", key_file: "/run/secrets/nats.key", ca_file: "/run/secrets/ca.pem" }
  routes: [$(IFS=,; echo "${routes[*]}")]
}
CONF
}
nats_conf 'nats{i}' > nats-compose.conf
nats_conf 'nats-{i}.nats' > nats-k8s.conf
# Readable by the containers' users (nats and xform), not by others: the
# directory is 0700.
chmod 0700 .
chmod 0644 ./*
echo "secrets in $(pwd)"
