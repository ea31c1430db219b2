"""The two horizons of every quality comparison (harness/report/metrics.py "Horizons"), on a
hand-made rows table whose expected values are computed by hand below.

Two seeds, 6 updates, evaluated after updates 2, 4, 6 (steps 1, 3, 5):
  full sync: 2.0 s per update -> evaluations at 4, 8, 12 s; accuracy seed 0: .5 .7 .8, seed 1: .6 .7 .8
  HiLo:      1.0 s per update -> evaluations at 2, 4, 6 s;  accuracy seed 0: .4 .6 .7, seed 1: .5 .6 .78
Equal wall-clock: HiLo finishes first, at 6 s; each side is read at its own last evaluation at or
before 6 s (measured points, nothing drawn between them): HiLo at 6 s (.7, .78), full sync at 4 s
(.5, .6); retained .7/.5 and .78/.6.
Time to 95% of full sync's final (.95 * .8 = .76), the first evaluation at or above it: full sync at
12 s on both seeds; HiLo seed 1 at 6 s (ratio 6/12 = .5); seed 0 never gets there: censored, its
ratio the lower bound 6/12 = .5 (its run's end over full sync's time).
Slope over the last 3 evaluations (x = updates 2, 4, 6; per 100 updates): full sync seed 0
100 * ((-2)(.5-.6667) + 2(.8-.6667)) / 8 = 7.5, seed 1 100 * (2*.1 + 2*.1) / 8 = 5.0.
"""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.report.metrics import final_slope, onpolicy_curve, onpolicy_runs, plateau, quality_read_at

UPDATES = 6
EVALS = {1, 3, 5}
RUNS = {  # variant: (method, compressor, update_s, {seed: accuracies at the evaluations})
    "full_sync": ("full_sync", "none", 2.0, {0: [0.5, 0.7, 0.8], 1: [0.6, 0.7, 0.8]}),
    "hilo_spar": ("hilo", "spar", 1.0, {0: [0.4, 0.6, 0.7], 1: [0.5, 0.6, 0.78]}),
}


def _rows() -> pd.DataFrame:
    lines = []
    for variant, (method, comp, update_s, seeds) in RUNS.items():
        for seed, acc in seeds.items():
            it = iter(acc)
            for step in range(UPDATES):
                common = dict(kind="onpolicy", run_id=f"{variant}-s{seed}", step=step, scenario="hilo_distill",
                              backend="tc", variant=variant, method=method, compressor=comp, task="distill",
                              rate_mbit=10.0, delay_ms=0.0, rank=64, ref_rank=64, staleness=0, seed=seed,
                              budget_frac=0.016 if method == "hilo" else float("nan"))
                lines.append({**common, "role": "learner", "update_s": update_s, "payload_bytes_down": 2000.0,
                              "accuracy": next(it) if step in EVALS else float("nan")})
                lines.append({**common, "role": "worker0"})
    return pd.DataFrame(lines)


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return onpolicy_runs(_rows()).set_index("run_id")


def test_quality_is_read_at_the_last_evaluation_never_between() -> None:
    rows = _rows()
    curve = onpolicy_curve(rows[rows.run_id == "full_sync-s0"])
    assert quality_read_at(curve, 6.0) == (pytest.approx(0.5), pytest.approx(4.0))
    assert quality_read_at(curve, 8.0) == (pytest.approx(0.7), pytest.approx(8.0))
    assert quality_read_at(curve, 12.5) == (pytest.approx(0.8), pytest.approx(12.0))
    assert all(math.isnan(x) for x in quality_read_at(curve, 3.0))   # before the first evaluation: nothing measured


