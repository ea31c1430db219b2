"""End-to-end tier of model=hf on an architecture the presets are not (GPT-2: Conv1D
projections, BPE tokenizer that merges digits): smoke_hilo runs ok through the same path, and a
wrong model.targets fails before any namespace or run directory exists, on one line."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import warm_cli

from hf_families import save_family

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _harness(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return warm_cli.run("harness", args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    # hidden 64: the 1.6% Spar budget of its r=16 adapter (33 kB bf16) holds the header and a factor
    return save_family("gpt2", tmp_path_factory.mktemp("gpt2") / "model", hidden=64)


def test_smoke_hilo_runs_ok_on_a_local_gpt2(gpt2_dir, tmp_path):
    from harness.record import read_rows

    out = tmp_path / "runs"
    proc = _harness("scenario=smoke_hilo", "model=hf", f"model.path={gpt2_dir}", f"out_dir={out}",
                    "progress=false", "onpolicy.steps=2", "onpolicy.eval_every=2", "only=[full_sync,hilo_spar]")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = sorted(p for p in (out / "smoke_hilo").iterdir() if p.is_dir())
    assert [r.name.rsplit("-", 2)[0] for r in runs] == ["full_sync", "hilo_spar"]   # <variant>-s<seed>-<hash>
    for run in runs:
        rows = read_rows(run)
        learner = rows[rows.role == "learner"]
        assert sorted(learner.step) == [0, 1] and learner.in_sync.all(), run.name
        assert (learner.payload_bytes_down > 0).all(), run.name


def test_wrong_targets_fail_before_launch_with_one_line(gpt2_dir, tmp_path):
    out = tmp_path / "runs"
    proc = _harness("scenario=smoke_hilo", "model=hf", f"model.path={gpt2_dir}", f"out_dir={out}",
                    "progress=false", "model.targets=[q_proj,v_proj]")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "model.targets" in lines[0], proc.stderr
    for name in ("c_attn", "c_proj", "c_fc"):
        assert name in lines[0]
    assert not out.exists()          # nothing launched: no run directory (and so no namespace)
