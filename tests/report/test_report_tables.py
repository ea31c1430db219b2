"""Tables: schemas readable without our code, derived metrics on hand-computed cases,
failed runs left out but listed, backends never mixed."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.report import build_tables, collect, write_tables
from harness.report.metrics import time_to_target
from harness.report.textfmt import fmt_bytes, in_run_paths
from harness.report.tables import HILO_COLUMNS, SPRA_COLUMNS, SWEEP_COLUMNS
from report_synthetic import EXPECTED, FULL_BYTES, ONPOLICY, VERDICT, write_onpolicy


def _csv(results, name: str) -> pd.DataFrame:
    return pd.read_csv(results / "tables" / f"{name}.csv")


@pytest.mark.parametrize("name, required", [("hilo", HILO_COLUMNS), ("spra", SPRA_COLUMNS), ("sweep", SWEEP_COLUMNS)])
def test_csv_has_the_required_columns(report, results, name, required):
    table = _csv(results, name)
    assert set(required) <= set(table.columns), f"{name}.csv lacks {set(required) - set(table.columns)}"
    assert len(table) > 0
    assert {"scenario", "backend"} <= set(table.columns)


def test_required_hilo_columns_are_exactly_the_issue_list():
    assert HILO_COLUMNS == ["task", "method", "compressor", "rank", "rate_mbit", "bytes_per_update", "bytes_frac",
                            "update_s", "speedup", "quality", "quality_retained", "in_sync_frac"]
    assert SPRA_COLUMNS == ["method", "ranks", "uplink_bytes", "downlink_bytes", "client_compute_s", "round_s",
                            "accuracy"]


def _hilo_row(results, variant: str, rate: float = 10.0) -> pd.Series:
    table = _csv(results, "hilo")
    row = table[(table["scenario"] == "hilo_distill") & (table["variant"] == variant) & (table["rate_mbit"] == rate)]
    assert len(row) == 1, row
    return row.iloc[0]


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_derived_metrics_match_hand_computation(report, results, variant):
    row = _hilo_row(results, variant)
    for column, expected in EXPECTED[variant].items():
        assert row[column] == pytest.approx(expected, rel=1e-5), column


def test_full_sync_is_its_own_reference(report, results):
    row = _hilo_row(results, "full_sync", 100.0)
    assert (row["bytes_frac"], row["speedup"], row["quality_retained"]) == (1.0, 1.0, 1.0)
    assert row["bytes_per_update"] == FULL_BYTES + VERDICT    # per worker: the learner's sum over 2 links / 2
    assert row["downlink_bytes_per_update"] == 2 * (FULL_BYTES + VERDICT)
    assert row["seeds"] == 2 and row["quality"] == pytest.approx(0.81)


def test_lowrank_is_compared_with_full_sync_at_the_scenario_rank(report, results):
    row = _hilo_row(results, "lowrank_r8", 100.0)
    assert row["rank"] == 8 and row["ref_rank"] == 64
    assert row["speedup"] == pytest.approx(0.5 / 0.45)


def test_a_bf16_full_sync_is_preferred_as_the_reference(tmp_path):
    full, hilo = ONPOLICY[0], ONPOLICY[2]
    fp32 = ("fs_fp32", *full[1:5], 2 * FULL_BYTES, {10: 3.0}, full[7])
    write_onpolicy(tmp_path, "s", "tc", fp32, 10, 0, sync_dtype="fp32")
    write_onpolicy(tmp_path, "s", "tc", ("fs_bf16", *full[1:]), 10, 0)
    write_onpolicy(tmp_path, "s", "tc", hilo, 10, 0)
    table = build_tables(collect(tmp_path)).hilo.set_index("variant")
    assert table.loc["hilo_spar", "baseline_variant"] == "fs_bf16"
    assert table.loc["hilo_spar", "speedup"] == pytest.approx(2.0 / 0.8)


def test_wire_efficiency_is_ideal_over_measured_time(report, results):
    # the synthetic transfers take ideal/0.9 seconds
    assert _hilo_row(results, "hilo_spar")["wire_efficiency"] == pytest.approx(0.9)


def test_time_to_target_on_a_hand_made_curve():
    curve = pd.DataFrame({"quality": [0.2, float("nan"), 0.6, 0.8], "cum_time_s": [1.0, 2.0, 3.0, 4.0]})
    assert time_to_target(curve, 0.5) == 3.0                    # the first evaluation at or above it, at 3 s
    assert math.isnan(time_to_target(curve, 0.9))


def test_federated_ratios(report, results):
    spra = _csv(results, "spra").set_index("variant")
    assert spra.loc["fedit", "uplink_bytes"] == 200_000 * (64 + 32 + 16) / 64   # per round, all clients
    assert spra.loc["spra", "uplink_frac_vs_fedit"] == pytest.approx(0.5)
    assert spra.loc["spra", "compute_frac_vs_fedit"] == pytest.approx(0.6)
    assert spra.loc["spra", "accuracy"] == pytest.approx(0.74)
    assert spra.loc["spra_const_lr", "lr_rule"] == "const"
    assert spra.loc["spra", "ranks"] == "64,32,16"          # recorded as a JSON list
    assert spra.loc["spra", "rounds"] == 6 and spra.loc["spra", "in_sync_frac"] == 1.0


def test_failed_and_interrupted_runs_are_left_out_but_listed(report, results):
    for name in ("hilo", "sweep"):
        assert "hilo_randk" not in set(_csv(results, name).get("variant", pd.Series(dtype=str)))
    listed = {status: reason for _, status, reason in report["excluded"]}
    assert listed == {"failed": "worker1 died: exit code 1", "interrupted": "KeyboardInterrupt"}
    summary = (results / "summary.md").read_text()
    assert "worker1 died: exit code 1" in summary and "KeyboardInterrupt" in summary


def test_backends_are_never_mixed(report, results):
    table = _csv(results, "hilo")
    grid = table[(table["scenario"] == "grid_hilo") & (table["rate_mbit"] == 10) & (table["rank"] == 64)]
    for backend, rows in grid.groupby("backend"):
        full = rows[rows["method"] == "full_sync"].iloc[0]
        hilo = rows[rows["method"] == "hilo"].iloc[0]
        assert hilo["speedup"] == pytest.approx(full["update_s"] / hilo["update_s"]), backend
    agreement = _csv(results, "backends")
    assert set(agreement["backend"]) == {"model"} and set(agreement["reference_backend"]) == {"tc"}
    assert agreement["time_ratio"].to_list() == pytest.approx([1 / 1.05] * len(agreement))
    assert "backend `model`" in (results / "summary.md").read_text()


def test_every_table_names_its_scenario_and_command(report, results):
    summary = (results / "summary.md").read_text()
    for scenario in ("hilo_distill", "spra_federated", "grid_hilo"):
        assert f"Scenario `{scenario}`" in summary
        assert f"python -m harness scenario={scenario}" in summary
    assert set(_csv(results, "hilo")["command"].str.startswith("python -m harness scenario="))


def test_claims_are_measured(report, results):
    claims = _csv(results, "claims")
    spar = claims[(claims["method"] == "HiLo") & claims["where"].str.startswith("hilo_distill")]
    speed = spar[spar["claim"] == "update speedup >= 2.2x vs full sync"].set_index("where")
    at10 = speed.loc[[w for w in speed.index if " 10 Mbit/s" in w][0]]
    # two seeds of full sync and HiLo + Spar, equal times: per-seed speedups 2.5, 2.5 -> a zero-width interval
    assert (at10["estimate"], at10["ci_low"], at10["ci_high"], at10["n_seeds"]) == (2.5, 2.5, 2.5, 2)
    assert at10["verdict"] == "met"
    assert len(speed) == 2          # judged at every rate: 10 and 100 Mbit/s
    one_seed = claims[claims["where"].str.contains("hilo_distill") & (claims["n_seeds"] == 1)]
    assert set(one_seed["verdict"]) <= {"inconclusive"}


def test_tables_are_idempotent(report, results, tmp_path):
    again = build_tables(collect(results))
    write_tables(again, tmp_path)
    for name in ("hilo", "spra", "sweep", "backends"):
        assert (tmp_path / f"{name}.csv").read_bytes() == (results / "tables" / f"{name}.csv").read_bytes()


def test_ranks_text_accepts_every_recorded_form():
    from harness.report.metrics_federated import ranks_text
    assert ranks_text("[64, 32, 16]") == ranks_text([64, 32, 16]) == ranks_text("64,32,16") == "64,32,16"
    assert ranks_text(float("nan")) == ""


def test_units_in_markdown():
    assert (fmt_bytes(16_000), fmt_bytes(1_000_000), fmt_bytes(float("nan"))) == ("16 kB", "1 MB", "–")


def test_compress_seeds_section_shows_each_rows_interval_and_the_median_throughput(tmp_path):
    """summary.md's compressor table over seeds: one table per LoRA rank from tables/compress_*_summary.csv,
    cells "mean [low, high]", Spar's own paired cell a dash, enc MB/s the median of the per-seed csv."""
    import pandas as pd

    from harness.report.summary import compress_seeds_section

    assert compress_seeds_section(tmp_path) == []
    (tmp_path / "tables").mkdir()
    nan = float("nan")
    common = dict(model="smollm2", budget=0.016, n=3, bytes=1.0, err_1_low=nan, err_1_high=nan)
    pd.DataFrame([
        {**common, "lora_rank": 16, "compressor": "spar", "err_1": 0.5, "err_ef": 0.3, "err_ef_low": 0.25,
         "err_ef_high": 0.35, "vs_spar_err_ef": nan, "vs_spar_low": nan, "vs_spar_high": nan},
        {**common, "lora_rank": 16, "compressor": "topk", "err_1": 0.6, "err_ef": 0.5, "err_ef_low": 0.3,
         "err_ef_high": 0.7, "vs_spar_err_ef": 0.2, "vs_spar_low": 0.05, "vs_spar_high": 0.35},
        {**common, "lora_rank": 8, "compressor": "spar", "err_1": 0.6, "err_ef": 0.4, "err_ef_low": 0.3,
         "err_ef_high": 0.5, "vs_spar_err_ef": nan, "vs_spar_low": nan, "vs_spar_high": nan},
    ]).to_csv(tmp_path / "tables" / "compress_real_summary.csv", index=False)
    pd.DataFrame([{"model": "smollm2", "lora_rank": 16, "compressor": "spar", "budget": 0.016, "seed": s,
                   "enc_mbs": v} for s, v in enumerate([600.0, 700.0, 650.0])]
                 ).to_csv(tmp_path / "tables" / "compress_real.csv", index=False)
    text = "\n".join(compress_seeds_section(tmp_path))
    assert "| spar | 1.6% | 3 | 0.500 | 0.300 [0.250, 0.350] | – | 650 |" in text      # median of 600, 700, 650
    assert "| topk | 1.6% | 3 | 0.600 | 0.500 [0.300, 0.700] | 0.200 [0.050, 0.350] | – |" in text
    assert text.index("LoRA r=16:") < text.index("LoRA r=8:") and "(3 seeds)" in text


