"""End-to-end launches without root: the userspace backend (paced loopback) and the model backend.

Each launch starts torch in every role (~5 s and ~350 MB each), so the assertions are grouped
into one launch per backend (module-scoped fixtures).
"""
from __future__ import annotations

import pytest

from cluster_helpers import broadcast_ratio, check_exchange, outputs, star
from harness.cluster.launch import launch
from harness.record import read_rows
from netem.spec import LinkSpec

pytestmark = pytest.mark.e2e
NBYTES = 40_000
TEN = LinkSpec(rate_bps=10e6)


@pytest.fixture(scope="module")
def userspace_run(tmp_path_factory):
    """Hub unshaped, 3 nodes behind 10mbit downlinks; exchange, then 2 broadcasts of 1.5 MB."""
    run_dir = tmp_path_factory.mktemp("userspace")
    roles = star(3, down=TEN)
    cfg = {"seed": 1, "selftest": {"phases": ["exchange", "probe"], "nbytes": NBYTES,
                                   "probes": [{"op": "broadcast", "nbytes": 1_500_000, "repeat": 2}]}}
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": cfg, "keys": {"run_id": "t", "scenario": "selftest"}},
                    backend="userspace", run_dir=run_dir, hang_timeout_s=60, progress=False, seed=cfg["seed"])
    return result, run_dir, roles


def test_userspace_run_ends_ok_and_records_exact_payload_bytes(userspace_run):
    result, run_dir, roles = userspace_run
    assert (result.status, result.reason, result.backend) == ("ok", "", "userspace")
    assert result.exit_codes == {r.name: 0 for r in roles}
    assert result.qdiscs == {} and result.caps["kernel"]
    seen = check_exchange(run_dir, roles, NBYTES)
    assert all(o["wire"]["tx_bytes"] == 0 and o["backend"] == "userspace" and o["device"] == "cpu" for o in seen)
    rows = read_rows(run_dir)
    assert sorted(rows["role"]) == sorted(r.name for r in roles)
    assert set(rows["backend"]) == {"userspace"} and set(rows["run_id"]) == {"t"}
    by_role = rows.set_index("role")["payload_bytes_up"].to_dict()
    assert by_role == {o["role"]: o["sent"] for o in seen}
    assert (run_dir / "logs" / "hub.log").exists() and (run_dir / "cluster" / "payload.json").exists()


def test_userspace_broadcast_through_downlinks_takes_one_payload_time(userspace_run):
    _, run_dir, _ = userspace_run
    ratio, records = broadcast_ratio(run_dir)
    print(f"userspace broadcast 1.5 MB to 3 nodes via 10mbit downlinks: measured/ideal = {ratio:.3f} "
          f"({[round(r['seconds'], 3) for r in records]} s, ideal {records[0]['ideal_s']:.3f} s)")
    assert records[0]["ideal_s"] == pytest.approx(1.2)
    assert records[0]["payload_bytes"] == 3 * 1_500_000
    # a lower bound only: pacing never beats the rate (less a burst), and 4 processes on a loaded machine
    # may only add time; the window around 1 is a benchmark (tests/benchmarks/test_wire.py, test_pacing.py)
    assert ratio >= 0.85, ratio


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    """Hub uplink 10mbit on the model backend; exchange, one broadcast of 1 MB, then a hang."""
    run_dir = tmp_path_factory.mktemp("model")
    roles = star(2, hub=TEN)
    cfg = {"selftest": {"phases": ["exchange", "probe", "hang"], "nbytes": NBYTES,
                        "probes": [{"op": "broadcast", "nbytes": 1_000_000}]}}
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": cfg}, backend="model", run_dir=run_dir,
                    hang_timeout_s=4, progress=False)
    return result, run_dir, roles


def test_model_backend_reports_modelled_times(model_run):
    _, run_dir, roles = model_run
    check_exchange(run_dir, roles, NBYTES)
    record = outputs(run_dir, "probe")["records"][0]
    assert record["seconds"] == pytest.approx(2 * 0.8) and record["ideal_s"] == pytest.approx(1.6)
    hub = outputs(run_dir, "exchange-hub")
    assert all(t["seconds"] == t["ideal_s"] for t in hub["transfers"])


def test_a_silent_run_fails_as_a_hang_and_is_stopped(model_run):
    result, run_dir, roles = model_run
    assert result.status == "failed" and result.reason.startswith("hang: no progress from any role for ")
    assert all(code is not None and code != 0 for code in result.exit_codes.values())
    assert (run_dir / "selftest" / "hang-hub.json").exists()


def test_a_damaged_payload_reaching_a_live_role_fails_the_run_naming_it(tmp_path):
    """The role that decodes a damaged payload raises, exits non-zero, and the run ends failed
    naming it, with the decoder's error in the log tail (the hub, left waiting, is stopped)."""
    roles = star(1)
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": {"selftest": {"phases": ["damaged"]}}},
                    backend="userspace", run_dir=tmp_path, hang_timeout_s=120, progress=False)
    assert result.status == "failed"
    first = result.reason.splitlines()[0]
    assert first.startswith(f"role {roles[1].name} (rank 1) exited with code 1"), result.reason
    assert "PayloadError" in result.reason, result.reason
    assert result.exit_codes[roles[1].name] == 1
    assert result.exit_codes[roles[0].name] != 0                  # stopped, not left running


@pytest.mark.parametrize("backstop", ["supervisor", "fixed"])
def test_a_hub_computing_longer_than_the_hang_limit_while_beating_keeps_its_waiting_peers(backstop, tmp_path,
                                                                                          monkeypatch):
    """The hub beats for 4 s (a learner evaluating) while its nodes wait at a barrier, with net.hang_timeout_s=1 and
    the margin cut to 1 s. The supervisor hears the beats and the nodes wait (launch.role_wait_s): ok. The control,
    a role's own wait fixed at hang limit + margin (the rule before 2026-12-07), fails the run: the nodes time out."""
    import harness.cluster.launch as launcher

    monkeypatch.setattr(launcher, "WAIT_MARGIN_S", 1.0)
    if backstop == "fixed":
        monkeypatch.setattr(launcher, "ROLE_BACKSTOP_S", 0.0)
    roles = star(2)
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": {"selftest": {"phases": ["busy"],
                                                                                            "busy_s": 4.0}}},
                    backend="userspace", run_dir=tmp_path, hang_timeout_s=1.0, progress=False)
    if backstop == "fixed":
        assert result.status == "failed" and "imed out" in result.reason, result.reason
        return
    assert result.status == "ok", result.reason
    assert {r.name: outputs(tmp_path, f"busy-{r.name}")["got"] for r in roles} == {r.name: "done" for r in roles}
