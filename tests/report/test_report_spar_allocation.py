"""Spar's allocation ablation in the report: a HiLo + Spar run with another allocation is a
configuration of its own (the ``allocation`` key, from run.json), the headline HiLo claims judge the
paper's (energy) only, and each other allocation is judged against energy as paired seeds."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.report.claims import SPECS
from report_synthetic import hilo_claim_rows, hilo_claims

UPDATES = 4
NAN = float("nan")
RUNS = {  # variant: (method, compressor, allocation, budget, update_s, {seed: final accuracy})
    "full_sync_10mbit": ("full_sync", "none", "", NAN, 2.0, {0: 0.90, 1: 0.92, 2: 0.91}),
    "hilo_spar_10mbit": ("hilo", "spar", "energy", 0.016, 1.0, {0: 0.80, 1: 0.84, 2: 0.82}),
    "hilo_spar_preconditioned_10mbit": ("hilo", "spar", "preconditioned", 0.016, 1.1, {0: 0.85, 1: 0.88, 2: 0.87}),
}


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    return hilo_claims(hilo_claim_rows(RUNS, "hilo_distill", "distill", UPDATES),
                       [s for s in SPECS if s.method.startswith("HiLo")])


def test_the_headline_claims_judge_the_papers_allocation_only(claims):
    quality = claims[claims["claim"] == "quality within 2% of full sync"]
    assert len(quality) == 1                                     # not one line per allocation
    assert quality["estimate"].iloc[0] == pytest.approx((0.80 / 0.90 + 0.84 / 0.92 + 0.82 / 0.91) / 3)


def test_each_other_allocation_is_judged_against_energy_on_paired_seeds(claims):
    ablation = claims[claims["method"] == "HiLo (ablation)"].set_index("claim")
    pre = ablation.loc[[c for c in ablation.index if c.startswith("allocation ablation: preconditioned")][0]]
    assert pre["estimate"] == pytest.approx((0.05 + 0.04 + 0.05) / 3) and pre["n_seeds"] == 3
    assert pre["verdict"] == "met" and pre["where"].endswith("vs hilo_spar_10mbit (energy)")
    assert pre["horizon"].startswith(f"equal updates: final evaluation after {UPDATES} updates")
    assert not any(c.startswith("allocation ablation: normalized") for c in ablation.index)   # it did not run
