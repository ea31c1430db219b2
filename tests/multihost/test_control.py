"""Pure and loopback tier of the control channel (docs/security.md): the run's secret, the proofs of
the challenge-response, the schema of every operation, a fuzz of the parser over generated lines,
and agent 0's door against each rogue client (on 127.0.0.1, in this process, each bounded in time).
The same rogues against real agents in namespaces: test_rogues.py."""
from __future__ import annotations

import json
import os
import random
import socket
import threading
import time

import pytest

from harness.errors import ConfigError
from harness.multihost import auth
from harness.multihost.admission import Door, join
from harness.multihost.control import HELLO_MAX_LINE, ControlError, Line
from harness.multihost.host import HostError
from harness.multihost.messages import TO_LEAD, TO_PEER, Limits, MessageError, parse
from harness.multihost.secret import SECRET_ENV, SECRET_FILE_ENV, load_secret, new_secret

SECRET = b"0123456789abcdef0123456789abcdef-test"
LIMITS = Limits(hosts=3, runs=2)
CASE_S = 20.0                # no case below may take longer (each is bounded by its own socket timeouts)


def _hello(rank: int) -> dict:
    return {"op": "hello", "rank": rank, "host": f"h{rank}", "addr": "127.0.0.1", "iface": "lo", "problem": "",
            "digest": "0123456789abcdef"}


# ---- the secret ---------------------------------------------------------------------------------
def test_the_secret_comes_from_a_private_file_or_the_environment(tmp_path):
    path = new_secret(tmp_path / "s")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_secret({SECRET_FILE_ENV: str(path)}) == path.read_bytes().strip()
    assert load_secret({SECRET_ENV: "x" * 40}) == b"x" * 40
    with pytest.raises(ConfigError, match="exists already"):
        new_secret(path)


@pytest.mark.parametrize("mode, content, env, words", [
    (None, None, {}, "NARROWBAND_SECRET_FILE: not set"),
    (0o644, "a" * 64, None, "mode 0644"),
    (0o600, "short", None, "at least 32"),
    (None, None, {SECRET_ENV: "short"}, "NARROWBAND_SECRET: its value is 5 characters"),
    (None, None, {SECRET_FILE_ENV: "/nonexistent/secret"}, "cannot be read"),
])
def test_a_missing_short_or_readable_secret_is_one_line(tmp_path, mode, content, env, words):
    if env is None:
        path = tmp_path / "s"
        path.write_text(content)
        path.chmod(mode)
        env = {SECRET_FILE_ENV: str(path)}
    with pytest.raises(ConfigError) as err:
        load_secret(env)
    assert words in str(err.value) and "\n" not in str(err.value)


# ---- the proofs ---------------------------------------------------------------------------------
def test_a_proof_binds_the_secret_the_challenge_and_the_whole_hello():
    hello = {**_hello(1), "nonce": auth.nonce()}
    challenge = auth.nonce()
    proof = auth.hello_proof(SECRET, challenge, hello)
    assert auth.matches(proof, auth.hello_proof(SECRET, challenge, {**hello, "proof": "ignored"}))
    assert not auth.matches(proof, auth.hello_proof(b"another secret of enough length....", challenge, hello))
    assert not auth.matches(proof, auth.hello_proof(SECRET, auth.nonce(), hello))         # replayed: another challenge
    assert not auth.matches(proof, auth.hello_proof(SECRET, challenge, {**hello, "rank": 2}))
    assert not auth.matches(proof, auth.admit_proof(SECRET, challenge, hello))            # no reflection
    assert not auth.matches(proof, None) and not auth.matches(proof, 12)


