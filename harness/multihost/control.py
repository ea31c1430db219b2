"""The control channel of the agents: JSON lines over TCP on the real network, unshaped (agent 0
listens on MASTER_ADDR:NARROWBAND_CONTROL_PORT; harness.node's docstring, step 1)."""
from __future__ import annotations

import json
import os
import socket
import threading

CONTROL_PORT_ENV = "NARROWBAND_CONTROL_PORT"
CONTROL_PORT = 29400
def connect_timeout_s() -> float:
    """How long an agent waits for its peers and the coordinator (NARROWBAND_CONNECT_TIMEOUT_S, read at call time)."""
    return float(os.environ.get("NARROWBAND_CONNECT_TIMEOUT_S", "60"))


class Line:
    """One control connection: ``send(dict)``, ``recv() -> dict`` (None at EOF)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.file = sock.makefile("rb")
        self._send_lock = threading.Lock()

    def send(self, msg: dict) -> None:
        with self._send_lock:
            self.sock.sendall((json.dumps(msg) + "\n").encode())

    def recv(self, timeout: float | None = None) -> dict | None:
        self.sock.settimeout(timeout)
        try:
            line = self.file.readline()
        except (OSError, ValueError):
            return None
        finally:
            try:
                self.sock.settimeout(None)
            except OSError:
                pass
        return json.loads(line) if line else None

    def close(self) -> None:
        for thing in (self.file, self.sock):
            try:
                thing.close()
            except OSError:
                pass
