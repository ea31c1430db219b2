"""The compute claim in two labelled readings: the whole client step and LoRA's own FLOPs."""
from __future__ import annotations

import pandas as pd

from harness.report.claims import SPECS, claims_frame
from harness.report.tables import Tables

WHOLE = {0: 0.93, 1: 0.94, 2: 0.935}      # per-seed ratios to FedIT (made up: the claim's arithmetic only)
ADAPTER = {0: 0.45, 1: 0.46, 2: 0.44}


def _tables(with_adapter: bool) -> Tables:
    base = {"backend": "tc", "scenario": "spra_federated", "task": "federated", "rate_mbit": 20.0, "delay_ms": 0.0,
            "trace": None, "optimizer": "sgd", "lr_rule": "linear", "resample_every": 5, "ranks": "64,32",
            "compute_measure": "client_flops"}
    variants = {"spra": "spra", "fedit": "fedit"}
    configs = pd.DataFrame([{**base, "variant": v, "method": m} for v, m in variants.items()])
    runs = pd.DataFrame([{**base, "variant": v, "method": m, "seed": s, "accuracy": 0.5,
                          "compute_frac_vs_fedit": WHOLE[s] if m == "spra" else 1.0,
                          "adapter_frac_vs_fedit": (ADAPTER[s] if m == "spra" else 1.0) if with_adapter else float("nan")}
                         for v, m in variants.items() for s in WHOLE])
    empty = pd.DataFrame()
    return Tables(hilo=empty, spra=configs, sweep=empty, backends=empty, spra_runs=runs)


def _compute_claims(tables: Tables) -> pd.DataFrame:
    specs = [s for s in SPECS if s.claim.startswith("client compute")]
    return claims_frame(tables, specs).set_index("statistic")


def test_both_readings_are_judged_and_labelled():
    frame = _compute_claims(_tables(with_adapter=True))
    whole, own = frame.loc["compute_frac_vs_fedit"], frame.loc["adapter_frac_vs_fedit"]
    assert "reading 1: the whole client step" in whole["claim"] and whole["verdict"] == "not met"
    assert "reading 2: LoRA's own FLOPs" in own["claim"] and own["verdict"] == "met"
    assert own["n_seeds"] == 3 and abs(own["estimate"] - sum(ADAPTER.values()) / 3) < 1e-12
    assert own["where"].endswith("measure client_adapter_flops")


def test_runs_without_adapter_flops_give_no_second_reading():
    frame = _compute_claims(_tables(with_adapter=False))
    assert list(frame.index) == ["compute_frac_vs_fedit"]
