"""Statistics of the report: summaries over seeds, paired ratios, verdicts, seeds to resolve.

Pure functions over numbers; no pandas frames of runs, no I/O. What we chose (and why):

- Interval: the two-sided 95% **Student t-interval** of the mean over seeds,
  ``mean ± t_{0.975, n-1} · sd / sqrt(n)`` with the sample sd (ddof=1). With n < 2 the
  interval is undefined (NaN): one seed says nothing about the spread. A bootstrap would
  need far more than the 3-5 seeds a run budget allows; the t-interval is the textbook
  choice there (it assumes roughly normal per-seed values).
- Ratios (speedup, bytes fraction, quality retained) are formed **per seed** from the two
  runs of that seed (same prompts, same init), then summarised like any other per-seed
  value: the interval is on the mean of the per-seed ratios.
- Verdict: ``met`` only when the whole interval lies on the claim's side of the threshold,
  ``not met`` only when it lies wholly on the other side; an interval that contains or
  touches the threshold (or is undefined) is ``inconclusive``.
- Seeds to resolve an inconclusive claim: the smallest n for which the t half-width at the
  observed sd, ``t_{0.975, n-1} · sd / sqrt(n)``, is below ``|mean - threshold|`` (so the
  interval would exclude the threshold if mean and sd stayed as observed). NaN when the
  sd is unknown (n < 2) or the mean sits on the threshold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy import stats as _st

LEVEL = 0.95
MET, NOT_MET, INCONCLUSIVE = "met", "not met", "inconclusive"
VERDICTS = (MET, NOT_MET, INCONCLUSIVE)
MAX_SEEDS = 10_000   # seeds_needed gives up (returns inf) beyond this


@dataclass(frozen=True)
class Summary:
    """Mean, sample sd (ddof=1), n and the 95% t-interval of per-seed values (NaN where undefined)."""
    mean: float
    sd: float
    n: int
    ci_low: float
    ci_high: float

    @property
    def half_width(self) -> float:
        """The ± of a table cell: half the interval's width (NaN with n < 2)."""
        return (self.ci_high - self.ci_low) / 2


def t_quantile(n: int, level: float = LEVEL) -> float:
    """Two-sided Student t quantile for a sample of n (n - 1 degrees of freedom); NaN for n < 2."""
    return float(_st.t.ppf(0.5 + level / 2, n - 1)) if n >= 2 else math.nan


def _clean(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray([float(v) for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def summarize(values: Iterable[float], level: float = LEVEL) -> Summary:
    """Summary of per-seed values; NaN/inf values are dropped (a run that never reached a target)."""
    x = _clean(values)
    n = len(x)
    if n == 0:
        return Summary(math.nan, math.nan, 0, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2:
        return Summary(mean, math.nan, 1, math.nan, math.nan)
    sd = float(x.std(ddof=1))
    half = t_quantile(n, level) * sd / math.sqrt(n)
    return Summary(mean, sd, n, mean - half, mean + half)


def paired(a: dict, b: dict, op: str = "ratio") -> dict:
    """Per-seed ``a[s] / b[s]`` (``op='ratio'``) or ``a[s] - b[s]`` (``'diff'``) over the seeds both have.

    ``a`` and ``b`` map seed -> value (one run each). Seeds only one side has are dropped:
    a ratio is only ever formed from two runs of the same seed.
    """
    out = {}
    for seed in sorted(set(a) & set(b), key=str):
        x, y = float(a[seed]), float(b[seed])
        if op == "ratio":
            out[seed] = x / y if y != 0 else math.nan
        elif op == "diff":
            out[seed] = x - y
        else:
            raise ValueError(f"op: {op!r} is not one of 'ratio', 'diff'")
    return out


def verdict(ci_low: float, ci_high: float, threshold: float, direction: str) -> str:
    """``met`` / ``not met`` / ``inconclusive`` of "estimate ``direction`` threshold" from its interval.

    ``direction`` is ``">="`` (the claim wants values above the threshold) or ``"<="``.
    Touching the threshold is inconclusive in both directions (the interval does not
    exclude it); an undefined interval (n < 2) is inconclusive.
    """
    if direction not in (">=", "<="):
        raise ValueError(f"direction: {direction!r} is not one of '>=', '<='")
    if any(v is None or not math.isfinite(v) for v in (ci_low, ci_high)):
        return INCONCLUSIVE
    above, below = ci_low > threshold, ci_high < threshold
    if direction == ">=":
        return MET if above else NOT_MET if below else INCONCLUSIVE
    return MET if below else NOT_MET if above else INCONCLUSIVE


def seeds_needed(mean: float, sd: float, threshold: float, level: float = LEVEL) -> float:
    """Smallest n whose t half-width at this sd is < |mean - threshold| (see the module docstring).

    NaN when sd is unknown or the mean equals the threshold; inf beyond ``MAX_SEEDS``.
    """
    gap = abs(mean - threshold)
    if not (math.isfinite(mean) and math.isfinite(sd)) or gap == 0:
        return math.nan
    if sd == 0:
        return 2.0
    n = 2
    while n <= MAX_SEEDS:
        if t_quantile(n, level) * sd / math.sqrt(n) < gap:
            return float(n)
        n = n + 1 if n < 100 else int(n * 1.1)
    return math.inf


def crossover(rates: Sequence[float], speedups: Sequence[float], at: float = 1.0) -> float:
    """The link rate where speedup crosses ``at``, interpolated linearly in log rate.

    Takes one seed's (rate, speedup) points; returns the rate [Mbit/s] of the first
    crossing from above ``at`` (slow links, the method wins) to below (fast links), NaN
    when the speedup never crosses in the measured range (it is then above or below
    everywhere: the summary says which).
    """
    pts = sorted((float(r), float(s)) for r, s in zip(rates, speedups)
                 if r and math.isfinite(float(r)) and float(r) > 0 and math.isfinite(float(s)))
    for (r0, s0), (r1, s1) in zip(pts, pts[1:]):
        if (s0 - at) * (s1 - at) <= 0 and s0 != s1:
            frac = (s0 - at) / (s0 - s1)
            return float(math.exp(math.log(r0) + frac * (math.log(r1) - math.log(r0))))
    return math.nan


def cell(s: Summary, fmt: str = "{:.2f}", unit: str = "") -> str:
    """Table text ``'3.03x ± 0.12 (n=5)'``: mean ± 95% t half-width; ``'0.820 (n=1)'`` for one seed."""
    if s.n == 0 or not math.isfinite(s.mean):
        return "–"
    text = fmt.format(s.mean) + unit
    if s.n >= 2 and math.isfinite(s.half_width):
        text += " ± " + fmt.format(s.half_width)
    return f"{text} (n={s.n})"
