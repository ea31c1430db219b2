"""The front door: --help answers at once, a bare command says how to start, Hydra sees only scenarios/.

The project root here is a temporary folder (NARROWBAND_ROOT) holding the real scenarios and
thousands of run folders with YAML files in them, the layout that made Hydra's help walk
results/runs for minutes. The time limits are hang detectors, not speed targets.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands.usage import purpose, scenarios

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 120      # a hang detector: the screen itself takes well under a second


@pytest.fixture(scope="module")
def crowded_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clone")
    (root / "scenarios").symlink_to(ROOT / "scenarios")
    runs = root / "results" / "runs"
    for i in range(3000):
        run = runs / f"smoke_hilo-{i:05d}" / ".hydra"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("method: {name: hilo}\n")
    (root / ".venv" / "lib" / "conf").mkdir(parents=True)
    return root


def _harness(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NARROWBAND_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=HANG_S)


def test_help_lists_every_scenario_with_its_purpose_the_groups_and_the_commands(crowded_root):
    out = _harness(crowded_root, "--help")
    assert out.returncode == 0, out.stderr
    for name, what in scenarios():
        line = next(l for l in out.stdout.splitlines() if l.split()[:1] == [name])
        assert what in line and len(what) > 10
    for group, option in (("method", "hilo"), ("compressor", "spar"), ("model", "tiny"), ("net", "slow")):
        line = next(l for l in out.stdout.splitlines() if l.split()[:1] == [group])
        assert option in line
    for command in ("make bench", "harness.report", "harness.tune", "harness.commands.sizes", "netem check"):
        assert command in out.stdout


def test_hydra_help_returns_on_a_clone_with_thousands_of_runs(crowded_root):
    out = _harness(crowded_root, "--hydra-help")
    assert out.returncode == 0, out.stderr
    assert "Hydra" in out.stdout


def test_a_bare_command_says_how_to_start_and_runs_nothing(crowded_root):
    out = _harness(crowded_root)
    assert out.returncode == 2
    assert "scenario=smoke_hilo" in out.stderr and "--help" in out.stderr
    assert out.stdout == ""
    assert sorted(p.name for p in (crowded_root / "results" / "runs").iterdir())[:1] == ["smoke_hilo-00000"]
    assert len(list((crowded_root / "results" / "runs").iterdir())) == 3000     # no run folder was added


def test_hydra_searches_only_the_scenarios_folder_of_the_project(crowded_root, monkeypatch):
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    monkeypatch.setenv("NARROWBAND_ROOT", str(crowded_root))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="harness.conf", version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            groups = loader.list_groups("")
            assert "scenario" in groups
            assert not {"results", ".venv", "scenarios"} & set(groups)
            assert set(loader.get_group_options("scenario", ObjectType.CONFIG)) == {n for n, _ in scenarios()}
    finally:
        GlobalHydra.instance().clear()


def test_purpose_is_the_headers_first_sentence_without_its_name(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text("# @package _global_\n# demo: full sync vs HiLo at 10 Mbit/s on the tiny\n"
                    "# model, 3 seeds. More detail here.\n# Measures: bytes.\nmethod: hilo\n")
    assert purpose(path) == "full sync vs HiLo at 10 Mbit/s on the tiny model, 3 seeds"
    long = tmp_path / "long.yaml"
    long.write_text("# long: " + "word " * 40 + "\n")
    text = purpose(long, width=40)
    assert len(text) <= 40 and text.endswith("...") and "wor..." not in text
