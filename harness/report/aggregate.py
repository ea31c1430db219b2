"""From per-run metrics to per-configuration tables: pairing by seed, then summaries over seeds.

A *configuration* is every key column but ``seed`` and ``run_id``; its runs differ only in
the seed. Two steps, in this order (harness.report.stats states the statistics):

1. ``pair_with_baseline``: each run is matched with the baseline configuration's run of the
   **same seed** (full sync for on-policy, FedIT for federated), and the ratios (speedup,
   bytes fraction, quality retained, ...) are formed on that pair. A run whose seed the
   baseline lacks gets NaN ratios: a ratio is never formed across seeds.
2. ``aggregate``: per configuration, each statistic column ``m`` becomes ``m`` (mean over
   seeds), ``m_sd`` (sample sd), ``m_n`` (seeds with a value), ``m_ci_low`` / ``m_ci_high``
   (95% t-interval); other numeric columns are averaged; ``seeds`` counts the runs,
   ``seed_list`` names them, ``loaded_runs`` counts runs measured under load and
   ``rebuilt_base_runs`` those that started from a base whose hash is not the reference's.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from harness.report.stats import summarize

STAT_SUFFIXES = ("_sd", "_n", "_ci_low", "_ci_high")
TEXT_COLUMNS = ("quality_metric", "continuous_metric", "compute_measure", "command", "run_ids", "lr_rule", "a_variance",
                "optimizer", "sync_dtype", "load_notes", "base_sha256")


def ident(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """One string per row naming its configuration (NaN keys compare equal, as 'nan')."""
    return pd.Series(["|".join(_key_text(v) for v in t) for t in frame[keys].itertuples(index=False)],
                     index=frame.index, dtype=object)


def _key_text(v) -> str:
    """A key value as text: numbers by value (64 == 64.0), NaN/None as 'nan'."""
    if v is None:
        return "nan"
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return repr(float(v))
    return str(v)


def seed_of(frame: pd.DataFrame) -> pd.Series:
    """The seed of each run (-1 where a run recorded none)."""
    if "seed" not in frame:
        return pd.Series(-1, index=frame.index)
    return pd.to_numeric(frame["seed"], errors="coerce").fillna(-1).astype(int)


def pair_with_baseline(per_run: pd.DataFrame, keys: list[str],
                       choose: Callable[[pd.DataFrame, pd.Series], pd.Series | None]) -> pd.Series:
    """Index (into ``per_run``) of each run's same-seed baseline run; -1 where none.

    ``choose(configs, config)`` picks the baseline configuration (a row of ``configs``, one
    row per configuration) for ``config``, or None.
    """
    ids = ident(per_run, keys)
    seeds = seed_of(per_run)
    configs = per_run.loc[~ids.duplicated()]
    runs_of = {i: dict(zip(seeds[ids == i], per_run.index[ids == i])) for i in ids.unique()}
    base = pd.Series(-1, index=per_run.index, dtype=int)
    for _, config in configs.iterrows():
        ref = choose(configs, config)
        if ref is None:
            continue
        ref_runs = runs_of[ident(ref.to_frame().T, keys).iloc[0]]
        mine = ids == ident(config.to_frame().T, keys).iloc[0]
        base[mine] = [ref_runs.get(s, -1) for s in seeds[mine]]
    return base


def paired_column(per_run: pd.DataFrame, base: pd.Series, num: str, den: str | None = None,
                  op: str = "ratio") -> pd.Series:
    """``per_run[num] / baseline[den]`` (or ``-``) per run with its same-seed baseline; NaN without one."""
    den = den or num
    mine = pd.to_numeric(per_run[num], errors="coerce") if num in per_run else pd.Series(np.nan, index=per_run.index)
    theirs = pd.Series(np.nan, index=per_run.index)
    has = base >= 0
    if den in per_run:
        theirs[has] = pd.to_numeric(per_run.loc[base[has].to_numpy(), den], errors="coerce").to_numpy()
    if op == "ratio":
        return mine / theirs.where(theirs != 0)
    return mine - theirs


def aggregate(per_run: pd.DataFrame, keys: list[str], stat_columns: list[str]) -> pd.DataFrame:
    """One line per configuration: statistics of ``stat_columns``, means of other numbers (module docstring)."""
    numeric = [c for c in per_run.columns if c not in keys and c not in ("run_id", "seed", "loaded", "rebuilt_base")
               and pd.api.types.is_numeric_dtype(per_run[c])]
    grouped = per_run.groupby(keys, dropna=False, sort=True)
    table = grouped[numeric].mean() if numeric else grouped.size().to_frame("_").drop(columns="_")
    added: dict[str, object] = {}      # every new column at once (one concat, not hundreds of inserts)
    for column in stat_columns:
        if column not in per_run:
            continue
        sums = [summarize(g[column]) for _, g in grouped]
        added[column] = [s.mean for s in sums]
        for suffix, attr in zip(STAT_SUFFIXES, ("sd", "n", "ci_low", "ci_high")):
            added[column + suffix] = [getattr(s, attr) for s in sums]
    added["seeds"] = grouped.size()
    added["seed_list"] = [",".join(str(v) for v in sorted(seed_of(g))) for _, g in grouped]
    for flag, out in (("loaded", "loaded_runs"), ("rebuilt_base", "rebuilt_base_runs")):
        added[out] = grouped[flag].agg(lambda s: int(s.fillna(False).astype(bool).sum())) if flag in per_run else 0
    for extra in TEXT_COLUMNS:
        if extra in per_run:
            added[extra] = grouped[extra].agg(lambda s: ";".join(dict.fromkeys(str(v) for v in s if str(v) != "")))
    new = pd.DataFrame({k: (v.reindex(table.index) if isinstance(v, pd.Series) else v) for k, v in added.items()},
                       index=table.index)
    table = pd.concat([table.drop(columns=[c for c in new.columns if c in table.columns]), new], axis=1)
    return table.reset_index()
