"""Tests behind the verdicts: one-sided p-values, Holm's adjustment, TOST, censored values, power.

Pure functions over numbers (stats.py's summaries feed them). What we chose:

- **The claim's test.** Every claim names its reading (claims.csv ``test``): *non-inferiority*
  ("quality within 2% of full sync": per-seed ratio >= 0.98; met when the 95% interval's lower
  end is above the margin), *superiority* ("higher accuracy than FedIT": difference > 0),
  *a bound on the mean* (speedup >= 2.2x, uplink <= 50%), or *a cap* (bytes per update <= 1.6%: a
  limit every update must respect, judged on the largest value observed, never on a mean). A
  "within X%" claim is also read as *equivalence* by TOST: both one-sided tests at 5% (the 90%
  interval inside [1 - X, 1 / (1 - X)]), in claims.csv's ``equivalence`` column.
- **p-values.** The verdict of a 95% two-sided t-interval equals two one-sided t-tests at 2.5%:
  ``p_met`` tests H0 "the mean is on the wrong side of the threshold" (small: met),
  ``p_not`` the opposite. ``p = 2 * min(p_met, p_not)`` is the two-sided p-value of "the mean
  equals the threshold", the one the interval's verdict compares with 0.05.
- **Multiplicity.** Holm's step-down adjustment of those two-sided p-values over every claim of a
  table (the family: one claims.csv); ``verdict_holm`` keeps a met / not met only where the
  adjusted p-value is < 0.05. Caps (no test) and claims with n < 2 are outside the family.
- **Censoring.** A seed that never reaches a target (time to 95% of full sync's quality) has a
  lower bound, not a value: ``censored_verdict`` never says met when a bound could cross the
  threshold (any censored seed in a ``<=`` claim), says not met only when the interval computed
  with the bounds in place of the unknown values (which can only raise the true ones) already lies
  wholly on the wrong side, and otherwise inconclusive. The estimate is then a lower bound.
- **Power.** ``seeds_for_power`` is the smallest number of seeds at which a t-interval at this
  per-seed sd would exclude the threshold with probability >= ``power`` (80%) if the true mean
  were ``threshold + gap``: the noncentral t power of the one-sided test at 2.5%.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from scipy import stats as _st

from harness.report.stats import INCONCLUSIVE, LEVEL, MET, NOT_MET, Summary, summarize, verdict

POWER = 0.8
MAX_SEEDS = 100_000          # seeds_for_power gives up (inf) beyond this
TESTS = ("non-inferiority", "superiority", "bound", "cap", "equivalence")


def p_values(s: Summary, threshold: float, direction: str) -> tuple[float, float]:
    """(p_met, p_not): one-sided t-test p-values that the mean lies on the claim's side of
    ``threshold`` (``direction`` ">=" or "<=") and on the other; NaN with n < 2."""
    if s.n < 2 or not math.isfinite(s.sd):
        return math.nan, math.nan
    if s.sd == 0:
        above = 0.0 if s.mean > threshold else 1.0 if s.mean < threshold else 0.5
        below = 1.0 - above if s.mean != threshold else 0.5
    else:
        t = (s.mean - threshold) / (s.sd / math.sqrt(s.n))
        above, below = float(_st.t.sf(t, s.n - 1)), float(_st.t.cdf(t, s.n - 1))
    return (above, below) if direction == ">=" else (below, above)


def two_sided(p_met: float, p_not: float) -> float:
    """The two-sided p-value of "the mean equals the threshold" from the two one-sided ones."""
    if not (math.isfinite(p_met) and math.isfinite(p_not)):
        return math.nan
    return min(1.0, 2 * min(p_met, p_not))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN entries stay NaN and are not counted)."""
    idx = [i for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def holm_verdict(p_adjusted: float, p_met: float, p_not: float, alpha: float = 1 - LEVEL) -> str:
    """met / not met where the Holm-adjusted two-sided p-value is < alpha, in the direction the
    smaller one-sided p-value points; inconclusive otherwise."""
    if not math.isfinite(p_adjusted) or p_adjusted >= alpha:
        return INCONCLUSIVE
    return MET if p_met < p_not else NOT_MET


def tost(s: Summary, low: float, high: float, alpha: float = 0.05) -> str:
    """Equivalence by two one-sided tests at ``alpha``: ``met`` when the (1 - 2 alpha) t-interval
    lies inside [low, high], ``not met`` when it lies wholly outside, else inconclusive."""
    if s.n < 2 or not math.isfinite(s.sd):
        return INCONCLUSIVE
    half = float(_st.t.ppf(1 - alpha, s.n - 1)) * s.sd / math.sqrt(s.n)
    lo, hi = s.mean - half, s.mean + half
    if low < lo and hi < high:
        return MET
    if hi < low or lo > high:
        return NOT_MET
    return INCONCLUSIVE


def cap_verdict(values: Iterable[float], cap: float) -> str:
    """A cap holds when every observed value is at or under it (met), is broken by any value above
    it (not met); no values: inconclusive. No interval: a cap is a rule on each value."""
    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not x:
        return INCONCLUSIVE
    return MET if max(x) <= cap else NOT_MET


def censored_verdict(values: dict, censored: set, threshold: float, direction: str) -> tuple[str, Summary]:
    """The verdict and summary of per-seed values where the seeds in ``censored`` hold lower bounds
    (module doc). Without censoring it is the plain interval verdict."""
    s = summarize(values.values())
    v = verdict(s.ci_low, s.ci_high, threshold, direction)
    if not censored:
        return v, s
    if direction == "<=":            # true values >= the bounds: "met" cannot be shown, "not met" can
        return (NOT_MET if v == NOT_MET else INCONCLUSIVE), s
    return (MET if v == MET else INCONCLUSIVE), s


def seeds_for_power(gap: float, sd: float, power: float = POWER, level: float = LEVEL) -> float:
    """Smallest n >= 2 whose level-``level`` t-interval excludes the threshold on the side of
    ``gap`` (true mean minus threshold) with probability >= ``power``, at per-seed sd ``sd``.
    NaN for an unknown sd or a zero gap; inf beyond MAX_SEEDS."""
    if not (math.isfinite(gap) and math.isfinite(sd)) or gap == 0:
        return math.nan
    if sd == 0:
        return 2.0
    effect = abs(gap) / sd

    def achieved(n: int) -> float:
        crit = _st.t.ppf(0.5 + level / 2, n - 1)
        return float(_st.nct.sf(crit, n - 1, effect * math.sqrt(n)))

    lo, hi = 2, 2
    while achieved(hi) < power:
        lo, hi = hi, hi * 2
        if hi > MAX_SEEDS:
            return math.inf
    while lo < hi:                   # achieved() rises with n
        mid = (lo + hi) // 2
        if achieved(mid) >= power:
            hi = mid
        else:
            lo = mid + 1
    return float(hi)


def power_at(n: int, gap: float, sd: float, level: float = LEVEL) -> float:
    """Probability that n seeds' interval excludes the threshold on ``gap``'s side (noncentral t)."""
    if n < 2 or not (math.isfinite(gap) and math.isfinite(sd)) or sd <= 0:
        return math.nan
    crit = _st.t.ppf(0.5 + level / 2, n - 1)
    return float(_st.nct.sf(crit, n - 1, abs(gap) / sd * math.sqrt(n)))


def supported_bound(s: Summary, direction: str) -> float:
    """What the data support at 95%: the interval's lower end for a ">=" claim, its upper end for "<="."""
    return s.ci_low if direction == ">=" else s.ci_high
