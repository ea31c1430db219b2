"""Plain TCP peers for `python -m netem probe`; run as a script inside a namespace (stdlib only).

    python peer.py serve                      prints "port N", then one JSON line per connection
    python peer.py send ADDR PORT BYTES PINGS prints one JSON line

Protocol: one byte of mode per connection. 'E': echo PING_BYTES-byte messages until EOF
(round-trip times). 'D': 8-byte big-endian length, then that many bytes; the server answers
one byte when all arrived and reports goodput measured at the receiver: bytes after the first
chunk over the time from the first to the last chunk (so connection setup is not counted).
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

PING_BYTES = 32
CHUNK = 64 * 1024
PROGRESS_EVERY_S = 0.2


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError(f"peer closed after {len(data)} of {n} bytes")
        data += part
    return bytes(data)


def serve() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", 0))
        listener.listen(2)
        print(f"port {listener.getsockname()[1]}", flush=True)
        while True:
            conn, _ = listener.accept()
            with conn:
                mode = _recv_exact(conn, 1)
                if mode == b"E":
                    while (msg := conn.recv(PING_BYTES)):
                        conn.sendall(msg)
                elif mode == b"D":
                    print(json.dumps(_receive(conn)), flush=True)
                    return


def _receive(conn: socket.socket) -> dict:
    total = struct.unpack("!Q", _recv_exact(conn, 8))[0]
    buf = bytearray(CHUNK)
    got = first = 0
    t_first = t_last = last_report = 0.0
    while got < total:
        n = conn.recv_into(buf, min(CHUNK, total - got))
        if n == 0:
            raise ConnectionError(f"sender closed after {got} of {total} bytes")
        t_last = time.perf_counter()
        if got == 0:
            t_first, first, last_report = t_last, n, t_last
        got += n
        if t_last - last_report >= PROGRESS_EVERY_S:
            print(f"progress {got}", flush=True)
            last_report = t_last
    conn.sendall(b"K")
    span = t_last - t_first
    return {"bytes": got, "counted_bytes": got - first, "span_s": span,
            "goodput_bps": (got - first) * 8 / span if span > 0 else None}


def send(addr: str, port: int, nbytes: int, pings: int) -> None:
    t0 = time.perf_counter()
    echo = socket.create_connection((addr, port))
    connect_s = time.perf_counter() - t0
    rtts = []
    with echo:
        echo.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        echo.sendall(b"E")
        msg = b"x" * PING_BYTES
        for _ in range(pings):
            t = time.perf_counter()
            echo.sendall(msg)
            _recv_exact(echo, PING_BYTES)
            rtts.append(time.perf_counter() - t)
    with socket.create_connection((addr, port)) as data:
        t = time.perf_counter()
        data.sendall(b"D" + struct.pack("!Q", nbytes))
        block = memoryview(b"\0" * CHUNK)
        left = nbytes
        while left:
            left -= data.send(block[:min(CHUNK, left)])
        _recv_exact(data, 1)
        total_s = time.perf_counter() - t
    print(json.dumps({"connect_s": connect_s, "rtt_s": rtts, "total_s": total_s}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["send"] and len(sys.argv) == 6:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit("usage: peer.py serve | send ADDR PORT BYTES PINGS")
