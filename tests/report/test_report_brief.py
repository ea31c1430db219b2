"""The claims table in short form (harness.report.brief) and the end screen of make bench."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.report.brief import compact_where, markdown, screen, short_frame

CLAIMS = pd.DataFrame([
    {"method": "HiLo", "claim": "update speedup >= 2.2x vs full sync", "statistic": "speedup",
     "where": "hilo_distill [tc] 10 Mbit/s, r=64, vs full_sync_10mbit bf16", "estimate": 3.5902,
     "ci_low": 3.2425, "ci_high": 3.9380, "n_seeds": 5, "verdict": "met", "model": "tiny (toy)"},
    {"method": "SPRA-LoRA", "claim": "uplink <= 50% of FedIT (B only)", "statistic": "uplink_frac_vs_fedit",
     "where": "spra_federated [tc] ranks 64,32,16,8,4, optimizer sgd", "estimate": 0.5299,
     "ci_low": float("nan"), "ci_high": float("nan"), "n_seeds": 1, "verdict": "inconclusive", "model": "SmolLM2-135M"},
    {"method": "SPRA-LoRA", "claim": "higher final accuracy than every baseline",
     "statistic": "accuracy - baseline accuracy", "where": "spra_federated [tc] ranks 64,32, optimizer sgd, vs ffa",
     "estimate": 0.003, "ci_low": -0.0351, "ci_high": 0.0411, "n_seeds": 5, "verdict": "inconclusive", "model": ""},
])


def test_short_form_keeps_each_claims_unit_interval_verdict_and_model(monkeypatch):
    monkeypatch.setattr("harness.report.brief._scenario_model", lambda scenario: f"<{scenario}>")
    frame = short_frame(CLAIMS)
    assert list(frame.columns) == ["method", "claim", "where", "estimate [95% CI]", "verdict", "n", "model"]
    assert frame["estimate [95% CI]"].tolist() == ["3.59x [3.24x, 3.94x]", "53.0%", "+0.003 [-0.035, +0.041]"]
    assert frame["claim"].tolist()[1] == "uplink <= 50% of FedIT"          # the trailing note is dropped
    assert frame["model"].tolist() == ["tiny (toy)", "SmolLM2-135M", "<spra_federated>"]   # empty: from the scenario
    assert frame["where"].tolist() == ["hilo_distill 10 Mbit/s", "spra_federated sgd", "spra_federated sgd vs ffa"]


def test_where_names_trace_rates_and_pairs():
    assert compact_where("hilo_distill [tc] trace lte (mean 4.8 Mbit/s), r=64, vs full_sync_trace bf16") \
        .startswith("hilo_distill trace lte")
    assert compact_where("hilo_wide [tc] 10 Mbit/s, r=64, vs low-rank r=1") == "hilo_wide 10 Mbit/s vs low-rank r=1"


def test_screen_and_markdown_have_a_line_per_claim(monkeypatch):
    frame = short_frame(CLAIMS.assign(model="m"))
    text = screen(frame)
    assert len(text.splitlines()) == 1 + len(CLAIMS) and "3.59x" in text.splitlines()[1]
    md = markdown(frame).splitlines()
    assert md[0].startswith("| method | claim |") and len(md) == 2 + len(CLAIMS)


def test_bench_end_screen_says_where_the_report_is_and_each_steps_time(tmp_path, monkeypatch):
    from harness.commands.bench import final_screen

    monkeypatch.setattr("harness.report.brief.claims_path", lambda root=None: tmp_path / "absent.csv")
    text = final_screen([("hilo_distill", 0, 600.0), ("report", 1, 30.0)])
    assert "results/summary.md" in text and "results/spra_real/summary.md" in text
    assert "results/real (short form" in text and "no " in text         # make bench builds it: said missing
    assert "results/spra_real (short form" not in text                  # optional steps only: no claims, no heading
    assert "results (short form" not in text                            # --tiny's: likewise
    assert "ok     hilo_distill" in text and "10.0 min" in text and "FAILED report" in text and "total 10.5 min" in text


@pytest.mark.parametrize("block", ["claims", "claims-real", "claims-spra-real"])
def test_the_readme_claims_blocks_are_the_committed_claims_tables(block):
    from pathlib import Path

    from harness.report.brief import BLOCKS, readme_block

    root = Path(__file__).resolve().parents[2]
    expected = markdown(short_frame(pd.read_csv(root / BLOCKS[block])))
    assert readme_block((root / "README.md").read_text(), block) == expected, \
        (f"README.md's {block} block differs from {BLOCKS[block]}: python -m harness.report.brief "
         f"--claims {BLOCKS[block]} --readme README.md --block {block}")


def test_rewrite_readme_replaces_only_the_block(tmp_path):
    from harness.report.brief import readme_block, rewrite_readme

    path = tmp_path / "README.md"
    path.write_text("intro\n<!-- claims:begin (cmd) -->\n| old |\n<!-- claims:end -->\noutro\n")
    rewrite_readme(path, "| new |\n|---|")
    assert path.read_text() == "intro\n<!-- claims:begin (cmd) -->\n| new |\n|---|\n<!-- claims:end -->\noutro\n"
    assert readme_block(path.read_text()) == "| new |\n|---|"
    path.write_text("<!-- claims:begin -->\n| a |\n<!-- claims:end -->\n<!-- claims-real:begin (c) -->\n| a |\n"
                    "<!-- claims-real:end -->\n")
    rewrite_readme(path, "| b |", "claims-real")                # same table in both: only the named one changes
    assert readme_block(path.read_text()) == "| a |" and readme_block(path.read_text(), "claims-real") == "| b |"


def test_the_horizon_is_shortened_to_what_tells_verdicts_apart():
    from harness.report.brief import short_horizon

    long = "equal updates: final evaluation after {} updates; full sync {}: slope over the last 3 evaluations +0.1"
    assert short_horizon(long.format(80, "NOT plateaued (still rising: a per-update lag at this horizon)")) == \
        "80 updates, not plateaued"
    assert short_horizon(long.format(240, "plateaued")) == "240 updates, plateaued"
    assert short_horizon(long.format(32, "no significant rise (not a shown plateau)")) == "32 updates, no rise shown"
    assert short_horizon("equal updates: final evaluation after 30 updates; plateau not judged (one evaluation)") == \
        "30 updates, plateau not judged"
    assert short_horizon("equal wall-clock: when the faster finishes (mean 15.9 s)") == "equal time (15.9 s)"
    assert short_horizon("equal wall-clock: when the faster finishes (mean 141.5 s; read at HiLo's evaluation at "
                         "141.5 s and full sync's at 98.1 s, means over seeds)") == "equal time (141.5 s)"
    assert short_horizon("equal wall-clock: time to 95% of full sync's final quality") == "time to 95%"
    assert short_horizon("final round (36 rounds)") == "final round (36)"
    assert short_horizon("per update (mean over the run)") == "per update"
    assert short_horizon(float("nan")) == ""
    frame = short_frame(CLAIMS.assign(horizon=["per update (mean over the run)", "final round", float("nan")]))
    assert frame["horizon"].tolist() == ["per update", "final round", ""]


SMOL = "SmolLM2-135M-Instruct (real)"


def test_the_model_is_the_claims_own_column_and_where_leaves_it_to_that_column(monkeypatch):
    """claims.csv names each row's model (its runs', from run.json) in ``model`` and in ``where``; the
    brief shows the column and the compact where of today, and composes no scenario to guess it."""
    def never(scenario):
        raise AssertionError(f"composed {scenario} although the claims name their model")

    monkeypatch.setattr("harness.report.brief._scenario_model", never)
    claims = CLAIMS.iloc[[0, 0, 1]].reset_index(drop=True).assign(
        model=["tiny (toy)", "wide (LLM shape)", SMOL],
        where=["hilo_distill [tc] tiny (toy) 10 Mbit/s, r=64, vs full_sync_10mbit bf16",   # model=wide on the
               "hilo_distill [tc] wide (LLM shape) 10 Mbit/s, r=64, vs low-rank r=1",       # command line
               f"spra_real [tc] {SMOL} ranks 16,8, optimizer sgd, vs ffa"])
    frame = short_frame(claims)
    assert frame["model"].tolist() == ["tiny (toy)", "wide (LLM shape)", SMOL]
    assert frame["where"].tolist() == ["hilo_distill 10 Mbit/s", "hilo_distill 10 Mbit/s vs low-rank r=1",
                                       "spra_real sgd vs ffa"]


def test_compact_where_takes_the_model_out_or_keeps_it_after_the_scenario():
    where = f"hilo_real [tc] {SMOL} 10 Mbit/s, r=16, vs low-rank r=1"
    assert compact_where(where, SMOL) == "hilo_real 10 Mbit/s vs low-rank r=1"
    assert compact_where(where, SMOL, keep_model=True) == f"hilo_real {SMOL} 10 Mbit/s vs low-rank r=1"
    local = "my-trace-model (local HF)"                       # a model name that reads like a trace
    assert compact_where(f"spra_real [tc] {local} ranks 16,8, optimizer sgd, vs ffa", local) == "spra_real sgd vs ffa"


def test_a_claims_file_without_the_column_falls_back_to_the_scenario_labelled_the_same_way():
    """Only for claims files that predate the column: the scenario composed now, its model through
    collect.model_label (hilo_real composes to model=hf with the packaged SmolLM2 GGUF)."""
    from harness.report.brief import _scenario_model

    assert _scenario_model("hilo_real") == SMOL
    assert _scenario_model("hilo_wide") == "wide (LLM shape)"
    assert _scenario_model("no_such_scenario") == "–"


def test_a_claims_readings_keep_their_names_in_short_form():
    from harness.report.brief import _claim

    one = _claim("client compute <= 50% of FedIT (reading 1: the whole client step)")
    two = _claim("client compute <= 50% of FedIT (reading 2: LoRA's own FLOPs over the frozen model's forward and backward)")
    assert one == "client compute <= 50% of FedIT (the whole client step)"
    assert two == "client compute <= 50% of FedIT (LoRA's own FLOPs)"
    assert _claim("uplink <= 50% of FedIT (per round)") == "uplink <= 50% of FedIT"