# ---- the schema ---------------------------------------------------------------------------------
GOOD_TO_PEER = [
    {"op": "challenge", "v": 1, "nonce": "a" * 64}, {"op": "admitted", "proof": "b" * 64},
    {"op": "error", "message": "x"}, {"op": "welcome", "addrs": {"0": "10.0.0.1", "1": "10.0.0.2"}},
    {"op": "run", "index": 1}, {"op": "build", "vni": 77, "subnet": "10.77.3", "mtu": 1400},
    {"op": "serve", "role": "worker0"},
    {"op": "send", "role": "learner", "addr": "10.77.3.2", "port": 40000, "nbytes": 262144, "timeout_s": 31.5},
    {"op": "collect", "role": "worker0", "timeout_s": 30}, {"op": "teardown"},
    {"op": "launch", "master_addr": "10.77.3.1", "master_port": 29500, "trace_t0": 1.7e9}, {"op": "stop"},
    {"op": "skip", "index": 0}, {"op": "finish", "ok": True},
]
BAD_TO_PEER = [   # (message, the key the line must name, the value it must show)
    ({"op": "build", "vni": 0, "subnet": "10.1.2", "mtu": 1400}, "vni", "0"),
    ({"op": "build", "vni": 2 ** 24 - 1, "subnet": "10.1.2", "mtu": 1400}, "vni", "16777215"),
    ({"op": "build", "vni": "7", "subnet": "10.1.2", "mtu": 1400}, "vni", "'7'"),
    ({"op": "build", "vni": True, "subnet": "10.1.2", "mtu": 1400}, "vni", "True"),
    ({"op": "build", "vni": 7, "subnet": "8.8.8", "mtu": 1400}, "subnet", "'8.8.8'"),
    ({"op": "build", "vni": 7, "subnet": "10.1.2.0/24", "mtu": 1400}, "subnet", "'10.1.2.0/24'"),
    ({"op": "build", "vni": 7, "subnet": "10.1.2", "mtu": 65000}, "mtu", "65000"),
    ({"op": "send", "role": "w", "addr": "8.8.8.8", "port": 1, "nbytes": 1, "timeout_s": 1}, "addr", "'8.8.8.8'"),
    ({"op": "send", "role": "w", "addr": "10.0.0.2", "port": 0, "nbytes": 1, "timeout_s": 1}, "port", "0"),
    ({"op": "send", "role": "w", "addr": "10.0.0.2", "port": 70000, "nbytes": 1, "timeout_s": 1}, "port", "70000"),
    ({"op": "send", "role": "w", "addr": "10.0.0.2", "port": 1, "nbytes": 2 ** 40, "timeout_s": 1}, "nbytes", str(2 ** 40)),
    ({"op": "send", "role": "w", "addr": "10.0.0.2", "port": 1, "nbytes": 1, "timeout_s": 1e9}, "timeout_s", "1000000000.0"),
    ({"op": "send", "role": "../../etc", "addr": "10.0.0.2", "port": 1, "nbytes": 1, "timeout_s": 1}, "role", "'../../etc'"),
    ({"op": "collect", "role": "w", "timeout_s": -1}, "timeout_s", "-1"),
    ({"op": "run", "index": 2}, "index", "2"),                  # LIMITS.runs == 2
    ({"op": "finish", "ok": 1}, "ok", "1"),
    ({"op": "launch", "master_addr": "224.0.0.1", "master_port": 29500, "trace_t0": 0}, "master_addr", "'224.0.0.1'"),
    ({"op": "build", "vni": 7, "subnet": "10.1.2"}, "mtu", "missing"),
    ({"op": "build", "vni": 7, "subnet": "10.1.2", "mtu": 1400, "cmd": "rm -rf /"}, "cmd", "'cmd'"),
    ({"op": "exec", "argv": ["sh"]}, "op", "'exec'"),
]


def test_every_operation_agent_0_sends_fits_its_schema():
    for msg in GOOD_TO_PEER:
        assert parse(json.dumps(msg).encode(), TO_PEER, LIMITS) == msg


@pytest.mark.parametrize("msg, key, value", BAD_TO_PEER, ids=[f"{m['op']}-{k}" for m, k, _ in BAD_TO_PEER])
def test_a_bad_value_is_one_line_naming_the_key_the_value_and_what_is_allowed(msg, key, value):
    with pytest.raises(MessageError) as err:
        parse(json.dumps(msg).encode(), TO_PEER, LIMITS)
    line = str(err.value)
    assert key in line and value in line and "\n" not in line
    assert "allowed" in line or "missing" in line


