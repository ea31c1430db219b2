"""Derived metrics: from tidy rows to one line per configuration, compared with its baseline.

Every metric is first computed per run, then averaged (mean) over the runs of one
configuration (same keys but seed); ``seeds`` counts them and ``quality_std`` is the
spread of the final quality over seeds (0 with one seed). Units: bytes, seconds, Mbit/s.

On-policy (learner rows, ``role == "learner"``):

- ``bytes_per_update`` [bytes]: mean over updates of ``payload_bytes_down / workers``, the
  payload bytes one worker's downlink carries for one update. The learner's
  ``payload_bytes_down`` sums every worker's link and already includes the verification
  verdicts and any full resync (``resync_bytes``); ``workers`` is the number of worker roles
  that wrote rows. Payload bytes, not wire bytes: ``wire_bytes_per_update`` (the learner's
  interface counters, with TCP/IP and framing, also per worker) is reported beside it, and
  ``downlink_bytes_per_update`` is the all-links total.
- ``bytes_frac``: ``bytes_per_update / bytes_per_update(full sync)``, where *full sync* is
  the ``full_sync`` configuration with the same backend, task, rate and delay, at the
  scenario's training rank (``model.rank`` in run.json; a ``lowrank`` run trains below it
  and is compared with full sync at that reference rank). Same scenario preferred; among
  several, the variant named ``full_sync``, then bf16 sync (``method.sync_dtype``), then the
  first by name; ``baseline_variant`` and ``baseline_dtype`` name the one used.
- ``update_s`` [s]: mean over updates of the learner's ``update_s`` (one update end to end:
  rollouts, uplink, learn, encode, downlink, apply; resyncs included).
- ``speedup``: ``update_s(full sync) / update_s`` at the same link (the same full sync as above).
- ``quality``: the task's quality at the last evaluation, ``QUALITY_METRIC[task]``: final
  held-out accuracy for ``distill`` and ``reward`` (and the federated task); the metric used
  is named in ``quality_metric``. ``quality_retained = quality / quality(full sync)``.
- ``time_to_target_s`` [s]: cumulative learner ``update_s`` up to the first evaluation whose
  quality reaches ``TARGET_FRACTION`` x full sync's final quality (NaN: never reached).
- ``wire_efficiency``: ideal over measured downlink time,
  ``sum(bytes_per_update_t * 8 / rate_bps) / sum(transfer_down_s_t)`` (``transfer_s`` when the
  split is absent); 1.0 means the payload crossed at the configured link rate, lower means
  protocol overhead, latency and pacing cost. NaN on unshaped links.
- ``in_sync_frac``: fraction of verified updates (learner rows with ``in_sync`` set; worker
  rows when the learner has none) at which every worker's checksum matched the learner's.

Federated (server rows ``role == "server"``, client rows ``role == "client<k>"``):

- ``uplink_bytes`` / ``downlink_bytes`` [bytes]: per round, summed over the clients of the
  round (client rows' ``payload_bytes_up`` / ``payload_bytes_down``; the server's rows when
  clients record none), mean over rounds. Step 0 of the server is the evaluation before
  round 1; rounds are steps 1..R. ``ranks`` is the client rank list as "64,32,16".
- ``client_compute_s`` [s]: mean over (client, round) of ``client_compute_s``.
- ``round_s`` [s]: mean of the server's ``round_s``. ``accuracy``: final server accuracy.
- ``uplink_frac_vs_fedit`` / ``compute_frac_vs_fedit``: ratios to the ``fedit`` configuration
  of the same scenario, backend, task, ranks and link.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

QUALITY_METRIC = {"distill": "accuracy", "reward": "accuracy", "federated": "accuracy"}
QUALITY_FALLBACK = ("accuracy", "reward")
TARGET_FRACTION = 0.9
ONPOLICY_KEYS = ["backend", "scenario", "variant", "method", "compressor", "task", "rate_mbit",
                 "delay_ms", "rank", "budget_frac", "ref_rank"]
FEDERATED_KEYS = ["backend", "scenario", "variant", "method", "task", "ranks", "rate_mbit", "delay_ms"]
LINK_KEYS = ["backend", "task", "rate_mbit", "delay_ms"]


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all-NaN when absent (rows of older runs may lack a column)."""
    if name not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce")


def _first(frame: pd.DataFrame, name: str, default: Any = np.nan) -> Any:
    if name in frame and frame[name].notna().any():
        return frame[name].dropna().iloc[0]
    return default


