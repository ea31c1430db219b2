"""A time-only run's quality curve, read from its twin on another link.

Some on-policy variants measure time only: the scenarios run them at 100 Mbit/s or on a link
trace for fewer updates and evaluate once, at their last update (``onpolicy.eval_every: 0``, or
equal to ``steps``), because the synchronous, seeded loop trains the same policy on any link.
Drawn alone such a run is one point per seed, not a curve: the lone end points of the
100 Mbit/s and trace panels of ``quality_vs_time`` before issue 27.

``borrow_quality(curves, rows)`` gives each such run the evaluations of its *twin*: a run of
the same scenario, backend, task, seed and configuration (method, compressor, rank, budget,
staleness, sync dtype) on another link, with two or more evaluations, whose learner ``loss``
equals this run's, bit for bit, at every update this run made, and whose evaluation equals this
run's own wherever both evaluated. The claim that the link does not change the trajectory is
checked per run, never assumed: a run without such a twin keeps its single point. Each borrowed
evaluation at update s sits at this run's own cumulative time and bytes at s; the run's own
evaluations stay. The result has ``quality_from``: the twin's run id on borrowed values, '' else.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SAME = ["scenario", "backend", "task", "seed", "method", "compressor", "rank", "budget_frac", "staleness",
        "sync_dtype"]   # what a twin shares; it differs in the link (rate, delay, trace) and the variant name


def _key(frame: pd.DataFrame) -> pd.Series:
    cols = [c for c in SAME if c in frame]
    return pd.Series(["|".join(map(str, t)) for t in frame[cols].astype(str).itertuples(index=False)],
                     index=frame.index)


def _losses(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """Per run id: the learner's training loss by update step (float64, as recorded)."""
    if rows.empty or "loss" not in rows:
        return {}
    hub = rows[(rows["role"] == "learner") & rows["loss"].notna()]
    return {rid: g.set_index("step")["loss"].astype("float64").sort_index() for rid, g in hub.groupby("run_id")}


def is_twin(short: pd.DataFrame, long: pd.DataFrame, loss_short: pd.Series | None,
            loss_long: pd.Series | None) -> bool:
    """``long`` trained the policy ``short`` trained: equal loss at every update of ``short``
    (bit for bit) and equal quality wherever both evaluated."""
    if loss_short is None or loss_long is None or loss_short.empty:
        return False
    if not set(loss_short.index) <= set(loss_long.index):
        return False
    if not np.array_equal(loss_short.to_numpy(), loss_long.reindex(loss_short.index).to_numpy()):
        return False
    own = short.dropna(subset=["quality"]).set_index("step")["quality"]
    theirs = long.dropna(subset=["quality"]).set_index("step")["quality"]
    both = own.index.intersection(theirs.index)
    return bool(np.array_equal(own[both].to_numpy(), theirs[both].to_numpy()))


def borrow_quality(curves: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``curves`` (metrics.onpolicy_curves) with each once-evaluated run's twin's evaluations added."""
    if curves.empty:
        return curves.assign(quality_from=pd.Series(dtype=str))
    curves = curves.copy()
    curves["quality_from"] = ""
    if "sync_dtype" not in curves and "sync_dtype" in rows:   # the learner rows carry it when recorded
        dtypes = rows[rows["role"] == "learner"].groupby("run_id")["sync_dtype"].first()
        curves["sync_dtype"] = curves["run_id"].map(dtypes)
    losses = _losses(rows)
    evals = curves.groupby("run_id")["quality"].count()
    key = _key(curves)
    run_key = key.groupby(curves["run_id"]).first()
    by_run = dict(tuple(curves.groupby("run_id")))
    for rid in evals[evals == 1].index:
        me = by_run[rid]
        candidates = [t for t in run_key[run_key == run_key[rid]].index
                      if t != rid and evals.get(t, 0) >= 2]
        twins = [t for t in sorted(candidates, key=lambda t: (-evals[t], t))
                 if is_twin(me, by_run[t], losses.get(rid), losses.get(t))]
        if not twins:
            continue
        twin = by_run[twins[0]].dropna(subset=["quality"]).set_index("step")["quality"]
        mine = curves.index[(curves["run_id"] == rid) & curves["quality"].isna()]
        steps = curves.loc[mine, "step"]
        hit = mine[steps.isin(twin.index).to_numpy()]
        curves.loc[hit, "quality"] = curves.loc[hit, "step"].map(twin).to_numpy()
        curves.loc[hit, "quality_from"] = twins[0]
    return curves


def borrowed_note(curves: pd.DataFrame) -> str:
    """The caption's sentence on borrowed evaluations ('' when none were borrowed)."""
    if "quality_from" not in curves or not (curves["quality_from"].astype(str) != "").any():
        return ""
    runs = curves.loc[curves["quality_from"].astype(str) != "", "run_id"].nunique()
    return (f" Runs evaluated once (time-only, {runs} runs) show the evaluations of the same seed's run on another "
            "link at their own clock: its training loss equals theirs at every update, bit for bit, so the same "
            "policy was trained (harness/report/twins.py).")