def test_a_hello_claims_a_rank_of_this_allocation_but_agent_0s():
    good = {**_hello(2), "nonce": "c" * 64, "proof": "d" * 64}
    assert parse(json.dumps(good).encode(), TO_LEAD, LIMITS) == good
    for rank in (0, 3, -1, "1", 1.0, None):
        with pytest.raises(MessageError, match="rank"):
            parse(json.dumps({**good, "rank": rank}).encode(), TO_LEAD, LIMITS)


def _random_json(rng: random.Random, depth: int = 0):
    kinds = ["int", "float", "str", "bool", "null", "list", "dict", "huge"] if depth < 4 else ["int", "str", "null"]
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, 1, -1, 65535, 65536, 2 ** 24 - 2, 2 ** 24, 2 ** 63, rng.randint(-10 ** 6, 10 ** 6)])
    if kind == "float":
        return rng.choice([0.0, -0.5, 1e308, 3.5, rng.random() * 1e4])
    if kind == "str":
        return rng.choice(["", "10.77.3", "10.0.0.1", "8.8.8.8", "worker0", "x" * rng.randint(0, 3000), "\u0000\ud7ff",
                           "hello", "build", "../..", " ".join(rng.choices("abc;$`|&", k=8))])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "huge":
        return "9" * 5000
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["op", "rank", "vni", "addrs", "role", "k"]): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _fuzz_lines(rng: random.Random, n: int):
    """Lines of every kind a peer could send: random bytes, random JSON, valid messages mutated."""
    valid = GOOD_TO_PEER + [{**_hello(1), "nonce": "a" * 64, "proof": "b" * 64}]
    for i in range(n):
        kind = i % 6
        if kind == 0:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        elif kind == 1:
            yield json.dumps(_random_json(rng)).encode()
        elif kind == 2:                                  # a valid message, one value replaced
            msg = dict(rng.choice(valid))
            msg[rng.choice(list(msg))] = _random_json(rng)
            yield json.dumps(msg).encode()
        elif kind == 3:                                  # a valid message, a key dropped or added
            msg = dict(rng.choice(valid))
            if rng.random() < 0.5 and len(msg) > 1:
                msg.pop(rng.choice([k for k in msg if k != "op"] or ["op"]))
            else:
                msg[rng.choice(["x", "cmd", "op", "rank"])] = _random_json(rng)
            yield json.dumps(msg).encode()
        elif kind == 4:                                  # a valid message's bytes, cut or flipped
            body = bytearray(json.dumps(rng.choice(valid)).encode())
            if rng.random() < 0.5:
                body = body[: rng.randint(0, len(body))]
            else:
                body[rng.randrange(len(body))] = rng.getrandbits(8)
            yield bytes(body)
        else:                                            # pathological JSON
            yield rng.choice([b"[" * 100_000 + b"]" * 100_000, b'{"op": NaN}', b'{"op": "run", "index": Infinity}',
                              b"1" * 10_000, b'{"op": "run", "index": ' + b"9" * 5000 + b"}", b'"op"', b"null",
                              b'{"op": "hello", "op": "build"}', b"\xff\xfe{}"])


def test_fuzz_the_parser_never_fails_otherwise_than_with_one_line():
    """3000 generated lines through both directions' parser: a dict that fits the schema, or a
    MessageError of one line; never another exception (a crash), never a hang."""
    rng = random.Random(48)
    outcomes = {"ok": 0, "refused": 0}
    for body in _fuzz_lines(rng, 3000):
        for schema in (TO_PEER, TO_LEAD):
            try:
                msg = parse(body, schema, LIMITS)
            except MessageError as err:
                assert "\n" not in str(err) and len(str(err)) < 1000
                outcomes["refused"] += 1
            else:
                assert isinstance(msg, dict) and msg["op"] in schema
                outcomes["ok"] += 1
    assert outcomes["refused"] > 5000 and outcomes["ok"] > 0, outcomes


