"""onpolicy.eval_base: the learner evaluates the base policy (the adapter before update 0) on the
held-out prompts and records it as ``base_<metric>`` on row 0, outside every timed window, without
touching the run's trajectory (greedy evaluation draws no random numbers)."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

pytestmark = [pytest.mark.slow]

STEPS = 2
SAME = ("loss", "grad_norm", "update_bytes", "payload_bytes_down", "accuracy", "reverse_kl")


def _learner(tmp_path, name: str, *extra: str):
    from harness.onpolicy.inproc import run_in_threads
    from harness.plan import build_plan
    from harness.record import read_rows
    from harness.compose import compose_config
    from harness.scenario import merge_overrides

    base = ["scenario=smoke_hilo", f"onpolicy.steps={STEPS}", "onpolicy.eval_every=0", "progress=false", *extra]
    variants = OmegaConf.to_container(compose_config(base).variants, resolve=False)
    cfg = compose_config(merge_overrides(base, list(variants["full_sync"])))
    here = tmp_path / name
    here.mkdir()
    run_in_threads(build_plan(cfg), here)
    rows = read_rows(here)
    return rows[rows.role == "learner"].sort_values("step").reset_index(drop=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval_base")
    return {name: _learner(tmp, name, *extra) for name, extra in (
        ("plain", ()), ("base", ("onpolicy.eval_base=true",)), ("timing", ("onpolicy.eval_final=false",)),
        ("frozen", ("onpolicy.eval_base=true", "onpolicy.lr=0")))}


def test_the_base_evaluation_lands_on_row_0_only(runs):
    learner = runs["base"]
    assert "base_accuracy" not in runs["plain"]
    assert learner["base_accuracy"].notna().tolist() == [True] + [False] * (STEPS - 1)
    assert 0.0 <= learner.at[0, "base_accuracy"] <= 1.0


def test_the_base_evaluation_leaves_the_trajectory_alone(runs):
    plain, base = runs["plain"], runs["base"]
    assert base["update_s"].notna().all()       # a wall-clock time: only its presence at every update
    for col in SAME:
        a, b = plain[col].tolist(), base[col].tolist()
        assert [x for x in a if x == x] == [x for x in b if x == x], (col, a, b)


def test_an_adapter_that_never_moves_scores_the_base(runs):
    """lr 0: every update leaves the adapter where it started, so the final evaluation is the base's."""
    frozen = runs["frozen"]
    assert frozen["accuracy"].dropna().iloc[-1] == frozen.at[0, "base_accuracy"]
    assert frozen["reverse_kl"].dropna().iloc[-1] == pytest.approx(frozen.at[0, "base_reverse_kl"])


def test_a_timing_only_run_evaluates_nothing_and_trains_the_same(runs):
    """onpolicy.eval_final=false with eval_every 0: no held-out metric at all (the run measures time
    and bytes only), the same trajectory."""
    plain, timing = runs["plain"], runs["timing"]
    assert "accuracy" not in timing or timing["accuracy"].isna().all()
    assert "eval_s" not in timing or timing["eval_s"].isna().all()
    for col in ("loss", "grad_norm", "update_bytes"):
        assert plain[col].tolist() == timing[col].tolist(), col
