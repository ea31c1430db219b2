"""The critical path of an on-policy update: its phases per method and link rate, beside the
ideal bound (issue 15's per-phase accounting).

From the per-run frame (``tables.hilo_runs``: each run's median over updates of every learner
phase, ``phase_<name>``), averaged over seeds. One figure per scenario, backend and task; one
panel per link rate; one stacked bar per variant (rollout, uplink, learn, encode, downlink,
apply, ack: the serial parts of the synchronous loop), a black tick at the measured update
time and a white diamond at the ideal bound (rollout + learn + both transfers at
bytes*8/rate + latency). HiLo's replay overlaps the downlink and is not stacked; a stale
(overlap-mode) run's rollout overlaps learn, encode and the downlink, so its stack is taller
than its update. Efficiency = bound / update (the HiLo table's column).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.report.figkit import PlotLog, finish, horizon_text, legend, models_text, seeds_text, title, xlabel
from harness.report.metrics import PHASES
from harness.report.style import PHASE_COLOURS, figure, link_order, link_text, series_label, slug, styled

NAMES = {"rollout_s": "rollout", "transfer_up_s": "uplink", "learn_s": "learn", "encode_s": "encode",
         "transfer_down_s": "downlink", "apply_s": "apply", "ack_s": "ack"}
MAX_PANELS = 4


def phase_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of each run's median phases, per configuration (one line per variant)."""
    cols = [f"phase_{p}" for p in (*PHASES, "replay_s", "bound_s", "update_s")]
    if runs.empty or not set(cols) <= set(runs.columns):
        return pd.DataFrame()
    runs = runs[runs["phase_update_s"].notna()]
    runs = runs.assign(trace=runs["trace"] if "trace" in runs else float("nan"),
                       budget_frac=runs["budget_frac"] if "budget_frac" in runs else float("nan"))
    steps = runs["steps"] if "steps" in runs else pd.Series(float("nan"), index=runs.index)
    runs = runs.assign(**{c: runs[c] if c in runs else "" for c in ("model", "sync_dtype")},
                       steps=steps.fillna(runs["updates"]) if "updates" in runs else steps)
    keys = ["scenario", "backend", "task", "rate_mbit", "trace", "variant", "method", "compressor", "rank", "ref_rank",
            "budget_frac", "model", "sync_dtype"]
    table = runs.groupby(keys, dropna=False, sort=True).agg(
        **{c: (c, "mean") for c in cols}, staleness=("staleness", "max"), seeds=("run_id", "count"),
        steps=("steps", "max")).reset_index()
    table["efficiency"] = table["phase_bound_s"] / table["phase_update_s"]
    return table


def plot_phases(runs: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    table = phase_table(runs)
    if table.empty:
        log.skip("phases", "no on-policy run recorded its phases (bound_s)")
        return
    for (scenario, backend, task), group in table.groupby(["scenario", "backend", "task"], sort=True):
        group = group.assign(link=[link_text(r, t) for r, t in zip(group["rate_mbit"], group["trace"])],
                             link_order=[link_order(r, t) for r, t in zip(group["rate_mbit"], group["trace"])])
        rates = list(dict.fromkeys(group.sort_values("link_order")["link"]))[:MAX_PANELS]
        if not rates:
            continue
        with styled():
            bars = max(int((group["link"] == r).sum()) for r in rates)
            fig, axes = figure(len(rates), height=1.45 + 0.42 * bars, sharey=False)   # one time scale for every panel
            for ax, rate in zip(axes, rates):
                _panel(ax, group[group["link"] == rate].sort_values(["method", "variant"]))
                ax.set_title(rate)
            xlabel(fig, axes, "Seconds per update (median over updates, mean over seeds)")
            title(fig, scenario, backend, models_text(group["model"]), seeds_text(group["seeds"]),
                  horizon_text(group["steps"]))
            legend(fig, axes)
            name = slug("phases", scenario, backend, task)
            seeds = ", ".join(sorted({str(int(n)) for n in group["seeds"]}))
            caption = (f"Where an update's time goes, per method and link rate, task {task}; scenario {scenario}, "
                       f"backend {backend}; every panel on one time scale. Stacked: the serial phases of the "
                       "synchronous loop (learner rows): rollout (the slowest worker's generation), uplink (rollouts "
                       "to the learner), learn (forward, backward, clipping), encode (compress or pack), downlink "
                       "(the payload to the workers), apply (the slowest worker's decode and step), ack (the slowest "
                       "worker's acknowledgement upload). Black tick: the measured update; white diamond: the ideal "
                       "bound, what the update would take if encoding, applying, acknowledging and the harness cost "
                       "nothing (rollout + learn + both transfers at bytes×8/rate + latency); efficiency = bound / "
                       "update. HiLo's replay overlaps the downlink (not stacked); in the overlap mode (staleness 1) "
                       f"the rollout overlaps learn and the downlink. Seeds per bar: {seeds}.")
            finish(log, fig, out_dir, name, caption)


def bar_labels(rows: pd.DataFrame) -> list[str]:
    """One bar's name in words, on two lines where long ('HiLo + Spar,\n0.5% budget'); the variant
    name is added only when two bars of a panel would read the same."""
    dtypes = rows["sync_dtype"] if "sync_dtype" in rows else [None] * len(rows)
    words = [series_label(m, c, rank=r, ref_rank=rr, budget=b, staleness=k, dtype=d)
             for m, c, r, rr, b, k, d in zip(rows["method"], rows["compressor"], rows["rank"], rows["ref_rank"],
                                             rows["budget_frac"], rows["staleness"], dtypes)]
    same = pd.Series(words).duplicated(keep=False).to_numpy()
    words = [w + f" [{v}]" if dup else w for w, v, dup in zip(words, rows["variant"], same)]
    return [w.replace(", ", ",\n", 1) if len(w) > 18 else w for w in words]


def _panel(ax, rows: pd.DataFrame) -> None:
    ys = np.arange(len(rows))
    left = np.zeros(len(rows))
    for phase in PHASES:
        color = PHASE_COLOURS[phase]
        width = rows[f"phase_{phase}"].fillna(0).to_numpy()
        ax.barh(ys, width, left=left, color=color, height=0.7, label=NAMES[phase])
        left += width
    ax.scatter(rows["phase_update_s"], ys, marker="|", s=220, color="black", linewidths=1.6, label="measured update",
               zorder=3)
    ax.scatter(rows["phase_bound_s"], ys, marker="D", s=22, facecolor="white", edgecolor="black", label="ideal bound",
               zorder=4)
    names = bar_labels(rows)
    ax.set_yticks(ys, names, fontsize=6)
    ax.invert_yaxis()
