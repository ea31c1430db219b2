"""End-to-end tier: the overlap mode (onpolicy.staleness=1) on smoke_hilo as real role processes
over shaped links, with a bit flipped in worker 1's state after update 1: the rollouts of
update t come from policy t-1, the drift is still detected within one update and repaired,
and hilo + identity still follows full sync (fp32) bit for bit."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 4
FAULT_STEP = 1


@pytest.fixture(scope="module")
def stale(tmp_path_factory):
    """{variant: (outcome, rows)} of smoke_hilo at staleness 1 with a fault at update FAULT_STEP."""
    from netem.caps import probe

    from harness.record import read_rows
    from harness.compose import compose_config
    from harness.run import run_scenario

    out = tmp_path_factory.mktemp("runs")
    overrides = ["scenario=smoke_hilo", f"out_dir={out}", f"onpolicy.steps={STEPS}", "progress=false",
                 "onpolicy.staleness=1", f"onpolicy.fault_flip_step={FAULT_STEP}", "onpolicy.fault_flip_worker=1",
                 f"net.backend={probe().best_backend()}", "only=[full_sync,hilo_spar,hilo_identity]"]
    return {o.variant: (o, read_rows(o.run_dir)) for o in run_scenario(compose_config(overrides), overrides)}


def _learner(rows):
    return rows[rows.role == "learner"].sort_values("step").reset_index(drop=True)


def test_rollouts_come_from_the_previous_policy(stale):
    assert set(stale) == {"full_sync", "hilo_spar", "hilo_identity"}
    for variant, (outcome, rows) in stale.items():
        assert outcome.status == "ok", f"{variant}: {outcome.reason}"
        for role, part in rows.groupby("role"):
            assert sorted(part.step) == list(range(STEPS)), (variant, role)
            assert list(part.sort_values("step").rollout_policy) == [0, 0, 1, 2], (variant, role)
        learner = _learner(rows)
        assert list(learner.rollout_overlapped) == [False, True, True, True], variant
        assert (learner.staleness == 1).all(), variant
        # measured on the rollouts: the stale policy is not the one trained on them (update 0's are fresh)
        assert learner.rollout_kl.isna().iloc[0] and (learner.rollout_kl.iloc[1:] > 0).all(), variant
        assert learner.bound_s.notna().all() and (learner.bound_s > 0).all(), variant


def test_a_drift_is_detected_within_one_update_and_repaired(stale):
    for variant, (_, rows) in stale.items():
        learner = _learner(rows)
        # the flipped state after update 1 is seen at update 2's acks; with hilo update 2, applied on it,
        # differs too (full sync's update 2 replaces the whole adapter); the repair rides on update 3
        # (before it is applied) and the final state matches
        second = variant == "full_sync"
        assert [bool(v) for v in learner.in_sync] == [True, False, second, True], variant
        assert learner.resync_bytes[FAULT_STEP + 2] > 0, variant
        assert (learner.resync_bytes.drop(FAULT_STEP + 2) == 0).all(), variant
        worker = rows[rows.role == "worker1"].sort_values("step").reset_index(drop=True)
        assert worker["fault"].notna()[FAULT_STEP] and worker.resync_bytes[FAULT_STEP + 2] > 0, variant


def test_hilo_identity_still_follows_full_sync_fp32_bit_for_bit(stale):
    full, hilo = _learner(stale["full_sync"][1]), _learner(stale["hilo_identity"][1])
    assert list(full.loss) == list(hilo.loss)
    assert list(full.accuracy.dropna()) == list(hilo.accuracy.dropna())
