"""The control channel of the agents: JSON lines over TCP on the real network, unshaped (agent 0
listens on its address towards the peers, port NARROWBAND_CONTROL_PORT; harness.node's docstring,
step 1; docs/security.md).

A Line reads at most ``max_line`` bytes per line (a longer one drops the connection), within a
deadline (a peer that says nothing is not waited for beyond it). Before admission lines are plain
JSON (the challenge-response of harness.multihost.auth); after ``seal`` every line is
``<HMAC hex> <JSON>`` under its direction's key and sequence number, and a line that does not
verify drops the connection. Every message is checked against its operation's schema
(harness.multihost.messages) before ``recv`` returns it.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

from harness.multihost import auth
from harness.multihost.messages import Check, Limits, parse

CONTROL_PORT_ENV = "NARROWBAND_CONTROL_PORT"
CONTROL_PORT = 29400
MAX_LINE = 1 << 20              # bytes of one line after admission (measured: a "done" with its qdiscs 0.4-1.6 kB)
HELLO_MAX_LINE = 8192           # bytes of one line before admission (a hello is ~300; its problem <= 2000 chars)
HANDSHAKE_S = 10.0              # seconds a new connection has to complete the challenge-response
CHUNK = 65536


def connect_timeout_s() -> float:
    """How long an agent waits for its peers and the coordinator (NARROWBAND_CONNECT_TIMEOUT_S, read at call time)."""
    return float(os.environ.get("NARROWBAND_CONNECT_TIMEOUT_S", "60"))


class ControlError(Exception):
    """A line that breaks the channel (too long, not sealed by the peer's key): the connection is dropped."""


def log(text: str) -> None:
    """One line on stderr (the agent's log)."""
    print(f"[narrowband] control: {text}", file=sys.stderr, flush=True)


class Line:
    """One control connection: ``send(dict)``, ``recv() -> dict`` (None when closed, silent past its
    timeout, or dropped for a broken line: then ``problem`` says why); MessageError for a message
    that breaks its schema (the connection stays usable)."""

    def __init__(self, sock: socket.socket, schema: dict[str, dict[str, Check]], limits: Limits | None = None,
                 max_line: int = HELLO_MAX_LINE):
        self.sock = sock
        self.schema = schema
        self.limits = limits
        self.max_line = max_line
        self.problem = ""
        self._buf = bytearray()
        self._send_lock = threading.Lock()
        self._keys: tuple[bytes, bytes] | None = None       # (send, receive) once sealed
        self._seq = [0, 0]                                   # lines sent, lines received under the keys

    def seal(self, send_key: bytes, recv_key: bytes) -> None:
        """From now on every line is MACed (send_key) and every line read must verify (recv_key)."""
        self._keys = (send_key, recv_key)
        self.max_line = MAX_LINE

    def send(self, msg: dict) -> None:
        body = json.dumps(msg, separators=(",", ":")).encode()
        with self._send_lock:
            if self._keys is not None:
                body = auth.line_mac(self._keys[0], self._seq[0], body).encode() + b" " + body
                self._seq[0] += 1
            self.sock.sendall(body + b"\n")

    def recv(self, timeout: float | None = None) -> dict | None:
        """The next message, checked (see the class docstring)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            raw = self.read_line(deadline)
            if raw is None:
                return None
            body = self._unseal(raw)
        except ControlError as err:
            self.drop(str(err))
            return None
        return parse(body, self.schema, self.limits)

    def read_line(self, deadline: float | None) -> bytes | None:
        """One line without its newline; None at EOF, on a socket error or past ``deadline`` (monotonic
        seconds); ControlError for a line longer than ``max_line``."""
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                if end > self.max_line:
                    raise ControlError(f"a line of more than {self.max_line} bytes")
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                return line
            if len(self._buf) > self.max_line:
                raise ControlError(f"a line of more than {self.max_line} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.problem = self.problem or "said nothing (complete) in time"
                return None
            try:
                self.sock.settimeout(left)
                chunk = self.sock.recv(CHUNK)
            except socket.timeout:
                continue
            except OSError:
                return None
            finally:
                try:
                    self.sock.settimeout(None)          # a send from another thread is never cut short
                except OSError:
                    pass
            if not chunk:
                return None
            self._buf += chunk

    def _unseal(self, raw: bytes) -> bytes:
        if self._keys is None:
            return raw
        mac, _, body = raw.partition(b" ")
        expected = auth.line_mac(self._keys[1], self._seq[1], body)
        if not auth.matches(expected, mac.decode("ascii", "replace")):
            raise ControlError(f"line {self._seq[1]} does not verify (not sealed by this connection's "
                               f"key: altered, replayed or injected)")
        self._seq[1] += 1
        return body

    def drop(self, why: str) -> None:
        """Close the connection for a broken line; ``problem`` says why (the caller logs it, once)."""
        self.problem = why
        self.close()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
