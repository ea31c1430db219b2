"""Small helpers every figure shares: the plot log, series naming, legends, log axes.

Kept apart from the figure functions (plots.py, federated_plots.py) so each reads as "what is drawn".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.ticker import Formatter, FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from harness.report.stats import summarize
from harness.report.style import METHOD_ORDER, SINGLE, save, series_styles

QUALITY_LABELS = {"accuracy": "Held-out accuracy", "reward": "Mean reward"}
TITLE_LINE = 60          # characters of a one-line figure title per column width (8 pt fits ~60 in 3.4 in)


@dataclass
class FigureText:
    """The words a drawn figure shows (read from its matplotlib objects before it is saved): the
    figure's heading (``title``: scenario, backend, model, horizon, seeds), panel titles, axis labels,
    and each legend entry with its colour, marker and line style."""
    heading: str = ""
    titles: list[str] = field(default_factory=list)
    xlabels: list[str] = field(default_factory=list)
    ylabels: list[str] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)
    entries: list[dict] = field(default_factory=list)   # {"label", "color", "marker", "linestyle"}
    panels: list[tuple[str, dict[str, int]]] = field(default_factory=list)   # (title, {series: points drawn})


@dataclass
class Figure:
    """One written figure: its file stem, caption, PNG and PDF paths, the claim it carries
    (``carries``: empty for an appendix figure) and the words it shows."""
    name: str
    caption: str
    paths: list[Path]
    carries: str = ""
    text: FigureText | None = None


def _entry(handle, text: str) -> dict:
    """Colour, marker and line style of a plotted handle (a line, an errorbar, bars, a scatter)."""
    import numpy as np
    from matplotlib.colors import to_hex

    if hasattr(handle, "lines") and handle.lines:          # ErrorbarContainer: (data line, caps, bars)
        handle = handle.lines[0]
    elif hasattr(handle, "patches") and handle.patches:    # BarContainer
        handle = handle.patches[0]
    colour = None
    for getter in ("get_color", "get_facecolor", "get_edgecolor"):
        if hasattr(handle, getter):
            value = np.asarray(getattr(handle, getter)(), dtype=object)
            value = value[0] if value.ndim == 2 and len(value) else value
            try:
                colour = to_hex(tuple(value) if value.ndim else value.item())
                break
            except (ValueError, TypeError):
                continue
    marker = handle.get_marker() if hasattr(handle, "get_marker") else ""
    style = handle.get_linestyle() if hasattr(handle, "get_linestyle") else ""
    return {"label": text, "color": colour, "marker": str(marker), "linestyle": str(style)}


def describe(fig) -> FigureText:
    """The words of ``fig``: titles (panels and suptitle), axis labels, legend texts (figure and axes
    legends), each legend entry with the colour, marker and line style of what it labels."""
    out = FigureText()
    if fig._suptitle is not None and fig._suptitle.get_text():
        out.heading = fig._suptitle.get_text()
    sup_x = fig._supxlabel.get_text() if getattr(fig, "_supxlabel", None) is not None else ""
    if sup_x:
        out.xlabels.append(sup_x)
    out.heading = out.heading or next((t for t in (leg.get_title().get_text() for leg in fig.legends) if t), "")
    legends, drawn = list(fig.legends), {}
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            out.ylabels += [t for t in (ax.get_ylabel(),) if t]
            continue
        out.titles += [t for t in (ax.get_title(),) if t]
        out.xlabels += [t for t in (ax.get_xlabel(),) if t]
        out.ylabels += [t for t in (ax.get_ylabel(),) if t]
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
        points = {}
        for h, lab in zip(*ax.get_legend_handles_labels()):
            drawn.setdefault(lab, h)
            line = h.lines[0] if hasattr(h, "lines") and h.lines else h
            if hasattr(line, "get_xdata"):
                points[lab] = len(line.get_xdata())
        out.panels.append((ax.get_title(), points))
    for leg in legends:
        for proxy, text in zip(leg.legend_handles, leg.get_texts()):
            out.legend.append(text.get_text())
            out.entries.append(_entry(drawn.get(text.get_text(), proxy), text.get_text()))
    return out


def finish(log: "PlotLog", fig, out_dir: Path, name: str, caption: str, carries: str = "") -> Figure:
    """Read the figure's words, write its PNG and PDF (closing it) and log it."""
    made = Figure(name, caption, [], carries, describe(fig))
    made.paths = save(fig, out_dir, name)
    log.made.append(made)
    return made


@dataclass
class PlotLog:
    """What was drawn (with a caption) and what was skipped (with the reason)."""
    made: list[Figure] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def skip(self, plot: str, reason: str) -> None:
        self.skipped.append((plot, reason))

    def paths(self) -> list[Path]:
        return [p for f in self.made for p in f.paths]