def test_equal_wall_clock_columns(runs) -> None:
    hilo0, hilo1 = runs.loc["hilo_spar-s0"], runs.loc["hilo_spar-s1"]
    assert hilo0.equal_time_s == pytest.approx(6.0) and hilo1.equal_time_s == pytest.approx(6.0)
    assert hilo0.quality_retained_equal_time == pytest.approx(0.7 / 0.5)
    assert hilo1.quality_retained_equal_time == pytest.approx(0.78 / 0.6)
    assert (hilo0.equal_time_read_s, hilo0.equal_time_full_read_s) == (pytest.approx(6.0), pytest.approx(4.0))
    assert runs.loc["full_sync-s0"].time_to_95_s == pytest.approx(12.0)
    assert math.isnan(hilo0.time_to_95_s) and hilo0.time_to_95_censored
    assert hilo0.time_to_95_vs_full == pytest.approx(6.0 / 12.0)            # the bound: its run's end
    assert hilo1.time_to_95_s == pytest.approx(6.0) and not hilo1.time_to_95_censored
    assert hilo1.time_to_95_vs_full == pytest.approx(6.0 / 12.0)
    full = runs.loc["full_sync-s1"]                          # full sync against itself: 1 at equal time
    assert full.quality_retained_equal_time == pytest.approx(1.0) and full.time_to_95_vs_full == pytest.approx(1.0)


def test_final_slope_and_the_plateau_criterion(runs) -> None:
    assert runs.loc["full_sync-s0"].final_slope == pytest.approx(7.5)
    assert runs.loc["full_sync-s1"].final_slope == pytest.approx(5.0)
    rows = _rows()
    short = onpolicy_curve(rows[(rows.run_id == "full_sync-s0") & (rows.step <= 3)])
    assert math.isnan(final_slope(short))                   # two evaluations: fewer than the window's 3
    flat, s = plateau([7.5, 5.0])                           # n=2: t(.975, 1) = 12.706 -> CI reaches below 0
    assert flat and s.mean == pytest.approx(6.25) and s.ci_low < 0
    rising, s = plateau([7.5, 5.0, 6.0])                    # mean 6.167, sd 1.258, half-width 4.303*sd/sqrt(3)
    assert not rising and s.ci_low == pytest.approx(6.1667 - 4.3027 * 1.2583 / math.sqrt(3), abs=1e-3)
    assert plateau([0.1, -0.2, 0.05])[0]
    assert not plateau([1.0])[0]                            # one seed: no interval, never "plateaued"


def test_claims_say_which_horizon_each_verdict_uses(runs) -> None:
    from harness.report.claims import claims_frame
    from harness.report.metrics import onpolicy_table
    from harness.report.tables import Tables, hilo_table

    per_run = runs.reset_index()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=per_run)), spra=pd.DataFrame(), sweep=pd.DataFrame(),
                    backends=pd.DataFrame(), hilo_runs=per_run, spra_runs=pd.DataFrame())
    claims = claims_frame(tables).set_index("claim")
    assert claims["horizon"].notna().all() and (claims["horizon"] != "").all()
    assert claims.loc["update speedup >= 2.2x vs full sync", "horizon"] == "per update (mean over the run)"
    quality = claims.loc["quality within 2% of full sync", "horizon"]
    assert quality.startswith("equal updates: final evaluation after 6 updates; full sync no significant rise")
    equal = claims.loc["quality within 2% of full sync at equal wall-clock time"]
    assert equal["horizon"].startswith("equal wall-clock: when the faster finishes (mean 6.0 s; read at HiLo's "
                                       "evaluation at 6.0 s and full sync's at 4.0 s")
    assert equal["estimate"] == pytest.approx((0.7 / 0.5 + 0.78 / 0.6) / 2)
    t95 = claims.loc["reaches 95% of full sync's final quality no later than full sync"]
    assert t95["horizon"].startswith("equal wall-clock: time to 95%") and t95["n_seeds"] == 2
    # both seeds at .5 (one a bound): dropping the censored seed would say "met"; a bound cannot
    assert t95["censored"] == "1 of 2" and t95["verdict"] == "inconclusive" and t95["estimate"] == pytest.approx(0.5)


