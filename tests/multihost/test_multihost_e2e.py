"""End to end across 3 stand-in hosts (namespaces on a bridge, each running python -m harness.commands.node
with the environment srun gives it): the same bytes and quality per seed as the one-host star,
every shaped pair calibrated within 10%, nothing left in any host after success, a missing host,
or a SIGKILL of one agent; bad placement input is one line and exit 2."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multihost_hosts import module_in_host, stand_in_hosts
from netem.names import list_ours

ROOT = Path(__file__).resolve().parents[2]
HILO = ("smoke_hilo", "hilo_spar")
SPRA = ("smoke_spra", "spra")


def secret_file(folder: Path) -> Path:
    """The run's secret as the launcher makes it: a 0600 file (here in the test's folder)."""
    path = folder / "run.secret"
    if not path.exists():
        from harness.multihost.secret import new_secret

        new_secret(path)
    return path


def _agents(hosts, args: list[str], out: Path, ranks=(0, 1, 2), **env) -> list[subprocess.Popen]:
    """One agent per stand-in host with srun's variables (SLURM_JOB_NODELIST, SLURM_NODEID), MASTER_ADDR
    and the run's secret (NARROWBAND_SECRET_FILE, as the sbatch script exports it)."""
    procs = []
    for i in ranks:
        environ = {**os.environ, "SLURM_JOB_NODELIST": "h[0-2]", "SLURM_NODEID": str(i), "PYTHONPATH": str(ROOT),
                   "MASTER_ADDR": hosts.nodes["h0"].addr, "NARROWBAND_CONNECT_TIMEOUT_S": "180",
                   "NARROWBAND_SECRET_FILE": str(secret_file(out)), **env}
        log = open(out / f"agent{i}.log", "w")
        procs.append(module_in_host(hosts, i, "harness.commands.node",
                                    [*args, "placement.source=slurm", f"out_dir={out / 'multi'}", "progress=false"],
                                    env=environ, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
    return procs


def _left(procs) -> list[str]:
    """Namespaces still owned by any of these agents (or their overlays' guards' owners)."""
    pids = {str(p.pid) for p in procs}
    return [n.name for n in list_ours() if n.owner in pids]


def _run_dir(base: Path, scenario: str, variant: str) -> Path:
    found = sorted((base / scenario).glob(f"{variant}-s0-*"))
    assert len(found) == 1, found
    return found[0]


def _hub(run: Path):
    from harness.record import read_rows

    rows = read_rows(run)
    return rows, rows[rows["role"].isin(["learner", "server"])].sort_values("step")


def test_bad_placement_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """One real command for the exit status and the single line; the other cases through main() in-process:
    a one-host placement, and a good placement with no run secret (docs/security.md)."""
    from harness.commands.node import main

    done = subprocess.run([sys.executable, "-m", "harness.commands.node", "scenario=smoke_hilo", "only=[hilo_spar]",
                           "placement.source=hostfile", f"placement.hostfile={tmp_path / 'none'}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "cannot be read" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert main(["scenario=smoke_hilo", "only=[hilo_spar]", "placement.source=star"]) == 2
    err = capsys.readouterr().err
    assert "gives one host" in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "hosts").write_text("h0 addr=127.0.0.1\nh1 addr=127.0.0.2\n")
    for name in ("NARROWBAND_SECRET_FILE", "NARROWBAND_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NARROWBAND_NODE_RANK", "0")
    assert main(["scenario=smoke_hilo", "only=[hilo_spar]", "placement.source=hostfile",
                 f"placement.hostfile={tmp_path / 'hosts'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: NARROWBAND_SECRET_FILE: not set") and len(err.strip().splitlines()) == 1, err


@pytest.mark.emulated
@pytest.mark.e2e
def test_a_host_that_never_comes_is_named_and_nothing_is_built(kernel_backend, tmp_path):
    with stand_in_hosts(3) as hosts:
        procs = _agents(hosts, ["scenario=smoke_hilo", "only=[hilo_spar]"], tmp_path, ranks=(0, 1),
                        NARROWBAND_CONNECT_TIMEOUT_S="30")   # agent 1 plans as slowly as agent 0 does
        seen: set[str] = set()
        while any(p.poll() is None for p in procs):
            seen |= {n.name for n in list_ours() if n.owner in {str(p.pid) for p in procs} and n.role != "caps"}
            time.sleep(0.2)
        assert [p.returncode for p in procs] == [2, 2]
        for i in (0, 1):
            text = (tmp_path / f"agent{i}.log").read_text()
            assert "host h2: its agent did not connect" in text, text
        assert seen == set() and _left(procs) == []


@pytest.mark.emulated
@pytest.mark.e2e
def test_a_sigkilled_agent_fails_the_run_everywhere_and_nothing_is_left(kernel_backend, tmp_path):
    with stand_in_hosts(3) as hosts:
        procs = _agents(hosts, ["scenario=smoke_hilo", "only=[hilo_spar]", "onpolicy.steps=60"], tmp_path)
        try:
            deadline = time.monotonic() + 600
            rows = tmp_path / "multi" / "smoke_hilo"
            while time.monotonic() < deadline and not list(rows.glob("hilo_spar-s0-*/rows/worker1-*.parquet")):
                assert all(p.poll() is None for p in procs), (tmp_path / "agent0.log").read_text()[-3000:]
                time.sleep(0.5)
            os.kill(procs[2].pid, signal.SIGKILL)                # h2's agent, mid-run
            codes = [p.wait(timeout=300) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert codes[0] == 1 and codes[1] == 1 and codes[2] == -signal.SIGKILL
        deadline = time.monotonic() + 30                         # h2's guard removes what its agent left
        while time.monotonic() < deadline and _left(procs):
            time.sleep(0.2)
        assert _left(procs) == []
        meta = json.loads((_run_dir(tmp_path / "multi", "smoke_hilo", "hilo_spar") / "run.json").read_text())
        assert meta["status"] == "failed" and "h2" in meta["reason"], meta["reason"]


@pytest.mark.emulated
@pytest.mark.e2e
def test_userspace_across_hosts_runs_unshaped_by_the_kernel_and_says_so(kernel_backend, tmp_path):
    """Where agents may not shape (no CAP_NET_ADMIN), net.backend=userspace: the hosts' own network,
    paced by the transport, no overlay and no calibration, labelled in run.json and every row."""
    with stand_in_hosts(3) as hosts:
        procs = _agents(hosts, ["scenario=smoke_hilo", "only=[hilo_spar]", "net.backend=userspace"], tmp_path)
        codes = [p.wait(timeout=900) for p in procs]
        assert codes == [0, 0, 0], (tmp_path / "agent0.log").read_text()[-3000:]
        assert _left(procs) == []
    run = _run_dir(tmp_path / "multi", "smoke_hilo", "hilo_spar")
    meta = json.loads((run / "run.json").read_text())
    assert meta["backend"] == "userspace" and "NO kernel shaping" in meta["backend_reason"]
    assert meta["calibration"] == [] and meta["overlays"] == {}
    rows, _ = _hub(run)
    assert set(rows["backend"]) == {"userspace"} and set(rows["host"]) == {"h0", "h1", "h2"}
