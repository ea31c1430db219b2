"""Two horizons of one comparison (``onpolicy.steps``: the run.json key ``steps``): each HiLo run is
paired with the full sync of its own horizon, and the quality claim is judged once per horizon."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from harness.report.claims import SPECS, claims_frame
from harness.report.metrics import onpolicy_runs, onpolicy_table
from harness.report.tables import Tables, hilo_table

RUNS = {  # variant: (method, compressor, steps, {seed: final accuracy})
    "full_sync_10mbit": ("full_sync", "none", 4, {0: 0.80, 1: 0.82, 2: 0.81}),
    "hilo_spar_10mbit": ("hilo", "spar", 4, {0: 0.60, 1: 0.62, 2: 0.61}),
    "full_sync_long_10mbit": ("full_sync", "none", 8, {0: 0.90, 1: 0.92, 2: 0.91}),
    "hilo_spar_long_10mbit": ("hilo", "spar", 8, {0: 0.90, 1: 0.91, 2: 0.90}),
}


def _rows() -> pd.DataFrame:
    lines = []
    for variant, (method, comp, steps, seeds) in RUNS.items():
        for seed, acc in seeds.items():
            for step in range(steps):
                common = dict(kind="onpolicy", run_id=f"{variant}-s{seed}", step=step, scenario="hilo_distill",
                              backend="tc", variant=variant, method=method, compressor=comp, task="distill",
                              rate_mbit=10.0, delay_ms=0.0, rank=64, ref_rank=64, staleness=0, seed=seed,
                              allocation="energy" if comp == "spar" else "", steps=float(steps),
                              budget_frac=0.016 if method == "hilo" else float("nan"))
                lines.append({**common, "role": "learner", "update_s": 1.0 if method == "hilo" else 2.0,
                              "payload_bytes_down": 1000.0, "accuracy": acc * (step + 1) / steps})   # evaluated every update
                lines.append({**common, "role": "worker0"})
    return pd.DataFrame(lines)


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return onpolicy_runs(_rows())


def test_each_run_pairs_with_the_full_sync_of_its_own_horizon(runs):
    paired = dict(zip(runs["variant"], runs["baseline_variant"]))
    assert paired["hilo_spar_10mbit"] == "full_sync_10mbit"
    assert paired["hilo_spar_long_10mbit"] == "full_sync_long_10mbit"        # not the shorter run at the same link
    long = runs[runs["variant"] == "hilo_spar_long_10mbit"].sort_values("seed")
    assert list(long["quality_retained"]) == pytest.approx([0.90 / 0.90, 0.91 / 0.92, 0.90 / 0.91])


def test_the_quality_claim_is_judged_once_per_horizon(runs):
    empty = pd.DataFrame()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=runs)), spra=empty, sweep=empty, backends=empty, hilo_runs=runs)
    spec = next(s for s in SPECS if s.claim == "quality within 2% of full sync")
    frame = claims_frame(tables, [spec])
    assert len(frame) == 2
    by_updates = {re.search(r"after (\d+) updates", h).group(1): e for h, e in zip(frame["horizon"], frame["estimate"])}
    assert by_updates["4"] == pytest.approx((0.60 / 0.80 + 0.62 / 0.82 + 0.61 / 0.81) / 3)
    assert by_updates["8"] == pytest.approx((1.0 + 0.91 / 0.92 + 0.90 / 0.91) / 3)


def test_the_report_tables_keep_what_the_horizon_claims_read():
    """build_tables (what the report writes and judges) keeps the per-run horizon columns: without them the
    equal-wall-clock claims and the plateau test had no values in a real report."""
    from harness.report.collect import Collection
    from harness.report.tables import build_tables

    rows = _rows()
    tables = build_tables(Collection(results_dir=Path("/nonexistent"), runs=[], rows=rows))
    spec = next(s for s in SPECS if s.claim == "quality within 2% of full sync at equal wall-clock time")
    frame = claims_frame(tables, [spec])
    assert len(frame) == 2 and (frame["n_seeds"] == 3).all()
    for column in ("final_slope", "equal_time_s", "quality_retained_equal_time", "time_to_95_vs_full"):
        assert column in tables.hilo_runs, column


def test_a_timing_only_run_enters_the_speedup_claim_but_no_quality_claim():
    """onpolicy.eval_final=false (hilo_real's short runs at 5 Mbit/s): the run measures time and bytes only,
    so it is judged for speedup and bytes and never appears in a quality claim (no n=0 line)."""
    rows = _rows()
    timing = []
    for variant, method, comp in (("full_sync_5mbit", "full_sync", "none"), ("hilo_spar_5mbit", "hilo", "spar")):
        for seed in (0, 1, 2):
            for step in range(2):
                common = dict(kind="onpolicy", run_id=f"{variant}-s{seed}", step=step, scenario="hilo_distill",
                              backend="tc", variant=variant, method=method, compressor=comp, task="distill",
                              rate_mbit=5.0, delay_ms=0.0, rank=64, ref_rank=64, staleness=0, seed=seed,
                              allocation="energy" if comp == "spar" else "", steps=2.0,
                              budget_frac=0.016 if method == "hilo" else float("nan"))
                timing.append({**common, "role": "learner", "update_s": 1.0 if method == "hilo" else 4.0,
                               "payload_bytes_down": 1000.0})           # no accuracy: nothing evaluated
                timing.append({**common, "role": "worker0"})
    runs = onpolicy_runs(pd.concat([rows, pd.DataFrame(timing)], ignore_index=True))
    empty = pd.DataFrame()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=runs)), spra=empty, sweep=empty, backends=empty, hilo_runs=runs)
    frame = claims_frame(tables)
    at5 = frame[frame["where"].str.contains(" 5 Mbit/s")]
    assert set(at5["claim"]) == {"update speedup >= 2.2x vs full sync",
                                 "bytes per update <= 1.6% of full sync (a cap on every update)"} \
        or set(at5["claim"]) == {"update speedup >= 2.2x vs full sync"}
    speed = at5[at5["claim"] == "update speedup >= 2.2x vs full sync"].iloc[0]
    assert speed["estimate"] == pytest.approx(4.0) and speed["n_seeds"] == 3
    assert (at5["n_seeds"] == 3).all()
