"""SPRA's own claims (issue 14) are judged as paired variants when the results hold both sides:
equal uplink (spra_equal_uplink vs fedit), the lr rule at fixed A variance, resampling."""
from __future__ import annotations

import pandas as pd

from harness.report.claims import SPECS, claims_frame
from harness.report.tables import Tables

ACC = {  # variant -> {seed: final accuracy}
    "spra": {0: 0.80, 1: 0.81, 2: 0.82}, "fedit": {0: 0.70, 1: 0.72, 2: 0.71},
    "spra_equal_uplink": {0: 0.78, 1: 0.79, 2: 0.80}, "spra_no_resample": {0: 0.80, 1: 0.80, 2: 0.83},
}


def _tables() -> Tables:
    base = {"backend": "tc", "scenario": "spra_federated", "task": "federated", "rate_mbit": 20.0, "delay_ms": 0.0,
            "trace": None, "optimizer": "sgd", "lr_rule": "linear", "resample_every": 5}
    method = {"fedit": "fedit"}
    configs = pd.DataFrame([{**base, "variant": v, "method": method.get(v, "spra"), "ranks": "64,32"} for v in ACC])
    runs = pd.DataFrame([{**base, "variant": v, "method": method.get(v, "spra"), "ranks": "64,32", "seed": s,
                          "accuracy": a} for v, per in ACC.items() for s, a in per.items()])
    empty = pd.DataFrame()
    return Tables(hilo=empty, spra=configs, sweep=empty, backends=empty, spra_runs=runs)


def test_spra_claim_variants_are_judged_per_seed_where_both_ran():
    specs = [s for s in SPECS if s.find.__qualname__.startswith("spra_versus")]
    frame = claims_frame(_tables(), specs).set_index("statistic")
    equal = frame.loc["accuracy - FedIT accuracy"]
    assert equal["n_seeds"] == 3 and abs(equal["estimate"] - (0.08 + 0.07 + 0.09) / 3) < 1e-12
    assert equal["verdict"] == "met" and "spra_equal_uplink vs fedit" in equal["where"]
    resample = frame.loc["accuracy - no-resample accuracy"]
    assert resample["verdict"] == "inconclusive"          # differences 0, +0.01, -0.01
    assert "accuracy - const-lr accuracy" not in frame.index   # the aref variants did not run: no line
