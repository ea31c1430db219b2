"""Who joins a run: agent 0's door (``gather``) and a peer's knock (``join``), each side proving it
holds the run's secret (harness.multihost.auth) before any operation (docs/security.md).

Agent 0 listens on its own address towards the peers (not 0.0.0.0), serves each new connection in a
thread of its own with HANDSHAKE_S to complete the challenge-response (at most MAX_PENDING at once:
a silent or slow client cannot hold the door), and admits a rank once. Whatever is not admitted (no
proof, a wrong one, a replayed hello, garbage, a line too long, silence) gets one error line, is
closed and logged once with its address; the run neither admits nor waits on it. The listener is
closed once every host is in (or the connect timeout passed): later connections are refused by the
kernel. A host that never came is named with the addresses refused meanwhile.
"""
from __future__ import annotations

import socket
import threading
import time

from harness.multihost import auth
from harness.multihost.control import HANDSHAKE_S, Line, log
from harness.multihost.host import HostError
from harness.multihost.messages import TO_LEAD, TO_PEER, Limits, MessageError

MAX_PENDING = 32            # handshakes in progress at once; a connection beyond them is closed at once
MAX_LOGGED = 20             # refusals logged one line each; the rest are counted
NOT_OURS = ("its proof does not match this run's secret (another NARROWBAND_SECRET_FILE / NARROWBAND_SECRET, "
            "or not an agent of this run)")


class Refused(Exception):
    """A connection agent 0 does not admit; the message says why, on one line."""


def admit(sock: socket.socket, secret: bytes, limits: Limits, deadline: float) -> tuple[dict, Line]:
    """Agent 0's half of the challenge-response on a new connection: (the verified hello, its sealed Line)."""
    line = Line(sock, {"hello": TO_LEAD["hello"]}, limits)
    challenge = auth.nonce()
    try:
        line.send({"op": "challenge", "v": auth.PROTOCOL, "nonce": challenge})
        hello = line.recv(timeout=max(0.0, deadline - time.monotonic()))
    except MessageError as err:
        raise Refused(str(err)) from None
    except OSError as err:
        raise Refused(f"connection lost ({err.strerror or err})") from None
    if hello is None:
        raise Refused(line.problem or "closed the connection before its hello")
    if not auth.matches(auth.hello_proof(secret, challenge, hello), hello["proof"]):
        raise Refused(NOT_OURS)
    line.send({"op": "admitted", "proof": auth.admit_proof(secret, challenge, hello)})
    line.seal(auth.session_key(secret, auth.TO_PEER, challenge, hello["nonce"]),
              auth.session_key(secret, auth.TO_LEAD, challenge, hello["nonce"]))
    line.schema = TO_LEAD
    return hello, line


def refuse(sock: socket.socket, why: str) -> None:
    """One error line (best effort, at most 1 s), then close."""
    line = Line(sock, {})
    try:
        sock.settimeout(1.0)
        line.send({"op": "error", "message": f"control: not admitted by agent 0: {why}"})
    except OSError:
        pass
    line.close()


