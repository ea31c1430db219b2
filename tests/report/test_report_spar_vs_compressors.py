"""HiLo + Spar against HiLo with another compressor in the report: each other compressor that ran at
Spar's budget is judged against Spar on paired seeds (the per-seed final-accuracy difference, Spar
minus the other, superiority), and one at another budget is not compared."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.report.claims import SPECS
from report_synthetic import hilo_claim_rows, hilo_claims

UPDATES = 4
NAN = float("nan")
RUNS = {  # variant: (method, compressor, allocation, budget, update_s, {seed: final accuracy})
    "full_sync_10mbit": ("full_sync", "none", "", NAN, 1.0, {0: 0.90, 1: 0.92, 2: 0.91}),
    "hilo_spar_10mbit": ("hilo", "spar", "energy", 0.016, 1.0, {0: 0.80, 1: 0.84, 2: 0.82}),
    "hilo_powersgd_10mbit": ("hilo", "powersgd", "", 0.016, 1.0, {0: 0.70, 1: 0.75, 2: 0.71}),
    "hilo_topk_b05_10mbit": ("hilo", "topk", "", 0.05, 1.0, {0: 0.88, 1: 0.89, 2: 0.90}),
}
CLAIM = "Spar beats another compressor at the same budget"


def _claims(runs: dict, specs: list) -> pd.DataFrame:
    return hilo_claims(hilo_claim_rows(runs, "hilo_reward", "reward", UPDATES), specs)


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    return _claims(RUNS, [s for s in SPECS if s.method.startswith("HiLo")])


def test_spar_is_judged_against_each_compressor_at_its_budget_on_paired_seeds(claims):
    lines = claims[claims["claim"] == CLAIM]
    assert len(lines) == 1                                  # top-k ran at 5%, not at Spar's 1.6%: no line
    line = lines.iloc[0]
    assert line["estimate"] == pytest.approx((0.10 + 0.09 + 0.11) / 3) and line["n_seeds"] == 3
    assert line["test"] == "superiority" and line["verdict"] == "met"
    assert line["where"].endswith("vs HiLo + powersgd (hilo_powersgd_10mbit)")
    assert line["horizon"].startswith(f"equal updates: final evaluation after {UPDATES} updates")


def test_a_compressor_ahead_of_spar_is_not_met():
    flipped = {**RUNS, "hilo_powersgd_10mbit": ("hilo", "powersgd", "", 0.016, 1.0, {0: 0.90, 1: 0.93, 2: 0.92})}
    line = _claims(flipped, [s for s in SPECS if s.claim == CLAIM]).iloc[0]
    assert line["estimate"] == pytest.approx((-0.10 - 0.09 - 0.10) / 3)
    assert line["verdict"] == "not met"
