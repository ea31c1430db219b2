"""The setup claim: full sync's final held-out accuracy over the base model's (``onpolicy.eval_base``:
``base_accuracy`` on the learner's row 0), per seed; runs without a base evaluation give no line."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.report.claims import SPECS, claims_frame
from harness.report.collect import Collection
from harness.report.tables import build_tables

BASE = {0: 0.30, 1: 0.30, 2: 0.30}                     # greedy: the same base model for every seed
FINAL = {"full_sync_10mbit": {0: 0.50, 1: 0.55, 2: 0.52}, "hilo_spar_10mbit": {0: 0.48, 1: 0.50, 2: 0.49}}
STEPS = 4


def _rows(scenario: str, with_base: bool) -> pd.DataFrame:
    lines = []
    for variant, finals in FINAL.items():
        method, comp = ("full_sync", "none") if variant.startswith("full") else ("hilo", "spar")
        for seed, acc in finals.items():
            for step in range(STEPS):
                common = dict(kind="onpolicy", run_id=f"{scenario}-{variant}-s{seed}", step=step, scenario=scenario,
                              backend="tc", variant=variant, method=method, compressor=comp, task="reward",
                              rate_mbit=10.0, delay_ms=0.0, rank=16, ref_rank=16, staleness=0, seed=seed,
                              allocation="energy" if comp == "spar" else "", steps=float(STEPS),
                              budget_frac=0.016 if method == "hilo" else float("nan"))
                learner = {**common, "role": "learner", "update_s": 1.0, "payload_bytes_down": 1000.0}
                if step == STEPS - 1:
                    learner["accuracy"] = acc
                if step == 0 and with_base:
                    learner["base_accuracy"] = BASE[seed]
                lines += [learner, {**common, "role": "worker0"}]
    return pd.DataFrame(lines)


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    rows = pd.concat([_rows("with_base", True), _rows("without_base", False)], ignore_index=True)
    tables = build_tables(Collection(results_dir=Path("/nonexistent"), runs=[], rows=rows))
    spec = next(s for s in SPECS if s.method == "full sync")
    return claims_frame(tables, [spec])


def test_the_gain_over_the_base_is_judged_per_seed_for_full_sync_only(claims):
    assert list(claims["where"].str.split(" ").str[0]) == ["with_base"]     # no base evaluation: no line
    line = claims.iloc[0]
    gains = [FINAL["full_sync_10mbit"][s] - BASE[s] for s in (0, 1, 2)]
    assert line["n_seeds"] == 3 and line["estimate"] == pytest.approx(sum(gains) / 3)
    assert line["verdict"] == "met" and line["ci_low"] > 0
    assert "after 4 updates" in line["horizon"] and "base 0.300" in line["note"]


def test_the_tables_carry_the_base_and_the_gain():
    rows = _rows("with_base", True)
    tables = build_tables(Collection(results_dir=Path("/nonexistent"), runs=[], rows=rows))
    full = tables.hilo[tables.hilo["variant"] == "full_sync_10mbit"].iloc[0]
    assert full["base_quality"] == pytest.approx(0.30)
    assert full["gain_over_base"] == pytest.approx(sum(FINAL["full_sync_10mbit"].values()) / 3 - 0.30)
