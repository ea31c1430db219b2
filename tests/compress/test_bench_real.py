"""The compressor bench on a real chat model's LoRA gradients (``--model hf:PATH``), here on the
tiny self-built chat model of tests/tasks/chat_model.py (1 layer, hidden 32): 2 SFT steps, one
LoRA rank, one budget. The 135M SmolLM2 never runs in a test."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch

from harness.commands import compress_bench as bench
from harness.commands.compress_bench import gradients as bench_gradients, real as bench_real, table as bench_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tasks"))
from chat_model import save_chat_model  # noqa: E402


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    return save_chat_model(tmp_path_factory.mktemp("chat") / "model")


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_gradients_follow_an_adamw_trajectory(chat_dir):
    torch.set_num_threads(1)
    grads = bench_real.chat_gradients(str(chat_dir), steps=2, warmup=0, rank=4)
    names = sorted(grads[0])
    assert len(names) == 14                                    # 7 linear layers x (A, B), 1 decoder layer
    a_names = [n for n in names if "lora_A" in n]
    # B = 0 at initialisation, so the first gradient of every A is zero; AdamW's first step moves B,
    # so the second gradient reaches A: the stream is consecutive steps of one run, not 2 fresh draws
    assert all(float(grads[0][n].abs().max()) == 0.0 for n in a_names)
    assert all(float(grads[1][n].abs().max()) > 0.0 for n in a_names)
    assert all(float(grads[0][n].abs().max()) > 0.0 for n in names if "lora_B" in n)
    assert tuple(grads[0]["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"].shape) == (4, 32)


def test_real_model_table_ranks_and_plot(chat_dir, tmp_path):
    out, plot = tmp_path / "real.csv", tmp_path / "ranks.png"
    rc = bench.main(["--model", f"hf:{chat_dir}", "--rank", "4", "--steps", "2", "--warmup", "1",
                     "--budgets", "0.5", "--csv", str(out), "--plot", str(plot)])
    assert rc == 0
    rows = _read(out)
    assert [r["compressor"].split("[")[0] for r in rows] == list(bench_table.REAL_VARIANTS)
    assert {(r["model"], r["lora_rank"], r["steps"], r["budget"]) for r in rows} == {(f"hf:{chat_dir}", "4", "2", "0.5")}
    ran = [r for r in rows if r["bytes"] != "nan"]
    assert {r["compressor"] for r in ran} >= {"spar", "topk", "randk"}
    for r in ran:                                              # every lossy row within its budget
        assert float(r["bytes"]) <= int(r["budget_bytes"]) and 0 <= float(r["err_1"]) < 1
    for r in rows:
        if r["bytes"] == "nan":                                # n/a says why (e.g. rank 4 does not fit)
            assert r["note"]
    ranks = _read(tmp_path / "real_spar_ranks.csv")
    assert len(ranks) == 2 * 14                                # one row per (step, matrix)
    assert {r["part"] for r in ranks} == {"A", "B"} and {r["layer"] for r in ranks} == {"0"}
    assert {r["matrix"] for r in ranks} == {f"L0 {m} {p}" for m in bench_gradients.TARGETS for p in "AB"}
    assert all(0 <= int(r["k"]) <= 4 for r in ranks) and any(int(r["k"]) > 0 for r in ranks)
    assert plot.is_file() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_seeds_give_streams_of_their_own_and_an_interval_per_row(chat_dir, tmp_path):
    """--seeds: one gradient stream per seed (rows differ), Spar's ranks from the first seed only, and a
    summary whose mean and interval are those of the per-seed rows, with err_ef paired against Spar's."""
    from harness.report.stats import summarize

    out = tmp_path / "real.csv"
    rc = bench.main(["--model", f"hf:{chat_dir}", "--rank", "4", "--steps", "2", "--warmup", "1", "--seeds", "0,1,2",
                     "--budgets", "0.5", "--compressors", "spar,topk", "--csv", str(out)])
    assert rc == 0
    rows = _read(out)
    assert sorted(r["seed"] for r in rows) == ["0", "0", "1", "1", "2", "2"]
    spar = {r["seed"]: float(r["err_ef"]) for r in rows if r["compressor"] == "spar"}
    topk = {r["seed"]: float(r["err_ef"]) for r in rows if r["compressor"] == "topk"}
    assert len(set(spar.values())) == 3                        # three streams, not one stream three times
    assert len(_read(tmp_path / "real_spar_ranks.csv")) == 2 * 14       # the first seed's ranks only
    summary = {r["compressor"]: r for r in _read(tmp_path / "real_summary.csv")}
    want = summarize(spar.values())
    assert float(summary["spar"]["err_ef"]) == pytest.approx(want.mean)
    assert float(summary["spar"]["err_ef_low"]) == pytest.approx(want.ci_low) and summary["spar"]["n"] == "3"
    assert summary["spar"]["vs_spar_err_ef"] == "nan"          # Spar itself: no difference
    diff = summarize(topk[s] - spar[s] for s in spar)
    assert float(summary["topk"]["vs_spar_err_ef"]) == pytest.approx(diff.mean)
    assert float(summary["topk"]["vs_spar_high"]) == pytest.approx(diff.ci_high)


def test_bad_real_model_input_is_one_line_exit_2(tmp_path, capsys):
    assert bench.main(["--model", f"hf:{tmp_path / 'missing'}"]) == 2
    assert bench.main(["--model", f"hf:{tmp_path}", "--rank", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("--model:") and err[1].startswith("--rank:")