class Door:
    """Agent 0's listener for one gathering (see the module docstring)."""

    def __init__(self, addr: str, port: int, hosts: int, secret: bytes, limits: Limits):
        self.hosts, self.secret, self.limits = hosts, secret, limits
        self.hellos: dict[int, dict] = {}
        self.lines: dict[int, Line] = {}
        self.refused: list[tuple[str, str]] = []          # (address:port, why)
        self._lock = threading.Lock()
        self._pending: set[socket.socket] = set()
        self._closed = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((addr, port))
        except OSError as err:
            self.listener.close()
            raise HostError(f"NARROWBAND_CONTROL_PORT: {addr}:{port} cannot be listened on ({err.strerror}); another "
                            f"agent 0 there? choose another port on every host") from None
        self.listener.listen(MAX_PENDING)

    def gather(self, hello0: dict, timeout_s: float) -> None:
        """Admit every other host (or until ``timeout_s`` seconds passed); then close the door."""
        self.hellos[0] = hello0
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                with self._lock:
                    if len(self.hellos) == self.hosts:
                        break
                self.listener.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
                try:
                    sock, (ip, port) = self.listener.accept()
                except socket.timeout:
                    continue
                with self._lock:
                    busy = len(self._pending) >= MAX_PENDING
                    if not busy:
                        self._pending.add(sock)
                if busy:
                    self._refused(sock, f"{ip}:{port}", f"more than {MAX_PENDING} connections in their handshake")
                    continue
                threading.Thread(target=self._shake, args=(sock, f"{ip}:{port}", deadline), daemon=True,
                                 name=f"admit-{ip}:{port}").start()
        finally:
            self.listener.close()
            with self._lock:
                self._closed = True
                pending = list(self._pending)
            for sock in pending:                 # handshakes still going: the door is shut (their threads
                try:                             # wake, tell the peer in one line and close)
                    sock.shutdown(socket.SHUT_RD)
                except OSError:
                    pass

    def _shake(self, sock: socket.socket, peer: str, gather_deadline: float) -> None:
        try:
            hello, line = admit(sock, self.secret, self.limits,
                                min(time.monotonic() + HANDSHAKE_S, gather_deadline))
        except Refused as err:
            with self._lock:
                self._pending.discard(sock)
                why = "no complete hello before every host was in (the door closed)" if self._closed else str(err)
            self._refused(sock, peer, why)
            return
        with self._lock:
            self._pending.discard(sock)
            twice = hello["rank"] in self.hellos
            if not twice and not self._closed:
                self.hellos[hello["rank"]] = hello
                self.lines[hello["rank"]] = line
                return
        if twice:
            self._note(peer, f"node rank {hello['rank']} connected twice")
            line.send({"op": "error", "message": f"host {hello['host']}: node rank {hello['rank']} connected twice"})
        line.close()

    def _refused(self, sock: socket.socket, peer: str, why: str) -> None:
        # noted before the peer is told: whoever sees the door close on a peer (the peer itself, a test, the
        # line naming a host that never came) finds the refusal already in ``refused``
        self._note(peer, why)
        refuse(sock, why)

    def _note(self, peer: str, why: str) -> None:
        with self._lock:
            self.refused.append((peer, why))
            n = len(self.refused)
        if n <= MAX_LOGGED:
            log(f"refused {peer}: {why}")
        elif n == MAX_LOGGED + 1:
            log(f"more connections refused; only the first {MAX_LOGGED} are logged")

    def refused_summary(self, limit: int = 3) -> str:
        """The addresses refused meanwhile, for the line that names a host that never came ("" if none)."""
        with self._lock:
            seen: dict[str, str] = {}
            for peer, why in self.refused:
                seen.setdefault(peer.rsplit(":", 1)[0], why)
        if not seen:
            return ""
        listed = "; ".join(f"{ip} ({why})" for ip, why in list(seen.items())[:limit])
        more = f" and {len(seen) - limit} more" if len(seen) > limit else ""
        return f"; refused meanwhile: {listed}{more}"


def join(master: str, port: int, secret: bytes, hello: dict, limits: Limits, timeout_s: float, me: str) -> tuple[Line, dict]:
    """A peer's half: connect to agent 0 (retrying until ``timeout_s``), prove, check agent 0's proof;
    (the sealed Line, agent 0's first sealed message: welcome or error). HostError (one line) otherwise."""
    where = f"agent 0 at {master}:{port}"
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            sock = socket.create_connection((master, port), timeout=5)
            break
        except OSError as err:
            last = err.strerror or str(err)
            if time.monotonic() > deadline:
                raise HostError(f"{where} cannot be reached from {me} within {timeout_s:g} s ({last})") from None
            time.sleep(0.3)
    line = Line(sock, {"challenge": TO_PEER["challenge"], "error": TO_PEER["error"]}, limits)
    try:
        msg = _expect(line, where, "a challenge")
        if msg["op"] == "challenge":
            mine = {**hello, "nonce": auth.nonce()}
            mine["proof"] = auth.hello_proof(secret, msg["nonce"], mine)
            line.schema = {"admitted": TO_PEER["admitted"], "error": TO_PEER["error"]}
            line.send(mine)
            reply = _expect(line, where, "its proof")
            if reply["op"] == "admitted":
                if not auth.matches(auth.admit_proof(secret, msg["nonce"], mine), reply["proof"]):
                    raise HostError(f"{where} did not prove it holds this run's secret (another secret, or not our "
                                    f"agent 0); nothing was done")
                line.seal(auth.session_key(secret, auth.TO_LEAD, msg["nonce"], mine["nonce"]),
                          auth.session_key(secret, auth.TO_PEER, msg["nonce"], mine["nonce"]))
                line.schema = {"welcome": TO_PEER["welcome"], "error": TO_PEER["error"]}
                first = line.recv(timeout=timeout_s + HANDSHAKE_S)
                if first is None:
                    raise HostError(f"{where} closed the control connection ({line.problem or 'before its verdict'})")
                line.schema = TO_PEER
                return line, first
            msg = reply
        raise HostError(f"{where} refused {me}: {msg['message']}")
    except MessageError as err:
        line.close()
        raise HostError(f"{where}: {err}") from None
    except (HostError, OSError) as err:
        line.close()
        if isinstance(err, HostError):
            raise
        raise HostError(f"{where}: connection lost ({err.strerror or err})") from None


def _expect(line: Line, where: str, what: str) -> dict:
    msg = line.recv(timeout=HANDSHAKE_S)
    if msg is None:
        raise HostError(f"{where} sent no {what} within {HANDSHAKE_S:g} s ({line.problem or 'closed or silent'})")
    return msg
