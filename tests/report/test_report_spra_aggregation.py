"""SPRA's aggregation ablation is judged as paired variants where both sides ran, and the lr-rule
claim keeps pairing spra with spra_const_lr when more const-lr variants exist."""
from __future__ import annotations

import pandas as pd

from harness.report.claims import SPECS, claims_frame
from harness.report.tables import Tables

ACC = {"spra": {0: 0.80, 1: 0.81, 2: 0.82}, "spra_const_lr": {0: 0.85, 1: 0.86, 2: 0.84},
       "spra_product": {0: 0.83, 1: 0.85, 2: 0.84}, "spra_product_const_lr": {0: 0.70, 1: 0.70, 2: 0.71}}
RULE = {"spra": "linear", "spra_const_lr": "const", "spra_product": "linear", "spra_product_const_lr": "const"}


def _tables() -> Tables:
    base = {"backend": "tc", "scenario": "spra_federated", "task": "federated", "rate_mbit": 20.0, "delay_ms": 0.0,
            "trace": None, "optimizer": "sgd", "resample_every": 5, "method": "spra", "ranks": "64,32"}
    order = ["spra_product_const_lr", "spra", "spra_const_lr", "spra_product"]     # a const ablation listed first
    configs = pd.DataFrame([{**base, "variant": v, "lr_rule": RULE[v]} for v in order])
    runs = pd.DataFrame([{**base, "variant": v, "lr_rule": RULE[v], "seed": s, "accuracy": a}
                         for v in order for s, a in ACC[v].items()])
    empty = pd.DataFrame()
    return Tables(hilo=empty, spra=configs, sweep=empty, backends=empty, spra_runs=runs)


def test_aggregation_pairs_are_judged_where_both_ran():
    specs = [s for s in SPECS if s.method == "SPRA-LoRA (ablation)"]
    frame = claims_frame(_tables(), specs).set_index("claim")
    linear = frame.loc["aggregation ablation: product vs column aggregation, linear lr (12 rounds)"]
    assert linear["verdict"] == "met" and abs(linear["estimate"] - 0.03) < 1e-12 and linear["n_seeds"] == 3
    assert linear["horizon"] == "final round (12 rounds)"
    const = frame.loc["aggregation ablation: product vs column aggregation, constant lr (12 rounds)"]
    assert const["verdict"] == "not met"
    assert not any("36 rounds" in c for c in frame.index)       # the long-horizon variants did not run: no line


def test_the_lr_rule_claim_still_pairs_spra_with_spra_const_lr():
    spec = next(s for s in SPECS if s.claim == "rank-aware (linear) lr beats constant lr")
    frame = claims_frame(_tables(), [spec])
    assert len(frame) == 1 and frame["where"].iloc[0].endswith("vs spra_const_lr")
    assert abs(frame["estimate"].iloc[0] - (-0.04)) < 1e-12
