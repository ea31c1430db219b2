"""Runs on link traces are their own configurations: they pair with the baseline on the same
trace, and the papers' claims (judged on constant links) leave them out."""
from __future__ import annotations

import pandas as pd

from harness.report.metrics import _choose_full_sync
from harness.report.rowkit import constant_links


def _config(variant: str, method: str, trace) -> dict:
    return {"backend": "tc", "task": "distill", "rate_mbit": 4.8, "delay_ms": 0.0, "trace": trace, "rank": 64,
            "scenario": "s", "variant": variant, "method": method, "sync_dtype": "bf16", "staleness": 0,
            "ref_rank": 64}


def test_a_traced_run_pairs_with_the_full_sync_on_the_same_trace():
    configs = pd.DataFrame([_config("full_sync_const", "full_sync", None),
                            _config("full_sync_trace", "full_sync", "lte_uplink")])
    traced = pd.Series(_config("hilo_spar_trace", "hilo", "lte_uplink"))
    const = pd.Series(_config("hilo_spar_const", "hilo", None))
    assert _choose_full_sync(configs, traced)["variant"] == "full_sync_trace"
    assert _choose_full_sync(configs, const)["variant"] == "full_sync_const"


def test_claims_see_constant_links_only():
    table = pd.DataFrame({"trace": [None, float("nan"), "", "lte_uplink"]})
    assert list(constant_links(table)) == [True, True, True, False]
    assert constant_links(pd.DataFrame({"x": [1]})).all()       # tables that predate the key