def with_series(frame: pd.DataFrame, keys: list[str], text: Callable, fam: Callable,
                within: list[str] | None = None) -> pd.DataFrame:
    """Add ``series`` (legend text, one per distinct ``keys``), ``family`` (colour) and ``order``.

    ``text`` gives the words (style.series_label); a series is the same configuration in
    every panel, so the keys should not hold the panel's link. Configurations that would share
    a legend text within one panel (``within``: the panel's columns; the whole frame when None)
    get their variant name added, a last resort when the words do not tell them apart (except
    the one whose variant is named after its method: the canonical run); series are ordered
    baselines first (style.ORDER), then by name.
    """
    frame = frame.copy()
    ident = pd.Series(["|".join(map(str, t)) for t in frame[keys].itertuples(index=False)], index=frame.index)
    first = frame.loc[~ident.duplicated()]
    names = {i: text(r) for i, r in zip(ident[first.index], first.itertuples(index=False))}
    panel = (pd.Series(["|".join(map(str, t)) for t in frame[within].itertuples(index=False)], index=frame.index)
             if within else pd.Series("", index=frame.index))
    shared = pd.DataFrame({"ident": ident, "panel": panel}).drop_duplicates()
    shared["name"] = shared["ident"].map(names)
    clashing = set(shared.loc[shared.duplicated(["panel", "name"], keep=False), "name"])
    methods = dict(zip(ident[first.index], first["method"]))
    variants = dict(zip(ident[first.index], first["variant"]))
    names = {i: (n + f" [{variants[i]}]" if n in clashing and variants[i] != methods[i] else n)
             for i, n in names.items()}
    clash = pd.Series(list(names.values())).value_counts()
    if within is None and (clash > 1).any():   # still ambiguous: every series of a shared text names its keys
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


BOUNDS = {"accuracy": (0.0, 1.0)}   # a band never leaves the metric's range (few seeds give wide t-intervals)


def draw_series(ax, frame: pd.DataFrame, x: str, y: str, scale: float, styles: dict, positive_x: bool = False,
                bounds: tuple[float, float] | None = None) -> None:
    """One line per series: mean over seeds at each evaluated step, a 95% t-interval band when seeds > 1
    (clipped to ``bounds``, the metric's range); a series evaluated once is a point with its interval."""
    for name, series in in_order(frame):
        st = styles[name]
        pts = seed_mean(series, x, y)
        if positive_x:
            pts = pts[pts["x"] > 0]
        if bounds is not None:
            pts = pts.assign(lo=pts["lo"].clip(*bounds), hi=pts["hi"].clip(*bounds))
        if len(pts) == 1:   # one evaluation (a time-only run): a point with its interval, not a curve
            lo, hi = pts["lo"].fillna(pts["y"]), pts["hi"].fillna(pts["y"])
            ax.errorbar(pts["x"] / scale, pts["y"], yerr=[pts["y"] - lo, hi - pts["y"]], label=name, capsize=1.5,
                        elinewidth=0.6, **st)
            continue
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


def _columns(labels: list[str], panels: int) -> int:
    ncol = min(len(labels), 2 if panels == 1 else 3)   # wider rows overflow a two-panel figure
    if panels == 1 and labels and max(map(len, labels)) > 26:   # two long entries overflow one column's width
        ncol = 1
    return max(1, ncol)


def legend_room(labels: list[str], panels: int = 1, extra_ok: int = 3) -> float:
    """Inches to add to a figure's height for the legend that ``legend`` puts above it (0 when it
    fits inside the one panel), so the axes keep their height however many series there are."""
    labels = list(dict.fromkeys(labels))
    if not labels or (panels == 1 and len(labels) <= extra_ok):
        return 0.0
    return 0.12 * math.ceil(len(labels) / _columns(labels, panels))


def legend(fig, axes: list, extra_ok: int = 3, order: list[str] | None = None) -> None:
    """In the axes when one panel has at most ``extra_ok`` entries; else one legend above the figure.

    Entries in ``order`` (the series' order: baselines first) come first, in that order, whichever
    panel drew them first; the rest (reference lines) keep the order they were drawn in."""
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if not labels:
        return
    if order:
        rank = {name: i for i, name in enumerate(order)}
        labels = sorted(labels, key=lambda lab: (rank.get(lab, -1), labels.index(lab)))
    if len(axes) == 1 and len(labels) <= extra_ok:
        axes[0].legend(loc="best")
        return
    ncol = _columns(labels, len(axes))
    heading = None
    if fig._suptitle is not None and fig._suptitle.get_text():   # the title heads the legend: both sit above the axes
        heading = fig._suptitle.get_text()
        fig._suptitle.remove()
        fig._suptitle = None
    fig.legend([handles[lab] for lab in labels], labels, loc="outside upper center", ncol=ncol, columnspacing=1.2,
               title=heading, title_fontsize=8)


