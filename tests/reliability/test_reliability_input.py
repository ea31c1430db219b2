"""Bad input fails with one line naming the key, the value and what is allowed, before any
process or namespace is created (issue 8).

Each case goes through the real entry (`run_scenario`, what `python -m harness` calls) with
the launch machinery replaced by tripwires, and asserts: a ConfigError that starts with the
key, on one line; no role process started, no topology entered; no namespace of this
process; no run directory written. tests/config/test_compose.py covers the message format of
the cases it lists (10mbps, -5mbit, 150% loss, 20parsecs, budget 0 and 1.5, rank 0 and
100000, a missing model directory, unknown backend/dtype, more clients than data, unknown
group names on the command line); the cases here are the others.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import warm_cli

from harness.errors import ConfigError
from reliability_helpers import ROOT, our_namespaces

ONPOLICY = ["scenario=smoke_hilo", "only=[hilo_spar]", "progress=false"]
FEDERATED = ["method=spra", "task=federated", "progress=false"]

BAD = [  # (id, base, overrides, key the message starts with, the value as the message shows it)
    # links: zero or negative rates, unknown units, loss outside [0, 100%], per-node specs
    ("rate_zero", ONPOLICY, ["net.rate=0"], "net.rate", "'0'"),
    ("rate_zero_with_unit", ONPOLICY, ["net.rate=0mbit"], "net.rate", "'0mbit'"),
    ("rate_unknown_unit", ONPOLICY, ["net.rate=10furlongs"], "net.rate", "'10furlongs'"),
    ("uplink_in_bytes_per_second", ONPOLICY, ["net.up=5MB/s"], "net.up", "'5MB/s'"),
    ("hub_rate_negative", ONPOLICY, ["net.hub=-1mbit"], "net.hub", "'-1mbit'"),
    ("loss_just_over_100", ONPOLICY, ["net.loss=100.5%"], "net.loss", "'100.5%'"),
    ("loss_negative", ONPOLICY, ["net.loss=-1%"], "net.loss", "'-1%'"),
    ("jitter_negative", ONPOLICY, ["net.jitter=-3ms"], "net.jitter", "'-3ms'"),
    ("node_rate_zero", ONPOLICY, ["net.nodes=[{rate:0}]"], "net.nodes[0].rate", "0"),
    ("node_loss_over_100", ONPOLICY, ["net.nodes=[{rate:10mbit},{loss:'250%'}]"], "net.nodes[1].loss", "'250%'"),
    ("node_unknown_key", ONPOLICY, ["net.nodes=[{bandwidth:10mbit}]"], "net.nodes[0] key", "'bandwidth'"),
    ("hang_timeout_zero", ONPOLICY, ["net.hang_timeout_s=0"], "net.hang_timeout_s", "0.0"),
    # budgets outside (0, 1]
    ("budget_negative", ONPOLICY, ["compressor.budget=-0.5"], "compressor.budget", "-0.5"),
    ("budget_nan", ONPOLICY, ["compressor.budget=nan"], "compressor.budget", "nan"),
    ("budget_bytes_zero", ONPOLICY, ["compressor.budget_bytes=0"], "compressor.budget_bytes", "0"),
    # ranks < 1 or larger than the layer
    ("lowrank_rank_zero", ONPOLICY, ["method=lowrank", "method.rank=0"], "method.rank", "0"),
    ("lowrank_rank_over_layer", ONPOLICY, ["method=lowrank", "method.rank=129"], "method.rank", "129"),
    ("client_rank_zero", FEDERATED, ["federated.ranks=[4,0]"], "federated.ranks[1]", "0"),
    ("client_rank_over_layer", FEDERATED, ["federated.ranks=[4,4096]"], "federated.ranks[1]", "4096"),
    # clients and data (more clients than examples: test_compose)
    ("no_clients", FEDERATED, ["federated.clients=0"], "federated.clients", "0"),
    ("fraction_zero", FEDERATED, ["federated.fraction=0"], "federated.fraction", "0.0"),
    # a local model directory that is not one (a missing one: test_compose)
    ("model_dir_without_config", ONPOLICY, ["model=hf", "model.path=/tmp"], "model.path", "'/tmp'"),
    # unknown names set as fields (group names on the command line: test_compose) and mismatches
    ("method_name_unknown", ONPOLICY, ["method.name=nonesuch"], "method.name", "'nonesuch'"),
    ("compressor_name_unknown", ONPOLICY, ["compressor.name=zip"], "compressor.name", "'zip'"),
    ("task_name_unknown", ONPOLICY, ["task.name=chess"], "task.name", "'chess'"),
    ("model_name_unknown", ONPOLICY, ["model.name=gpt9"], "model.name", "'gpt9'"),
    ("federated_task_for_onpolicy_method", ONPOLICY, ["task=federated"], "task.name", "'federated'"),
    ("onpolicy_task_for_federated_method", FEDERATED, ["task=distill"], "task.name", "'distill'"),
    ("unknown_variant", ["scenario=smoke_hilo", "only=[nonesuch]"], [], "only", "'nonesuch'"),
]


@pytest.fixture
def tripwires(monkeypatch):
    """Fail the test if anything would start a role process or build a topology."""
    import harness.cluster.launch
    import harness.cluster.supervise
    import netem.topology

    def tripped(what):
        def _fail(*args, **kwargs):
            raise AssertionError(f"bad input reached {what}")
        return _fail

    monkeypatch.setattr(harness.cluster.launch, "launch", tripped("harness.cluster.launch"))
    monkeypatch.setattr(harness.cluster.supervise, "start", tripped("harness.cluster.supervise.start"))
    monkeypatch.setattr(netem.topology.StarTopology, "__enter__", tripped("StarTopology.__enter__"))


def _run(overrides: list[str]):
    from harness.compose import compose_config
    from harness.run import run_scenario

    return run_scenario(compose_config(overrides), overrides)


def _assert_one_line(err: ConfigError, key: str) -> str:
    message = str(err)
    assert message.startswith(key), f"error must name {key!r} first: {message}"
    assert "\n" not in message and "Traceback" not in message, message
    return message


@pytest.mark.parametrize("base, extra, key, shown", [pytest.param(b, e, k, v, id=i) for i, b, e, k, v in BAD])
def test_bad_input_fails_before_anything_is_created(base, extra, key, shown, tripwires, tmp_path):
    out = tmp_path / "runs"
    before = our_namespaces()
    with pytest.raises(ConfigError) as err:
        _run([*base, *extra, f"out_dir={out}"])
    message = _assert_one_line(err.value, key)
    assert f": {shown} " in message, f"error must show the value {shown}: {message}"
    assert our_namespaces() == before
    assert not out.exists(), "a run directory was written for bad input"


def test_loss_on_the_tc_backend_fails_before_launch(tripwires, tmp_path):
    from netem.caps import probe

    caps = probe()
    if not caps.root or caps.qdiscs.get("netem"):
        pytest.skip("needs root on a kernel without sch_netem (tc is then the best backend)")
    for backend in ("tc", "auto"):
        with pytest.raises(ConfigError) as err:
            _run([*ONPOLICY, f"net.backend={backend}", "net.loss=1%", f"out_dir={tmp_path}"])
        message = _assert_one_line(err.value, "net.loss")
        assert "'1%'" in message and "tc" in message, message
    with pytest.raises(ConfigError) as err:      # a per-node loss is caught as well
        _run([*ONPOLICY, "net.nodes=[{rate:10mbit},{rate:10mbit,loss:'0.5%'}]", f"out_dir={tmp_path}"])
    _assert_one_line(err.value, "net.nodes[1].loss")


def test_loss_on_the_userspace_and_model_backends_fails_before_launch(tripwires, tmp_path):
    for backend in ("userspace", "model"):
        with pytest.raises(ConfigError) as err:
            _run([*ONPOLICY, f"net.backend={backend}", "net.loss=2%", f"out_dir={tmp_path}"])
        message = _assert_one_line(err.value, "net.loss")
        assert backend in message and "netem" in message, message


@pytest.fixture
def not_root(monkeypatch):
    """This process looks unprivileged: euid 65534 and no CAP_NET_ADMIN (probe re-checks live)."""
    import netem.caps

    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    monkeypatch.setattr(netem.caps, "may_admin_net", lambda: False)
    assert not netem.caps.probe().root
    yield
    monkeypatch.undo()
    netem.caps.probe()                           # re-read the real capabilities


@pytest.mark.parametrize("backend", ["tc", "netem"])
def test_not_root_asking_for_a_kernel_backend_fails_clearly(backend, not_root, tripwires, tmp_path):
    with pytest.raises(ConfigError) as err:
        _run([*ONPOLICY, f"net.backend={backend}", f"out_dir={tmp_path}"])
    message = _assert_one_line(err.value, "net.backend")
    assert backend in message and "root" in message and "userspace" in message, message


@pytest.mark.e2e
def test_not_root_auto_falls_back_to_userspace_and_says_so_in_run_json(not_root, monkeypatch, tmp_path):
    """A real run (the launch is wrapped, not replaced: it records the backend it was given), so the
    rows are the roles' own: each names its backend."""
    import harness.cluster.launch
    from harness.record import read_rows
    from reliability_helpers import warm_cache

    calls = []
    real_launch = harness.cluster.launch.launch

    def recording_launch(roles, entry, payload, *, backend, **kwargs):
        calls.append(backend)
        return real_launch(roles, entry, payload, backend=backend, **kwargs)

    monkeypatch.setattr(harness.cluster.launch, "launch", recording_launch)
    overrides = [*ONPOLICY, "net.backend=auto", "onpolicy.workers=1", "onpolicy.steps=2", "onpolicy.eval_every=0",
                 "onpolicy.policy_kl=false", "task.eval_prompts=4", "net.hang_timeout_s=120", f"out_dir={tmp_path}"]
    warm_cache(overrides)
    outcomes = _run(overrides)
    assert [o.status for o in outcomes] == ["ok"], [o.reason for o in outcomes]
    assert calls == ["userspace"]
    meta = json.loads((outcomes[0].run_dir / "run.json").read_text())
    assert meta["backend"] == "userspace"
    reason = meta["backend_reason"]
    assert "root" in reason and "\n" not in reason, reason
    frame = read_rows(outcomes[0].run_dir)
    assert len(frame) > 0 and {"learner", "worker0"} <= set(frame.role)
    assert "backend" in frame.columns and frame.backend.notna().all(), "a row without its backend"
    assert set(frame.backend) == {"userspace"}, set(frame.backend)      # a key column of every row, every role


