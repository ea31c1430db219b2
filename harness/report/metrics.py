"""Derived on-policy metrics: from tidy rows to one line per configuration, compared with its baseline.

Every metric is first computed per run; ratios to the baseline are formed per seed on the
baseline's run of the same seed; then each configuration (same keys but seed) is summarised
over seeds with mean, sd, n and 95% t-interval (harness/report/aggregate.py, stats.py).
Units: bytes, seconds, Mbit/s.

On-policy (learner rows, ``role == "learner"``):

- ``bytes_per_update`` [bytes]: mean over updates of ``payload_bytes_down / workers``, the
  payload bytes one worker's downlink carries for one update. The learner's
  ``payload_bytes_down`` sums every worker's link and already includes the verification
  verdicts and any full resync (``resync_bytes``); ``workers`` is the number of worker roles
  that wrote rows. Payload bytes, not wire bytes: ``wire_bytes_per_update`` (the learner's
  interface counters, with TCP/IP and framing, also per worker) is reported beside it, and
  ``downlink_bytes_per_update`` is the all-links total.
- ``bytes_frac_max``: the largest single update's bytes over full sync's bytes per update: what a
  cap on every update is judged on.
- ``bytes_frac``: ``bytes_per_update / bytes_per_update(full sync)``, where *full sync* is
  the ``full_sync`` configuration with the same backend, model, task, rate and delay, at the
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
- ``time_to_target_s`` [s]: cumulative learner ``update_s`` of the first evaluation at which quality
  is at or above ``TARGET_FRACTION`` x the same seed's full-sync final quality (a measured point,
  never a value drawn between evaluations; NaN: not reached by the run's end).
  ``continuous``: the task's ``CONTINUOUS_METRIC`` at the end.
- Horizons (docs/onpolicy.md "Horizons"): every quality comparison is judged at two horizons.
  Equal updates: the final evaluation, with ``final_slope`` [quality per 100 updates], the
  least-squares slope of the held-out quality over the run's last ``PLATEAU_EVALS``
  evaluations (NaN with fewer); a configuration has *plateaued* when the 95% t-interval of
  its per-seed slopes reaches 0 or below (``plateau``). Equal wall-clock:
  ``equal_time_s`` [s] = min(this run's, the same seed's full sync's total update time), the
  time at which the faster of the two finishes; ``quality_retained_equal_time`` = this run's
  quality over full sync's, each read at its own last evaluation at or before that time
  (``quality_read_at``: a measured value, never one drawn between evaluations; the times read are
  ``equal_time_read_s`` and ``equal_time_full_read_s``; where the pair's full sync evaluated the
  base model, ``onpolicy.eval_base``, both curves start from it at t = 0); ``time_to_95_s`` [s] =
  the cumulative time of this run's first evaluation at or above ``WALLCLOCK_TARGET`` (95%) x the
  same seed's full-sync final quality, and ``time_to_95_vs_full`` = that time over full sync's own
  (< 1: there sooner; 1 when both are there from the base, at t = 0). A run that never gets there
  is *censored*, not dropped: ``time_to_95_censored`` is True and ``time_to_95_vs_full`` holds the
  lower bound (its run's end over full sync's time: it would have needed longer than it ran). Full sync always reaches
  95% of its own final quality, by its last evaluation at the latest. Runs that score their curve on a
  fixed subset of the held-out prompts (``onpolicy.curve_prompts``, the rows' ``curve_<metric>``) take
  every point of these horizons, the base's and the target's (95% of full sync's final value on that
  subset) from the subset: one prompt set per curve.
- ``wire_efficiency``: ideal over measured downlink time,
  ``sum(bytes_per_update_t * 8 / rate_bps) / sum(transfer_down_s_t)`` (``transfer_s`` when the
  split is absent); 1.0 means the payload crossed at the configured link rate, lower means
  protocol overhead, latency and pacing cost. NaN on unshaped links.
- ``efficiency``: ``sum(bound_s) / sum(update_s)`` over updates: the ideal update (rollout,
  uplink and downlink at bytes*8/rate + latency, learn) over the measured one; 1.0 means the
  harness and the method added nothing on the path beyond the transfers and the learning.
  ``phase_<name>``: the median over updates of each learner phase (the stacked-phase plot).
- ``staleness`` / ``rollout_kl``: the overlap mode (``onpolicy.staleness``, 0 = synchronous;
  speedups of either are against the synchronous full sync) and the mean measured
  KL(rollout policy || trained policy) per token of a stale run (NaN at staleness 0).
- ``run_wall_s`` [s]: the run's wall clock from launch to end (run.json); ``updates_s_total`` and
  ``eval_s_total`` [s]: the sums of its updates' and its evaluations' seconds (the learner's rows):
  what a seed costs and where it goes (the rest is start-up: processes, models, links).
- ``in_sync_frac``: fraction of verified updates (learner rows with ``in_sync`` set; worker
  rows when the learner has none) at which every worker's checksum matched the learner's.

Federated metrics: harness/report/metrics_federated.py; reading a run's rows: rowkit.py.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

from harness.report.aggregate import aggregate, pair_with_baseline, paired_column
from harness.report.rowkit import (col, config_key, first, hub_rows, in_sync, match_keys,
                                   pick_reference, run_flags, runs_of)

QUALITY_METRIC = {"distill": "accuracy", "reward": "accuracy", "federated": "accuracy"}
QUALITY_FALLBACK = ("accuracy", "reward")
CONTINUOUS_METRIC = {"distill": "reverse_kl", "reward": "reward", "federated": "eval_loss"}
LOWER_IS_BETTER = {"reverse_kl", "eval_loss"}
ONPOLICY_STATS = ["bytes_per_update", "update_s", "quality", "continuous", "policy_kl", "bytes_frac", "bytes_frac_max",
                  "speedup",
                  "quality_retained", "time_to_target_s", "efficiency", "rollout_kl", "final_slope", "equal_time_s",
                  "quality_retained_equal_time", "time_to_95_s", "time_to_95_vs_full",
                  "base_quality", "gain_over_base"]
PHASES = ("rollout_s", "transfer_up_s", "learn_s", "encode_s", "transfer_down_s", "apply_s", "ack_s")   # serial at k=0
TARGET_FRACTION = 0.9
WALLCLOCK_TARGET = 0.95      # the equal-wall-clock horizon: time to 95% of the same seed's full-sync final quality
PLATEAU_EVALS = 3            # the plateau criterion's window: the slope over the last 3 evaluations
ONPOLICY_KEYS = ["backend", "scenario", "variant", "method", "compressor", "task", "rate_mbit", "delay_ms", "rank",
                 "budget_frac", "ref_rank", "staleness", "trace", "allocation", "steps", "model"]
LINK_KEYS = ["backend", "task", "rate_mbit", "delay_ms", "trace"]     # trace: the link traces' names (NaN: constant links)


def quality_metric(task: str, frame: pd.DataFrame) -> str | None:
    """The column that measures quality for ``task`` in these rows (None when none is recorded)."""
    for name in (QUALITY_METRIC.get(task), *QUALITY_FALLBACK):
        if name and col(frame, name).notna().any():
            return name
    return None


def continuous_metric(task: str, frame: pd.DataFrame) -> str | None:
    """The task's continuous quality column (``CONTINUOUS_METRIC``) when these rows record it, else None."""
    name = CONTINUOUS_METRIC.get(task)
    return name if name and col(frame, name).notna().any() else None


