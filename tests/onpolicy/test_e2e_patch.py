"""End-to-end tier of ``patch``: smoke_hilo's full_sync (here with a bf16 wire) and patch
variants as real role processes over shaped links, 3 updates. The workers sample with the
adapter they hold, so equal losses at every update mean equal worker states at every update:
patch's trajectory is full sync (bf16)'s bit for bit, and every verified checksum matched."""
from __future__ import annotations

import pytest

from harness.onpolicy.patch import PATCH_OVERHEAD

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from netem.caps import probe

    from harness.record import read_rows
    from harness.compose import compose_config
    from harness.run import run_scenario

    out = tmp_path_factory.mktemp("runs")
    overrides = ["scenario=smoke_hilo", "only=[full_sync,patch]", "method.sync_dtype=bf16", f"out_dir={out}",
                 f"onpolicy.steps={STEPS}", f"onpolicy.eval_every={STEPS}", "progress=false",
                 f"net.backend={probe().best_backend()}"]
    outcomes = run_scenario(compose_config(overrides), overrides)
    return {o.variant: (o, read_rows(o.run_dir)) for o in outcomes}


def _learner(rows):
    return rows[rows.role == "learner"].sort_values("step").reset_index(drop=True)


def test_patch_trajectory_equals_full_sync_bf16_bit_for_bit(runs):
    assert set(runs) == {"full_sync", "patch"}
    for variant, (outcome, _) in runs.items():
        assert outcome.status == "ok", f"{variant}: {outcome.reason}"
    full, part = _learner(runs["full_sync"][1]), _learner(runs["patch"][1])
    assert list(full.loss) == list(part.loss)
    assert list(full.accuracy.dropna()) == list(part.accuracy.dropna())
    assert list(full.worker_accuracy.dropna()) == list(part.worker_accuracy.dropna())
    assert list(full.policy_kl) == list(part.policy_kl)
    assert [bool(v) for v in part.in_sync] == [True] * STEPS


def test_patch_rows_carry_the_payload_split(runs):
    rows = runs["patch"][1]
    part = _learner(rows)
    assert list(part.update_bytes) == list(part.patch_index_bytes + part.patch_value_bytes + PATCH_OVERHEAD)
    assert (part.patch_raw_value_bytes == 2 * part.patch_changed).all()
    assert ((part.patch_changed_frac > 0) & (part.patch_changed_frac <= 1)).all()
    assert part.encode_s.notna().all()
    workers = rows[rows.role != "learner"]
    assert workers.decode_s.notna().all() and workers.scatter_s.notna().all()
