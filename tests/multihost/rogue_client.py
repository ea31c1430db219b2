"""Rogue clients against agent 0's control port, run inside a stand-in host that is not part of the
allocation (test_rogues.py starts it with nsenter). Stdlib and harness only; every wait is bounded.

    python rogue_client.py ADDR PORT RECORDED_HELLO_FILE

Waits (at most WAIT_S) for the port to open, connects a silent client first and keeps it open,
then runs the other cases one after another; prints one JSON line per case ({case, told: what the
door said, at most 300 characters; seconds: from connect to the door closing on it}), then
"cases-done" once every case but the silent one is over, and the silent one's line last.
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys
import threading
import time

WAIT_S = 300.0              # for agent 0 to open its port (it plans first)
CASE_S = 60.0               # any one case, at most


def _connect(addr: str, port: int) -> socket.socket:
    sock = socket.create_connection((addr, port), timeout=CASE_S)
    sock.settimeout(CASE_S)
    return sock


def _told(sock: socket.socket) -> str:
    data = b""
    try:
        while (part := sock.recv(65536)):
            data += part
    except (OSError, socket.timeout):
        pass
    return data.decode("utf-8", "replace")[:300]


def case(name: str, addr: str, port: int, recorded: bytes) -> dict:
    t0 = time.monotonic()
    if name == "wrong-secret":             # the real protocol, another secret, claiming a real rank
        from harness.multihost.admission import join
        from harness.multihost.host import HostError
        from harness.multihost.messages import Limits

        hello = {"op": "hello", "rank": 2, "host": "h2", "addr": addr, "iface": "eth0", "problem": "",
                 "digest": "0123456789abcdef"}
        try:
            join(addr, port, b"a wrong secret, long enough to pass as one", hello, Limits(3, 1), 10, "rogue")
            told = "ADMITTED"
        except HostError as err:
            told = str(err)
        return {"case": name, "told": told[:300], "seconds": round(time.monotonic() - t0, 3)}
    sock = _connect(addr, port)
    challenge = sock.recv(4096)
    if name == "no-secret":                # the attack: a bare hello taking rank 2
        sock.sendall(b'{"op": "hello", "rank": 2}\n')
    elif name == "10MB-line":
        try:
            sock.sendall(b"x" * (10 << 20) + b"\n")
        except OSError:
            pass
    elif name == "garbage":
        sock.sendall(bytes(random.Random(11).getrandbits(8) for _ in range(4096)) + b"\n")
    elif name == "replayed-hello":
        sock.sendall(recorded)
    told = _told(sock)
    sock.close()
    return {"case": name, "challenged": b'"challenge"' in challenge, "told": told,
            "seconds": round(time.monotonic() - t0, 3)}


def main() -> int:
    addr, port, recorded = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read()
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            socket.create_connection((addr, port), timeout=2).close()   # (the door refuses this one too)
            break
        except OSError:
            if time.monotonic() > deadline:
                print(json.dumps({"case": "wait", "told": "agent 0 never opened its port"}), flush=True)
                return 1
            time.sleep(0.2)
    silent: list[dict] = []
    held = threading.Thread(target=lambda: silent.append(case("silent", addr, port, recorded)), daemon=True)
    held.start()
    time.sleep(0.5)                         # the silent client is connected before the others
    for name in ("no-secret", "wrong-secret", "10MB-line", "garbage", "replayed-hello"):
        print(json.dumps(case(name, addr, port, recorded)), flush=True)
    print("cases-done", flush=True)
    held.join(timeout=CASE_S + 5)
    print(json.dumps(silent[0] if silent else {"case": "silent", "told": "STILL CONNECTED"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.environ.get("NARROWBAND_ROOT", "."))
    raise SystemExit(main())
