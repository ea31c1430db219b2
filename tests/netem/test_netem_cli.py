"""`python -m netem` end to end, and the probe's accuracy (TCP goodput against the configured L2 rate)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from netem import LinkSpec
from netem.measure import TCP_PAYLOAD, L2_FRAME, run
from netem_helpers import FLOOR, REPO, best_of_trials, ours_of


def netem_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "netem", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, named", [
    (["probe", "--rate", "10mbps"], "--rate: '10mbps'"),
    (["probe", "--rate", "10mbit", "--delay", "20"], "--delay: '20'"),
    (["up", "--nodes", "0"], "--nodes: 0"),
    (["probe", "--rat", "10mbit"], "unrecognized arguments: --rat"),
    (["probe", "--rate", "10mbit", "--bytes", "lots"], "--bytes: 'lots'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_is_one_line_and_exit_2(args, named):
    done = netem_cli(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and named in done.stderr and "Traceback" not in done.stderr


def test_check_reports_capabilities_and_backend():
    done = netem_cli("check", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert set(found["qdiscs"]) == {"netem", "tbf", "htb", "ingress", "ifb", "mirred"}
    assert found["best_backend"] in ("netem", "tc", "userspace")
    assert "best backend:" in netem_cli("check").stdout


@pytest.mark.emulated
@pytest.mark.parametrize("rate", ["5mbit", "20mbit", "100mbit"])
def test_probe_measures_the_configured_rate(emulation, rate):
    """TCP goodput is capped by the configured L2 rate and comes close to it (see netem_helpers.CAP/FLOOR)."""
    spec = LinkSpec.parse(rate=rate)
    results = []

    def measure():
        results.append(run(spec, nbytes=int(spec.rate_bps / 8 * 1.0)))
        return results[-1].measured_bps

    best, _ = best_of_trials(measure, spec.rate_bps)
    result = results[-1]
    assert best >= FLOOR, [r.lines() for r in results]
    assert result.tcp_ceiling_bps == pytest.approx(spec.rate_bps * TCP_PAYLOAD / L2_FRAME)
    assert result.wire_bytes >= result.payload_bytes                       # counters see headers too
    assert not ours_of(os.getpid())


@pytest.mark.emulated
def test_probe_cli_prints_json_and_cleans_up(emulation):
    def probe():
        done = netem_cli("probe", "--rate", "20mbit", "--bytes", "1mb", "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["configured_bps"] == 20e6
        return result["measured_bps"]

    best, seen = best_of_trials(probe, 20e6)
    assert best >= FLOOR, seen
    human = netem_cli("probe", "--rate", "20mbit", "--bytes", "256kb")
    assert "L2 rate" in human.stdout and "TCP goodput" in human.stdout and "rtt" in human.stdout


@pytest.mark.emulated
def test_up_leaves_a_star_standing_until_down(emulation, tmp_path):
    env = {"NARROWBAND_STATE_DIR": str(tmp_path)}
    done = netem_cli("up", "--nodes", "3", "--rate", "10mbit", "--json", env=env)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    prefix = info["prefix"]
    try:
        assert [n["name"] for n in info["nodes"]] == ["node0", "node1", "node2"]
        assert len(ours_of("up")) >= 4 and (tmp_path / f"{prefix}.json").exists()
        reach = subprocess.run(["ip", "netns", "exec", info["nodes"][1]["netns"], sys.executable, "-c",
                                "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print('ok')",
                                info["nodes"][1]["addr"]], capture_output=True, text=True)
        assert reach.stdout.strip() == "ok", reach.stderr
        assert netem_cli("clean", env=env).returncode == 0                     # clean keeps `up` topologies
        assert f"{prefix}-sw" in ours_of("up")
    finally:
        down = netem_cli("down", "--prefix", prefix, env=env)
    assert down.returncode == 0, down.stderr
    assert not [n for n in ours_of("up") if n.startswith(prefix)] and not (tmp_path / f"{prefix}.json").exists()