# ---------------------------------------------------------------- on-policy
def workers_of(rows: pd.DataFrame) -> int:
    """Number of worker roles that wrote rows in this run (at least 1)."""
    roles = rows["role"].dropna().astype(str)
    return max(1, roles[roles.str.startswith("worker")].nunique())


def _per_worker_down(rows: pd.DataFrame, hub: pd.DataFrame) -> pd.Series:
    return col(hub, "payload_bytes_down") / workers_of(rows)


def onpolicy_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """One run's learner trajectory: step, cum_bytes [bytes per worker], cum_time_s [s], quality (NaN between
    evals). Where the run scored its curve on a fixed subset of the held-out prompts (``onpolicy.curve_prompts``:
    the ``curve_<metric>`` column), the curve reads that column at every evaluation: one prompt set throughout."""
    hub = hub_rows(rows, "learner")
    metric = quality_metric(str(first(hub, "task", "")), hub)
    if metric and f"curve_{metric}" in hub and hub[f"curve_{metric}"].notna().any():
        metric = f"curve_{metric}"
    return pd.DataFrame({
        "step": hub["step"].to_numpy(),
        "cum_bytes": _per_worker_down(rows, hub).fillna(0).cumsum().to_numpy(),
        "cum_time_s": col(hub, "update_s").fillna(0).cumsum().to_numpy(),
        "quality": (col(hub, metric) if metric else col(hub, "_none_")).to_numpy(),
    })


