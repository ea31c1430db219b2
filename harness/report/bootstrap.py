"""Two-level paired bootstrap over seeds and prompts, for claims that per-prompt records can pair.

A quality claim compares two methods evaluated on the same held-out prompts at the same seeds:
``a[s, p]`` and ``b[s, p]`` (seeds x prompts; 0/1 correctness or a continuous score). Its
statistic is the mean over seeds of a per-seed comparison of the prompt means (``ratio``:
mean_p a / mean_p b; ``diff``: mean_p a - mean_p b), as the seed-level t-interval uses.

The seed-level t-interval covers the noise of training (seeds) only: the prompts are fixed, so
the luck of which prompts were drawn into the held-out set is in no interval. The bootstrap adds
it: each replicate draws seeds with replacement and, independently, prompts with replacement
(the same draw for both methods and every seed: the pairing stays), and recomputes the statistic;
the interval is the percentile interval of ``B`` replicates. With a handful of seeds the seed
level of a bootstrap under-covers (it never sees a seed beyond the observed ones), so verdicts
use the t-interval and the report shows this one beside it, named for what it covers.
"""
from __future__ import annotations

import math

import numpy as np

REPLICATES = 4000
SEED = 20261206            # a fixed stream: the report is a function of its runs


def statistic(a: np.ndarray, b: np.ndarray, op: str) -> float:
    """Mean over seeds of the per-seed ratio (or difference) of prompt means."""
    ma, mb = a.mean(1), b.mean(1)
    return float(np.mean(ma / mb) if op == "ratio" else np.mean(ma - mb))


def two_level(a: np.ndarray, b: np.ndarray, op: str = "ratio", level: float = 0.95, replicates: int = REPLICATES,
              seed: int = SEED) -> tuple[float, float]:
    """Percentile interval of the statistic under resampling seeds and prompts (module doc);
    (NaN, NaN) with fewer than 2 seeds or prompts."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"two_level: a {a.shape} and b {b.shape} must be seeds x prompts of one shape")
    if op not in ("ratio", "diff"):
        raise ValueError(f"op: {op!r} is not one of 'ratio', 'diff'")
    n_seeds, n_prompts = a.shape
    if n_seeds < 2 or n_prompts < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    out = np.empty(replicates)
    for start in range(0, replicates, 500):          # chunks keep memory at 500 x seeds x prompts
        k = min(500, replicates - start)
        s = rng.integers(0, n_seeds, (k, n_seeds))
        p = rng.integers(0, n_prompts, (k, n_prompts))
        ma = a[s[:, :, None], p[:, None, :]].mean(2)
        mb = b[s[:, :, None], p[:, None, :]].mean(2)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[start:start + k] = (ma / mb).mean(1) if op == "ratio" else (ma - mb).mean(1)
    out = out[np.isfinite(out)]
    if len(out) < replicates // 2:
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    return float(np.percentile(out, tail)), float(np.percentile(out, 100 - tail))
