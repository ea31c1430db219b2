"""Derived federated metrics: from tidy rows to one line per configuration, with its ratios to the
reference method (FedIT) of the same seed (summarised over seeds as in metrics.py).

Federated (server rows ``role == "server"``, client rows ``role == "client<k>"``):

- ``uplink_bytes`` / ``downlink_bytes`` [bytes]: per round, summed over the clients of the
  round (client rows' ``payload_bytes_up`` / ``payload_bytes_down``; the server's rows when
  clients record none), mean over rounds. Step 0 of the server is the evaluation before
  round 1; rounds are steps 1..R. ``ranks`` is the client rank list as "64,32,16".
- ``client_compute_s`` [s]: mean over (client, round) of ``client_compute_s``.
- ``round_s`` [s]: mean of the server's ``round_s``. ``accuracy``: final server accuracy.
- ``uplink_frac_vs_fedit`` / ``compute_frac_vs_fedit``: ratios to the ``fedit`` configuration
  of the same scenario, backend, model, task, ranks and link. A configuration's keys include
  ``model`` (collect.model_label, from run.json): runs of two models are never averaged together.
- ``client_adapter_flops``: LoRA's own FLOPs per (client, round), what the adapter adds over the
  frozen model's forward and backward (harness.federated.flops.adapter_flops), and
  ``adapter_frac_vs_fedit`` its ratio to FedIT's: the compute claim's second reading (NaN for
  runs that predate the column).

A population run (``federated.population``; harness/federated/pool.py) has no ``client<k>``
roles: its clients' compute rows are the executors' (``executor<e>``, one row per client it
ran), and the server writes one ``population`` row per sampled client and round with its
``status`` (finished, late, failed, unavailable). Its ``ranks`` are the ranks its clients drew
("32,16,8,4", descending), and these per-run metrics come from those rows:

- ``sampled_per_round``: clients sampled per round (mean); ``unavailable_frac``: of the sampled,
  the fraction that were off; ``late_frac``: of those that ran, the fraction past the deadline
  (``federated.deadline_s``; dropped from the aggregate); ``failed_frac`` likewise for clients
  lost with their executor.
- ``client_uplink_bytes`` / ``client_downlink_bytes`` [bytes]: payload per finished client and
  round (mean); ``client_s`` [s]: a finished client's own down + compute + up time (mean).
- ``virtual_round_s`` [s]: mean of the server's ``virtual_round_s`` (the deadline when a client
  was late, else the slowest finished client), the population's round time; its ``round_s`` is
  the wall clock of the executors' serial work.

- ``run_wall_s`` [s]: the run's wall clock from launch to end (run.json); ``rounds_s_total`` and
  ``eval_s_total`` [s]: the sums of the server's ``round_s`` (a round: downlink, the clients' local
  steps, uplink) and its evaluations' ``eval_s`` (the one before round 1 included): what a seed costs
  and where it goes (the rest is start-up and aggregation).
"""
from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pandas as pd

from harness.report.aggregate import aggregate, pair_with_baseline, paired_column
from harness.report.rowkit import (col, config_key, first, hub_rows, in_sync, match_keys, missing, pick_reference,
                                   run_flags, runs_of)

COMPUTE_MEASURES = ("client_flops", "client_compute_isolated_s", "client_compute_s")   # best first
FEDERATED_STATS = ["uplink_bytes", "client_compute_s", "client_compute_isolated_s", "client_flops",
                   "client_adapter_flops", "adapter_frac_vs_fedit", "round_s",
                   "accuracy", "eval_loss", "uplink_frac_vs_fedit", "compute_frac_vs_fedit", "accuracy_gain_vs_fedit",
                   "unavailable_frac", "late_frac", "client_uplink_bytes", "client_s", "virtual_round_s"]
POPULATION_METRICS = ["sampled_per_round", "unavailable_frac", "late_frac", "failed_frac", "client_uplink_bytes",
                      "client_downlink_bytes", "client_s", "virtual_round_s"]
FEDERATED_KEYS = ["backend", "scenario", "variant", "method", "task", "ranks", "rate_mbit", "delay_ms", "trace",
                  "model"]