def quality_metric(task: str, frame: pd.DataFrame) -> str | None:
    """The column that measures quality for ``task`` in these rows (None when none is recorded)."""
    for name in (QUALITY_METRIC.get(task), *QUALITY_FALLBACK):
        if name and _col(frame, name).notna().any():
            return name
    return None


def _hub(rows: pd.DataFrame, role: str) -> pd.DataFrame:
    return rows[rows["role"] == role].sort_values("step", kind="stable")


def _runs_of(rows: pd.DataFrame, kind: str) -> list[tuple[str, pd.DataFrame]]:
    """(run_id, rows) of every collected run of ``kind`` (onpolicy | federated), sorted by run id."""
    if rows.empty or "kind" not in rows:
        return []
    return list(rows[rows["kind"] == kind].groupby("run_id", sort=True))


# ---------------------------------------------------------------- on-policy
def workers_of(rows: pd.DataFrame) -> int:
    """Number of worker roles that wrote rows in this run (at least 1)."""
    roles = rows["role"].dropna().astype(str)
    return max(1, roles[roles.str.startswith("worker")].nunique())


def _per_worker_down(rows: pd.DataFrame, hub: pd.DataFrame) -> pd.Series:
    return _col(hub, "payload_bytes_down") / workers_of(rows)


def onpolicy_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """One run's learner trajectory: step, cum_bytes [bytes per worker], cum_time_s [s], quality (NaN between evals)."""
    hub = _hub(rows, "learner")
    metric = quality_metric(str(_first(hub, "task", "")), hub)
    return pd.DataFrame({
        "step": hub["step"].to_numpy(),
        "cum_bytes": _per_worker_down(rows, hub).fillna(0).cumsum().to_numpy(),
        "cum_time_s": _col(hub, "update_s").fillna(0).cumsum().to_numpy(),
        "quality": (_col(hub, metric) if metric else _col(hub, "_none_")).to_numpy(),
    })


def _in_sync(rows: pd.DataFrame, hub: pd.DataFrame, others: str = "worker") -> pd.Series:
    """The hub's in_sync verdicts (every peer matched), else the peers' own (roles ``others<k>``)."""
    for source in (hub, rows[rows["role"].astype(str).str.startswith(others)]):
        if "in_sync" in source and source["in_sync"].notna().any():
            return source["in_sync"].dropna().astype(bool)
    return pd.Series(dtype=bool)


def onpolicy_run(rows: pd.DataFrame) -> dict[str, Any]:
    """Per-run on-policy metrics (see the module docstring)."""
    hub = _hub(rows, "learner")
    n = workers_of(rows)
    down = _per_worker_down(rows, hub)
    metric = quality_metric(str(_first(hub, "task", "")), hub)
    quality = _col(hub, metric).dropna() if metric else pd.Series(dtype=float)
    transfer = _col(hub, "transfer_down_s")
    if transfer.isna().all():
        transfer = _col(hub, "transfer_s")
    rate_bps = float(_first(hub, "rate_mbit")) * 1e6
    ideal = (down * 8 / rate_bps).sum() if rate_bps > 0 else np.nan
    sync = _in_sync(rows, hub)
    return {
        "updates": int(len(hub)),
        "workers": n,
        "bytes_per_update": down.mean(),
        "downlink_bytes_per_update": _col(hub, "payload_bytes_down").mean(),
        "wire_bytes_per_update": _col(hub, "wire_bytes_down").mean() / n,
        "resync_bytes": _col(hub, "resync_bytes").fillna(0).sum(),
        "update_s": _col(hub, "update_s").mean(),
        "transfer_down_s": transfer.mean(),
        "wire_efficiency": ideal / transfer.sum() if transfer.sum() > 0 and not math.isnan(ideal) else np.nan,
        "quality": quality.iloc[-1] if len(quality) else np.nan,
        "quality_metric": metric or "none",
        "in_sync_frac": sync.mean() if len(sync) else np.nan,
    }


