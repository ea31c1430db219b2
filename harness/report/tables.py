"""Paper tables as tidy CSVs under ``results/tables/`` (readable without our code).

- ``hilo.csv``: one line per on-policy configuration (method x compressor x rate x rank),
  with bytes per update, ``bytes_frac`` and ``speedup`` vs full sync, final quality and
  ``quality_retained``, ``in_sync_frac`` (definitions: harness/report/metrics.py).
- ``spra.csv``: one line per federated configuration (method x rank mix): uplink and
  downlink bytes per round, client compute, round time, final accuracy; for a population
  run also its clients' availability, lateness, per-client bytes and time, and the virtual
  round time (harness/report/metrics.py, "A population run").
- ``sweep.csv``: the rate x rank grid view of the on-policy configurations.
- ``hilo_runs.csv`` / ``spra_runs.csv``: the same, one line per run (per seed), with the
  per-seed ratios that the configuration lines summarise.
- ``backends.csv``: the same configuration run on two link backends (e.g. ``model`` vs
  ``tc``), side by side, with the ratio of their times: how far the model backend agrees.

Configuration tables aggregate over seeds: each statistic ``m`` has ``m`` (mean), ``m_sd``,
``m_n``, ``m_ci_low``, ``m_ci_high`` (95% t-interval, harness/report/stats.py); ``seeds``
counts the runs and ``seed_list`` names them. Every table carries ``scenario``, ``backend`` and ``model`` columns
(backends and models are never averaged together; ``model`` is harness.report.collect.model_label of each run's
run.json) and the exact ``command`` that produced its runs. ``snr.csv`` (rank, snr[, fit])
is written by the SNR check, not here; it is read if present.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.backends import EMULATED
from harness.report.collect import Collection
from harness.report.aggregate import STAT_SUFFIXES
from harness.report.metrics import ONPOLICY_STATS, PHASES, onpolicy_runs, onpolicy_table
from harness.report.metrics_federated import FEDERATED_STATS, POPULATION_METRICS, federated_runs, federated_table
from harness.report.style import METHOD_ORDER

HILO_COLUMNS = ["task", "method", "compressor", "rank", "rate_mbit", "bytes_per_update", "bytes_frac",
                "update_s", "speedup", "quality", "quality_retained", "in_sync_frac"]
HILO_EXTRA = ["scenario", "backend", "model", "variant", "delay_ms", "budget_frac", "ref_rank", "quality_metric",
              "continuous", "continuous_metric", "policy_kl", "seeds", "seed_list", "loaded_runs",
              "rebuilt_base_runs", "load_notes", "base_sha256", "updates", "workers", "time_to_target_s", "downlink_bytes_per_update",
              "wire_bytes_per_update",
              "resync_bytes", "transfer_down_s", "wire_efficiency", "sync_dtype", "baseline_variant",
              "baseline_dtype", "command", "staleness", "trace", "allocation", "steps", "efficiency", "rollout_kl",
              "base_quality", "gain_over_base", "bytes_frac_max", "run_wall_s", "updates_s_total", "eval_s_total"]
HILO_EXTRA += [f"phase_{p}" for p in (*PHASES, "replay_s", "bound_s", "update_s")]
# per run only (the claims' horizons, harness/report/metrics.py "Horizons"): judged from the seeds, never averaged first
HILO_RUN_EXTRA = ["final_slope", "equal_time_s", "quality_retained_equal_time", "equal_time_read_s",
                  "equal_time_full_read_s", "time_to_95_s", "time_to_95_vs_full", "time_to_95_censored"]
SPRA_COLUMNS = ["method", "ranks", "uplink_bytes", "downlink_bytes", "client_compute_s", "round_s", "accuracy"]
SPRA_EXTRA = ["scenario", "backend", "model", "variant", "task", "rate_mbit", "delay_ms", "trace", "optimizer", "lr_rule", "a_variance",
              "resample_every",
              "uplink_frac_vs_fedit",
              "compute_frac_vs_fedit", "compute_measure", "accuracy_gain_vs_fedit", "client_compute_isolated_s",
              "client_flops", "client_adapter_flops", "adapter_frac_vs_fedit", "forward_s", "backward_s", "eval_loss",
              "seeds", "seed_list", "loaded_runs",
              "rebuilt_base_runs", "load_notes", "base_sha256",
              "rounds", "uplink_bytes_total", "in_sync_frac", "command", *POPULATION_METRICS,
              "run_wall_s", "rounds_s_total", "eval_s_total"]
SWEEP_COLUMNS = ["rate_mbit", "rank", "method", "compressor", "speedup", "bytes_frac", "quality"]
SWEEP_EXTRA = ["scenario", "backend", "model", "task", "variant", "ref_rank", "budget_frac", "delay_ms", "update_s",
               "quality_retained", "seeds", "loaded_runs"]


def stat_columns(names: list[str]) -> list[str]:
    """``m_sd, m_n, m_ci_low, m_ci_high`` for each m (the mean keeps the plain name)."""
    return [n + suffix for n in names for suffix in STAT_SUFFIXES]


HILO_EXTRA += stat_columns(ONPOLICY_STATS)
SPRA_EXTRA += stat_columns(FEDERATED_STATS)
SWEEP_EXTRA += stat_columns(["speedup", "bytes_frac", "quality_retained"])
RUN_KEYS = ["seed", "run_id", "loaded", "rebuilt_base"]
BACKEND_COLUMNS = ["scenario", "variant", "method", "compressor", "rate_mbit", "rank", "backend",
                   "reference_backend", "time_s", "reference_time_s", "time_ratio", "bytes_ratio"]
SNR_COLUMNS = ["rank", "snr"]


@dataclass
class Tables:
    """The report's tables; each empty (with its columns) when no run feeds it."""
    hilo: pd.DataFrame
    spra: pd.DataFrame
    sweep: pd.DataFrame
    backends: pd.DataFrame
    snr: pd.DataFrame | None = None
    hilo_runs: pd.DataFrame = field(default_factory=pd.DataFrame)   # one line per on-policy run (per seed)
    spra_runs: pd.DataFrame = field(default_factory=pd.DataFrame)   # one line per federated run (per seed)
    prompts: pd.DataFrame = field(default_factory=pd.DataFrame)     # per-prompt evaluation records of the ok runs
    written: list[Path] = field(default_factory=list)