def federated_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """One run's rounds: round, accuracy (NaN between evals), cum_uplink_bytes [bytes], cum_time_s [s]."""
    server = hub_rows(rows, "server")
    up = _per_round(rows, "payload_bytes_up")
    rounds = server["step"].to_numpy()
    cum_up = up.reindex(rounds).fillna(0).cumsum().to_numpy() if len(up) else np.full(len(rounds), np.nan)
    return pd.DataFrame({"round": rounds, "accuracy": col(server, "accuracy").to_numpy(), "cum_uplink_bytes": cum_up,
                         "cum_time_s": col(server, "round_s").fillna(0).cumsum().to_numpy()})


def _per_round(rows: pd.DataFrame, column: str) -> pd.Series:
    """Bytes per round summed over clients (client rows; the server's rows when clients have none)."""
    clients = rows[rows["role"].astype(str).str.startswith("client")]
    source = clients if col(clients, column).notna().any() else rows[rows["role"] == "server"]
    values = col(source, column)
    if values.isna().all():
        return pd.Series(dtype=float)
    return values.groupby(source["step"]).sum()


def _client_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (client, round) of local training: the ``client<k>`` roles, or a population's executors."""
    roles = rows["role"].astype(str)
    clients = rows[roles.str.startswith("client")]
    return clients if len(clients) else rows[roles.str.startswith("executor")]


def population_run(rows: pd.DataFrame, server: pd.DataFrame) -> dict[str, Any]:
    """A population run's metrics from its ``population`` rows and its ``server`` rows (module
    docstring); {} for other runs."""
    pop = rows[rows["role"] == "population"]
    if pop.empty or "status" not in pop:
        return {}
    status = pop["status"].astype(str)
    sampled, ran = len(pop), int((status != "unavailable").sum())
    done = pop[status == "finished"]
    return {
        "sampled_per_round": sampled / max(1, pop["step"].nunique()),
        "unavailable_frac": (status == "unavailable").sum() / sampled,
        "late_frac": (status == "late").sum() / ran if ran else np.nan,
        "failed_frac": (status == "failed").sum() / ran if ran else np.nan,
        "client_uplink_bytes": col(done, "payload_bytes_up").mean(),
        "client_downlink_bytes": col(done, "payload_bytes_down").mean(),
        "client_s": col(done, "client_s").mean(),
        "virtual_round_s": col(server, "virtual_round_s").mean(),
    }


def federated_run(rows: pd.DataFrame) -> dict[str, Any]:
    """Per-run federated metrics (see the module docstring)."""
    server = hub_rows(rows, "server")
    clients = _client_rows(rows)
    accuracy = col(server, "accuracy").dropna()
    up, down = _per_round(rows, "payload_bytes_up"), _per_round(rows, "payload_bytes_down")
    return {
        "rounds": int(col(server, "round_s").notna().sum()),
        "uplink_bytes": up.mean() if len(up) else np.nan,
        "downlink_bytes": down.mean() if len(down) else np.nan,
        "uplink_bytes_total": up.sum() if len(up) else np.nan,
        "client_compute_s": col(clients, "client_compute_s").mean(),
        "client_compute_isolated_s": col(clients, "client_compute_isolated_s").mean(),
        "client_flops": col(clients, "client_flops").mean(),
        "client_adapter_flops": col(clients, "client_adapter_flops").mean(),
        "forward_s": col(clients, "forward_s").mean(),
        "backward_s": col(clients, "backward_s").mean(),
        "round_s": col(server, "round_s").mean(),
        "accuracy": accuracy.iloc[-1] if len(accuracy) else np.nan,
        "eval_loss": col(server, "eval_loss").dropna().iloc[-1] if col(server, "eval_loss").notna().any() else np.nan,
        "in_sync_frac": sync.mean() if len(sync := in_sync(rows, server, "client")) else np.nan,
        # where a run's time goes (the cost of a seed): its rounds, the server's evaluations, the rest (start-up)
        "run_wall_s": first(server, "run_wall_s"),
        "rounds_s_total": col(server, "round_s").sum(),
        "eval_s_total": col(server, "eval_s").fillna(0).sum(),
        **population_run(rows, server),
    }


