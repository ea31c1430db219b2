"""Plots: PNG and PDF exist and are non-empty; absent data is a note, not an error."""
from __future__ import annotations

import json

import pytest

from harness.report import build_report
from harness.report.figkit import dodge
from harness.report.plots import short_matrix_name
from report_synthetic import ONPOLICY, write_federated, write_onpolicy, FEDERATED

KINDS = ["quality_vs_bytes", "quality_vs_time", "speedup_vs_rate", "frontier", "bytes_vs_rank", "spar_ranks",
         "fed_accuracy_vs_rounds", "fed_accuracy_vs_uplink", "snr_vs_rank"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_figure_kind_is_written_as_png_and_pdf(report, results, kind):
    pngs = sorted((results / "plots").glob(f"{kind}*.png"))
    assert pngs, f"no {kind} figure"
    for png in pngs:
        pdf = png.with_suffix(".pdf")
        assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert pdf.stat().st_size > 1000 and pdf.read_bytes()[:5] == b"%PDF-"


def test_figures_are_listed_in_the_summary(report, results):
    summary = (results / "summary.md").read_text()
    for fig in report["figures"]:
        assert f"plots/{fig.name}.png" in summary


def test_absent_data_is_skipped_with_a_note(tmp_path):
    write_federated(tmp_path, "spra_federated", "tc", FEDERATED[0])      # no on-policy run, no snr.csv
    report = build_report(tmp_path)
    skipped = dict(report["skipped"])
    assert {"quality_vs_bytes", "spar_ranks", "snr_vs_rank"} <= set(skipped)
    summary = (tmp_path / "summary.md").read_text()
    assert "snr.csv absent" in summary and "No on-policy runs" in summary
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "fed_accuracy_vs_rounds-spra_federated-tc.pdf", "fed_accuracy_vs_rounds-spra_federated-tc.png",
        "fed_accuracy_vs_uplink-spra_federated-tc.pdf", "fed_accuracy_vs_uplink-spra_federated-tc.png"]


def test_figures_no_longer_drawn_are_removed_but_foreign_files_kept(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir(parents=True)
    (plots / "quality_vs_bytes-gone-tc-distill.png").write_bytes(b"old")
    (plots / "my_own_figure.png").write_bytes(b"mine")
    (tmp_path / "runs").mkdir()
    build_report(tmp_path)
    assert sorted(p.name for p in plots.iterdir()) == ["my_own_figure.png"]


def test_empty_and_incomplete_results_still_report(tmp_path):
    (tmp_path / "runs").mkdir()
    empty = build_report(tmp_path)
    assert empty["runs"] == 0 and empty["plots"] == [] and (tmp_path / "summary.md").exists()
    killed = write_onpolicy(tmp_path, "hilo_distill", "tc", ONPOLICY[0], 10, 0)
    meta = json.loads((killed / "run.json").read_text())
    (killed / "run.json").write_text(json.dumps({**meta, "status": "running", "reason": ""}))
    no_meta = write_onpolicy(tmp_path, "hilo_distill", "tc", ONPOLICY[2], 10, 0)
    (no_meta / "run.json").unlink()
    report = build_report(tmp_path)
    assert report["ok_runs"] == 0
    assert sorted(status for _, status, _ in report["excluded"]) == ["missing", "running"]


def test_spar_allocations_from_either_column():
    import pandas as pd
    from harness.report.plots import spar_allocations
    rows = pd.DataFrame({"role": ["learner", "learner", "worker0"], "step": [0, 1, 0], "compressor": "spar",
                         "spar_ranks": [None, '{"m": 2}', None],
                         "compressor_info": ['{"ranks": {"m": 3}, "used_bytes": 10}', None, None]})
    assert spar_allocations(rows).to_list() == [{"m": 3}, {"m": 2}]


def test_snr_table_has_slopes(report, results):
    summary = (results / "summary.md").read_text()
    assert "Fitted log-log slope" in summary and "L0 q_proj" in summary


def test_matrix_names_and_dodge():
    name = "base_model.model.model.layers.11.mlp.down_proj.lora_B.default.weight"
    assert short_matrix_name(name) == "L11 down_proj B"
    assert dodge([64, 64, 8], [1.6, 1.6, 100])[2] == 8
    left, right, _ = dodge([64, 64, 8], [1.6, 1.6, 100])
    assert left < 64 < right
