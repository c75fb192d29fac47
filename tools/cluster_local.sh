#!/usr/bin/env bash
# A three-node xform cluster on this machine, as docs/cluster.md describes
# one: three nats-server processes in one JetStream cluster (TLS with a CA
# made here, a client token, a route password), and three xformd nodes on
# them, node0 driving the demo worlds. Prints how to reach it and runs until
# Ctrl-C (then stops everything and removes its files).
#
#   tools/cluster_local.sh [--build=DIR] [--port=P] [--nats_port=N] [--smoke]
#       [--empty]
#
# Nodes listen on 127.0.0.1:P, P+1, P+2 (default 50051); NATS clients on N,
# N+1, N+2 (default 4222), routes on N+1000.... --smoke brings it up, shows
# `xformctl nodes list` and a few frames of the demo world read on node2 (a
# replica), kills node0 with SIGKILL, checks the demo world is written on
# another node and that ListNodes says so, then stops: CI runs it so.
# --empty starts no demo worlds (up in seconds, for tests that bring their
# own: tests/python/client_test.py).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
port=50051
nats_port=4222
smoke=false
demo=true
for arg in "$@"; do
  case $arg in
    --build=*) build=${arg#*=} ;;
    --port=*) port=${arg#*=} ;;
    --nats_port=*) nats_port=${arg#*=} ;;
    --smoke) smoke=true ;;
    --empty) demo=false ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
xformd=$build/server/xformd
xformctl=$build/tools/xformctl
for binary in "$xformd" "$xformctl"; do
  [[ -x $binary ]] || { echo "no $binary: build it first (README)" >&2; exit 1; }
done
command -v nats-server > /dev/null || { echo "no nats-server: bash .ci/setup installs it" >&2; exit 1; }

dir=$(mktemp -d -t xform-cluster.XXXXXX)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$dir"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# Secrets: a CA, one certificate for the NATS servers (127.0.0.1 and
# localhost), the client token (xformd reads it from a file) and the
# route password.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=xform local CA" \
  -keyout "$dir/ca.key" -out "$dir/ca.pem" 2> /dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=nats" \
  -keyout "$dir/nats.key" -out "$dir/nats.csr" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' > "$dir/san"
openssl x509 -req -in "$dir/nats.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 2 -extfile "$dir/san" -out "$dir/nats.pem" 2> /dev/null
openssl rand -hex 24 > "$dir/token"
route_password=$(openssl rand -hex 24)
chmod 600 "$dir"/*.key "$dir/token"

urls=()
for i in 0 1 2; do
  routes=()
  for j in 0 1 2; do
    [[ $i == "$j" ]] || routes+=("\"nats-route://route:$route_password@127.0.0.1:$((nats_port + 1000 + j))\"")
  done
  cat > "$dir/nats$i.conf" << CONF
server_name: nats$i
listen: 127.0.0.1:$((nats_port + i))
authorization { token: "$(cat "$dir/token")" }
tls { cert_file: "$dir/nats.pem", key_file: "$dir/nats.key", ca_file: "$dir/ca.pem" }
jetstream { store_dir: "$dir/store$i" }
cluster {
  name: xform-local
  listen: 127.0.0.1:$((nats_port + 1000 + i))
  authorization { user: route, password: "$route_password" }
  tls { cert_file: "$dir/nats.pem", key_file: "$dir/nats.key", ca_file: "$dir/ca.pem" }
  routes: [$(IFS=,; echo "${routes[*]}")]
}
CONF
  chmod 600 "$dir/nats$i.conf"
  nats-server -c "$dir/nats$i.conf" > "$dir/nats$i.log" 2>&1 &
  pids+=($!)
  urls+=("tls://127.0.0.1:$((nats_port + i))")
done

addresses=()
for i in 0 1 2; do
  # Each node's own NATS server first.
  own=("${urls[@]:i}" "${urls[@]:0:i}")
  flags=(--listen="127.0.0.1:$((port + i))" --node_name="node$i"
    --cluster="$(IFS=,; echo "${own[*]}")" --cluster_ca_file="$dir/ca.pem"
    --cluster_token_file="$dir/token")
  [[ $i == 0 ]] && $demo && flags+=(--demo)
  "$xformd" "${flags[@]}" > "$dir/node$i.log" 2>&1 &
  pids+=($!)
  addresses+=("127.0.0.1:$((port + i))")
done
all=$(IFS=,; echo "${addresses[*]}")

# Up when every node answers and node0 has made the demo world.
up_by=$((SECONDS + 90))
until { ! $demo || "$xformctl" --server="${addresses[2]}" worlds info demo > /dev/null 2>&1; } &&
  "$xformctl" --server="${addresses[1]}" nodes list 2> /dev/null | grep -q node2; do
  if ((SECONDS > up_by)); then
    tail -n 20 "$dir"/node*.log "$dir"/nats*.log >&2
    echo "FAIL: the cluster did not come up in 90 s" >&2
    exit 1
  fi
  sleep 0.2
done

cat << EOF
xform cluster up: nodes $all, NATS ${urls[*]} (files in $dir)
  $xformctl --server=$all nodes list
  $xformctl --server=$all watch demo        # from any node
  $xformctl --server=$all nodes drain node0  # its worlds move to others
EOF
"$xformctl" --server="$all" nodes list

if ! $smoke; then
  echo "Ctrl-C stops the cluster."
  wait "${pids[@]}"
  exit 0
fi

echo "+ the demo world on node2, a replica"
"$xformctl" --server="${addresses[2]}" watch demo --frames=30 | tail -n 2
echo "+ kill -9 node0, the demo world's writer"
kill -KILL "${pids[3]}"
others="${addresses[1]},${addresses[2]}"
moved_by=$((SECONDS + 30))
until "$xformctl" --server="$others" worlds info demo 2> /dev/null |
  grep -Eq "written at node[12]"; do
  if ((SECONDS > moved_by)); then
    "$xformctl" --server="${addresses[1]}" worlds info demo >&2 || true
    tail -n 20 "$dir"/node*.log >&2
    echo "FAIL: no node took the demo world's writes in 30 s" >&2
    exit 1
  fi
  sleep 0.2
done
"$xformctl" --server="$others" worlds create smoke --mode=driven
"$xformctl" --server="$others" entities create smoke 1 --position=1,2,3 --end_frame
"$xformctl" --server="$others" worlds info demo
"$xformctl" --server="${addresses[2]}" entities get smoke 1
echo "smoke: OK"