def test_compress_section_reads_the_wide_compressor_table(tmp_path):
    """summary.md's "Compressors at LLM shapes": one table per model from tables/compress_wide.csv,
    bytes used as a share of the adapter, inapplicable rows (no error) named, not tabulated."""
    import pandas as pd

    from harness.report.summary import compress_section

    assert compress_section(tmp_path) == []            # no table, no section
    (tmp_path / "tables").mkdir()
    pd.DataFrame([
        {"compressor": "spar", "budget": 0.016, "bytes": 372.0, "err_1": 0.65, "err_ef": 0.54, "enc_mbs": 17.9,
         "dec_mbs": 159.0, "model": "wide", "adapter_bytes": 23250},
        {"compressor": "quant", "budget": 0.016, "bytes": float("nan"), "err_1": float("nan"), "err_ef": float("nan"),
         "enc_mbs": float("nan"), "dec_mbs": float("nan"), "model": "wide", "adapter_bytes": 23250},
        {"compressor": "topk", "budget": 0.05, "bytes": 500.0, "err_1": 0.72, "err_ef": 0.49, "enc_mbs": 8.0,
         "dec_mbs": 108.0, "model": "small", "adapter_bytes": 10000},
    ]).to_csv(tmp_path / "tables" / "compress_wide.csv", index=False)
    text = "\n".join(compress_section(tmp_path))
    assert "Not applicable at these budgets: quant." in text and "| quant |" not in text
    assert "| spar | 1.6% | 1.60% | 0.65 | 0.54 |" in text          # 372 / 23250 bytes
    assert "| topk | 5.0% | 5.00% | 0.72 | 0.49 |" in text
    assert text.index("wide (LLM shape), adapter") < text.index("small (toy), adapter")   # the claims' model names


