"""The one-process path (harness.onpolicy.inproc) follows the emulated run's trajectory bit for
bit in synchronous mode: same loss, gradient norm, payload bytes and held-out accuracy at every
update as real role processes over shaped links (tc as root, userspace otherwise), for a lossy
method (HiLo + Spar) and a lossless one (full sync), smoke_hilo-size. That equality is what lets
harness.tune and the plateau horizon spend compute instead of link time."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 3
VARIANTS = ("hilo_spar", "full_sync")
SAME = ("loss", "grad_norm", "train_reverse_kl", "update_bytes", "payload_bytes_down", "accuracy", "reverse_kl",
        "in_sync")


def _backend() -> str:
    from netem.caps import probe

    return probe().best_backend()


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """{variant: (emulated learner rows, in-process learner rows)}."""
    from harness.onpolicy.inproc import run_in_threads
    from harness.plan import build_plan
    from harness.record import read_rows
    from harness.compose import compose_config
    from harness.scenario import merge_overrides
    from harness.run import run_scenario

    out = tmp_path_factory.mktemp("runs")
    base = ["scenario=smoke_hilo", f"out_dir={out}", f"onpolicy.steps={STEPS}", "onpolicy.eval_every=2",
            "progress=false", f"net.backend={_backend()}"]
    over = [*base, f"only=[{','.join(VARIANTS)}]"]
    outcomes = run_scenario(compose_config(over), over)
    variants = OmegaConf.to_container(compose_config(base).variants, resolve=False)
    result = {}
    for o in outcomes:
        assert o.status == "ok", f"{o.variant}: {o.reason}"
        vcfg = compose_config(merge_overrides(base, list(variants[o.variant])))
        here = tmp_path_factory.mktemp(f"inproc-{o.variant}")
        run_in_threads(build_plan(vcfg), here)
        result[o.variant] = tuple(read_rows(d) for d in (o.run_dir, here))
    return result


def _learner(rows):
    return rows[rows.role == "learner"].sort_values("step").reset_index(drop=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_inproc_follows_the_emulated_trajectory_bit_for_bit(both, variant) -> None:
    real, inproc = (_learner(rows) for rows in both[variant])
    assert list(real.step) == list(inproc.step) == list(range(STEPS))
    for col in SAME:
        assert col in real, col
        a, b = real[col].tolist(), inproc[col].tolist()
        assert [x for x in a if x == x] == [x for x in b if x == x], (variant, col, a, b)   # NaN between evaluations
    assert real["accuracy"].notna().sum() == 2          # evaluated after updates 2 and 3: both compared


def test_inproc_writes_the_rows_of_every_role_as_a_real_run(both) -> None:
    real, inproc = both["hilo_spar"]
    assert sorted(inproc.role.unique()) == sorted(real.role.unique()) == ["learner", "worker0", "worker1"]
    for role, part in inproc.groupby("role"):
        assert sorted(part.step) == list(range(STEPS)), role