def log_axis(ax, which: str = "x", base: int = 10) -> None:
    """Log scale with plain numbers (0.2, 1, 10 rather than 10^-1); denser ticks on short spans.

    Call after the data is drawn: the tick density follows the data's span.
    """
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    shared = (ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()).get_siblings(ax)
    spans = [sorted((a.xaxis if which == "x" else a.yaxis).get_data_interval()) for a in shared]
    spans = [s for s in spans if all(map(math.isfinite, s))] or [sorted(axis.get_data_interval())]
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)   # shared panels: one locator for all
    decades = math.log10(hi / lo) if base == 10 and lo > 0 else math.inf
    if decades < 0.5:      # less than half a decade: plain evenly spaced ticks read best
        axis.set_major_locator(MaxNLocator(nbins=4))
    else:
        axis.set_major_locator(LogLocator(base=base, subs=(1.0, 2.0, 5.0) if decades < 1.5 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


class TickPercent(Formatter):
    """Fractions as percents with as few decimals as the ticks need to differ: 46%, 46.5%, never
    46.00% (the decimals follow the tick spacing, read when the axis is drawn)."""

    def __init__(self) -> None:
        self.decimals = 0

    def set_locs(self, locs) -> None:
        super().set_locs(locs)
        steps = [abs(b - a) * 100 for a, b in zip(locs, locs[1:]) if b != a]
        step = min(steps) if steps else 1.0
        self.decimals = 0 if step >= 1 else min(4, math.ceil(-math.log10(step) - 1e-9))
        while self.decimals and len({f"{100 * v:.{self.decimals - 1}f}" for v in locs}) == len(set(locs)):
            self.decimals -= 1    # fewer digits still tell every tick apart

    def __call__(self, x, pos=None) -> str:
        return f"{100 * x:.{self.decimals}f}%"


def quality_axis(ax, metric: str) -> None:
    """Label the quality axis; accuracy in percent, with the decimals its ticks need. Call after drawing."""
    ax.set_ylabel(QUALITY_LABELS.get(metric, metric))
    if metric == "accuracy":
        ax.yaxis.set_major_formatter(TickPercent())


def per_series_seeds(frame: pd.DataFrame) -> list[int]:
    """Seeds behind each series of a curve figure (distinct seeds per series)."""
    return list(frame.groupby("series")["seed"].nunique()) if "series" in frame else []


def seed_counts(curves: pd.DataFrame) -> str:
    """The number of seeds each series of a figure rests on, e.g. '5' or '3-5'."""
    counts = curves.groupby("series")["seed"].nunique() if "series" in curves else pd.Series(dtype=int)
    return "-" if counts.empty else (f"{counts.min()}" if counts.min() == counts.max()
                                     else f"{counts.min()}-{counts.max()}")


def seeds_text(counts) -> str:
    """'n = 3 seeds', 'n = 2–5 seeds' (per series), 'n = 1 seed (no interval)'."""
    counts = sorted({int(c) for c in counts if c == c})
    if not counts:
        return "n = ? seeds"
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    if counts[-1] == 1:
        return "n = 1 seed (no interval)"
    return f"n = {span} seeds" + (" (n = 1: no interval)" if counts[0] == 1 else "")


def horizon_text(values, unit: str = "updates") -> str:
    """'80 updates', '16–80 updates' from the runs' counts ('' when none is known)."""
    found = sorted({int(v) for v in values if v == v})
    if not found:
        return ""
    return f"{found[0]} {unit}" if len(found) == 1 else f"{found[0]}–{found[-1]} {unit}"


def models_text(values) -> str:
    """The model(s) a figure's runs trained, in collect.model_label's words ('tiny (toy)')."""
    found = sorted({str(v) for v in values if isinstance(v, str) and v})
    return ", ".join(found) if found else "model not recorded"


def title(fig, scenario: str, backend: str, model: str, seeds: str, horizon: str = "") -> str:
    """The figure's title, so it stands alone: 'hilo_distill [tc] · tiny (toy) · 80 updates · n = 3 seeds'.
    Call before ``legend``: a legend above the axes takes it as its heading."""
    head, tail = [p for p in (f"{scenario} [{backend}]", model) if p], [p for p in (horizon, seeds) if p]
    text = " · ".join(head + tail)
    if len(text) > TITLE_LINE * fig.get_figwidth() / SINGLE:   # two lines rather than a title wider than the figure
        text = " · ".join(head) + "\n" + " · ".join(tail)
    fig.suptitle(text, fontsize=8)
    return text


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
