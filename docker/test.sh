#!/usr/bin/env bash
# Builds the xformd image from docker/Dockerfile, runs it, waits for its
# HEALTHCHECK to pass, drives it with xformctl from the same image, stops it
# with SIGTERM and checks that it stopped cleanly (exit 0, its streams ended).
#
# Uses docker where an engine answers; otherwise Debian's podman, with the
# Debian base images made locally by debootstrap (no registry needed).
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
image=xform:test
name=xform-test-$$
port=$((30000 + RANDOM % 20000))
web_port=$((port + 1))
fox_port=$((port + 2))

if docker info > /dev/null 2>&1; then
  engine=(docker)
  build_flags=()
  run_flags=(-p "127.0.0.1:$port:$port" -p "127.0.0.1:$web_port:$web_port"
    -p "127.0.0.1:$fox_port:$fox_port")
else
  missing=()
  for package in podman buildah runc debootstrap; do
    dpkg-query -W -f='${Status}' "$package" 2> /dev/null | grep -q "ok installed" ||
      missing+=("$package")
  done
  if ((${#missing[@]})); then
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
  fi
  engine=($sudo podman)
  build_flags=(--pull=never --network=host --format docker)
  run_flags=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096
    --network=host)
  if ! "${engine[@]}" image exists debian:bookworm; then
    echo "making the debian:bookworm base image with debootstrap"
    root=$(mktemp -d)
    $sudo debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > /dev/null
    $sudo tar -C "$root" -c . | "${engine[@]}" import - debian:bookworm
    $sudo rm -rf "$root"
  fi
  # minbase is already slim: the same root serves as bookworm-slim.
  "${engine[@]}" image exists debian:bookworm-slim ||
    "${engine[@]}" tag debian:bookworm debian:bookworm-slim
fi

# The page's npm ci inside the build trusts what this machine trusts (a
# proxy's CA, say).
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[[ -s "$ca_bundle" ]] && build_flags+=(--secret "id=ca_bundle,src=$ca_bundle")

cleanup() { "${engine[@]}" rm -f "$name" "$name-web" > /dev/null 2>&1 || true; }
trap cleanup EXIT

echo "building $image"
build_log=$(mktemp)
if ! "${engine[@]}" build "${build_flags[@]}" -f docker/Dockerfile -t "$image" . \
  > "$build_log" 2>&1; then
  tail -n 50 "$build_log"
  echo "FAIL: the image did not build"
  exit 1
fi
rm -f "$build_log"

# The image runs a cluster's NATS servers too (docker/compose.cluster.yaml).
"${engine[@]}" run --rm "${run_flags[@]}" --entrypoint /usr/sbin/nats-server "$image" --version ||
  { echo "FAIL: the image has no nats-server"; exit 1; }

echo "running $name on port $port"
"${engine[@]}" run -d --name "$name" "${run_flags[@]}" \
  -e XFORM_PROBE_ADDR="127.0.0.1:$port" "$image" \
  --listen="0.0.0.0:$port" --demo > /dev/null 2>&1

# The image's HEALTHCHECK, run as the engine would run it.
wait_healthy() {
  for _ in $(seq 1 60); do
    if "${engine[@]}" healthcheck run "$name" > /dev/null 2>&1 ||
      "${engine[@]}" exec "$name" /usr/local/bin/xform_health_probe > /dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  echo "FAIL: never healthy"; "${engine[@]}" logs "$name"; exit 1
}
wait_healthy
echo "healthy"

uid=$("${engine[@]}" exec "$name" id -u)
[[ "$uid" != 0 ]] || { echo "FAIL: xformd runs as root"; exit 1; }

ctl=("${engine[@]}" run --rm "${run_flags[@]}" --entrypoint /usr/local/bin/xformctl
  "$image" --server="127.0.0.1:$port")
if [[ "${engine[0]}" == docker ]]; then
  ctl=(docker run --rm --network "container:$name" --entrypoint
    /usr/local/bin/xformctl "$image" --server="127.0.0.1:$port")
fi
"${ctl[@]}" worlds list 2> /dev/null | grep '^demo ' ||
  { echo "FAIL: no demo world"; exit 1; }
"${ctl[@]}" worlds create probe --mode=driven > /dev/null 2>&1
"${ctl[@]}" entities create probe 1 --position=1,2,3 --end_frame > /dev/null 2>&1
"${ctl[@]}" entities get probe 1 --json 2> /dev/null | grep -q '"world":\[1.0,0.0,0.0,1.0' ||
  { echo "FAIL: entity did not read back"; exit 1; }
"${ctl[@]}" watch demo --frames=5 2> /dev/null | tail -n 2

# xform-web from the image, beside xformd: the page, the world list and the
# Foxglove endpoint.
web_flags=("${run_flags[@]}")
[[ "${engine[0]}" == docker ]] && web_flags=(--network "container:$name")
"${engine[@]}" run -d --name "$name-web" "${web_flags[@]}" \
  --entrypoint /usr/local/bin/xform-web "$image" \
  --server="127.0.0.1:$port" --listen="127.0.0.1:$web_port" \
  --foxglove_listen="127.0.0.1:$fox_port" > /dev/null
http_get() {  # PATH [PORT]: the response, over bash's /dev/tcp (no curl)
  exec 3<> "/dev/tcp/127.0.0.1/${2:-$web_port}" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}
for _ in $(seq 1 40); do
  worlds=$(http_get /api/worlds 2> /dev/null || true)
  grep -q '"name":"solar"' <<< "$worlds" && break
  sleep 0.5
done
grep -q '"name":"solar"' <<< "$worlds" ||
  { echo "FAIL: xform-web lists no solar world: $worlds"; "${engine[@]}" logs "$name-web"; exit 1; }
http_get / | grep -q '<title>xform-web</title>' || { echo "FAIL: xform-web serves no page"; exit 1; }
http_get /app.js | head -c 200 | grep -q '200 OK' || { echo "FAIL: no app.js"; exit 1; }
http_get / "$fox_port" | grep -q 'foxglove.websocket.v1' ||
  { echo "FAIL: no Foxglove endpoint"; exit 1; }
"${engine[@]}" rm -f "$name-web" > /dev/null 2>&1
echo "xform-web served the page, listed the worlds and answered for Foxglove"

# The image keeps its worlds in its volume (/var/lib/xform): an
# acknowledged write survives kill -9 and a restart.
"${ctl[@]}" entities set probe 1 --position=4,5,6 --end_frame > /dev/null 2>&1
echo "kill -9 and restart"
"${engine[@]}" kill -s KILL "$name" > /dev/null 2>&1
"${engine[@]}" start "$name" > /dev/null 2>&1
wait_healthy
"${ctl[@]}" entities get probe 1 --json 2> /dev/null | grep -q '"world":\[1.0,0.0,0.0,4.0' ||
  { echo "FAIL: the world did not survive kill -9"; "${engine[@]}" logs "$name"; exit 1; }
echo "recovered after kill -9"

echo "stopping"
"${engine[@]}" stop -t 20 "$name" > /dev/null 2>&1
code=$("${engine[@]}" inspect --format '{{.State.ExitCode}}' "$name")
logs=$("${engine[@]}" logs "$name" 2>&1)
[[ "$code" == 0 ]] || { echo "FAIL: exit code $code"; echo "$logs"; exit 1; }
grep -q "shutting down" <<< "$logs" || { echo "FAIL: no graceful shutdown"; echo "$logs"; exit 1; }
echo "PASS: built, healthy, served a client and xform-web, kept its worlds through kill -9, stopped cleanly (exit 0)"