def _final(frame: pd.DataFrame, name: str | None) -> float:
    values = col(frame, name).dropna() if name else pd.Series(dtype=float)
    return float(values.iloc[-1]) if len(values) else np.nan


def onpolicy_run(rows: pd.DataFrame) -> dict[str, Any]:
    """Per-run on-policy metrics (see the module docstring)."""
    hub = hub_rows(rows, "learner")
    n = workers_of(rows)
    down = _per_worker_down(rows, hub)
    metric = quality_metric(str(first(hub, "task", "")), hub)
    quality = col(hub, metric).dropna() if metric else pd.Series(dtype=float)
    transfer = col(hub, "transfer_down_s")
    if transfer.isna().all():
        transfer = col(hub, "transfer_s")
    rate_bps = float(first(hub, "rate_mbit")) * 1e6
    ideal = (down * 8 / rate_bps).sum() if rate_bps > 0 else np.nan
    sync = in_sync(rows, hub)
    cont = continuous_metric(str(first(hub, "task", "")), hub)
    return {
        "updates": int(len(hub)),
        "workers": n,
        "bytes_per_update": down.mean(),
        "bytes_per_update_max": down.max(),
        "downlink_bytes_per_update": col(hub, "payload_bytes_down").mean(),
        "wire_bytes_per_update": col(hub, "wire_bytes_down").mean() / n,
        "resync_bytes": col(hub, "resync_bytes").fillna(0).sum(),
        "update_s": col(hub, "update_s").mean(),
        "transfer_down_s": transfer.mean(),
        "wire_efficiency": ideal / transfer.sum() if transfer.sum() > 0 and not math.isnan(ideal) else np.nan,
        "quality": quality.iloc[-1] if len(quality) else np.nan,
        "quality_metric": metric or "none",
        "base_quality": _final(hub, f"base_{metric}") if metric else np.nan,   # onpolicy.eval_base: before update 0
        # the learning curve's own prompt set (onpolicy.curve_prompts): its final and base values (NaN: none kept)
        "curve_quality": _final(hub, f"curve_{metric}") if metric else np.nan,
        "curve_base_quality": _final(hub, f"base_curve_{metric}") if metric else np.nan,
        "continuous": _final(hub, cont),
        "continuous_metric": cont or "none",
        "policy_kl": _final(hub, "policy_kl"),
        "in_sync_frac": sync.mean() if len(sync) else np.nan,
        "efficiency": _ratio(col(hub, "bound_s"), col(hub, "update_s")),
        "rollout_kl": col(hub, "rollout_kl").mean(),
        **{f"phase_{p}": col(hub, p).median() for p in (*PHASES, "replay_s", "bound_s", "update_s")},
        # where a run's time goes (the cost of a seed): its updates, its evaluations, the rest (start-up, set-up)
        "run_wall_s": first(hub, "run_wall_s"),
        "updates_s_total": col(hub, "update_s").sum(),
        "eval_s_total": col(hub, "eval_s").fillna(0).sum(),
    }


def synchronous(table: pd.DataFrame) -> pd.Series:
    """Configurations of the synchronous loop (``staleness`` 0, or a table that predates the key)."""
    if "staleness" not in table:
        return pd.Series(True, index=table.index)
    return pd.to_numeric(table["staleness"], errors="coerce").fillna(0) == 0


def _ratio(num: pd.Series, den: pd.Series) -> float:
    """sum(num) / sum(den) over the updates that have both (NaN when none has)."""
    both = num.notna() & den.notna()
    return float(num[both].sum() / den[both].sum()) if both.any() and den[both].sum() > 0 else np.nan


def time_to_target(curve: pd.DataFrame, target: float) -> float:
    """Cumulative update time [s] of the first evaluation at which quality is at or above ``target``
    (a measured point: nothing between evaluations is drawn); NaN: never reached."""
    if math.isnan(target):
        return np.nan
    pts = curve.dropna(subset=["quality"])
    hit = np.flatnonzero(pts["quality"].to_numpy() >= target)
    return float(pts["cum_time_s"].iloc[int(hit[0])]) if len(hit) else np.nan


def final_slope(curve: pd.DataFrame, evals: int = PLATEAU_EVALS) -> float:
    """Least-squares slope of quality per 100 updates over the last ``evals`` evaluations of one
    run (x: updates done, ``step + 1``); NaN with fewer evaluations than that (or fewer than 2)."""
    pts = curve.dropna(subset=["quality"]).tail(evals)
    if len(pts) < max(2, evals):
        return np.nan
    x = pts["step"].to_numpy(dtype=float) + 1
    return float(100 * np.polyfit(x, pts["quality"].to_numpy(dtype=float), 1)[0])