def _aggregate(per_run: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean over the seeds of each configuration; ``seeds`` counts runs, ``quality_std`` their spread."""
    numeric = [c for c in per_run.columns if c not in keys and c not in ("run_id", "seed")
               and pd.api.types.is_numeric_dtype(per_run[c])]
    grouped = per_run.groupby(keys, dropna=False, sort=True)
    table = grouped[numeric].mean()
    table["seeds"] = grouped.size()
    quality = "quality" if "quality" in per_run else "accuracy"
    table["quality_std"] = grouped[quality].std(ddof=0).fillna(0.0)
    for extra in ("quality_metric", "command", "run_ids", "lr_rule", "sync_dtype"):
        if extra in per_run:
            table[extra] = grouped[extra].agg(lambda s: ";".join(dict.fromkeys(map(str, s))))
    return table.reset_index()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _match(table: pd.DataFrame, row: pd.Series, keys: Iterable[str]) -> pd.DataFrame:
    mask = np.ones(len(table), dtype=bool)
    for k in keys:
        mask &= np.array([_same(v, row[k]) for v in table[k]], dtype=bool)
    return table[mask]


def _pick_reference(candidates: pd.DataFrame, row: pd.Series, name: str) -> pd.Series | None:
    """Same scenario first; then the variant called ``name``; then bf16 sync; then the first by variant."""
    if candidates.empty:
        return None
    same = candidates[candidates["scenario"] == row["scenario"]]
    pool = same if not same.empty else candidates
    rank = (pool["variant"] != name).astype(int) * 2
    if "sync_dtype" in pool:
        rank += (pool["sync_dtype"].astype(str) != "bf16").astype(int)
    return pool.assign(_pref=rank).sort_values(["_pref", "variant"], kind="stable").iloc[0]


def time_to_target(curve: pd.DataFrame, target: float) -> float:
    """Cumulative update time [s] at the first evaluation with quality >= target (NaN: never)."""
    if math.isnan(target):
        return np.nan
    hit = curve[curve["quality"] >= target]
    return float(hit["cum_time_s"].iloc[0]) if len(hit) else np.nan


def onpolicy_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per on-policy configuration, with bytes_frac, speedup, quality_retained, time_to_target_s."""
    per_run, curves = [], {}
    for run_id, run_rows in _runs_of(rows, "onpolicy"):
        hub = _hub(run_rows, "learner")
        if hub.empty:
            continue
        keys = {k: _first(hub, k) for k in ONPOLICY_KEYS}
        per_run.append({**keys, "run_id": run_id, "run_ids": run_id, "command": _first(hub, "command", ""),
                        "sync_dtype": _first(hub, "sync_dtype", ""),
                        **onpolicy_run(run_rows)})
        curves[run_id] = onpolicy_curve(run_rows)
    if not per_run:
        return pd.DataFrame(columns=ONPOLICY_KEYS)
    table = _aggregate(pd.DataFrame(per_run), ONPOLICY_KEYS)
    baselines = table[table["method"] == "full_sync"]
    out = []
    for _, row in table.iterrows():
        cands = _match(baselines, row, LINK_KEYS)
        cands = cands[cands["rank"] == row["ref_rank"]]
        ref = _pick_reference(cands, row, "full_sync")
        line = row.to_dict()
        if ref is None:
            line.update(baseline_variant="", baseline_dtype="", bytes_frac=np.nan, speedup=np.nan,
                        quality_retained=np.nan,
                        time_to_target_s=np.nan)
        else:
            target = TARGET_FRACTION * ref["quality"]
            ttt = [time_to_target(curves[r], target) for r in row["run_ids"].split(";")]
            line.update(baseline_variant=ref["variant"], baseline_dtype=ref.get("sync_dtype", ""),
                        bytes_frac=row["bytes_per_update"] / ref["bytes_per_update"],
                        speedup=ref["update_s"] / row["update_s"], quality_retained=row["quality"] / ref["quality"],
                        time_to_target_s=float(np.mean(ttt)))
        out.append(line)
    return pd.DataFrame(out)


def onpolicy_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """Trajectories of every on-policy run, with its configuration keys (for the plots)."""
    frames = []
    for run_id, run_rows in _runs_of(rows, "onpolicy"):
        hub = _hub(run_rows, "learner")
        if hub.empty:
            continue
        curve = onpolicy_curve(run_rows)
        for k in ONPOLICY_KEYS + ["seed"]:
            curve[k] = _first(hub, k)
        curve["quality_metric"] = quality_metric(str(_first(hub, "task", "")), hub) or "none"
        curve["run_id"] = run_id
        frames.append(curve)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ---------------------------------------------------------------- federated
def federated_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """One run's rounds: round, accuracy (NaN between evals), cum_uplink_bytes [bytes], cum_time_s [s]."""
    server = _hub(rows, "server")
    up = _per_round(rows, "payload_bytes_up")
    rounds = server["step"].to_numpy()
    cum_up = up.reindex(rounds).fillna(0).cumsum().to_numpy() if len(up) else np.full(len(rounds), np.nan)
    return pd.DataFrame({"round": rounds, "accuracy": _col(server, "accuracy").to_numpy(), "cum_uplink_bytes": cum_up,
                         "cum_time_s": _col(server, "round_s").fillna(0).cumsum().to_numpy()})


def _per_round(rows: pd.DataFrame, column: str) -> pd.Series:
    """Bytes per round summed over clients (client rows; the server's rows when clients have none)."""
    clients = rows[rows["role"].astype(str).str.startswith("client")]
    source = clients if _col(clients, column).notna().any() else rows[rows["role"] == "server"]
    values = _col(source, column)
    if values.isna().all():
        return pd.Series(dtype=float)
    return values.groupby(source["step"]).sum()


def federated_run(rows: pd.DataFrame) -> dict[str, Any]:
    """Per-run federated metrics (see the module docstring)."""
    server = _hub(rows, "server")
    clients = rows[rows["role"].astype(str).str.startswith("client")]
    accuracy = _col(server, "accuracy").dropna()
    up, down = _per_round(rows, "payload_bytes_up"), _per_round(rows, "payload_bytes_down")
    return {
        "rounds": int(_col(server, "round_s").notna().sum()),
        "uplink_bytes": up.mean() if len(up) else np.nan,
        "downlink_bytes": down.mean() if len(down) else np.nan,
        "uplink_bytes_total": up.sum() if len(up) else np.nan,
        "client_compute_s": _col(clients, "client_compute_s").mean(),
        "forward_s": _col(clients, "forward_s").mean(),
        "backward_s": _col(clients, "backward_s").mean(),
        "round_s": _col(server, "round_s").mean(),
        "accuracy": accuracy.iloc[-1] if len(accuracy) else np.nan,
        "eval_loss": _col(server, "eval_loss").dropna().iloc[-1] if _col(server, "eval_loss").notna().any() else np.nan,
        "in_sync_frac": sync.mean() if len(sync := _in_sync(rows, server, "client")) else np.nan,
    }


def ranks_text(value: Any) -> str:
    """Client ranks as "64,32,16" whether recorded as that text, a JSON list or a list."""
    if isinstance(value, str) and value.strip().startswith("["):
        value = json.loads(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return ",".join(str(int(v)) for v in value)
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _ranks_of(rows: pd.DataFrame) -> str:
    return ranks_text(_first(rows, "ranks", "")) if "ranks" in rows else ""


def federated_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per federated configuration, with ratios to FedIT on the same scenario and link."""
    per_run = []
    for run_id, run_rows in _runs_of(rows, "federated"):
        server = _hub(run_rows, "server")
        if server.empty:
            continue
        keys = {k: _first(server, k) for k in FEDERATED_KEYS if k != "ranks"}
        per_run.append({**keys, "ranks": _ranks_of(run_rows), "run_id": run_id, "run_ids": run_id,
                        "command": _first(server, "command", ""), "lr_rule": _first(server, "lr_rule", ""),
                        "resample_every": _first(server, "resample_every"), **federated_run(run_rows)})
    if not per_run:
        return pd.DataFrame(columns=FEDERATED_KEYS)
    table = _aggregate(pd.DataFrame(per_run), FEDERATED_KEYS)
    fedit = table[table["method"] == "fedit"]
    out = []
    for _, row in table.iterrows():
        same = _match(fedit, row, ["backend", "scenario", "task", "ranks", "rate_mbit", "delay_ms"])
        ref = _pick_reference(same, row, "fedit")
        line = row.to_dict()
        line["uplink_frac_vs_fedit"] = row["uplink_bytes"] / ref["uplink_bytes"] if ref is not None else np.nan
        line["compute_frac_vs_fedit"] = row["client_compute_s"] / ref["client_compute_s"] if ref is not None else np.nan
        out.append(line)
    return pd.DataFrame(out)


def federated_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """Round-by-round accuracy and cumulative uplink of every federated run, with its keys."""
    frames = []
    for run_id, run_rows in _runs_of(rows, "federated"):
        server = _hub(run_rows, "server")
        if server.empty:
            continue
        curve = federated_curve(run_rows)
        for k in FEDERATED_KEYS + ["seed"]:
            curve[k] = _ranks_of(run_rows) if k == "ranks" else _first(server, k)
        curve["run_id"] = run_id
        frames.append(curve)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
