"""`python -m harness.report` and the notebooks, as a user runs them (subprocess)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLBACKEND": "Agg", **(env or {})})


def test_cli_builds_the_report_and_prints_a_summary(small_results):
    out = _run(["-m", "harness.report", "--results", str(small_results), "--no-progress"])
    assert out.returncode == 0, out.stderr
    # one seed per configuration: no interval, so no claim is judged; the screen lists each line left out and why
    assert "6/6 runs ok" in out.stdout
    speedup = [line for line in out.stdout.splitlines() if "update speedup" in line]
    assert speedup and all(line.strip().startswith("not judged: HiLo: update speedup") for line in speedup), speedup
    assert all(line.endswith("fewer than 2 seeds: no interval (run >= 3 seeds)") for line in speedup), speedup
    assert (small_results / "summary.md").exists() and (small_results / "tables" / "hilo.csv").exists()


def test_cli_names_a_bad_results_folder(tmp_path):
    out = _run(["-m", "harness.report", "--results", str(tmp_path / "nope")])
    assert out.returncode == 2
    assert "--results" in out.stderr and "nope" in out.stderr


@pytest.mark.parametrize("notebook, expect", [("hilo_analysis.py", "hilo.csv"),
                                              ("federated_analysis.py", "spra.csv")])
def test_notebooks_run_as_scripts(small_results, notebook, expect):
    out = _run([f"notebooks/{notebook}", "--results", str(small_results)])
    assert out.returncode == 0, out.stderr[-2000:]
    assert expect in out.stdout and "plots/" in out.stdout


def test_notebook_reads_the_results_folder_from_the_environment(tmp_path):
    (tmp_path / "runs").mkdir()   # no runs: every figure is skipped with its reason
    out = _run(["notebooks/federated_analysis.py"], env={"NARROWBAND_RESULTS": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{tmp_path}: 0 ok runs of 0" in out.stdout and "skipped fed_accuracy_vs_rounds" in out.stdout


def test_notebooks_are_jupytext_percent_files():
    jupytext = pytest.importorskip("jupytext")
    for path in sorted((ROOT / "notebooks").glob("*.py")):
        nb = jupytext.read(path)
        assert nb.metadata["jupytext"]["text_representation"]["format_name"] == "percent", path
        assert sum(c.cell_type == "code" for c in nb.cells) >= 3, path