def quality_read_at(curve: pd.DataFrame, t: float) -> tuple[float, float]:
    """(quality, its time [s]) of the last evaluation at or before cumulative update time ``t``: a
    measured value, never one drawn between evaluations; (NaN, NaN) before the first evaluation."""
    pts = curve.dropna(subset=["quality"])
    if math.isnan(t) or pts.empty:
        return np.nan, np.nan
    times = pts["cum_time_s"].to_numpy(dtype=float)
    at = np.flatnonzero(times <= t + 1e-9)
    if not len(at):
        return np.nan, np.nan
    return float(pts["quality"].iloc[int(at[-1])]), float(times[int(at[-1])])


def plateau(slopes: Iterable[float]) -> tuple[bool, Any]:
    """Whether a configuration's held-out quality has plateaued: the 95% t-interval of its
    per-seed ``final_slope`` values reaches 0 or below (no significant rise over the last
    PLATEAU_EVALS evaluations); (verdict, the stats.Summary). Fewer than 2 seeds: False."""
    from harness.report.stats import summarize

    s = summarize([v for v in slopes if v == v])
    return (s.n >= 2 and s.ci_low <= 0), s


def _end_time(curve: pd.DataFrame) -> float:
    return float(curve["cum_time_s"].iloc[-1]) if len(curve) else np.nan


def _from_base(curve: pd.DataFrame, q0: float) -> pd.DataFrame:
    """The curve with the base policy's evaluation (``onpolicy.eval_base``: before update 0, at
    cumulative time 0 and 0 bytes) as its first point: every LoRA run starts from the base model
    (B = 0), so a run whose first evaluation comes late is still measured from t = 0."""
    start = pd.DataFrame({"step": [-1], "cum_bytes": [0.0], "cum_time_s": [0.0], "quality": [q0]})
    return pd.concat([start, curve], ignore_index=True)


def _time_ratio(reach: float, t_full: float) -> float:
    """This run's time to the target over full sync's; both there at t = 0 (the base already at the target)
    is a tie, 1.0, not 0/0; a run later than a full sync that was there at t = 0 has no finite ratio (NaN)."""
    if t_full != t_full or reach != reach:
        return np.nan
    if t_full == 0:
        return 1.0 if reach == 0 else np.nan
    return reach / t_full


def _horizons(frame: pd.DataFrame, base: pd.Series, curves: dict[str, pd.DataFrame]) -> None:
    """The equal-updates slope and the equal-wall-clock columns of every run (module docstring)."""
    frame["final_slope"] = [final_slope(curves[r]) for r in frame["run_id"]]
    cols: dict[str, list] = {k: [] for k in ("equal_time_s", "quality_retained_equal_time", "equal_time_read_s",
                                             "equal_time_full_read_s", "time_to_95_s", "time_to_95_vs_full",
                                             "time_to_95_censored")}
    for r, b, sha in zip(frame["run_id"], base, frame["base_sha256"]):
        if b < 0:
            for k in cols:
                cols[k].append(False if k == "time_to_95_censored" else np.nan)
            continue
        mine, full = curves[r], curves[frame.at[b, "run_id"]]
        subset = frame.at[b, "curve_quality"] == frame.at[b, "curve_quality"]   # curves on the curve prompts
        q0 = frame.at[b, "curve_base_quality" if subset else "base_quality"]
        if q0 == q0 and sha == frame.at[b, "base_sha256"]:   # both start from the base policy measured at t=0
            mine, full = _from_base(mine, q0), _from_base(full, q0)
        t = min(_end_time(mine), _end_time(full))
        (q_mine, at_mine), (q_full, at_full) = quality_read_at(mine, t), quality_read_at(full, t)
        cols["equal_time_s"].append(t)
        cols["equal_time_read_s"].append(at_mine)
        cols["equal_time_full_read_s"].append(at_full)
        cols["quality_retained_equal_time"].append(q_mine / q_full if q_full and q_full == q_full else np.nan)
        target = WALLCLOCK_TARGET * frame.at[b, "curve_quality" if subset else "quality"]
        t_mine, t_full = time_to_target(mine, target), time_to_target(full, target)
        censored = bool(t_mine != t_mine and target == target and len(mine.dropna(subset=["quality"])))
        cols["time_to_95_s"].append(t_mine)
        cols["time_to_95_censored"].append(censored)
        reach = _end_time(mine) if censored else t_mine          # censored: the bound its run's end gives
        cols["time_to_95_vs_full"].append(_time_ratio(reach, t_full))
    for k, v in cols.items():
        frame[k] = v


