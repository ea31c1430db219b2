"""Statistics of the report: intervals, verdicts, paired ratios and seeds to resolve.

Pure: stats functions on hand-picked numbers, then a synthetic tree with known per-seed
values (report_synthetic.make_seeded_results) through the tables and claims, no plots.
Expected intervals are computed here from the textbook formula with scipy's t quantile.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from harness.report import build_tables, collect
from harness.report.claims import claims_frame, crossover_frame
from harness.report.metrics import time_to_target
from harness.report.inference import seeds_for_power
from harness.report.stats import cell, crossover, paired, summarize, verdict
from report_synthetic import (SEEDED_FED, SEEDED_FED_ADAMW, SEEDED_FULL_Q, SEEDED_LOWRANK, SEEDED_RETAINED, SEEDED_SPEEDUP, SEEDS,
                              make_seeded_results)


def t_interval(x):
    x = np.asarray(x, dtype=float)
    half = st.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean() - half, x.mean() + half


# ---------------------------------------------------------------- pure
def test_summary_is_the_t_interval():
    s = summarize([2.5, 2.6, 2.7, 2.8, 2.9])
    lo, hi = t_interval([2.5, 2.6, 2.7, 2.8, 2.9])
    assert (s.n, s.mean) == (5, pytest.approx(2.7))
    assert s.sd == pytest.approx(math.sqrt(0.025))            # sample sd, ddof=1
    assert (s.ci_low, s.ci_high) == (pytest.approx(lo), pytest.approx(hi))
    assert s.half_width == pytest.approx(2.7764451 * math.sqrt(0.025) / math.sqrt(5), rel=1e-6)  # t_{.975,4}


def test_one_seed_has_no_interval_and_nan_is_dropped():
    one = summarize([0.8, float("nan")])
    assert one.n == 1 and one.mean == 0.8 and math.isnan(one.ci_low) and math.isnan(one.sd)
    assert summarize([]).n == 0


@pytest.mark.parametrize("lo, hi, threshold, direction, expected", [
    (2.3, 2.9, 2.2, ">=", "met"), (1.0, 2.1, 2.2, ">=", "not met"), (1.9, 2.7, 2.2, ">=", "inconclusive"),
    (2.2, 2.9, 2.2, ">=", "inconclusive"),      # touches the threshold from above: does not exclude it
    (1.5, 2.2, 2.2, ">=", "inconclusive"),      # touches it from below
    (0.01, 0.015, 0.016, "<=", "met"), (0.02, 0.03, 0.016, "<=", "not met"),
    (0.01, 0.016, 0.016, "<=", "inconclusive"),  # touches a "<=" threshold
    (2.2, 2.2, 2.2, ">=", "inconclusive"),      # a zero-width interval on the threshold
    (float("nan"), float("nan"), 2.2, ">=", "inconclusive"),   # one seed: no interval
])
def test_verdict_from_the_interval(lo, hi, threshold, direction, expected):
    assert verdict(lo, hi, threshold, direction) == expected


def test_verdict_names_a_bad_direction():
    with pytest.raises(ValueError, match="direction"):
        verdict(1, 2, 1.5, ">")


def test_seeds_for_power_is_the_textbook_one_sample_t_size():
    # 80% power, two-sided 5%, one-sample (paired) t-test: d = 1 -> 10, d = 0.5 -> 34, d = 0.2 -> 199 (Cohen's tables)
    assert [seeds_for_power(g, 1.0) for g in (1.0, 0.5, -0.5, 0.2)] == [10, 34, 34, 199]
    n, gap, sd = seeds_for_power(0.1, 0.3162), 0.1, 0.3162
    power = lambda k: st.nct.sf(st.t.ppf(0.975, k - 1), k - 1, gap / sd * math.sqrt(k))  # noqa: E731
    assert power(int(n)) >= 0.8 > power(int(n) - 1)                    # the smallest such n
    assert math.isnan(seeds_for_power(0.0, 0.3)) and math.isnan(seeds_for_power(0.1, float("nan")))


def test_paired_ratios_use_only_shared_seeds():
    assert paired({0: 2.0, 1: 3.0, 2: 1.0}, {0: 1.0, 1: 2.0}) == {0: 2.0, 1: 1.5}
    assert paired({0: 0.8}, {0: 0.7}, "diff") == {0: pytest.approx(0.1)}


def test_crossover_interpolates_in_log_rate():
    # speedup 2 at 10 Mbit/s, 0.5 at 1000: linear in log10 rate, 1 is crossed at 2/3 of the way
    assert crossover([10, 1000], [2.0, 0.5]) == pytest.approx(10 ** (1 + 2 * (2 / 3)))
    assert math.isnan(crossover([10, 100], [2.0, 1.5]))    # never crosses in range


def test_cell_text():
    assert cell(summarize([2.5, 2.6, 2.7, 2.8, 2.9]), "{:.2f}", "x") == "2.70x ± 0.20 (n=5)"
    assert cell(summarize([0.82]), "{:.3f}") == "0.820 (n=1)"


def test_time_to_target_is_the_first_measured_evaluation_at_or_above_it():
    curve = pd.DataFrame({"quality": [0.2, float("nan"), 0.6, 0.8], "cum_time_s": [1.0, 2.0, 3.0, 4.0]})
    assert time_to_target(curve, 0.5) == 3.0                   # never a time drawn between evaluations
    assert time_to_target(curve, 0.6) == 3.0 and time_to_target(curve, 0.1) == 1.0
    assert math.isnan(time_to_target(curve, 0.9))


# ---------------------------------------------------------------- through the tables and claims
@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    root = make_seeded_results(tmp_path_factory.mktemp("seeded"))
    tables = build_tables(collect(root))
    return tables, claims_frame(tables), crossover_frame(tables)


def _hilo(tables, variant, rate):
    t = tables.hilo
    return t[(t["variant"] == variant) & (t["rate_mbit"] == rate)].iloc[0]


@pytest.mark.parametrize("rate", sorted(SEEDED_SPEEDUP))
def test_speedup_is_aggregated_per_seed_with_its_interval(seeded, rate):
    row = _hilo(seeded[0], "hilo_spar", rate)
    lo, hi = t_interval(SEEDED_SPEEDUP[rate])
    assert row["speedup"] == pytest.approx(np.mean(SEEDED_SPEEDUP[rate]))
    assert (row["speedup_ci_low"], row["speedup_ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert row["speedup_n"] == 5 and row["seeds"] == 5 and row["seed_list"] == "0,1,2,3,4"


def test_quality_and_continuous_metric_carry_intervals(seeded):
    row = _hilo(seeded[0], "hilo_spar", 10)
    retained = SEEDED_RETAINED
    assert row["quality_retained"] == pytest.approx(np.mean(retained))
    assert row["quality_retained_ci_low"] == pytest.approx(t_interval(retained)[0])
    finals = [q * r for q, r in zip(SEEDED_FULL_Q, retained)]
    assert row["quality"] == pytest.approx(np.mean(finals))
    assert row["continuous_metric"] == "reverse_kl"            # the synthetic runs record 1 - accuracy
    assert row["continuous_ci_high"] == pytest.approx(1 - t_interval(finals)[0])


def _claim(claims, claim, where_has):
    """The one claim row whose text is ``claim`` (or, if none is, starts with it) and whose where has ``where_has``."""
    here = claims[claims["where"].str.contains(where_has, regex=False)]
    hit = here[here["claim"] == claim]
    hit = hit if len(hit) else here[here["claim"].str.startswith(claim)]
    assert len(hit) == 1, (claim, where_has, claims[["claim", "where"]])
    return hit.iloc[0]


@pytest.mark.parametrize("rate, expected", [(10, "met"), (100, "inconclusive"), (1000, "not met")])
def test_speedup_claim_is_judged_at_every_rate(seeded, rate, expected):
    c = _claim(seeded[1], "update speedup", f" {rate:g} Mbit/s")
    assert c["verdict"] == expected and c["n_seeds"] == 5
    assert (c["ci_low"], c["ci_high"]) == tuple(pytest.approx(v) for v in t_interval(SEEDED_SPEEDUP[rate]))
    if expected == "inconclusive":
        sd = np.std(SEEDED_SPEEDUP[rate], ddof=1)
        gap = np.mean(SEEDED_SPEEDUP[rate]) - 2.2
        assert c["seeds_80"] == seeds_for_power(gap, sd) > 5
        assert c["resolves"] == ("met" if gap > 0 else "not met")
    else:
        assert math.isnan(c["seeds_80"]) and c["resolves"] == ""


def test_quality_claims_vs_full_sync_and_at_equal_bytes(seeded):
    claims = seeded[1]
    assert _claim(claims, "quality within 2% of full sync", "10 Mbit/s")["verdict"] == "met"
    equal = _claim(claims, "quality within 2% of low-rank", "low-rank r=1")
    per_seed = [r / lr for r, lr in zip(SEEDED_RETAINED, SEEDED_LOWRANK)]
    assert equal["estimate"] == pytest.approx(np.mean(per_seed)) and equal["verdict"] == "met"
    bytes_claim = _claim(claims, "bytes per update", "10, 100 and 1000 Mbit/s")    # a cap: every rate's runs
    assert bytes_claim["verdict"] == "met" and "configured budget 1.50%" in bytes_claim["note"]
    assert bytes_claim["where"].endswith("vs each rate's full sync bf16")


def test_no_verdict_contradicts_its_interval(seeded):
    claims = seeded[1]
    assert (claims["n_seeds"] >= 2).all()                      # a line without an interval is no claim
    for _, c in claims.iterrows():
        assert {"method", "claim", "where", "test", "estimate", "ci_low", "ci_high", "n_seeds", "rule", "verdict",
                "verdict_holm", "seeds_80", "supported"} <= set(c.index)
        if c["test"] == "cap":                                 # a cap is judged on its largest value
            assert c["verdict"] == ("met" if c["estimate"] <= c["threshold"] else "not met")
        elif not c["censored"]:
            assert c["verdict"] == verdict(c["ci_low"], c["ci_high"], c["threshold"], c["direction"])
        if c["verdict_holm"] != "inconclusive":                # Holm only ever withdraws a verdict
            assert c["verdict_holm"] == c["verdict"]


def test_spra_beats_fedit_paired_per_seed(seeded):
    c = _claim(seeded[1], "higher final accuracy", "optimizer sgd, vs fedit")
    diffs = [a - b for a, b in zip(SEEDED_FED["spra"], SEEDED_FED["fedit"])]
    assert c["estimate"] == pytest.approx(np.mean(diffs)) and c["n_seeds"] == 3 and c["verdict"] == "met"
    # SPRA ships exactly half FedIT's uplink on every seed: a zero-width interval touching 50% is inconclusive
    uplink = _claim(seeded[1], "uplink", "spra_seeds [tc] tiny (toy) ranks 64,32,16, optimizer sgd")
    assert (uplink["ci_low"], uplink["ci_high"]) == (0.5, 0.5) and uplink["verdict"] == "inconclusive"
    assert math.isnan(uplink["seeds_80"])                  # no number of seeds moves a mean that sits on it


def test_spra_claims_pair_by_optimizer(seeded):
    """SGD spra against the SGD baselines, spra_adamw against the *_adamw ones: separate rows, never crossed."""
    claims = seeded[1]
    acc = claims[claims["claim"].str.startswith("higher final accuracy")]
    assert sorted(acc["where"].str.extract(r"optimizer (\w+), vs (\w+)").apply(tuple, axis=1)) == \
        [("adamw", "fedit_adamw"), ("sgd", "fedit")]
    c = _claim(claims, "higher final accuracy", "optimizer adamw, vs fedit_adamw")
    diffs = [a - b for a, b in zip(SEEDED_FED_ADAMW["spra_adamw"], SEEDED_FED_ADAMW["fedit_adamw"])]
    assert c["estimate"] == pytest.approx(np.mean(diffs)) and c["n_seeds"] == 3 and c["verdict"] == "not met"
    for claim in ("uplink", "client compute"):      # the FedIT ratios pair with the FedIT of the same optimizer
        rows = claims[claims["claim"].str.startswith(claim)]
        assert sorted(rows["where"].str.extract(r"optimizer (\w+)")[0]) == ["adamw", "sgd"]
        assert (rows["n_seeds"] == 3).all()


def test_crossover_per_seed_then_aggregated(seeded):
    cross = seeded[2]
    row = cross[cross["variants"] == "hilo_spar"].iloc[0]
    per_seed = [crossover([100, 1000], [SEEDED_SPEEDUP[100][i], SEEDED_SPEEDUP[1000][i]]) for i in range(len(SEEDS))]
    assert all(100 < x < 1000 for x in per_seed)
    assert row["crossover_mbit"] == pytest.approx(np.mean(per_seed)) and row["n_seeds"] == 5
    assert row["ci_low"] == pytest.approx(t_interval(per_seed)[0]) and row["sides"] == "crosses"


def test_crossover_joins_variants_named_per_rate(seeded):
    """hilo_distill names its variants per rate (hilo_spar_10mbit, hilo_spar_100mbit): still one method."""
    tables = seeded[0]
    runs = tables.hilo_runs.copy()
    runs["variant"] = [f"{v}_{r:g}mbit" for v, r in zip(runs["variant"], runs["rate_mbit"])]
    renamed = crossover_frame(replace(tables, hilo_runs=runs))
    before = seeded[2][seeded[2]["variants"] == "hilo_spar"].iloc[0]
    after = renamed[renamed["variants"] == "hilo_spar_1000mbit,hilo_spar_100mbit,hilo_spar_10mbit"].iloc[0]
    assert after["crossover_mbit"] == pytest.approx(before["crossover_mbit"]) and after["n_seeds"] == before["n_seeds"]


def test_runs_under_load_are_counted(seeded):
    assert _hilo(seeded[0], "hilo_spar", 10)["loaded_runs"] == 1
    assert _hilo(seeded[0], "hilo_spar", 100)["loaded_runs"] == 0
    runs = seeded[0].hilo_runs
    loaded = runs[runs["loaded"].fillna(False).astype(bool)]
    assert list(zip(loaded["variant"], loaded["seed"], loaded["rate_mbit"])) == [("hilo_spar", 4, 10.0)]


def test_load_and_base_flags_from_run_json(tmp_path):
    from harness.report.collect import Run
    from report_synthetic import IDLE, LOADED

    def run(meta):
        return Run(tmp_path, "s", "r", "ok", "", meta, pd.DataFrame())
    assert run({"load": LOADED}).load() == (True, "loadavg 3.50 at start > 0.5 x 2 CPUs")
    assert run({"load": IDLE}).load() == (False, "")
    busy = {**IDLE, "roles_cpu_s": 50.0}                  # 50 s of CPU in 20 s on 2 CPUs
    assert run({"load": busy}).load()[0] is True
    assert run({}).load() == (None, "")                   # not recorded: unknown, not idle
    # records with the machine's CPU time: the previous run's processes still in the load average do not count
    alone = {**LOADED, "machine_cpu_s": 11.0, "launcher_cpu_s": 0.5, "others_cpu_s": 0.5}
    assert run({"load": alone}).load() == (False, "")
    shared = {**IDLE, "machine_cpu_s": 30.0, "launcher_cpu_s": 0.5, "others_cpu_s": 19.5}   # > 0.25 x 2 x 20 s
    assert run({"load": shared}).load() == (True, "other programs took 20 CPU s > 0.25 x 2 CPUs x 20 s wall")
    bases = {"student": {"sha256": "ab" * 32, "reference": True},
             "teacher": {"sha256": "cd" * 32, "reference": False, "reference_sha256": "ef" * 32}}
    rebuilt, text = run({"bases": bases}).bases()
    assert rebuilt and text == "student:abababababab,teacher:cdcdcdcdcdcd(rebuilt)"
    # a recipe that ships no reference (the wide bases): built here, not "rebuilt"
    local = {"student": {"sha256": "ab" * 32, "reference": False}, "teacher": {"sha256": "cd" * 32, "reference": False}}
    assert run({"bases": local}).bases() == (False, "student:abababababab(local),teacher:cdcdcdcdcdcd(local)")
