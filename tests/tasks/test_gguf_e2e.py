"""End-to-end tier of model=hf from a GGUF file of a family other than llama (qwen2: biases on
q/k/v, no BOS token, written here by hf_families.save_gguf with Q8_0 projections): smoke_hilo
runs ok through the same path and run.json records the file's and the weights' SHA-256; a
missing file and an architecture transformers cannot dequantize each end the command with one
line and exit 2, before any run directory (and so any namespace) exists."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import warm_cli

from hf_families import save_gguf

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _harness(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NARROWBAND_CACHE": str(cache)}
    return warm_cli.run("harness", args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def qwen2_file(tmp_path_factory) -> Path:
    # hidden 64: the 1.6% Spar budget of its r=16 adapter holds the header and a factor
    return save_gguf("qwen2", tmp_path_factory.mktemp("qwen2") / "tiny-qwen2.Q8_0.gguf", hidden=64, qtype="Q8_0")


def test_smoke_hilo_runs_ok_on_a_qwen2_gguf(qwen2_file, tmp_path):
    from harness.record import read_rows, read_run_json
    from harness.tasks.bases import dir_weights_sha256

    out, cache = tmp_path / "runs", tmp_path / "cache"
    proc = _harness(cache, "scenario=smoke_hilo", "model=hf", f"model.path={qwen2_file}", f"out_dir={out}",
                    "progress=false", "onpolicy.steps=2", "onpolicy.eval_every=2", "only=[hilo_spar]")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert [p.name[:5] for p in entries] == ["gguf-"]                      # one entry for student and teacher
    file_sha = hashlib.sha256(qwen2_file.read_bytes()).hexdigest()
    runs = sorted(p for p in (out / "smoke_hilo").iterdir() if p.is_dir())
    assert [r.name.rsplit("-", 2)[0] for r in runs] == ["hilo_spar"]    # full_sync too, on a local folder: test_targets_e2e
    for run in runs:
        rows = read_rows(run)
        learner = rows[rows.role == "learner"]
        assert sorted(learner.step) == [0, 1] and learner.in_sync.all(), run.name
        assert json.loads((run / "cluster" / "roles.json").read_text())["spawn"] == "fork"   # not exec: no thread left by the materialising
        bases = read_run_json(run)["bases"]
        assert set(bases) == {"student", "teacher"}                        # smoke_hilo distills
        for base in bases.values():
            assert base["origin"] == "gguf" and base["gguf"] == str(qwen2_file)
            assert base["gguf_sha256"] == file_sha
            assert base["sha256"] == dir_weights_sha256(entries[0]) and base["path"] == str(entries[0])


def _fails_on_one_line(proc: subprocess.CompletedProcess, out: Path) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert not out.exists()                                                # nothing launched
    return lines[0]


def test_a_missing_gguf_fails_before_launch_with_one_line(tmp_path):
    out = tmp_path / "runs"
    line = _fails_on_one_line(_harness(tmp_path / "cache", "scenario=smoke_hilo", "model=hf",
                                       f"model.path={tmp_path / 'gone.gguf'}", f"out_dir={out}", "progress=false"), out)
    assert "model.path" in line and "gone.gguf" in line


def test_an_unsupported_architecture_fails_before_launch_with_one_line(tmp_path, monkeypatch):
    import gguf
    import numpy as np

    file = tmp_path / "tiny-rwkv.gguf"
    w = gguf.GGUFWriter(str(file), "rwkv6")
    w.add_block_count(1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b"])
    w.add_tensor("token_embd.weight", np.zeros((2, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    # in-process, through the planner the command line calls (the missing-file case above is the real
    # command: its exit status and single line); the error is the line the command prints
    from harness.errors import ConfigError
    from harness.plan import build_plan
    from harness.compose import compose_config

    monkeypatch.setenv("NARROWBAND_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as err:
        build_plan(compose_config(["scenario=smoke_hilo", "model=hf", f"model.path={file}"]))
    line = str(err.value)
    assert "\n" not in line and line.startswith("model.path")
    assert "'rwkv6'" in line and "cannot dequantize" in line
    assert not any((tmp_path / "cache").glob("gguf-*/meta.json"))          # nothing was dequantized