def test_a_late_first_evaluation_is_measured_from_the_base_policy_at_time_zero() -> None:
    """Full sync evaluates the base (0.3, before update 0) and then only after update 6 (at 12 s:
    0.8); HiLo finishes at 6 s with 0.7. Full sync's last measured point by 6 s is the base at t = 0,
    so HiLo retains 0.7 / 0.3; without the base point nothing of full sync was measured by 6 s."""
    rows = _rows()
    rows.loc[(rows.variant == "full_sync") & rows.step.isin([1, 3]), "accuracy"] = float("nan")   # one evaluation
    first = (rows.role == "learner") & (rows.step == 0)
    rows.loc[first & (rows.variant == "full_sync"), "base_accuracy"] = 0.3
    runs = onpolicy_runs(rows).set_index("run_id")
    hilo = runs.loc["hilo_spar-s0"]
    assert hilo.quality_retained_equal_time == pytest.approx(0.7 / 0.3)
    assert hilo.equal_time_full_read_s == pytest.approx(0.0)
    full = runs.loc["full_sync-s0"]
    assert full.base_quality == pytest.approx(0.3)
    assert full.time_to_95_s == pytest.approx(12.0)                       # its only evaluation at or above 0.76


def test_an_equal_time_with_nothing_measured_is_listed_as_not_judged_with_the_reason() -> None:
    """Full sync evaluates only after update 6 (at 12 s) and not the base: by HiLo's end (6 s) nothing
    of it was measured on either seed, so no ratio is drawn; the line is not a claim (n = 0) and the
    report says why, not "fewer than 2 seeds" alone."""
    from harness.report.claims import claims_frame
    from harness.report.metrics import onpolicy_table
    from harness.report.tables import Tables, hilo_table

    rows = _rows()
    rows.loc[(rows.variant == "full_sync") & rows.step.isin([1, 3]), "accuracy"] = float("nan")
    per_run = onpolicy_runs(rows)
    assert per_run[per_run.variant == "hilo_spar"].quality_retained_equal_time.isna().all()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=per_run)), spra=pd.DataFrame(), sweep=pd.DataFrame(),
                    backends=pd.DataFrame(), hilo_runs=per_run, spra_runs=pd.DataFrame())
    claims = claims_frame(tables)
    equal = "quality within 2% of full sync at equal wall-clock time"
    assert equal not in set(claims["claim"])
    (line,) = [x for x in claims.attrs["unjudged_lines"] if x["claim"] == equal]
    assert line["n_seeds"] == 0
    assert line["why"].startswith("not measured on 2 of 2 seeds: full sync had no evaluation at or before the "
                                  "equal time (mean 6.0 s)")


def test_a_report_with_no_judged_claim_still_lists_the_lines_not_judged() -> None:
    """When every claim line is left out (none has 2 seeds with a measured value), the claims section
    says no claim is measured and still lists each left-out line with its reason."""
    from harness.report.summary import claims_section

    frame = pd.DataFrame()
    frame.attrs["unjudged_lines"] = [{"method": "HiLo", "claim": "update speedup >= 2.2x vs full sync",
                                      "where": "distill_real 10 Mbit/s", "n_seeds": 1,
                                      "why": "one seed of full sync so far"}]
    text = "\n".join(claims_section(None, frame))
    assert "No run in these results measures a headline claim" in text
    assert "**Not judged**" in text
    assert "- HiLo: update speedup >= 2.2x vs full sync — distill_real 10 Mbit/s (n=1): one seed of full sync so far" \
        in text


def test_both_at_the_target_from_the_base_is_a_tie_not_a_dropped_seed() -> None:
    """Full sync's base (0.8, measured at t = 0) is already at 95% of its final quality (0.8): its time to
    the target is 0, and so is HiLo's, whose curve starts from the same base. The ratio is a tie, 1.0, not
    0/0 (which dropped the seed from the time-to-target line)."""
    rows = _rows()
    first = (rows.role == "learner") & (rows.step == 0)
    rows.loc[first & (rows.variant == "full_sync"), "base_accuracy"] = 0.8
    runs = onpolicy_runs(rows).set_index("run_id")
    assert runs.loc["full_sync-s0"].time_to_95_s == pytest.approx(0.0)
    hilo = runs.loc["hilo_spar-s0"]
    assert hilo.time_to_95_s == pytest.approx(0.0)
    assert hilo.time_to_95_vs_full == pytest.approx(1.0)
