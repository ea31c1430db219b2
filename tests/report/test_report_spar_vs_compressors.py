"""HiLo + Spar against HiLo with another compressor in the report: each other compressor that ran at
Spar's budget is judged against Spar on paired seeds (the per-seed final-accuracy difference, Spar
minus the other, superiority), and one at another budget is not compared."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.report.claims import SPECS, claims_frame
from harness.report.metrics import onpolicy_runs, onpolicy_table
from harness.report.tables import Tables, hilo_table

UPDATES = 4
RUNS = {  # variant: (method, compressor, budget, {seed: final accuracy})
    "full_sync_10mbit": ("full_sync", "none", float("nan"), {0: 0.90, 1: 0.92, 2: 0.91}),
    "hilo_spar_10mbit": ("hilo", "spar", 0.016, {0: 0.80, 1: 0.84, 2: 0.82}),
    "hilo_powersgd_10mbit": ("hilo", "powersgd", 0.016, {0: 0.70, 1: 0.75, 2: 0.71}),
    "hilo_topk_b05_10mbit": ("hilo", "topk", 0.05, {0: 0.88, 1: 0.89, 2: 0.90}),
}
CLAIM = "Spar beats another compressor at the same budget"


def _rows() -> pd.DataFrame:
    lines = []
    for variant, (method, comp, budget, seeds) in RUNS.items():
        for seed, acc in seeds.items():
            for step in range(UPDATES):
                common = dict(kind="onpolicy", run_id=f"{variant}-s{seed}", step=step, scenario="hilo_reward",
                              backend="tc", variant=variant, method=method, compressor=comp, task="reward",
                              rate_mbit=10.0, delay_ms=0.0, rank=64, ref_rank=64, staleness=0, seed=seed,
                              allocation="energy" if comp == "spar" else "", budget_frac=budget)
                last = step == UPDATES - 1
                lines.append({**common, "role": "learner", "update_s": 1.0, "payload_bytes_down": 1000.0,
                              "accuracy": acc if last else float("nan")})
                lines.append({**common, "role": "worker0"})
    return pd.DataFrame(lines)


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    runs = onpolicy_runs(_rows())
    empty = pd.DataFrame()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=runs)), spra=empty, sweep=empty, backends=empty, hilo_runs=runs)
    return claims_frame(tables, [s for s in SPECS if s.method.startswith("HiLo")])


def test_spar_is_judged_against_each_compressor_at_its_budget_on_paired_seeds(claims):
    lines = claims[claims["claim"] == CLAIM]
    assert len(lines) == 1                                  # top-k ran at 5%, not at Spar's 1.6%: no line
    line = lines.iloc[0]
    assert line["estimate"] == pytest.approx((0.10 + 0.09 + 0.11) / 3) and line["n_seeds"] == 3
    assert line["test"] == "superiority" and line["verdict"] == "met"
    assert line["where"].endswith("vs HiLo + powersgd (hilo_powersgd_10mbit)")
    assert line["horizon"].startswith(f"equal updates: final evaluation after {UPDATES} updates")


def test_a_compressor_ahead_of_spar_is_not_met():
    flipped = {**RUNS, "hilo_powersgd_10mbit": ("hilo", "powersgd", 0.016, {0: 0.90, 1: 0.93, 2: 0.92})}
    rows = _rows()
    for seed, acc in flipped["hilo_powersgd_10mbit"][3].items():
        hit = (rows["variant"] == "hilo_powersgd_10mbit") & (rows["seed"] == seed) & rows["accuracy"].notna()
        rows.loc[hit, "accuracy"] = acc
    runs = onpolicy_runs(rows)
    empty = pd.DataFrame()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=runs)), spra=empty, sweep=empty, backends=empty, hilo_runs=runs)
    line = claims_frame(tables, [s for s in SPECS if s.claim == CLAIM]).iloc[0]
    assert line["estimate"] == pytest.approx((-0.10 - 0.09 - 0.10) / 3)
    assert line["verdict"] == "not met"
