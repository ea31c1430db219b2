"""A report never writes into a committed reference unless asked, and then only from complete
reference runs (harness/report/reference.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.commands.report import main
from harness.report.reference import MARKER


def _tree(src: Path, dst: Path, runs: dict | None = None) -> Path:
    shutil.copytree(src, dst)
    if runs is not None:
        (dst / MARKER).write_text(json.dumps({"what": "test", "rebuild": "make bench", "runs": runs, "optional": {}}))
    return dst


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_plain_report_refuses_a_reference_folder_and_writes_nothing(small_results, tmp_path, capsys):
    ref = _tree(small_results, tmp_path / "ref", {"hilo_distill": {"full_sync": [0]}})
    before = _files(ref)
    assert main(["--results", str(ref), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "committed reference" in err and "outputs/" in err
    assert _files(ref) == before


def test_reference_needs_every_listed_run(small_results, tmp_path, capsys):
    ref = _tree(small_results, tmp_path / "ref", {"hilo_distill": {"full_sync": [0, 1]}})
    before = _files(ref)
    assert main(["--results", str(ref), "--reference", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "full_sync seed 1" in err and "1 runs missing" in err and "optional" not in err
    assert _files(ref) == before


def test_an_optional_variant_is_all_seeds_or_none(small_results, tmp_path, capsys):
    ref = _tree(small_results, tmp_path / "ref")
    (ref / MARKER).write_text(json.dumps({"runs": {"hilo_distill": {"full_sync": [0]}},
                                          "optional": {"spra_federated": {"fedit": [0, 1]}}}))
    assert main(["--results", str(ref), "--reference", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "fedit seed 1" in err and "the optional bench step" in err and "--only NAME" in err
    (ref / MARKER).write_text(json.dumps({"runs": {"hilo_distill": {"full_sync": [0]}},
                                          "optional": {"spra_federated": {"absent_variant": [0, 1]}}}))
    assert main(["--results", str(ref), "--reference", "--no-progress"]) == 0


def test_reference_builds_from_listed_runs_only(small_results, tmp_path, capsys):
    ref = _tree(small_results, tmp_path / "ref", {"hilo_distill": {"full_sync": [0], "hilo_spar": [0]}})
    assert main(["--results", str(ref), "--reference", "--no-progress"]) == 0
    out = capsys.readouterr().out
    # two runs per listed key (10 and 100 Mbit/s): the later counts; the federated runs are not listed
    assert "2/6 runs ok" in out
    assert out.count(": superseded") == 2 and out.count(": not reference") == 2
    assert (ref / "summary.md").is_file()


def test_out_sends_the_report_elsewhere(small_results, tmp_path, capsys):
    ref = _tree(small_results, tmp_path / "ref", {"hilo_distill": {"full_sync": [0]}})
    before = _files(ref)
    assert main(["--results", str(ref), "--out", str(tmp_path / "mine"), "--no-progress"]) == 0
    assert (tmp_path / "mine" / "summary.md").is_file() and (tmp_path / "mine" / "tables" / "claims.csv").is_file()
    assert _files(ref) == before


def test_reference_flag_on_a_plain_folder_is_refused(small_results, tmp_path, capsys):
    plain = _tree(small_results, tmp_path / "plain")
    assert main(["--results", str(plain), "--reference", "--no-progress"]) == 2
    assert "not a reference folder" in capsys.readouterr().err


@pytest.mark.parametrize("folder", ["results", "results/real", "results/real_bytes", "results/spra_real"])
def test_committed_manifests_are_the_bench_steps(folder):
    from harness.commands.bench import REFERENCES, reference_manifest
    from harness.paths import project_root

    (_, steps, rebuild, what), = [r for r in REFERENCES if r[0] == folder]
    assert (project_root() / folder / MARKER).read_text() == reference_manifest(steps, folder, rebuild).to_json(what), (
        f"{folder}/{MARKER} is stale: python -m harness.bench --manifest")