def test_fuzz_the_line_reader_bounds_every_line():
    """Random chunks with newlines at random places through a socket pair: every line comes out whole
    and at most max_line bytes; a longer one is a ControlError, never an unbounded buffer."""
    rng = random.Random(7)
    for _ in range(50):
        a, b = socket.socketpair()
        line = Line(b, TO_PEER, max_line=256)
        sent = bytes(rng.choice(b"ab{}\n") for _ in range(rng.randint(0, 3000)))
        a.sendall(sent)
        a.close()
        got = []
        try:
            while (raw := line.read_line(time.monotonic() + 5)) is not None:
                got.append(raw)
        except ControlError:
            assert any(len(x) > 256 for x in sent.split(b"\n"))
        else:
            assert got == sent.split(b"\n")[: len(got)] and all(len(x) <= 256 for x in got)
        line.close()


# ---- agent 0's door against each rogue, on loopback ------------------------------------------------
class _Gathering:
    """A Door on 127.0.0.1 gathering 3 hosts in a thread; ``join(rank, secret)`` an honest peer."""

    def __init__(self, secret: bytes = SECRET, timeout_s: float = 15.0):
        self.door = Door("127.0.0.1", 0, 3, secret, LIMITS)
        self.port = self.door.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.door.gather, args=(_hello(0), timeout_s), daemon=True)
        self.thread.start()
        self.joined: dict[int, object] = {}

    def join(self, rank: int, secret: bytes = SECRET) -> threading.Thread:
        def go() -> None:
            try:
                self.joined[rank] = join("127.0.0.1", self.port, secret, _hello(rank), LIMITS, 10, f"h{rank}")
            except HostError as err:
                self.joined[rank] = err
        t = threading.Thread(target=go, daemon=True)
        t.start()
        return t

    def finish(self) -> dict:
        self.thread.join(timeout=CASE_S)
        assert not self.thread.is_alive()
        for line in self.door.lines.values():
            line.send({"op": "welcome", "addrs": {"0": "127.0.0.1", "1": "127.0.0.1", "2": "127.0.0.1"}})
        return self.door.hellos


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=CASE_S)
    sock.settimeout(CASE_S)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """What the door said until it closed (bounded by the socket's timeout)."""
    data = b""
    try:
        while (part := sock.recv(65536)):
            data += part
    except (ConnectionResetError, socket.timeout):
        pass
    return data


def _recorded_hello() -> bytes:
    """A valid hello line of rank 2, recorded from a connection of an earlier gathering with the same secret."""
    door = Door("127.0.0.1", 0, 2, SECRET, Limits(2, 1))
    port = door.listener.getsockname()[1]
    thread = threading.Thread(target=door.gather, args=(_hello(0), 10), daemon=True)
    thread.start()
    sock = _connect(port)
    challenge = json.loads(sock.makefile("rb").readline())
    hello = {**_hello(1), "rank": 1, "nonce": auth.nonce()}
    hello["proof"] = auth.hello_proof(SECRET, challenge["nonce"], hello)
    line = json.dumps(hello).encode() + b"\n"
    sock.sendall(line)
    thread.join(timeout=CASE_S)
    sock.close()
    assert 1 in door.hellos                                    # it was admitted there, once
    return line.replace(b'"rank": 1', b'"rank": 2')             # (rank 1 in a 2-host run: claim 2 here)


def _rogue(case: str, port: int) -> tuple[bytes, float]:
    """Run one rogue client against the door; (what it was told, seconds until the door closed on it)."""
    t0 = time.monotonic()
    sock = _connect(port)
    challenge = sock.recv(4096)
    assert b'"challenge"' in challenge
    if case == "no-secret":                       # the attack: a bare hello taking rank 2
        sock.sendall(b'{"op": "hello", "rank": 2, "host": "h2", "addr": "127.0.0.1"}\n')
    elif case == "silent":
        pass
    elif case == "10MB-line":
        try:
            sock.sendall(b"x" * (10 << 20) + b"\n")
        except OSError:                           # the door closed while it was still sending
            pass
    elif case == "garbage":
        sock.sendall(bytes(random.Random(3).getrandbits(8) for _ in range(4000)) + b"\n")
    elif case == "replayed-hello":
        sock.sendall(_recorded_hello())
    told = _read_all(sock)
    sock.close()
    return told, time.monotonic() - t0


