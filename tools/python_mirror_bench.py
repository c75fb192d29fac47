#!/usr/bin/python3
"""What the Python Mirror costs: xformd, xform-load's writer moving --move
of an --entities world at --hz, and one xform.Mirror of it in this
process. Over --seconds it reports the frames and updates a second the
Mirror applied, how far behind the world it is, and this process's CPU
(all its threads: gRPC's and the Mirror's). Not run in CI.

  /usr/bin/python3 tools/python_mirror_bench.py --build=build \\
      [--entities=100000] [--move=1000] [--hz=60] [--encoding=compact] [--seconds=10]
      [--history_seconds=2]
"""

import argparse
import os
import subprocess
import sys
import threading
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--entities", type=int, default=100000)
    parser.add_argument("--move", type=int, default=1000)
    parser.add_argument("--hz", type=float, default=60)
    parser.add_argument("--encoding", default="compact")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--history_seconds", type=float, default=0)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "client/python/gen"))
    import xform

    xformd = subprocess.Popen([os.path.join(args.build, "server/xformd"),
                               "--listen=127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in xformd.stderr:
        if "xformd serving on" in line:
            port = line.split("(port ")[1].split(",")[0]
            break
    threading.Thread(target=lambda: [None for _ in xformd.stderr], daemon=True).start()
    address = f"127.0.0.1:{port}"
    load = subprocess.Popen(
        [os.path.join(args.build, "tools/xform-load"), f"--server={address}",
         "--world=bench", f"--entities={args.entities}", f"--move={args.move}",
         f"--hz={args.hz}", "--subscribers=1", f"--seconds={args.seconds + 60}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = xform.Client(address)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if client.get_world("bench").entities >= args.entities:
                    break
            except xform.XformError:
                pass
            time.sleep(0.2)
        frames = []
        mirror = xform.Mirror(client, "bench", encoding=args.encoding,
                              on_frame=lambda m, f: frames.append(f),
                              history_seconds=args.history_seconds)
        if not mirror.wait_for_sync(60):
            sys.exit(f"no sync: {mirror.status}")
        time.sleep(1)
        frames.clear()
        updates0, world0 = mirror.updates, client.get_world("bench").frame
        cpu0, t0 = time.process_time(), time.monotonic()
        time.sleep(args.seconds)
        cpu, elapsed = time.process_time() - cpu0, time.monotonic() - t0
        world = client.get_world("bench").frame
        applied = len(frames)
        behind = world - mirror.frame
        print(f"{args.entities} entities, {args.move} moved a frame at {args.hz:g} Hz "
              f"(the world published {(world - world0) / elapsed:.1f} frames/s), "
              f"{args.encoding}: the Mirror applied {applied / elapsed:.1f} messages/s, "
              f"{(mirror.updates - updates0) / elapsed:.0f} updates/s; "
              f"{behind} frames behind at the end; this process "
              f"{cpu / elapsed * 100:.1f}% of a core; {len(mirror)} entities held")
        mirror.close()
    finally:
        load.kill()
        xformd.kill()


if __name__ == "__main__":
    main()
