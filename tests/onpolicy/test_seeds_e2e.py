"""End-to-end tier: seeds are an axis. smoke_hilo's full_sync and hilo_spar at seeds 0 and 1
(interleaved: seed 0 of both, then seed 1 of both), and seed 0 of hilo_spar once more in another
results folder: another seed gives other losses, the same seed the same rows (bytes, quality).
Also what run.json records: the load the run ran under and the bases it started from."""
from __future__ import annotations

import pytest

from harness.record import read_rows, read_run_json

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 2
COMMON = ["scenario=smoke_hilo", "progress=false", f"onpolicy.steps={STEPS}", f"onpolicy.eval_every={STEPS}"]
# payload_bytes_up is left out: the uplink's small frames carry measured seconds (a worker's
# apply_s, as JSON text), whose printed length varies by a byte or two from run to run
SAME = ["loss", "accuracy", "policy_kl", "update_bytes", "payload_bytes_down"]


def _backend() -> str:
    from netem.caps import probe

    return probe().best_backend()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from harness.compose import compose_config
    from harness.run import run_scenario

    net = f"net.backend={_backend()}"
    first = COMMON + [net, "only=[full_sync,hilo_spar]", "seeds=[0,1]", f"out_dir={tmp_path_factory.mktemp('a')}"]
    again = COMMON + [net, "only=[hilo_spar]", "seed=0", f"out_dir={tmp_path_factory.mktemp('b')}"]
    return run_scenario(compose_config(first), first), run_scenario(compose_config(again), again)


def _learner(outcome):
    rows = read_rows(outcome.run_dir)
    return rows[rows.role == "learner"].sort_values("step").reset_index(drop=True)


def test_seeds_interleave_and_ids_carry_them(runs):
    first, _ = runs
    assert all(o.status == "ok" for o in first), [(o.run_id, o.reason) for o in first]
    assert [(o.seed, o.variant) for o in first] == [(0, "full_sync"), (0, "hilo_spar"), (1, "full_sync"), (1, "hilo_spar")]
    assert all(o.run_id.startswith(f"{o.variant}-s{o.seed}-") for o in first)


def test_another_seed_changes_the_run_and_the_same_seed_repeats_it(runs):
    first, (again,) = runs
    s0, s1 = (_learner(o) for o in first if o.variant == "hilo_spar")
    assert list(s0.loss) != list(s1.loss)
    rerun = _learner(again)
    assert again.run_id == next(o.run_id for o in first if (o.seed, o.variant) == (0, "hilo_spar"))
    for col in SAME:
        assert s0[col].equals(rerun[col]), col     # exactly (NaN where not evaluated, in the same places)


def test_run_json_records_load_and_bases(runs):
    first, _ = runs
    meta = read_run_json(first[0].run_dir)
    load = meta["load"]
    assert len(load["start"]["loadavg"]) == 3 and len(load["end"]["loadavg"]) == 3
    assert load["cpus"] >= 1 and load["wall_s"] > 0 and load["roles_cpu_s"] > 0
    assert load["machine_cpu_s"] + 0.1 >= load["roles_cpu_s"] and load["others_cpu_s"] >= 0   # /proc/stat covers the roles (clock ticks)
    for kind in ("student", "teacher"):                          # smoke_hilo distills
        assert meta["bases"][kind]["reference"] is True, meta["bases"]
        assert meta["bases"][kind]["sha256"] == meta["bases"][kind]["reference_sha256"]