def _order(table: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    """Required columns first, then the extras present; rows in a paper's reading order."""
    missing = {c: np.nan for c in columns if c not in table}          # added in one concat, not one insert each
    order = table["method"].map(METHOD_ORDER).fillna(99) if len(table) else pd.Series([], index=table.index, dtype=float)
    table = pd.concat([table, pd.DataFrame(missing, index=table.index), order.rename("_m")], axis=1)
    table = table.sort_values([c for c in by if c in table] + ["_m"], kind="stable", na_position="first")
    return table[columns].reset_index(drop=True)


def hilo_table(onpolicy: pd.DataFrame) -> pd.DataFrame:
    cols = HILO_COLUMNS + HILO_EXTRA
    return _order(onpolicy.copy(), ["scenario", "backend", "task", "rate_mbit", "ref_rank"], cols)


def sweep_table(onpolicy: pd.DataFrame) -> pd.DataFrame:
    cols = SWEEP_COLUMNS + SWEEP_EXTRA
    table = _order(onpolicy.copy(), ["scenario", "backend", "task", "rate_mbit", "rank"], cols)
    return table.sort_values(["scenario", "backend", "method", "compressor", "rank", "rate_mbit"],
                             kind="stable").reset_index(drop=True) if len(table) else table


def spra_table(federated: pd.DataFrame) -> pd.DataFrame:
    return _order(federated.copy(), ["scenario", "backend", "task", "ranks", "rate_mbit"], SPRA_COLUMNS + SPRA_EXTRA)


def runs_table(runs: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The per-seed view: one line per run, the configuration's columns then seed and run id."""
    if runs.empty:
        return pd.DataFrame(columns=[c for c in columns if "_sd" not in c])
    plain = [c for c in columns if not c.endswith(STAT_SUFFIXES) and c in runs] + [k for k in RUN_KEYS if k in runs]
    return _order(runs.copy(), ["scenario", "backend", "task", "rate_mbit", "seed"], list(dict.fromkeys(plain)))


def backend_table(onpolicy: pd.DataFrame, federated: pd.DataFrame) -> pd.DataFrame:
    """Configurations measured on more than one backend, each compared with the best emulated one."""
    lines = []
    sources = [(onpolicy, "update_s", "bytes_per_update", ["scenario", "model", "variant", "method", "compressor",
                                                           "task", "rate_mbit", "delay_ms", "rank", "budget_frac"]),
               (federated, "round_s", "uplink_bytes", ["scenario", "model", "variant", "method", "task", "ranks",
                                                       "rate_mbit", "delay_ms"])]
    for table, time_col, bytes_col, keys in sources:
        if table.empty or table["backend"].nunique() < 2:
            continue
        for _, group in table.groupby(keys, dropna=False, sort=True):
            present = list(group["backend"])
            ref_name = next((b for b in EMULATED if b in present), None)
            if ref_name is None or len(present) < 2:
                continue
            ref = group[group["backend"] == ref_name].iloc[0]
            for _, row in group[group["backend"] != ref_name].iterrows():
                lines.append({"scenario": row["scenario"], "variant": row["variant"], "method": row["method"],
                              "compressor": row.get("compressor", ""), "rate_mbit": row["rate_mbit"],
                              "rank": row.get("rank", row.get("ranks")), "backend": row["backend"],
                              "reference_backend": ref_name, "time_s": row[time_col],
                              "reference_time_s": ref[time_col], "time_ratio": row[time_col] / ref[time_col],
                              "bytes_ratio": row[bytes_col] / ref[bytes_col]})
    return pd.DataFrame(lines, columns=BACKEND_COLUMNS)


def read_snr(tables_dir: Path) -> pd.DataFrame | None:
    """``snr.csv`` (rank, snr[, fit]) if the SNR check wrote one; None otherwise or when malformed."""
    path = Path(tables_dir) / "snr.csv"
    if not path.exists():
        return None
    snr = pd.read_csv(path)
    if not set(SNR_COLUMNS) <= set(snr.columns):
        return None
    return snr.sort_values([c for c in ("module", "rank") if c in snr], kind="stable").reset_index(drop=True)


def snr_slopes(snr: pd.DataFrame) -> pd.DataFrame:
    """Least-squares slope of log SNR on log rank, per module (1.0 = SNR linear in r)."""
    groups = snr.groupby("module", sort=False) if "module" in snr else [("all", snr)]
    rows = []
    for module, t in groups:
        t = t[(t["rank"] > 0) & (t["snr"] > 0)]
        slope = float(np.polyfit(np.log(t["rank"]), np.log(t["snr"]), 1)[0]) if t["rank"].nunique() > 1 else np.nan
        rows.append({"module": module, "slope": slope, "points": len(t)})
    return pd.DataFrame(rows)


def build_tables(coll: Collection) -> Tables:
    """All tables from the collected ok runs (nothing is written)."""
    op_runs, fed_runs = onpolicy_runs(coll.rows), federated_runs(coll.rows)
    onpolicy, federated = onpolicy_table(runs=op_runs), federated_table(runs=fed_runs)
    return Tables(hilo=hilo_table(onpolicy), spra=spra_table(federated), sweep=sweep_table(onpolicy),
                  backends=backend_table(onpolicy, federated), snr=read_snr(coll.results_dir / "tables"),
                  hilo_runs=runs_table(op_runs, HILO_COLUMNS + HILO_EXTRA + HILO_RUN_EXTRA),
                  spra_runs=runs_table(fed_runs, SPRA_COLUMNS + SPRA_EXTRA), prompts=coll.prompts)


def write_tables(tables: Tables, tables_dir: Path) -> list[Path]:
    """Write hilo.csv, spra.csv, sweep.csv (always, header-only when empty) and backends.csv (when any)."""
    tables_dir = Path(tables_dir)
    tables_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("hilo", "spra", "sweep", "backends", "hilo_runs", "spra_runs"):
        frame = getattr(tables, name)
        if name == "backends" and frame.empty:
            (tables_dir / "backends.csv").unlink(missing_ok=True)
            continue
        path = tables_dir / f"{name}.csv"
        frame.to_csv(path, index=False, float_format="%.10g")
        written.append(path)
    path = tables_dir / PROMPTS_TABLE
    if len(tables.prompts):                # every evaluation's per-prompt records: claims recomputable prompt by prompt
        prompt_table(tables.prompts).to_csv(path, index=False, float_format="%.8g",
                                            compression={"method": "gzip", "mtime": 0})
        written.append(path)
    else:
        path.unlink(missing_ok=True)
    tables.written = written
    return written


PROMPTS_TABLE = "prompts.csv.gz"


def prompt_table(prompts: pd.DataFrame) -> pd.DataFrame:
    """The per-prompt records in a stable order (run, role, evaluation, view, prompt); the key columns first."""
    from harness.record import PROMPT_COLUMNS

    first = [c for c in PROMPT_COLUMNS if c in prompts]
    frame = prompts[first + [c for c in prompts.columns if c not in first]]
    return frame.sort_values(["scenario", "variant", "seed", "run_id", "role", "step", "view", "prompt"],
                             kind="stable").reset_index(drop=True)