def test_federated_ratios_are_taken_against_the_reference_each_run_recorded(tmp_path):
    """The reference method is declared by the method (report_reference) and recorded in run.json's plan;
    the report pairs with the recorded one, not a name of its own: with ffa recorded, spra's uplink and
    compute ratios are spra/ffa (1.0), not spra/fedit (0.5, 0.6: test_federated_ratios)."""
    from harness.federated.methods import METHODS, reference
    from harness.record import read_run_json, write_run_json
    from report_synthetic import FEDERATED, write_federated

    assert [n for n, cls in METHODS.items() if cls.report_reference] == [reference()]    # exactly one declares it
    for spec in FEDERATED[:3]:                                # fedit, ffa, spra
        run_dir = write_federated(tmp_path, "spra_federated", "tc", spec)
        write_run_json(run_dir, {**read_run_json(run_dir), "plan": {"federated": {"reference": "ffa"}}})
    spra = build_tables(collect(tmp_path)).spra.set_index("variant")
    assert spra.loc["spra", "uplink_frac_vs_fedit"] == pytest.approx(1.0)
    assert spra.loc["spra", "compute_frac_vs_fedit"] == pytest.approx(1.0)


def test_a_failed_runs_paths_are_read_inside_its_folder():
    """The summary is committed and rebuilt on other machines: a reason's absolute path into the run (or
    the attempt it was moved aside from) reads from the run's folder; other paths stay as they are."""
    run = "full_sync_10mbit-s0-a7e57d4c.attempt1"
    reason = ("role worker0 exited with code 1; last lines of /tmp/x/results/runs/hilo_real/"
              "full_sync_10mbit-s0-a7e57d4c.attempt1/logs/worker0.log: … "
              "RuntimeError: [/__w/pytorch/gloo/tcp/unbound_buffer.cc:78] timed out")
    assert in_run_paths(reason, run) == ("role worker0 exited with code 1; last lines of logs/worker0.log: … "
                                         "RuntimeError: [/__w/pytorch/gloo/tcp/unbound_buffer.cc:78] timed out")
    assert in_run_paths("see /r/runs/s/full_sync_10mbit-s0-a7e57d4c/logs/a.log", run) == "see logs/a.log"
    other = "see /r/runs/s/full_sync_10mbit-s0-a7e57d4c9/logs/a.log"       # another run's folder stays whole
    assert in_run_paths(other, run) == other