@pytest.mark.parametrize("args, key", [
    (["net.rate=0"], "net.rate"),
    (["net.nodes=[{rate:10mbit},{rate:-3mbit}]"], "net.nodes[1].rate"),
], ids=["rate_zero", "node_rate_negative"])
def test_the_command_line_prints_one_line_and_creates_nothing(args, key, tmp_path):
    out = tmp_path / "runs"
    proc = warm_cli.popen("harness", ["scenario=smoke_hilo", f"out_dir={out}", *args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}:"), stderr
    assert "Traceback" not in stderr + stdout
    assert not out.exists()
    assert our_namespaces(proc.pid) == []


@pytest.mark.parametrize("where", ["kernel_fs", "missing_parent", "a_file"])
def test_an_unusable_out_dir_fails_before_anything_is_created(where, tripwires, tmp_path):
    """out_dir on /proc, under a parent that does not exist, or naming a file: one line naming
    out_dir and the value, before any planning, namespace or folder (harness.checks)."""
    if where == "kernel_fs" and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    (tmp_path / "file").write_text("")
    value = {"kernel_fs": "/proc/narrowband-runs", "missing_parent": str(tmp_path / "no" / "such" / "runs"),
             "a_file": str(tmp_path / "file")}[where]
    before = our_namespaces()
    with pytest.raises(ConfigError) as err:
        _run([*ONPOLICY, f"out_dir={value}"])
    message = _assert_one_line(err.value, "out_dir")
    assert message.startswith(f"out_dir: {value}: ") and "nothing was started" in message, message
    assert our_namespaces() == before and not (tmp_path / "no").exists()


@pytest.mark.parametrize("args, key", [
    (["compressor.budgt=0.1"], "compressor.budgt"),
    (["seed=0,1"], "seed"),
    (["out_dir=/proc/narrowband-runs"], "out_dir"),
], ids=["unknown_key", "seed_sweep_without_m", "out_dir_on_proc"])
def test_the_command_line_names_the_key_of_other_bad_input(args, key, tmp_path):
    proc = warm_cli.popen("harness", ["scenario=smoke_hilo", *args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}:"), stderr
    assert "Traceback" not in stderr + stdout
    assert our_namespaces(proc.pid) == []
