"""Sweeps: every ``scenarios/grid_*.yaml`` is a Hydra multirun grid whose swept keys exist, and a
sweep run through the real CLI (``python -m harness -m ...``) is resumable: run again, every
complete run is skipped; a run left failed or interrupted is redone, the old attempt kept.

The e2e part runs a 2-point grid (2 rates, 1 rank, full_sync only, 1 update, 1 worker) on the
``model`` backend (no root needed): 4 runs of ~10 s process start-up each on 2 cores."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import warm_cli
from omegaconf import OmegaConf

from harness.paths import project_root, scenarios_root

GRIDS = sorted(p.stem for p in scenarios_root().glob("grid_*.yaml"))
RATES = ("5mbit", "20mbit")
MISSING_KEY = object()


def _hydra_section(scenario: str):
    """The composed config with its ``hydra`` node (what the multirun sweeper reads)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from harness.conf.schema import register

    register()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="harness.conf", version_base="1.3"):
        return compose(config_name="config", overrides=[f"scenario={scenario}"],
                       return_hydra_config=True)


def test_there_is_a_grid_scenario():
    assert "grid_hilo" in GRIDS


@pytest.mark.parametrize("scenario", GRIDS)
def test_grid_sweeps_keys_that_exist_with_more_than_one_value(scenario):
    cfg = _hydra_section(scenario)
    params = cfg.hydra.sweeper.params
    assert params, f"{scenario}: hydra.sweeper.params is empty; a grid_* scenario must define its sweep"
    for key, values in params.items():
        assert OmegaConf.select(cfg, key, default=MISSING_KEY) is not MISSING_KEY, \
            f"{scenario}: swept key {key!r} is not in the config"
        assert len(str(values).split(",")) > 1, f"{scenario}: {key} sweeps a single value ({values})"


def test_multirun_dirs_stay_under_outputs_named_by_the_scenario():
    cfg = _hydra_section("grid_hilo")
    sweep_dir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"]
    assert sweep_dir.startswith("outputs/"), sweep_dir
    assert cfg.hydra.job.name == "grid_hilo" and cfg.scenario == "grid_hilo"


def test_results_runs_and_hydra_are_gitignored():
    root = project_root()
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("outputs/runs/x/y/run.json", "outputs/summary.md", "results/runs/x/y/run.json",
                 "outputs/multirun/grid_hilo/2026-01-01_00-00-00/0"):
        out = subprocess.run(["git", "check-ignore", "-q", path], cwd=root, timeout=30)
        assert out.returncode == 0, f"{path} is not ignored by .gitignore (a sweep would litter git status)"


# --- e2e: resumption through the real multirun CLI -------------------------------------------------

