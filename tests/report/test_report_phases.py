"""Per-phase accounting (issue 15): efficiency = bound / update from learner rows, the stacked
phase figure, and the overlap mode's runs compared with the synchronous full sync."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.report.figkit import PlotLog
from harness.report.metrics import PHASES, _choose_full_sync, onpolicy_run
from harness.report.phases import phase_table, plot_phases


def _learner_rows(update_s: list[float], bound_s: list[float]) -> pd.DataFrame:
    n = len(update_s)
    rows = {"role": ["learner"] * n, "step": list(range(n)), "task": ["distill"] * n, "rate_mbit": [10.0] * n,
            "payload_bytes_down": [2000] * n, "update_s": update_s, "bound_s": bound_s}
    for i, p in enumerate(PHASES):
        rows[p] = [0.01 * (i + 1)] * n
    rows["transfer_down_s"] = [0.02 * (k + 1) for k in range(n)]
    worker = {"role": ["worker0"] * n, "step": list(range(n))}
    return pd.concat([pd.DataFrame(rows), pd.DataFrame(worker)], ignore_index=True)


def test_efficiency_is_the_bound_over_the_measured_update_summed_over_updates():
    run = onpolicy_run(_learner_rows([1.0, 2.0, 3.0], [0.9, 1.0, 2.0]))
    assert run["efficiency"] == pytest.approx(3.9 / 6.0)
    assert run["phase_update_s"] == pytest.approx(2.0)               # median over updates
    assert run["phase_transfer_down_s"] == pytest.approx(0.04)
    assert run["phase_learn_s"] == pytest.approx(0.03)


def test_runs_without_a_bound_have_no_efficiency():
    rows = _learner_rows([1.0, 2.0], [0.5, 0.5]).drop(columns=["bound_s"])
    assert pd.isna(onpolicy_run(rows)["efficiency"])


def test_the_reference_full_sync_is_the_synchronous_one():
    keys = {"backend": "tc", "task": "distill", "rate_mbit": 10.0, "delay_ms": 0.0, "trace": None, "rank": 64, "scenario": "s",
            "method": "full_sync", "sync_dtype": "bf16"}
    configs = pd.DataFrame([{**keys, "variant": "a_stale", "staleness": 1},
                            {**keys, "variant": "z_sync", "staleness": 0}])
    row = pd.Series({**keys, "variant": "hilo_stale", "method": "hilo", "staleness": 1, "ref_rank": 64})
    assert _choose_full_sync(configs, row)["variant"] == "z_sync"


def test_phase_figure_is_drawn_per_scenario_with_a_bar_per_variant(tmp_path):
    base = {"scenario": "s", "backend": "tc", "task": "distill", "method": "hilo", "compressor": "spar", "rank": 64,
            "ref_rank": 64, "staleness": 0, **{f"phase_{p}": 0.1 for p in (*PHASES, "replay_s")},
            "phase_bound_s": 0.5, "phase_update_s": 1.0}
    runs = pd.DataFrame([{**base, "variant": v, "rate_mbit": r, "run_id": f"{v}-{r}-{s}", "seed": s}
                         for v in ("a", "b") for r in (10.0, 100.0) for s in (0, 1)])
    table = phase_table(runs)
    assert len(table) == 4 and (table["seeds"] == 2).all() and (table["efficiency"] == 0.5).all()
    log = PlotLog()
    plot_phases(runs, tmp_path, log)
    assert [f.name for f in log.made] == ["phases-s-tc-distill"]
    assert all(p.is_file() for p in log.made[0].paths)


def test_no_phases_is_a_skip_not_an_error(tmp_path):
    log = PlotLog()
    plot_phases(pd.DataFrame(), tmp_path, log)
    assert log.skipped and not log.made


def test_every_panel_of_a_phases_figure_shares_one_time_scale(tmp_path, monkeypatch):
    """The slow link's panel and the fast one's are read on the same x axis."""
    import harness.report.figkit as figkit

    base = {"scenario": "s", "backend": "tc", "task": "distill", "method": "full_sync", "compressor": "none",
            "rank": 64, "ref_rank": 64, "staleness": 0, "variant": "full_sync", "seed": 0,
            **{f"phase_{p}": 0.1 for p in (*PHASES, "replay_s")}}
    runs = pd.DataFrame([{**base, "rate_mbit": r, "run_id": f"r{r}", "phase_bound_s": u / 2, "phase_update_s": u}
                         for r, u in ((10.0, 4.0), (100.0, 0.8))])
    limits = []

    def keep_limits(fig, out_dir, name):
        import matplotlib.pyplot as plt
        fig.canvas.draw()
        limits.extend(ax.get_xlim() for ax in fig.axes)
        plt.close(fig)
        return []

    monkeypatch.setattr(figkit, "save", keep_limits)
    plot_phases(runs, tmp_path, PlotLog())
    assert len(limits) == 2 and limits[0] == limits[1] and limits[0][1] >= 4.0
