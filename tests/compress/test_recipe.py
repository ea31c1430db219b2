"""The compressor recipe of docs/interfaces.md, followed to the letter: one module + one YAML, nothing else.

The test copies the project's code (harness/, netem/, hydra_plugins/, scenarios/) into a temporary
folder, writes the recipe's two code blocks there at the paths their first lines name, and runs
the real command line (a fresh interpreter whose import path starts at the copy): a smoke run of
HiLo with the new compressor must finish ``ok`` with every update in sync, and a budget the
compressor cannot hold must end with one line and exit 2 before any run directory exists.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "interfaces.md"
COPIED = ("harness", "netem", "hydra_plugins", "scenarios")


def recipe_files() -> dict[str, str]:
    """Relative path -> text of the compressor recipe's code blocks (the first line of each names its file)."""
    text = DOC.read_text()
    section = text[text.index("A **compressor** is one new module"):text.index("An **on-policy sync method**")]
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", section, re.S)
    files = {}
    for block in blocks:
        first, _, rest = block.partition("\n")
        assert first.startswith("# harness/"), f"a recipe block must open with its path: {first!r}"
        path = first[2:].strip()
        files[path] = rest if path.endswith(".py") else block
    assert set(files) == {"harness/compress/signsgd.py", "harness/conf/compressor/signsgd.yaml"}, sorted(files)
    return files


@pytest.fixture(scope="module")
def project_with_recipe(tmp_path_factory) -> Path:
    """A copy of the project with the recipe's two files added and nothing else changed."""
    root = tmp_path_factory.mktemp("recipe")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for rel, text in recipe_files().items():
        assert not (root / rel).exists(), f"the recipe's {rel} is already in the project"
        (root / rel).write_text(text)
    return root


def run_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "NARROWBAND_ROOT": str(root),
           "NARROWBAND_CACHE": str(root / ".cache")}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.e2e
def test_a_compressor_written_from_the_docs_alone_runs_end_to_end(project_with_recipe, tmp_path):
    out = tmp_path / "runs"
    result = run_cli(project_with_recipe, "scenario=smoke_hilo", "only=[hilo_spar]", "compressor=signsgd",
                     "compressor.options.scale=max", "onpolicy.steps=2", "onpolicy.eval_every=0",
                     "onpolicy.eval_final=false", f"out_dir={out}", "progress=false")
    assert result.returncode == 0, result.stderr[-3000:]
    from harness.record import read_rows, read_run_json

    (run_dir,) = [p for p in (out / "smoke_hilo").iterdir() if p.is_dir()]
    meta = read_run_json(run_dir)
    assert meta["status"] == "ok", meta.get("reason")
    assert meta["config"]["compressor"]["name"] == "signsgd"
    rows = read_rows(run_dir)
    learner = rows[rows["role"] == "learner"]
    assert len(learner) == 2 and (learner["compressor"] == "signsgd").all()
    assert rows["in_sync"].astype(bool).all()
    # one sign bit per element: at least 1/16 of the bf16 bytes, within the 10% budget (budget_bytes)
    info = learner["compressor_info"].map(json.loads)
    assert all(i["budget_bytes"] / 0.1 / 16 < i["used_bytes"] <= i["budget_bytes"] for i in info)
    assert (learner["update_bytes"] == [i["used_bytes"] for i in info]).all()


@pytest.mark.e2e
def test_a_budget_the_recipe_compressor_cannot_hold_is_one_line_and_exit_2(project_with_recipe, tmp_path):
    result = run_cli(project_with_recipe, "scenario=smoke_hilo", "only=[hilo_spar]", "compressor=signsgd",
                     "compressor.budget=0.016", f"out_dir={tmp_path / 'runs'}")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: compressor.budget:"), result.stderr[-3000:]
    assert "cannot hold one sign bit per element" in lines[0]
    assert not (tmp_path / "runs").exists()
