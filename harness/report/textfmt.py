"""How the report's numbers and claims read: units (fmt_*), a line's aggregated cell (stat), a claim's
estimate with its interval rounded to what the interval supports (claim_text), seeds for 80% power
(power_text), and markdown tables. Shared by summary.md, the README's claims block and the report's output."""
from __future__ import annotations

import math
import re
from typing import Callable

import pandas as pd

from harness.report.headline import seeds_of
from harness.report.rowkit import missing as is_nan
from harness.report.stats import Summary, cell

DASH = "–"


def fmt_bytes(v) -> str:
    if is_nan(v):
        return DASH
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.3g} {unit}"
    return f"{v:.0f} B"


def fmt_pct(v, digits: int = 1) -> str:
    return DASH if is_nan(v) else f"{100 * v:.{digits}f}%"


def fmt_x(v) -> str:
    return DASH if is_nan(v) else f"{v:.2f}×"


def fmt_num(v, digits: int = 3) -> str:
    return DASH if is_nan(v) else f"{v:.{digits}g}"


def fmt_q(v) -> str:
    return DASH if is_nan(v) else f"{v:.3f}"


def fmt_s(v) -> str:
    if is_nan(v):
        return DASH
    return f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def fmt_rate(v) -> str:
    return "unshaped" if is_nan(v) else f"{v:g}"


def summary_of(r: pd.Series, column: str, scale: float = 1.0) -> Summary:
    """The aggregated statistic ``column`` of one table line (mean, sd, n, interval), scaled."""
    get = lambda k: float(r[k]) if k in r and not is_nan(r[k]) else math.nan  # noqa: E731
    n = int(get(column + "_n")) if not is_nan(get(column + "_n")) else (1 if not is_nan(get(column)) else 0)
    return Summary(get(column) * scale, get(column + "_sd") * scale, n, get(column + "_ci_low") * scale,
                   get(column + "_ci_high") * scale)


def stat(column: str, fmt: str = "{:.3f}", unit: str = "", scale: float = 1.0) -> Callable:
    """A markdown_table formatter that reads a whole line (use with column ``"*"``): ``mean ± hw (n=k)``."""
    def text(r: pd.Series) -> str:
        return cell(summary_of(r, column, scale), fmt, unit)
    text.whole_row = True   # type: ignore[attr-defined]
    return text


FORMATS = {"speedup": ("{:.2f}", "×", 1.0), "crossover_mbit": ("{:.3g}", " Mbit/s", 1.0),
           "bytes_frac": ("{:.4f}", "%", 100.0), "bytes_frac_max": ("{:.3f}", "%", 100.0),   # bytes sit near a budget
           "accuracy difference": ("{:.1f}", " pt", 100.0)}       # Spar minus another compressor, the ablations


def _format(statistic: str) -> tuple[str, str, float]:
    return FORMATS.get(statistic, ("{:.1f}", " pt", 100.0) if " - " in statistic else ("{:.2f}", "%", 100.0))


def claim_value(statistic: str, v: float, decimals: int | None = None) -> str:
    """One number of a claim in its unit ('2.50×', '1.57%', '4.2 pt'); ``decimals`` overrides the default."""
    fmt, unit, scale = _format(statistic)
    if decimals is not None and fmt.endswith("f}"):
        fmt = f"{{:.{decimals}f}}"
    return DASH if is_nan(v) else fmt.format(v * scale) + unit


def supported_decimals(statistic: str, estimate: float, low: float, high: float) -> int | None:
    """Decimals the interval supports: its half-width to two significant digits, never more than the
    statistic's default (None: keep the default; no interval, a zero-width one, or a %g format).
    1.5663% [1.4299%, 1.7027%] -> 2 decimals: 1.57% [1.43%, 1.70%]."""
    fmt, _, scale = _format(statistic)
    if not fmt.endswith("f}") or any(is_nan(v) for v in (estimate, low, high)):
        return None
    half = max(abs(estimate - low), abs(high - estimate)) * scale
    if not half > 0 or not math.isfinite(half):
        return None
    default = int(re.search(r"\.(\d+)f", fmt).group(1))
    return max(0, min(default, 1 - math.floor(math.log10(half))))


def claim_text(c: pd.Series) -> str:
    """``'2.50× [2.31×, 2.69×] (n=5)'``: estimate, 95% interval, seeds, rounded to what the interval
    supports (supported_decimals); a cap: ``'max 1.598% (n=5)'``; a censored estimate:
    ``'>= 0.61 [...] (n=5, 2 censored)'``."""
    if str(c.get("test", "")) == "cap":
        return f"max {claim_value(c['statistic'], c['estimate'])} (n={seeds_of(c)})"
    decimals = supported_decimals(c["statistic"], c["estimate"], c["ci_low"], c["ci_high"])
    value = lambda v: claim_value(c["statistic"], v, decimals)  # noqa: E731
    interval = "" if is_nan(c["ci_low"]) else f" [{value(c['ci_low'])}, {value(c['ci_high'])}]"
    censored = str(c.get("censored", "") or "")
    head = ">= " if censored and not is_nan(c.get("estimate")) else ""
    tail = f", {censored.split(' of ')[0]} censored" if censored else ""
    return f"{head}{value(c['estimate'])}{interval} (n={seeds_of(c)}{tail})"


def power_text(c: pd.Series) -> str:
    """Seeds for 80% power to resolve an inconclusive claim, and which way (``'31 (met)'``), else a dash."""
    v = c.get("seeds_80")
    if is_nan(v):
        return DASH
    return ("> 100000" if v == math.inf else f"{int(v)}") + (f" ({c['resolves']})" if c.get("resolves") else "")


_NO_INTERVAL = re.compile(r"(;\s*)?n=[01]: no interval, run >= 3 seeds")


def claim_note(text: str) -> str:
    """A claim's note without the no-interval remark (lines with fewer than 2 seeds are not judged)."""
    return _NO_INTERVAL.sub("", str(text)).strip("; ").strip()


def short_reason(reason: str) -> str:
    """A failure reason on one line: its first line, and its last when it spans several (a traceback)."""
    lines = [x.strip() for x in str(reason).splitlines() if x.strip()]
    return " … ".join([lines[0], lines[-1]]) if len(lines) > 2 else " ".join(lines)


def in_run_paths(reason: str, run_id: str) -> str:
    """``reason`` with the absolute paths into run ``run_id`` (or the attempt it was moved aside from)
    cut to the part inside the run's folder: ``/any/where/runs/<scenario>/<id>/logs/w.log`` reads
    ``logs/w.log``, the same on every machine the committed summary is rebuilt on."""
    stem = re.escape(run_id.split(".attempt", 1)[0])
    return re.sub(rf"(?<![\w.-])/\S*?/{stem}(?:\.attempt\d+)?/", "", str(reason))


def markdown_table(frame: pd.DataFrame, columns: list[tuple[str, str, Callable]]) -> str:
    """Render ``frame`` with (header, column, formatter) triples; numbers right-aligned."""
    head = "| " + " | ".join(h for h, _, _ in columns) + " |"
    rule = "|" + "|".join("---:" if f is not str else "---" for _, _, f in columns) + "|"
    body = ["| " + " | ".join(f(r) if getattr(f, "whole_row", False) else f(r[c]) if f is not str else str(r[c])
                              for _, c, f in columns) + " |" for _, r in frame.iterrows()]
    return "\n".join([head, rule, *body])
