"""Rogue clients against real agents in namespaces (docs/security.md): a fourth stand-in host, not
in the allocation, connects to agent 0's control port before the other agents start: a bare hello
without the secret, the real protocol with a wrong secret, a client that says nothing, a 10 MB line,
garbage bytes and a hello recorded from an earlier run. Each is told one line and dropped, agent 0
logs its address, and the run completes on the three real hosts with nothing left behind. Then the
real host h2 with a wrong secret: the run fails within the connect timeout with one line naming h2
and its address, and nothing is built anywhere."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from multihost_hosts import in_host, stand_in_hosts
from netem.names import list_ours
from test_multihost_e2e import HILO, ROOT, _agents, _left, _run_dir, secret_file

CASES = ("silent", "no-secret", "wrong-secret", "10MB-line", "garbage", "replayed-hello")


def _recorded_hello(secret: bytes) -> bytes:
    """A hello line that an agent of rank 2 sent in an earlier gathering with the same secret (on
    loopback, in this process): admitted there, a replay anywhere else."""
    from harness.multihost import auth
    from harness.multihost.admission import Door
    from harness.multihost.messages import Limits

    door = Door("127.0.0.1", 0, 3, secret, Limits(3, 1))
    thread = threading.Thread(target=door.gather, args=({"op": "hello", "rank": 0}, 3.0), daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", door.listener.getsockname()[1]), timeout=10) as sock:
        challenge = json.loads(sock.makefile("rb").readline())
        hello = {"op": "hello", "rank": 2, "host": "h2", "addr": "10.0.0.3", "iface": "eth0", "problem": "",
                 "digest": "0123456789abcdef", "nonce": auth.nonce()}
        hello["proof"] = auth.hello_proof(secret, challenge["nonce"], hello)
        line = json.dumps(hello).encode() + b"\n"
        sock.sendall(line)
        thread.join(timeout=10)
    assert 2 in door.hellos
    return line


@pytest.mark.emulated
@pytest.mark.e2e
def test_rogues_connecting_first_are_dropped_and_the_run_completes(kernel_backend, tmp_path):
    from harness.multihost.secret import load_secret

    secret = load_secret({"NARROWBAND_SECRET_FILE": str(secret_file(tmp_path))})
    (tmp_path / "recorded").write_bytes(_recorded_hello(secret))
    with stand_in_hosts(4) as hosts:                       # h3: another tenant of the network
        h0, rogue_addr = hosts.nodes["h0"].addr, hosts.nodes["h3"].addr
        args = ["scenario=smoke_hilo", "only=[hilo_spar]"]
        procs = _agents(hosts, args, tmp_path, ranks=(0,))
        rogue = in_host(hosts, 3, [sys.executable, str(Path(__file__).with_name("rogue_client.py")), h0, "29400",
                                   str(tmp_path / "recorded")],
                        env={**os.environ, "NARROWBAND_ROOT": str(ROOT), "PYTHONPATH": str(ROOT)},
                        stdout=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            said = []
            deadline = time.monotonic() + 400
            for text in rogue.stdout:                      # every case but the silent one, before h1 and h2 start
                said.append(text.strip())
                if text.strip() == "cases-done" or time.monotonic() > deadline:
                    break
            assert said[-1] == "cases-done", said
            procs += _agents(hosts, args, tmp_path, ranks=(1, 2))
            said += [t.strip() for t in rogue.stdout]
            rogue.wait(timeout=120)
            codes = [p.wait(timeout=900) for p in procs]
        finally:
            for p in [*procs, rogue]:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        log = (tmp_path / "agent0.log").read_text()
        assert codes == [0, 0, 0], log[-3000:]
        assert _left(procs) == []
    results = {r["case"]: r for r in (json.loads(t) for t in said if t.startswith("{"))}
    assert sorted(results) == sorted(CASES), said
    for name, r in results.items():
        print(f"{name}: told {r['told'][:160]!r} after {r['seconds']} s")
        assert r["told"] != "ADMITTED" and "STILL CONNECTED" not in r["told"]
        if name != "10MB-line":                            # a reset may swallow the line of a client still sending
            assert "not admitted by agent 0" in r["told"], r
    refused = [line for line in log.splitlines() if f"control: refused {rogue_addr}:" in line]
    assert len(refused) >= len(CASES), log[-3000:]         # (+1: the rogue's first knock, to see the port open)
    meta = json.loads((_run_dir(tmp_path / "multi", *HILO) / "run.json").read_text())
    assert meta["status"] == "ok" and [h["name"] for h in meta["placement"]["hosts"]] == ["h0", "h1", "h2"]


@pytest.mark.emulated
@pytest.mark.e2e
def test_a_host_with_a_wrong_secret_fails_the_run_in_bounded_time_naming_its_address(kernel_backend, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    with stand_in_hosts(3) as hosts:
        args = ["scenario=smoke_hilo", "only=[hilo_spar]"]
        procs = _agents(hosts, args, tmp_path, ranks=(0, 1), NARROWBAND_CONNECT_TIMEOUT_S="30")
        procs += _agents(hosts, args, wrong, ranks=(2,), NARROWBAND_CONNECT_TIMEOUT_S="30")  # another secret file
        seen: set[str] = set()
        t0 = time.monotonic()
        while any(p.poll() is None for p in procs) and time.monotonic() - t0 < 600:
            seen |= {n.name for n in list_ours() if n.owner in {str(p.pid) for p in procs} and n.role != "caps"}
            time.sleep(0.2)
        codes = [p.wait(timeout=10) for p in procs]
        h2 = hosts.nodes["h2"].addr
    assert codes == [2, 2, 2]
    for i in (0, 1):
        lines = [t for t in (tmp_path / f"agent{i}.log").read_text().splitlines() if t.startswith("error:")]
        assert len(lines) == 1 and "host h2: its agent did not connect" in lines[0] and f"refused meanwhile: {h2}" in lines[0], lines
    mine = (wrong / "agent2.log").read_text()
    assert "refused h2" in mine and "its proof does not match this run's secret" in mine, mine[-2000:]
    assert seen == set() and _left(procs) == []
    print(f"the run failed after {time.monotonic() - t0:.1f} s with the connect timeout at 30 s")
