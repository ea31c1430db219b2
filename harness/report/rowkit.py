"""Reading one run's tidy rows (both run kinds): typed columns, a configuration's keys, the hub's rows, the
in_sync verdicts, and matching a configuration with its reference."""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

KEY_DEFAULTS = {"model": ""}   # rows without the column (hand-built ones) name no model; NaN for the other keys


def col(frame: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all-NaN when absent (rows of older runs may lack a column)."""
    if name not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce")


def first(frame: pd.DataFrame, name: str, default: Any = np.nan) -> Any:
    if name in frame and frame[name].notna().any():
        return frame[name].dropna().iloc[0]
    return default


def config_key(frame: pd.DataFrame, name: str) -> Any:
    """A configuration key's value in one run's rows (``KEY_DEFAULTS`` when the rows lack it)."""
    return first(frame, name, KEY_DEFAULTS.get(name, np.nan))


def hub_rows(rows: pd.DataFrame, role: str) -> pd.DataFrame:
    return rows[rows["role"] == role].sort_values("step", kind="stable")


def runs_of(rows: pd.DataFrame, kind: str) -> list[tuple[str, pd.DataFrame]]:
    """(run_id, rows) of every collected run of ``kind`` (onpolicy | federated), sorted by run id."""
    if rows.empty or "kind" not in rows:
        return []
    return list(rows[rows["kind"] == kind].groupby("run_id", sort=True))


def in_sync(rows: pd.DataFrame, hub: pd.DataFrame, others: str = "worker") -> pd.Series:
    """The hub's in_sync verdicts (every peer matched), else the peers' own (roles ``others<k>``)."""
    for source in (hub, rows[rows["role"].astype(str).str.startswith(others)]):
        if "in_sync" in source and source["in_sync"].notna().any():
            return source["in_sync"].dropna().astype(bool)
    return pd.Series(dtype=bool)


def run_flags(hub: pd.DataFrame) -> dict[str, Any]:
    """Load and base-hash flags that collect() copied from run.json onto the rows."""
    return {"loaded": first(hub, "loaded", None), "load_notes": first(hub, "load_notes", ""),
            "rebuilt_base": bool(first(hub, "rebuilt_base", False)), "base_sha256": first(hub, "base_sha256", "")}


def constant_links(table: pd.DataFrame) -> pd.Series:
    """Configurations on constant links (no ``trace``): the ones the papers' claims are judged on."""
    if "trace" not in table:
        return pd.Series(True, index=table.index)
    return table["trace"].isna() | (table["trace"].astype(str).isin(["", "nan"]))


def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def same_key(a: Any, b: Any) -> bool:
    """Equal keys; a missing key (None or NaN: e.g. no trace) equals a missing one."""
    if missing(a) or missing(b):
        return missing(a) and missing(b)
    return a == b


def match_keys(table: pd.DataFrame, row: pd.Series, keys: Iterable[str]) -> pd.DataFrame:
    mask = np.ones(len(table), dtype=bool)
    for k in keys:
        mask &= np.array([same_key(v, row[k]) for v in table[k]], dtype=bool)
    return table[mask]


def pick_reference(candidates: pd.DataFrame, row: pd.Series, name: str) -> pd.Series | None:
    """Same scenario first; then the variant called ``name``; then bf16 sync; then the first by variant."""
    if candidates.empty:
        return None
    same = candidates[candidates["scenario"] == row["scenario"]]
    pool = same if not same.empty else candidates
    rank = (pool["variant"] != name).astype(int) * 2
    if "sync_dtype" in pool:
        rank += (pool["sync_dtype"].astype(str) != "bf16").astype(int)
    return pool.assign(_pref=rank).sort_values(["_pref", "variant"], kind="stable").iloc[0]