@pytest.mark.parametrize("case", ["no-secret", "wrong-secret", "silent", "10MB-line", "garbage", "replayed-hello"])
def test_a_rogue_connecting_first_is_told_once_and_dropped_and_the_hosts_are_admitted(case):
    gathering = _Gathering()
    t0 = time.monotonic()
    if case == "wrong-secret":
        gathering.join(2, b"not the secret, but long enough to be one").join(timeout=CASE_S)
        told, took = str(gathering.joined.pop(2)).encode(), time.monotonic() - t0
    else:
        result: list = []
        rogue = threading.Thread(target=lambda: result.append(_rogue(case, gathering.port)), daemon=True)
        rogue.start()
        if case == "silent":            # the honest hosts come while it is still connected
            time.sleep(0.5)
        else:
            rogue.join(timeout=CASE_S)
    honest = [gathering.join(1), gathering.join(2)]
    hellos = gathering.finish()
    for t in honest:
        t.join(timeout=CASE_S)
    if case != "wrong-secret":
        rogue.join(timeout=CASE_S)
        assert not rogue.is_alive()
        told, took = result[0]
    assert sorted(hellos) == [0, 1, 2]
    assert all(isinstance(gathering.joined[r], tuple) and gathering.joined[r][1]["op"] == "welcome" for r in (1, 2))
    assert [p for p, _ in gathering.door.refused] and len(gathering.door.refused) == 1, gathering.door.refused
    if case != "10MB-line":             # the door closes on a sender mid-line: its one line may be lost in the reset
        assert b"not admitted" in told and told.count(b"\n") <= 1, told[:300]
    else:
        assert f"more than {HELLO_MAX_LINE} bytes" in gathering.door.refused[0][1]
    assert took < CASE_S
    print(f"{case}: refused ({gathering.door.refused[0][1]}) after {took:.2f} s")


def test_a_peer_meeting_an_agent_0_without_the_secret_does_nothing():
    """A fake agent 0 (say, another tenant's process on the master's port) cannot prove the secret:
    the peer ends with one line before any operation."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def fake() -> None:
        conn, _ = listener.accept()
        conn.sendall(json.dumps({"op": "challenge", "v": 1, "nonce": "a" * 64}).encode() + b"\n")
        conn.makefile("rb").readline()
        conn.sendall(json.dumps({"op": "admitted", "proof": "b" * 64}).encode() + b"\n")
        conn.sendall(b'{"op": "build", "vni": 5, "subnet": "10.1.1", "mtu": 1400}\n')
        time.sleep(1)
        conn.close()

    threading.Thread(target=fake, daemon=True).start()
    with pytest.raises(HostError) as err:
        join("127.0.0.1", port, SECRET, _hello(1), LIMITS, 5, "h1")
    listener.close()
    assert "did not prove it holds this run's secret" in str(err.value) and "\n" not in str(err.value)


def test_an_injected_or_replayed_line_after_admission_drops_the_connection():
    gathering = _Gathering()
    threads = [gathering.join(1), gathering.join(2)]
    gathering.finish()
    for t in threads:
        t.join(timeout=CASE_S)
    peer, lead = gathering.joined[1][0], gathering.door.lines[1]
    lead.send({"op": "run", "index": 0})
    assert peer.recv(timeout=5) == {"op": "run", "index": 0}
    lead.sock.sendall(json.dumps({"op": "run", "index": 1}).encode() + b"\n")        # not sealed
    assert peer.recv(timeout=5) is None and "does not verify" in peer.problem
    other, lead2 = gathering.joined[2][0], gathering.door.lines[2]
    lead2.send({"op": "stop"})                                                     # line 0, sealed
    assert other.recv(timeout=5) == {"op": "stop"}
    body = b'{"op":"stop"}'
    lead2.sock.sendall(auth.line_mac(lead2._keys[0], 0, body).encode() + b" " + body + b"\n")   # line 0 again
    assert other.recv(timeout=5) is None and "does not verify" in other.problem
