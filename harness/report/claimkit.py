"""What every claim finder shares: where a claim was measured (``Where``, built by ``_where`` only),
the per-seed values of a configuration (``values``), its runs (``run_ids``), paired ratios and
differences, and the ``Line`` a finder yields (harness/report/claims.py judges it)."""
from __future__ import annotations

import math
from typing import Iterator, NamedTuple

import numpy as np
import pandas as pd

from harness.report.aggregate import ident, seed_of
from harness.report.rowkit import KEY_DEFAULTS


def values(runs: pd.DataFrame, config: pd.Series, keys: list[str], column: str) -> dict:
    """{seed: value of ``column``} over the runs of one configuration (NaN values dropped); a key that
    a hand-built table lacks (``model``) holds its default (rowkit.KEY_DEFAULTS) on that side."""
    def keyed(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(**{k: KEY_DEFAULTS.get(k, np.nan) for k in keys if k not in frame})

    mine = runs[ident(keyed(runs), keys) == ident(keyed(config.to_frame().T), keys).iloc[0]]
    vals = pd.to_numeric(mine[column], errors="coerce") if column in mine else pd.Series(dtype=float)
    return {s: float(v) for s, v in zip(seed_of(mine), vals) if math.isfinite(v)}


def diff(a: dict, b: dict) -> dict:
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def ratio(a: dict, b: dict) -> dict:
    return {s: a[s] / b[s] for s in sorted(set(a) & set(b)) if b[s] != 0}


def run_ids(runs: pd.DataFrame, config: pd.Series, keys: list[str]) -> dict:
    """{seed: run_id} of the runs of one configuration (the runs ``values`` reads)."""
    def keyed(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(**{k: KEY_DEFAULTS.get(k, np.nan) for k in keys if k not in frame})

    if "run_id" not in runs:
        return {}
    mine = runs[ident(keyed(runs), keys) == ident(keyed(config.to_frame().T), keys).iloc[0]]
    return {s: str(r) for s, r in zip(seed_of(mine), mine["run_id"])}


def _model(value) -> str:
    """A configuration's ``model`` as text ("" when it names none: a hand-built table without the column)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _models(t: pd.DataFrame) -> pd.Series:
    """Each configuration's ``_model`` (all "" in a table without the column)."""
    if "model" not in t:
        return pd.Series("", index=t.index, name="model")
    return t["model"].map(_model).rename("model")


class Where(NamedTuple):
    """Where a claim was measured (claims.csv's ``where``) and the model it rests on (its ``model``)."""
    text: str
    model: str

    def then(self, more: str) -> "Where":
        """The same place with more said after it (``, vs fedit``); the model stays the one it names."""
        return Where(self.text + more, self.model)


def _where(label: str, r: pd.Series, vs: str | None = None, tail: str | None = None,
           rates: list[float] | None = None) -> Where:
    """The one place a claim's ``where`` is built: ``label`` (``scenario [backend]``), the model of the
    configuration ``r`` (its runs' ``model``: keys pick the runs, so the two agree), then for an
    on-policy line the rate, training rank and what it is compared with (``vs``; default: ``r``'s full
    sync and its dtype), for a federated one ``tail`` (its ranks and client optimizer). E.g.
    ``hilo_real [tc] SmolLM2-135M-Instruct (real) 10 Mbit/s, r=16, vs full_sync_10mbit bf16``. ``rates``: a
    line pooling the runs of several rates names them all, against the full sync of each rate."""
    model = _model(r.get("model"))
    head = f"{label} {model}" if model else label
    if tail is not None:
        return Where(f"{head} {tail}", model)
    dtype = str(r.get("baseline_dtype") or "")
    if rates and len(rates) > 1:
        names = [f"{x:g}" for x in sorted(rates)]
        link = f"{', '.join(names[:-1])} and {names[-1]} Mbit/s"
        vs = vs or f"each rate's full sync{' ' + dtype if dtype else ''}"
    else:
        link = f"{r['rate_mbit']:g} Mbit/s"
        vs = vs or f"{r['baseline_variant']}{' ' + dtype if dtype else ''}"
    return Where(f"{head} {link}, r={int(r['rank'])}, vs {vs}", model)


class Line(NamedTuple):
    """One place a claim can be judged, as a finder yields it (positional: where, per_seed, note, horizon)."""
    where: Where
    per_seed: dict                        # seed -> the claim's per-seed statistic
    note: str = ""
    horizon: str | None = None            # None: the spec's
    censored: frozenset = frozenset()     # seeds whose value is a lower bound (never reached the target)
    pairs: dict | None = None             # seed -> (run_id, run_id of the other side): per-prompt pairing
    op: str = "ratio"                     # how pairs combine: ratio | diff (the per-seed statistic's form)
    column: str = "correct"               # the per-prompt record the pairs compare (prompts.csv.gz)


Found = Iterator[tuple]   # Line, or a plain (Where, {seed: value}, note[, horizon]) tuple