def _sweep(tmp: Path, runs: Path) -> subprocess.CompletedProcess:
    """The 2-point grid, run from ``tmp`` (so Hydra's default sweep dir lands there)."""
    argv = ["-m", "scenario=grid_hilo", f"net.rate={','.join(RATES)}",
            "model.rank=16", "net.backend=model", "only=[full_sync]", "onpolicy.workers=1",
            "onpolicy.steps=1", "onpolicy.eval_every=1", "task.eval_prompts=8", f"out_dir={runs}",
            "progress=false"]
    # from a folder that is not the checkout, PYTHONPATH keeps the import on this checkout's harness
    # (an editable install may point at another checkout); NARROWBAND_ROOT finds its scenarios
    root = str(project_root())
    env = {**os.environ, "NARROWBAND_ROOT": root,
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    out = warm_cli.run("harness", argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _runs(runs: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((runs / "grid_hilo").glob("*/run.json"))}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    runs = tmp / "runs"
    first = _sweep(tmp, runs)
    return tmp, runs, first, _runs(runs)


@pytest.mark.e2e
@pytest.mark.slow
def test_multirun_runs_every_grid_point(sweep):
    tmp, runs, first, metas = sweep
    assert "Launching 2 jobs" in first.stdout + first.stderr
    assert len(metas) == 2 and all(m["status"] == "ok" for m in metas.values()), metas
    rates = sorted(m["config"]["net"]["rate"] for m in metas.values())
    assert rates == sorted(RATES)
    for name, meta in metas.items():      # a folder says its grid point: full_sync-rate=5mbit-s0-<hash>
        assert f"-rate={meta['config']['net']['rate']}-" in name, name
    headers = [line for line in first.stdout.splitlines() if line.startswith("=== grid_hilo [")]
    assert any(f"net.rate={RATES[0]}" in h.split("]")[0] for h in headers), first.stdout[-2000:]
    assert {m["backend"] for m in metas.values()} == {"model"}
    # Hydra's job folders went under <cwd>/outputs/multirun/grid_hilo/, nothing else was written in cwd
    assert sorted(p.name for p in tmp.iterdir()) == ["outputs", "runs"]
    assert [p.name for p in (tmp / "outputs").iterdir()] == ["multirun"]
    assert [p.name for p in (tmp / "outputs" / "multirun").iterdir()] == ["grid_hilo"]


@pytest.mark.e2e
@pytest.mark.slow
def test_the_whole_pipeline_real_runs_to_tables_and_plots(sweep):
    """runs -> report -> plots on the sweep's real runs: table schemas and non-empty figures."""
    import pandas as pd

    from harness.report import build_report
    from harness.report.tables import HILO_COLUMNS

    tmp, _, _, metas = sweep
    made = build_report(tmp)
    hilo = pd.read_csv(tmp / "tables" / "hilo.csv")
    assert set(HILO_COLUMNS) <= set(hilo.columns), set(HILO_COLUMNS) - set(hilo.columns)
    assert len(hilo) == len(metas) and set(hilo["method"]) == {"full_sync"}
    assert (hilo["bytes_per_update"] > 0).all() and (hilo["bytes_frac"] == 1.0).all()
    assert made["plots"], made["skipped"]
    for path in made["plots"]:
        assert Path(path).stat().st_size > 0, path
    assert {Path(p).suffix for p in made["plots"]} == {".png", ".pdf"}
    assert "grid_hilo" in (tmp / "summary.md").read_text()


@pytest.mark.e2e
@pytest.mark.slow
def test_rerun_skips_complete_runs_and_redoes_failed_or_interrupted(sweep):
    from harness.record import set_status

    tmp, runs, _, before = sweep
    again = _sweep(tmp, runs)
    assert again.stdout.count("complete already, skipped (resume=true)") == 2, again.stdout[-3000:]
    assert _runs(runs) == before, "a skipped run's run.json changed"

    failed, killed = sorted(before)
    set_status(runs / "grid_hilo" / failed, "failed", "test: pretend it crashed")
    set_status(runs / "grid_hilo" / killed, "running", "")   # what a killed sweep leaves behind
    third = _sweep(tmp, runs)
    assert "complete already" not in third.stdout
    after = _runs(runs)
    assert set(after) == {failed, killed, f"{failed}.attempt1", f"{killed}.attempt1"}
    assert after[failed]["status"] == after[killed]["status"] == "ok"
    assert after[f"{failed}.attempt1"]["status"] == "failed"
    assert after[f"{killed}.attempt1"]["status"] == "interrupted"
    assert after[failed]["config"] == before[failed]["config"]
    assert list((runs / "grid_hilo" / failed / "rows").glob("*.parquet")), "the redone run wrote no rows"


def test_a_bad_value_anywhere_in_a_sweep_is_one_line_before_any_job(tmp_path):
    """The command line's check composes every value of every swept key once: a bad one ends the
    sweep before its first job, with one line naming the key and the value, exit 2."""
    argv = ["-m", "scenario=grid_hilo", "net.rate=5mbit,bogus", "model.rank=16", "net.backend=model",
            "only=[full_sync]", f"out_dir={tmp_path / 'runs'}", f"hydra.sweep.dir={tmp_path / 'hydra'}"]
    out = warm_cli.run("harness", argv, cwd=project_root(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: net.rate: 'bogus'"), out.stderr
    assert "Launching" not in out.stdout and not (tmp_path / "runs").exists() and not (tmp_path / "hydra").exists()


def test_a_bad_grid_point_fails_its_job_not_the_sweep(tmp_path):
    """In multirun a ConfigError the planner finds (the command line's check composes and validates
    fields; the planner checks what a role would trip over, here the optimizer's name) is that job's
    failure (an exception Hydra records; a launcher in other processes pickles it back), not
    SystemExit(2), which would end the basic launcher's sweep at the first bad point and leave a
    submitit job with no result file."""
    argv = ["-m", "scenario=grid_hilo", "onpolicy.optimizer=bogus,bogus2", "net.rate=5mbit",
            "model.rank=16", "net.backend=model", "only=[full_sync]", f"out_dir={tmp_path / 'runs'}",
            f"hydra.sweep.dir={tmp_path / 'hydra'}", "progress=false"]
    out = warm_cli.run("harness", argv, cwd=project_root(), capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    for bad in ("bogus", "bogus2"):      # both points ran: the first failure did not stop the sweep
        assert f"error: onpolicy.optimizer: '{bad}' is not allowed" in text, text[-3000:]
    assert "harness.errors.ConfigError: onpolicy.optimizer: 'bogus'" in text, text[-3000:]
    assert not (tmp_path / "runs").exists()
