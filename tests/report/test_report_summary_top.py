"""summary.md reads at a glance: a headline in words from the claims (what held, what did not,
what is undecided), claim tables per scenario with short settings, estimates rounded to the digits
their interval supports."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.report.claims import SPECS
from harness.report.headline import headline, setting
from harness.report.textfmt import claim_text, supported_decimals


def _section(text: str, head: str) -> str:
    return text.split(f"## {head}", 1)[1].split("\n## ", 1)[0]


def test_the_headline_opens_the_summary_and_sorts_every_claim_by_verdict(report):
    text = report["summary"].read_text()
    assert text.index("## In short") < text.index("## Claims, as measured here")
    top = _section(text, "In short")
    claims = report["tables"]["claims"]
    held = top.split("**Held**", 1)[1].split("**Did not hold**", 1)[0]
    failed = top.split("**Did not hold**", 1)[1].split("**Undecided**", 1)[0]
    for verdict, part in (("met", held), ("not met", failed)):
        rows = claims[claims["verdict"] == verdict]
        assert part.startswith(f" ({len(rows)})"), part[:20]
        for _, c in rows.head(3).iterrows():
            assert f"{c['method']}: {c['claim']}" in part, (verdict, c["claim"])
    undecided = (claims["verdict"] == "inconclusive").sum()
    assert f"**Undecided** ({undecided})" in top
    assert f"{len(claims)} claim checks" in top


def test_the_headline_names_a_claim_nearest_to_a_verdict_by_the_seeds_it_needs():
    rows = pd.DataFrame([
        {"method": "HiLo", "claim": "c1", "where": "s [tc] tiny (toy) 10 Mbit/s, r=64, vs full_sync bf16",
         "model": "tiny (toy)", "estimate": 0.95, "ci_low": 0.6, "ci_high": 1.3, "n_seeds": 2, "verdict": "inconclusive",
         "statistic": "quality_retained", "seeds_to_resolve": 40},
        {"method": "HiLo", "claim": "c2", "where": "s [tc] tiny (toy) 100 Mbit/s, r=64, vs full_sync bf16",
         "model": "tiny (toy)", "estimate": 0.99, "ci_low": 0.9, "ci_high": 1.1, "n_seeds": 3, "verdict": "inconclusive",
         "statistic": "quality_retained", "seeds_to_resolve": 4},
        {"method": "HiLo", "claim": "c3", "where": "s [tc] tiny (toy) 10 Mbit/s, r=64, vs full_sync bf16",
         "model": "tiny (toy)", "estimate": 2.5, "ci_low": math.nan, "ci_high": math.nan, "n_seeds": 1,
         "verdict": "inconclusive", "statistic": "speedup", "seeds_to_resolve": math.nan}])
    lines = headline(rows, claim_text)
    nearest = [line for line in lines if line.startswith("  - ")]
    assert nearest[0].startswith("  - HiLo: c2 — s 100 Mbit/s") and "4 seeds" in nearest[0]
    assert "1 of them on fewer than two seeds" in "\n".join(lines)
    assert "- **Held** (0)." in lines and "- **Did not hold** (0)." in lines


def test_a_setting_drops_the_backend_and_the_model_the_table_heading_names():
    c = pd.Series({"where": "hilo_real [tc] SmolLM2-135M-Instruct (real) 10 Mbit/s, r=16, vs full_sync_10mbit bf16",
                   "model": "SmolLM2-135M-Instruct (real)"})
    assert setting(c) == "hilo_real 10 Mbit/s, r=16, vs full_sync_10mbit bf16"
    assert setting(c, scenario=False) == "10 Mbit/s, r=16, vs full_sync_10mbit bf16"


@pytest.mark.parametrize("statistic, estimate, low, high", [
    ("bytes_frac", 0.015663, 0.014299, 0.017027),
    ("quality_retained", 0.9509, 0.6449, 1.2569),
    ("speedup", 3.55, 3.44, 3.66),
    ("accuracy - baseline accuracy", 0.042, -0.018, 0.101),
])
def test_estimates_keep_two_significant_digits_of_their_half_width(statistic, estimate, low, high):
    row = pd.Series({"statistic": statistic, "estimate": estimate, "ci_low": low, "ci_high": high, "n_seeds": 3})
    text = claim_text(row)
    numbers = [t.strip("[],%×pt ") for t in text.split("(n=")[0].replace(",", " ").split() if t.strip("[],%×pt ")]
    decimals = {len(n.split(".")[1]) if "." in n else 0 for n in numbers}
    assert len(decimals) == 1, text                                    # estimate and bounds alike
    d = decimals.pop()
    scale = 1.0 if statistic == "speedup" else 100.0
    half = max(estimate - low, high - estimate) * scale
    assert half * 10 ** d >= 10 or d >= 2, (text, half)        # two significant digits of the half-width ...
    assert d == 0 or half * 10 ** (d - 1) < 10, (text, half)   # ... and no digit beyond them


@pytest.mark.parametrize("spec", [s for s in SPECS if " minus " in s.rule], ids=lambda s: s.statistic)
def test_a_difference_of_accuracies_reads_in_points_not_percent(spec):
    """Spar minus PowerSGD at -0.056 is 5.6 points of accuracy behind, not a 5.6% change."""
    row = pd.Series({"statistic": spec.statistic, "estimate": -0.056, "ci_low": -0.108, "ci_high": -0.003,
                     "n_seeds": 12})
    assert claim_text(row) == "-5.6 pt [-10.8 pt, -0.3 pt] (n=12)", (spec.statistic, claim_text(row))


def test_a_zero_width_or_missing_interval_keeps_the_default_digits():
    assert supported_decimals("bytes_frac", 0.016, 0.016, 0.016) is None
    assert supported_decimals("speedup", 2.5, math.nan, math.nan) is None
    assert claim_text(pd.Series({"statistic": "speedup", "estimate": 2.5, "ci_low": math.nan, "ci_high": math.nan,
                                 "n_seeds": 1})) == "2.50× (n=1)"


def test_no_quality_column_reads_none(report):
    text = report["summary"].read_text()
    assert ", none" not in text and "none after" not in text
