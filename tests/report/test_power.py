"""Power and the prompt level: harness.commands.power from pilot runs with per-prompt records, and the paired
two-level bootstrap (harness/report/bootstrap.py) beside the seed-level t-interval."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.commands.power import main, plan, within_seed_sd
from harness.report import build_tables, collect
from harness.report.bootstrap import two_level
from harness.report.claims import claims_frame
from harness.report.inference import seeds_for_power
from report_synthetic import SEEDED_FULL_Q, SEEDED_RETAINED, make_seeded_results

PROMPTS = 200


def _with_prompts(root):
    """make_seeded_results, plus each 10 Mbit/s hilo_seeds run's final evaluation prompt by prompt: the
    first round(q * 200) of 200 fixed prompts correct, in an order drawn from the run (q: its final accuracy)."""
    for run_json in sorted((root / "runs" / "hilo_seeds").glob("*/run.json")):
        run = run_json.parent
        rows = pd.concat([pd.read_parquet(p) for p in sorted((run / "rows").glob("*.parquet"))])
        learner = rows[rows["role"] == "learner"]
        if float(learner["rate_mbit"].iloc[0]) != 10.0:
            continue
        final = learner.dropna(subset=["accuracy"]).sort_values("step").iloc[-1]
        k = int(round(float(final["accuracy"]) * PROMPTS))
        rng = np.random.default_rng(abs(hash(run.name)) % 2**32)
        correct = np.zeros(PROMPTS, dtype=bool)
        correct[rng.permutation(PROMPTS)[:k]] = True
        frame = pd.DataFrame({"run_id": run.name, "role": "learner", "step": int(final["step"]), "view": "learner",
                              "prompt": range(PROMPTS), "correct": correct,
                              "answer_logprob": np.where(correct, -0.5, -3.0),
                              # HiLo's prompts twice as far from the teacher as full sync's: the objective's pairs
                              "reverse_kl": np.where(correct, 0.1, 1.0) * (2.0 if run.name.startswith("hilo") else 1.0)})
        (run / "prompts").mkdir(exist_ok=True)
        frame.to_parquet(run / "prompts" / f"learner-{int(final['step']) + 1:05d}.parquet", index=False)
    return root


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    return _with_prompts(make_seeded_results(tmp_path_factory.mktemp("pilot")))


def test_within_seed_sd_is_the_binomial_one_for_a_difference():
    a = np.tile(np.r_[np.ones(50), np.zeros(150)], (3, 1))     # p = .25 on each of 3 seeds
    b = np.zeros_like(a)
    assert within_seed_sd(a, b, "diff") == pytest.approx(math.sqrt(0.25 * 0.75 * 200 / 199 / 200))


def test_power_plan_splits_the_spread_and_sizes_seeds_and_prompts(pilot):
    lines = [p for p in plan(pilot, "within 2% of full sync", (100, 200, 800)) if " 10 Mbit/s" in p.row["where"]]
    quality = [p for p in lines if p.row["claim"] == "quality within 2% of full sync"]
    assert len(quality) == 1
    p = quality[0]
    assert p.prompts == PROMPTS and p.sd_prompt > 0
    gap = p.row["estimate"] - 0.98
    assert p.row["seeds_80"] == seeds_for_power(gap, p.row["sd"])
    assert p.row["if_equal_80"] == seeds_for_power(0.02, p.row["sd"])
    assert p.sd_seed <= p.row["sd"]
    sizes = [p.at_prompts[n] for n in (100, 200, 800)]
    assert sizes[0] >= sizes[1] >= sizes[2]                      # more prompts never need more seeds
    assert sizes[1] == p.row["seeds_80"]                         # at the pilot's own P: the pilot's sd


def test_the_command_prints_and_writes_the_table(pilot, tmp_path, capsys):
    assert main(["--results", str(pilot), "--claim", "within 2%", "--prompts", "200,400",
                 "--csv", str(tmp_path / "power.csv")]) == 0
    out = capsys.readouterr().out
    assert "80% power:" in out and "prompts scored" in out
    table = pd.read_csv(tmp_path / "power.csv")
    assert {"seeds_80", "if_equal_80", "sd_prompt", "sd_seed", "seeds_80_at_400_prompts"} <= set(table.columns)


def test_the_command_names_a_folder_without_runs(tmp_path, capsys):
    assert main(["--results", str(tmp_path)]) == 2
    assert "--results" in capsys.readouterr().err
    assert main(["--results", str(tmp_path), "--prompts", "0"]) == 2


def test_claims_carry_the_two_level_bootstrap_where_prompts_pair(pilot):
    claims = claims_frame(build_tables(collect(pilot)))
    q = claims[(claims["claim"] == "quality within 2% of full sync") & claims["where"].str.contains(" 10 Mbit/s")]
    row = q.iloc[0]
    assert row["boot_low"] < row["boot_high"] and "bootstrap" in row["interval"]
    speed = claims[claims["claim"].str.startswith("update speedup")].iloc[0]
    assert math.isnan(speed["boot_low"]) and "bootstrap" not in speed["interval"]


def test_the_distillation_objective_is_judged_as_full_syncs_reverse_kl_over_hilos(pilot):
    claims = claims_frame(build_tables(collect(pilot)))
    line = claims[claims["claim"].str.startswith("distillation objective") & claims["where"].str.contains(" 10 Mbit/s")]
    assert len(line) == 1
    row = line.iloc[0]
    # the runs' final reverse KL is 1 - accuracy (report_synthetic); lower is better, so full sync's over HiLo's
    expected = np.mean([(1 - q) / (1 - q * r) for q, r in zip(SEEDED_FULL_Q, SEEDED_RETAINED)])
    assert row["estimate"] == pytest.approx(expected) and row["n_seeds"] == len(SEEDED_FULL_Q)
    assert row["test"] == "non-inferiority" and row["threshold"] == 0.98
    # the bootstrap pairs the prompts' reverse_kl in the same order: HiLo's are twice full sync's, so about 0.5
    # (accuracy's pairs would give about 1, the other order about 2)
    assert 0.4 < row["boot_low"] < row["boot_high"] < 0.6


def test_two_level_bootstrap_pairs_the_sides():
    rng = np.random.default_rng(0)
    a = rng.random((4, 300)) < 0.5
    assert two_level(a, a, "ratio") == (1.0, 1.0)                 # identical sides: no spread in the ratio
    lo, hi = two_level(a.astype(float), np.full(a.shape, 0.5), "diff")
    assert lo < float(a.mean() - 0.5) < hi
    assert all(math.isnan(v) for v in two_level(a[:1], a[:1]))  # one seed: no interval
    with pytest.raises(ValueError, match="seeds x prompts"):
        two_level(a, a[:, :10])


def test_a_censored_line_asks_for_a_longer_run_not_for_seeds(pilot, monkeypatch):
    """Where some seeds never reached the target (time to 95%), the ratio is a bound: no seed count is given."""
    import harness.report.claims as claims

    real_judge = claims.judge

    def censoring_judge(spec, line, prompts=None):
        row = real_judge(spec, line, prompts=prompts)
        return {**row, "censored": "2 of 3"}

    monkeypatch.setattr(claims, "judge", censoring_judge)
    lines = plan(pilot, "within 2% of full sync", (100,))
    assert lines and all(p.row["seeds_80"] != p.row["seeds_80"] for p in lines)      # NaN: no seed count
    assert all(p.row["toward"].startswith("censored (2 of 3 seeds)") for p in lines)
