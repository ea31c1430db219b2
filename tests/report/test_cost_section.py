"""The summary's "What a seed costs": one line per configuration, on-policy (updates) and federated (rounds)."""
from __future__ import annotations

import pandas as pd

from harness.report.summary import cost_section
from harness.report.tables import Tables


def _runs(variant: str, work: str, walls, works, evals) -> pd.DataFrame:
    return pd.DataFrame({"scenario": "s", "backend": "tc", "variant": variant, "run_wall_s": walls, work: works,
                         "eval_s_total": evals})


def _tables(**runs) -> Tables:
    empty = pd.DataFrame()
    return Tables(hilo=empty, spra=empty, sweep=empty, backends=empty, **runs)


def test_cost_lines_for_onpolicy_and_federated_runs():
    tables = _tables(hilo_runs=_runs("full_sync", "updates_s_total", [100.0, 300.0], [50.0, 150.0], [10.0, 30.0]),
                    spra_runs=_runs("spra", "rounds_s_total", [600.0, 600.0], [300.0, 360.0], [240.0, 180.0]))
    text = "\n".join(cost_section(tables))
    lines = {line.split("|")[3].strip(): [c.strip() for c in line.split("|")[1:-1]]
             for line in text.splitlines() if line.startswith("| s ")}
    assert lines["full_sync"][3:] == ["2", "3.3 min", "50%", "10%"]      # mean wall; mean of the per-run shares
    assert lines["spra"][3:] == ["2", "10.0 min", "55%", "35%"]


def test_no_cost_section_without_wall_times():
    assert cost_section(_tables()) == []
    assert cost_section(_tables(spra_runs=_runs("spra", "rounds_s_total", [None], [1.0], [1.0]))) == []
