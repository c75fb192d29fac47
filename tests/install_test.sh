#!/usr/bin/env bash
# Installs the build into a scratch prefix, builds tests/outside_project
# against it with find_package(xform), and runs it against the installed
# xformd.
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$scratch/prefix" > /dev/null
cmake -S "$source_dir/tests/outside_project" -B "$scratch/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" > /dev/null
cmake --build "$scratch/build" > /dev/null

port=$((20000 + RANDOM % 20000))
"$scratch/prefix/bin/xformd" --listen="127.0.0.1:$port" 2> "$scratch/xformd.log" &
server_pid=$!
"$scratch/build/outside" "127.0.0.1:$port"

# The Python package, where the install put it for Debian's python3.
python_dir=$(find "$scratch/prefix" -type d -name dist-packages | head -n 1)
if [[ -n "$python_dir" && -x /usr/bin/python3 ]]; then
  PYTHONPATH="$python_dir" /usr/bin/python3 - "127.0.0.1:$port" << 'PY'
import sys
import xform
client = xform.Client(sys.argv[1])
client.create_world("installed", mode="driven")
frame = client.apply("installed", [xform.create([1, 2], [0, 1])], end_frame=True)
mirror = xform.Mirror(client, "installed")
assert mirror.wait_for_frame(frame, 10), mirror.status
assert sorted(int(e) for e in mirror.view().ids) == [1, 2]
mirror.close()
print("the installed Python package (%s) mirrors a world" % xform.__file__)
PY
fi
