"""A sweep through hydra-submitit-launcher's local executor (``hydra/launcher=submitit_local``):
the code path a Slurm sweep takes. Each grid point runs in a fresh subprocess that unpickles the
launcher and the app's task function (submitit's ``_submit``); the job's output goes to
``<hydra.sweep.dir>/.submitit/<job id>/``, not to the sweep's stdout.

Checked through the real CLI, from a folder that is not the checkout: both points run ``ok``
with the scenario name and the ``scenario=`` command recorded; the same command again skips
a complete run (resume) and redoes one left ``running`` (what a killed job leaves behind),
keeping the old attempt. 2 jobs of 1 update, 1 worker, on the ``model`` backend (no root).
Two sweeps, each two job processes in parallel; each job imports torch and transformers
from cold, so most of the time is process start-up."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import warm_cli

from harness.paths import project_root

pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                    reason="hydra-submitit-launcher is not installed (pip install -e '.[dev]')")

RATES = ("5mbit", "20mbit")
SKIPPED = "complete already, skipped (resume=true)"


def _sweep(tmp: Path) -> subprocess.CompletedProcess:
    argv = ["-m", "scenario=grid_hilo", f"net.rate={','.join(RATES)}",
            "model.rank=16", "net.backend=model", "only=[full_sync]", "onpolicy.workers=1",
            "onpolicy.steps=1", "onpolicy.eval_every=1", "task.eval_prompts=8", "progress=false",
            f"out_dir={tmp / 'runs'}", f"hydra.sweep.dir={tmp / 'hydra'}",
            "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]
    # the jobs inherit cwd and environment: PYTHONPATH makes them import this checkout's harness
    # (not whichever checkout an editable install points at), NARROWBAND_ROOT its scenarios
    root = str(project_root())
    env = {**os.environ, "NARROWBAND_ROOT": root,
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    out = warm_cli.run("harness", argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Submitit 'local' sweep output dir" in out.stdout + out.stderr, "the sweep did not use submitit"
    return out


def _runs(tmp: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((tmp / "runs" / "grid_hilo").glob("*/run.json"))}


def _job_logs(tmp: Path) -> dict[str, str]:
    """stdout of every submitit job so far, by job folder (``.submitit/<job id>``)."""
    return {p.parent.name: p.read_text() for p in (tmp / "hydra" / ".submitit").glob("*/*_log.out")}


@pytest.mark.e2e
@pytest.mark.slow
def test_submitit_local_sweep_runs_resumes_and_redoes_a_killed_run(tmp_path):
    from harness.record import set_status

    _sweep(tmp_path)
    first, logs = _runs(tmp_path), _job_logs(tmp_path)
    assert len(logs) == 2, f"expected 2 submitit jobs, found {sorted(logs)}"
    assert len(first) == 2 and all(m["status"] == "ok" for m in first.values()), first
    assert sorted(m["config"]["net"]["rate"] for m in first.values()) == sorted(RATES)
    for m in first.values():
        assert m["scenario"] == "grid_hilo" and m["backend"] == "model"
        assert m["command"].startswith("python -m harness ") and "scenario=grid_hilo" in m["command"]
    assert not list(tmp_path.glob("results")), "a job wrote results/ into the cwd instead of out_dir"

    killed, kept = sorted(first)
    set_status(tmp_path / "runs" / "grid_hilo" / killed, "running", "")   # the job was killed mid-run
    _sweep(tmp_path)
    second = _runs(tmp_path)
    new_logs = {k: v for k, v in _job_logs(tmp_path).items() if k not in logs}
    assert len(new_logs) == 2, f"expected 2 new submitit jobs, found {sorted(new_logs)}"
    said = "".join(new_logs.values())
    assert said.count(SKIPPED) == 1 and f"{kept}: {SKIPPED}" in said, said[-3000:]
    assert set(second) == {killed, kept, f"{killed}.attempt1"}
    assert second[kept] == first[kept], "the skipped run's run.json changed"
    assert second[killed]["status"] == "ok" and second[f"{killed}.attempt1"]["status"] == "interrupted"
    assert second[killed]["config"] == first[killed]["config"]
    assert list((tmp_path / "runs" / "grid_hilo" / killed / "rows").glob("*.parquet")), "the redone run wrote no rows"