def ranks_text(value: Any) -> str:
    """Client ranks as "64,32,16" whether recorded as that text, a JSON list or a list."""
    if isinstance(value, str) and value.strip().startswith("["):
        value = json.loads(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return ",".join(str(int(v)) for v in value)
    return "" if missing(value) else str(value)


def _ranks_of(rows: pd.DataFrame) -> str:
    """The run's client ranks: its ``ranks`` column, else (a population) the ranks its clients drew, descending."""
    if "ranks" in rows and rows["ranks"].notna().any():
        return ranks_text(first(rows, "ranks", ""))
    drawn = col(rows[rows["role"] == "population"], "rank").dropna()
    return ",".join(str(int(r)) for r in sorted(drawn.unique(), reverse=True)) if len(drawn) else ""


def _choose_reference(configs: pd.DataFrame, row: pd.Series) -> pd.Series | None:
    """The configuration of the run's reference method (declared by the method, recorded in the run's plan;
    the ``*_vs_fedit`` columns hold the ratios to it: fedit is the one that declares it)."""
    recorded = row.get("reference_method")
    name = recorded if isinstance(recorded, str) and recorded else reference_method()
    same = match_keys(configs[configs["method"] == name], row, ["backend", "scenario", "task", "ranks", "rate_mbit",
                                                             "delay_ms", "trace", "optimizer", "model"])
    return pick_reference(same, row, name)


@functools.lru_cache(maxsize=1)
def reference_method() -> str:
    """The federated reference as the code declares it (for runs whose run.json predates the plan record)."""
    from harness.federated.methods import reference

    return reference()


def federated_runs(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per federated run, with its ratios to the same seed's FedIT run with the same client
    optimizer (NaN without one).

    ``compute_frac_vs_fedit`` uses the best compute measure both runs have (``compute_measure``):
    ``client_flops``, else ``client_compute_isolated_s``, else ``client_compute_s``.
    """
    per_run = []
    for run_id, run_rows in runs_of(rows, "federated"):
        server = hub_rows(run_rows, "server")
        if server.empty:
            continue
        keys = {k: config_key(server, k) for k in FEDERATED_KEYS if k != "ranks"}
        per_run.append({**keys, "ranks": _ranks_of(run_rows), "seed": first(server, "seed", -1), "run_id": run_id,
                        "run_ids": run_id, "command": first(server, "command", ""),
                        "lr_rule": first(server, "lr_rule", ""), "a_variance": first(server, "a_variance", ""),
                        "resample_every": first(server, "resample_every"),
                        # the client optimizer (federated.optimizer); a run.json without it predates the key: sgd
                        "optimizer": first(server, "optimizer", "") or "sgd",
                        "reference_method": first(server, "reference_method", ""),
                        **run_flags(server), **federated_run(run_rows)})
    if not per_run:
        return pd.DataFrame(columns=FEDERATED_KEYS + ["seed", "run_id"])
    frame = pd.DataFrame(per_run)
    base = pair_with_baseline(frame, FEDERATED_KEYS, _choose_reference)
    frame["uplink_frac_vs_fedit"] = paired_column(frame, base, "uplink_bytes")
    measure = next((m for m in COMPUTE_MEASURES if m in frame and frame[m].notna().all()), "client_compute_s")
    frame["compute_measure"] = measure
    frame["compute_frac_vs_fedit"] = paired_column(frame, base, measure)
    frame["adapter_frac_vs_fedit"] = paired_column(frame, base, "client_adapter_flops")
    frame["accuracy_gain_vs_fedit"] = paired_column(frame, base, "accuracy", op="diff")
    return frame


def federated_table(rows: pd.DataFrame | None = None, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One line per federated configuration: means over seeds with sd, n and 95% t-interval columns."""
    runs = federated_runs(rows) if runs is None else runs
    if runs.empty:
        return pd.DataFrame(columns=FEDERATED_KEYS)
    return aggregate(runs, FEDERATED_KEYS, FEDERATED_STATS)


def federated_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """Round-by-round accuracy and cumulative uplink of every federated run, with its keys."""
    frames = []
    for run_id, run_rows in runs_of(rows, "federated"):
        server = hub_rows(run_rows, "server")
        if server.empty:
            continue
        curve = federated_curve(run_rows)
        for k in FEDERATED_KEYS + ["seed"]:
            curve[k] = _ranks_of(run_rows) if k == "ranks" else config_key(server, k)
        curve["run_id"] = run_id
        frames.append(curve)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