def _choose_full_sync(configs: pd.DataFrame, row: pd.Series) -> pd.Series | None:
    """The synchronous (staleness 0) full sync of the same model at the same link, training rank and horizon
    (``steps``, the configured updates: a ratio of final qualities is only meaningful at equal updates)."""
    cands = match_keys(configs[configs["method"] == "full_sync"], row,
                   LINK_KEYS + [k for k in ("steps", "model") if k in configs])
    cands = cands[synchronous(cands)]
    return pick_reference(cands[cands["rank"] == row["ref_rank"]], row, "full_sync")


def onpolicy_runs(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per on-policy run: its metrics and its ratios to the same seed's full-sync run.

    ``bytes_frac``, ``speedup``, ``quality_retained`` and ``time_to_target_s`` (target: 90%
    of that seed's full-sync final quality) are per seed; NaN where full sync lacks the seed.
    """
    per_run, curves = [], {}
    for run_id, run_rows in runs_of(rows, "onpolicy"):
        hub = hub_rows(run_rows, "learner")
        if hub.empty:
            continue
        keys = {k: config_key(hub, k) for k in ONPOLICY_KEYS}
        per_run.append({**keys, "seed": first(hub, "seed", -1), "run_id": run_id, "run_ids": run_id,
                        "command": first(hub, "command", ""), "sync_dtype": first(hub, "sync_dtype", ""),
                        "staleness": int(first(hub, "staleness", 0)),
                        **run_flags(hub), **onpolicy_run(run_rows)})
        curves[run_id] = onpolicy_curve(run_rows)
    if not per_run:
        return pd.DataFrame(columns=ONPOLICY_KEYS + ["seed", "run_id"])
    frame = pd.DataFrame(per_run)
    base = pair_with_baseline(frame, ONPOLICY_KEYS, _choose_full_sync)
    frame["baseline_variant"] = [frame.at[b, "variant"] if b >= 0 else "" for b in base]
    frame["baseline_dtype"] = [frame.at[b, "sync_dtype"] if b >= 0 else "" for b in base]
    frame["bytes_frac"] = paired_column(frame, base, "bytes_per_update")
    frame["bytes_frac_max"] = paired_column(frame, base, "bytes_per_update_max", "bytes_per_update")
    frame["speedup"] = 1.0 / paired_column(frame, base, "update_s")
    frame["quality_retained"] = paired_column(frame, base, "quality")
    frame["gain_over_base"] = frame["quality"] - frame["base_quality"]     # NaN without onpolicy.eval_base
    frame["time_to_target_s"] = [time_to_target(curves[r], TARGET_FRACTION * frame.at[b, "quality"]) if b >= 0
                                 else np.nan for r, b in zip(frame["run_id"], base)]
    _horizons(frame, base, curves)
    return frame


def onpolicy_table(rows: pd.DataFrame | None = None, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One line per on-policy configuration: means over seeds with sd, n and 95% t-interval columns."""
    runs = onpolicy_runs(rows) if runs is None else runs
    if runs.empty or "run_id" not in runs or not len(runs):
        return pd.DataFrame(columns=ONPOLICY_KEYS)
    table = aggregate(runs, ONPOLICY_KEYS, ONPOLICY_STATS)
    for name in ("baseline_variant", "baseline_dtype"):
        table[name] = [";".join(dict.fromkeys(v for v in g[name].astype(str) if v))
                      for _, g in runs.groupby(ONPOLICY_KEYS, dropna=False, sort=True)]
    return table


def onpolicy_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """Trajectories of every on-policy run, with its configuration keys (for the plots)."""
    frames = []
    for run_id, run_rows in runs_of(rows, "onpolicy"):
        hub = hub_rows(run_rows, "learner")
        if hub.empty:
            continue
        curve = onpolicy_curve(run_rows)
        for k in ONPOLICY_KEYS + ["seed"]:
            curve[k] = config_key(hub, k)
        curve["quality_metric"] = quality_metric(str(first(hub, "task", "")), hub) or "none"
        curve["run_id"] = run_id
        frames.append(curve)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
