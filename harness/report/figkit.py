"""Small helpers every figure shares: the plot log, series naming, legends, log axes.

Kept apart from the figure functions (plots.py) so each reads as "what is drawn".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, PercentFormatter

from harness.report.stats import summarize
from harness.report.style import METHOD_ORDER, series_styles

QUALITY_LABELS = {"accuracy": "Held-out accuracy", "reward": "Mean reward"}


@dataclass
class Figure:
    name: str
    caption: str
    paths: list[Path]


@dataclass
class PlotLog:
    """What was drawn (with a caption) and what was skipped (with the reason)."""
    made: list[Figure] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def skip(self, plot: str, reason: str) -> None:
        self.skipped.append((plot, reason))

    def paths(self) -> list[Path]:
        return [p for f in self.made for p in f.paths]


def with_series(frame: pd.DataFrame, keys: list[str], text: Callable, fam: Callable) -> pd.DataFrame:
    """Add ``series`` (legend text, one per distinct ``keys``), ``family`` (colour) and ``order``.

    Configurations that would share a legend text get their variant name added (except
    the one whose variant is named after its method: the canonical run); series
    are ordered baselines first (style.ORDER), then by name.
    """
    frame = frame.copy()
    ident = pd.Series(["|".join(map(str, t)) for t in frame[keys].itertuples(index=False)], index=frame.index)
    first = frame.loc[~ident.duplicated()]
    names = {i: text(r) for i, r in zip(ident[first.index], first.itertuples(index=False))}
    clash = pd.Series(list(names.values())).value_counts()
    methods = dict(zip(ident[first.index], first["method"]))
    names = {i: (n + f" [{v}]" if clash[n] > 1 and v != methods[i] else n)
             for (i, n), v in zip(names.items(), first["variant"])}
    clash = pd.Series(list(names.values())).value_counts()
    if (clash > 1).any():   # still ambiguous: every series of a shared text names its keys
        names = {i: (n + f" [{i}]" if clash[n] > 1 else n) for i, n in names.items()}
    frame["series"] = ident.map(names)
    frame["family"] = [fam(r) for r in frame.itertuples(index=False)]
    frame["order"] = frame["method"].map(METHOD_ORDER).fillna(len(METHOD_ORDER))
    return frame


def styles_of(frame: pd.DataFrame) -> dict[str, dict]:
    """Line kwargs per series name (colour and marker by family, line style by member)."""
    pairs = list(dict.fromkeys(zip(frame.sort_values(["order", "series"])["family"],
                                   frame.sort_values(["order", "series"])["series"])))
    by_pair = series_styles(pairs)
    return {name: by_pair[(fam, name)] for fam, name in pairs}


def in_order(frame: pd.DataFrame):
    """(series name, rows) in legend order."""
    for name in frame.sort_values(["order", "series"])["series"].drop_duplicates():
        yield name, frame[frame["series"] == name]


def seed_mean(curve: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Mean x and y over seeds at each step where y was evaluated, and y's 95% t-interval (NaN for one seed)."""
    pts = curve.dropna(subset=[y])
    rows = []
    for step, g in pts.groupby("step"):
        s = summarize(g[y])
        rows.append({"step": step, "x": g[x].mean(), "y": s.mean, "lo": s.ci_low, "hi": s.ci_high, "n": s.n})
    return pd.DataFrame(rows, columns=["step", "x", "y", "lo", "hi", "n"])


def draw_series(ax, frame: pd.DataFrame, x: str, y: str, scale: float, styles: dict, positive_x: bool = False) -> None:
    """One line per series: mean over seeds at each evaluated step, a 95% t-interval band when seeds > 1."""
    for name, series in in_order(frame):
        st = styles[name]
        pts = seed_mean(series, x, y)
        if positive_x:
            pts = pts[pts["x"] > 0]
        ax.plot(pts["x"] / scale, pts["y"], label=name, markevery=max(1, len(pts) // 6), **st)
        if series["seed"].nunique() > 1 and pts["lo"].notna().any():
            ax.fill_between(pts["x"] / scale, pts["lo"], pts["hi"], color=st["color"], alpha=0.15, lw=0)


def error_bars(frame: pd.DataFrame, column: str, scale: float = 1.0) -> tuple | None:
    """(below, above) distances to the 95% interval of ``column`` for ``ax.errorbar``; None when no line has n > 1."""
    lo, hi = f"{column}_ci_low", f"{column}_ci_high"
    if lo not in frame or not frame[lo].notna().any():
        return None
    mean = frame[column] * scale
    return ((mean - frame[lo] * scale).fillna(0).clip(lower=0).to_numpy(),
            (frame[hi] * scale - mean).fillna(0).clip(lower=0).to_numpy())


def legend(fig, axes: list, extra_ok: int = 3) -> None:
    """In the axes when one panel has at most ``extra_ok`` entries; else one legend above the figure."""
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if not labels:
        return
    if len(axes) == 1 and len(labels) <= extra_ok:
        axes[0].legend(loc="best")
        return
    ncol = min(len(labels), 2 if len(axes) == 1 else 3)   # wider rows overflow a two-panel figure
    fig.legend([handles[lab] for lab in labels], labels, loc="outside upper center", ncol=ncol, columnspacing=1.2)


def log_axis(ax, which: str = "x", base: int = 10) -> None:
    """Log scale with plain numbers (0.2, 1, 10 rather than 10^-1); denser ticks on short spans.

    Call after the data is drawn: the tick density follows the data's span.
    """
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    lo, hi = sorted(axis.get_data_interval())
    decades = math.log10(hi / lo) if base == 10 and lo > 0 else math.inf
    if decades < 0.5:      # less than half a decade: plain evenly spaced ticks read best
        axis.set_major_locator(MaxNLocator(nbins=4))
    else:
        axis.set_major_locator(LogLocator(base=base, subs=(1.0, 2.0, 5.0) if decades < 1.5 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def quality_axis(ax, metric: str) -> None:
    """Label the quality axis; accuracy in percent. Call after the data is drawn."""
    ax.set_ylabel(QUALITY_LABELS.get(metric, metric))
    if metric == "accuracy":
        lo, hi = ax.get_ylim()   # whole percents unless the axis spans under 5 points
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0 if hi - lo > 0.05 else None))


def xlabel(fig, axes: list, text: str) -> None:
    """One x label: under the axis, or centred under a row of panels."""
    if len(axes) == 1:
        axes[0].set_xlabel(text)
    else:
        fig.supxlabel(text, fontsize=8)


def dodge(xs: list[float], ys: list[float], width: float = 0.08, close: float = 1.5) -> list[float]:
    """Shift x multiplicatively (log axes) where points share an x and nearly share a y.

    Points at one x whose y values lie within a factor ``close`` of each other form a
    cluster and are spread symmetrically by ``width`` (in log2 units) so none hides another.
    """
    out = list(xs)
    for x in set(xs):
        idx = sorted((i for i, v in enumerate(xs) if v == x), key=lambda i: ys[i])
        clusters: list[list[int]] = []
        for i in idx:
            if clusters and ys[i] <= ys[clusters[-1][-1]] * close:
                clusters[-1].append(i)
            else:
                clusters.append([i])
        for members in clusters:
            for slot, i in enumerate(members):
                out[i] = x * 2 ** (width * (slot - (len(members) - 1) / 2))
    return out
