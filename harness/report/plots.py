"""Paper figures from results/ only (PNG + PDF under ``results/plots/``).

Each ``plot_*`` function takes tidy frames (harness.report.metrics / tables), draws one
figure per scenario and backend (backends never share an axis), and records what it made
or why it made nothing in a ``PlotLog``: absent data is a note, not an error. Curves over
several seeds are their mean with a band of the 95% t-interval over seeds; points of
configuration tables carry error bars of the same interval (harness/report/stats.py) when n > 1. Units: MB = 10^6 bytes, s, Mbit/s.

One message per figure: a series is a configuration (``CONFIG_KEYS``), the same one in every
panel, named in words and coloured by its method (harness/report/style.py); panels are links
("10 Mbit/s", "LTE-like trace, mean 4.8 Mbit/s"); the curve figures show each method at the
scenario's main budget (the frontier shows the budgets); a figure that carries a headline claim
says which (``CARRIES``), and the summary shows those first, the rest in its appendix.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.ticker import MaxNLocator

from harness.report.figkit import (BOUNDS, QUALITY_LABELS, PlotLog, dodge, draw_series, error_bars, finish, horizon_text,
                                   in_order, legend, legend_room, log_axis, models_text, per_series_seeds, quality_axis,
                                   seed_counts, seeds_text, styles_of, title, with_series, xlabel)
from harness.report.figkit import Figure  # noqa: F401  (re-exported: plots.Figure)
from harness.report.metrics import synchronous
from harness.report.rowkit import constant_links
from harness.report.style import (METHOD_COLOURS, SERIES_COLOURS, budget_text, family, figure, label, link_order, link_text, slug,
                                  series_label, styled, trace_text)
from harness.report.twins import borrowed_note


MAX_PANELS = 4
CONFIG_KEYS = ["method", "compressor", "rank", "ref_rank", "budget_frac", "staleness", "sync_dtype"]  # a series
MODULE_ORDER = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CARRIES = {   # the claim each main figure carries (summary.md shows these first; the rest go to the appendix)
    "quality_vs_time": "HiLo: quality within 2% of full sync, and the wall-clock each link costs to reach it",
    "speedup_vs_rate": "HiLo: update speedup >= 2.2x vs full sync, at every link rate",
    "frontier": "HiLo: bytes per update <= 1.6% of full sync with quality within 2% (vs low-rank at equal bytes)",
    "fed_accuracy_vs_uplink": "SPRA-LoRA: uplink <= 50% of FedIT with higher final accuracy than every baseline",
}

__all__ = ["Figure", "PlotLog", "plot_frontier", "plot_quality_vs_bytes", "plot_quality_vs_time", "plot_speedup_vs_rate",
           "plot_bytes_vs_rank", "plot_spar_ranks", "plot_snr"]   # the federated figures: federated_plots.py


def _value(row, name: str, default=None):
    return getattr(row, name, default)


def _config_text(multi_ref: bool, show_budget: bool = True):
    """Legend text in words (style.series_label); the rank is named when it differs from the
    scenario's, or for every series when the training ranks vary."""
    def text(row) -> str:
        rank_ref = None if multi_ref else _value(row, "ref_rank")
        name = series_label(row.method, row.compressor, rank=_value(row, "rank"), ref_rank=rank_ref,
                            budget=_value(row, "budget_frac"), staleness=_value(row, "staleness"),
                            show_budget=show_budget, dtype=_value(row, "sync_dtype"))
        return name + (f", r={int(row.rank)}" if multi_ref else "")
    return text


def _onpolicy_family(row) -> str:
    return family(row.method, row.compressor)


def with_links(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``link`` (the panel title: '10 Mbit/s', 'LTE-like trace, mean 4.8 Mbit/s') and ``link_order``."""
    trace = frame["trace"] if "trace" in frame else pd.Series([None] * len(frame), index=frame.index)
    return frame.assign(link=[link_text(r, t) for r, t in zip(frame["rate_mbit"], trace)],
                        link_order=[link_order(r, t) for r, t in zip(frame["rate_mbit"], trace)])


def main_budget(frame: pd.DataFrame) -> float:
    """The byte budget most compressed configurations share (the scenario's; NaN when none is set)."""
    if "budget_frac" not in frame:
        return float("nan")
    per_variant = frame.drop_duplicates(["variant"])["budget_frac"].dropna()
    if per_variant.empty:
        return float("nan")
    counts = per_variant.round(6).value_counts()
    return float(counts[counts == counts.max()].index.min() if len(counts) else np.nan)


def headline(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[float]]:
    """The configurations a curve figure draws: every method at the main budget (and unbudgeted
    ones); returns them and the other budgets left to the frontier figure."""
    main = main_budget(frame)
    if "budget_frac" not in frame or np.isnan(main):
        return frame.copy(), []
    budget = frame["budget_frac"].round(6)
    keep = budget.isna() | (budget == round(main, 6))
    return frame[keep].copy(), sorted(set(frame.loc[~keep, "budget_frac"].dropna().round(6)))


def config_keys(frame: pd.DataFrame, within: list[str]) -> list[str]:
    """A series' keys: the configuration (CONFIG_KEYS), plus the variant name wherever two variants
    of one configuration share a panel (they differ in something the keys do not hold)."""
    keys = [k for k in CONFIG_KEYS if k in frame]
    by = list(dict.fromkeys(keys + within))
    probe = frame[by + ["variant"]].astype(str)
    return keys + (["variant"] if (probe.groupby(by)["variant"].nunique() > 1).any() else [])


def _panels(group: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(group.sort_values("link_order")["link"]))[:MAX_PANELS]


def _updates(frame: pd.DataFrame) -> str:
    """The figure's horizon in updates: the runs' configured count (``steps``, else ``updates``)."""
    for column in ("steps", "updates"):
        if column in frame and frame[column].notna().any():
            return horizon_text(frame[column])
    return ""


def _onpolicy_curve_plot(curves: pd.DataFrame, out_dir: Path, log: PlotLog, *, x: str, xtext: str,
                         scale: float, logx: bool, kind: str, what: str) -> None:
    if curves.empty or curves["quality"].notna().sum() == 0:
        log.skip(kind, "no on-policy run recorded a quality metric")
        return
    for (scenario, backend, task), group in curves.groupby(["scenario", "backend", "task"], sort=True):
        group, other_budgets = headline(with_links(group.dropna(subset=["quality"])))
        group = with_series(group, config_keys(group, ["link"]), _config_text(group["ref_rank"].nunique() > 1),
                            _onpolicy_family, within=["link"])
        links = _panels(group)
        styles, metric = styles_of(group), group["quality_metric"].iloc[0]
        with styled():
            fig, axes = figure(len(links), height=2.0 + legend_room(list(styles), len(links)))
            for ax, link in zip(axes, links):
                draw_series(ax, group[group["link"] == link], x, "quality", scale, styles, positive_x=logx,
                            bounds=BOUNDS.get(metric))
                if logx:
                    log_axis(ax, "x")
                ax.set_title(link)
            xlabel(fig, axes, xtext)
            quality_axis(axes[0], metric)
            title(fig, scenario, backend, models_text(group.get("model", [])), seeds_text(per_series_seeds(group)),
                  _updates(group))
            legend(fig, axes, order=list(styles))
            name = slug(kind, scenario, backend, task)
            others = (f" Other budgets ({', '.join(budget_text(b) for b in other_budgets)}): the frontier figure."
                      if other_budgets else "")
            caption = (f"{QUALITY_LABELS.get(metric, metric)} vs {what}, task {task}; scenario {scenario}, "
                       f"backend {backend}; one panel per link; mean over seeds at each evaluation "
                       f"(band: 95% t-interval; seeds per series: {seed_counts(group)})." + others
                       + borrowed_note(group))
            finish(log, fig, out_dir, name, caption, CARRIES.get(kind, ""))


def plot_quality_vs_bytes(curves: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    """Quality vs cumulative downlink payload per worker (MB, log x): what each byte buys."""
    _onpolicy_curve_plot(curves, out_dir, log, x="cum_bytes", xtext="Cumulative downlink payload per worker (MB)",
                         scale=1e6, logx=True, kind="quality_vs_bytes", what="cumulative bytes shipped per worker")


def plot_quality_vs_time(curves: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    """Quality vs cumulative update time (s): what the link costs in wall-clock."""
    _onpolicy_curve_plot(curves, out_dir, log, x="cum_time_s", xtext="Wall-clock training time (s)",
                         scale=1.0, logx=False, kind="quality_vs_time", what="cumulative update time")


def plot_speedup_vs_rate(hilo: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    """Update speedup over full sync vs link rate (log x); one panel per training rank.

    One line per configuration across its constant-link rates (the variants that name a rate,
    hilo_spar_10mbit and hilo_spar_100mbit, are one line); a configuration on a link trace is
    its own series, hollow, at the trace's mean rate; other budgets than the main one: the frontier.
    """
    data = hilo[(hilo["method"] != "full_sync") & hilo["speedup"].notna()] if len(hilo) else hilo
    if data.empty:
        log.skip("speedup_vs_rate", "no configuration has a full-sync baseline at its rate")
        return
    for (scenario, backend, task), group in data.groupby(["scenario", "backend", "task"], sort=True):
        if group["rate_mbit"].nunique() < 2:
            log.skip(f"speedup_vs_rate {scenario}/{backend}/{task}", "fewer than two link rates")
            continue
        group, other_budgets = headline(group)
        trace = group["trace"] if "trace" in group else pd.Series([None] * len(group), index=group.index)
        group = group.assign(on_trace=[trace_text(t) if isinstance(t, str) and t not in ("", "nan") else ""
                                       for t in trace])
        words = _config_text(False)
        text = lambda r: words(r) + (f", {r.on_trace}" if r.on_trace else "")  # noqa: E731
        group = with_series(group, config_keys(group, ["ref_rank", "rate_mbit", "on_trace"]) + ["on_trace"], text,
                            _onpolicy_family, within=["ref_rank", "rate_mbit"])
        refs = sorted(group["ref_rank"].unique())[:MAX_PANELS]
        styles = styles_of(group)
        with styled():
            fig, axes = figure(len(refs), height=2.3 + legend_room([*styles, "full sync (1×)"], len(refs), 3))
            for ax, ref in zip(axes, refs):
                for name, series in in_order(group[group["ref_rank"] == ref]):
                    series = series.sort_values("rate_mbit")
                    st = dict(styles[name])
                    if series["on_trace"].iloc[0]:
                        st.update(markerfacecolor="white", linestyle="none")
                    ax.errorbar(series["rate_mbit"], series["speedup"], yerr=error_bars(series, "speedup"),
                                label=name, capsize=1.5, elinewidth=0.6, **st)
                ax.axhline(1.0, color=METHOD_COLOURS["full_sync"], lw=0.8, ls="--", label="full sync (1×)")
                log_axis(ax, "x")
                if len(refs) > 1:
                    ax.set_title(f"training rank r = {int(ref)}")
            xlabel(fig, axes, "Link rate (Mbit/s)")
            axes[0].set_ylabel("Update speedup vs full sync (×)")
            title(fig, scenario, backend, models_text(group.get("model", [])), seeds_text(group["seeds"]),
                  _updates(group))
            legend(fig, axes)
            name = slug("speedup_vs_rate", scenario, backend, task)
            others = (f" Other budgets ({', '.join(budget_text(b) for b in other_budgets)}): tables/hilo.csv."
                      if other_budgets else "")
            caption = (f"End-to-end update speedup over full sync at the same link, task {task}; "
                       f"scenario {scenario}, backend {backend}. Above 1: faster than full sync; hollow: on a link "
                       "trace, against full sync on the same trace, at the trace's mean rate. Per-seed "
                       "speedups (paired runs), mean with 95% t-interval error bars; seeds per point: "
                       f"{', '.join(sorted(set(str(int(n)) for n in group['seeds'])))}." + others)
            finish(log, fig, out_dir, name, caption, CARRIES["speedup_vs_rate"])


def plot_frontier(hilo: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    """Quality vs bytes per update (% of full sync, log x) over compression budgets, one line per compressor.

    One point per configuration at the scenario's slowest constant link (quality does not depend
    on the rate; runs on link traces and in the overlap mode are other experiments), at the
    scenario's training rank except low-rank training (its own ranks); error bars: the 95%
    t-interval of the final quality over seeds.
    """
    if len(hilo):
        hilo = hilo[constant_links(hilo) & synchronous(hilo)]
    data = hilo[hilo["bytes_frac"].notna() & hilo["quality"].notna()] if len(hilo) else hilo
    if data.empty or not (data["budget_frac"].notna()).any():
        log.skip("frontier", "no compressed configuration with a full-sync baseline")
        return
    for (scenario, backend, task), group in data.groupby(["scenario", "backend", "task"], sort=True):
        group = group[group["rate_mbit"] == group["rate_mbit"].min()] if group["rate_mbit"].notna().any() else group
        group, horizon = _main_horizon(group)
        for ref, g in group.groupby("ref_rank"):
            g = g[(g["rank"] == g["ref_rank"]) | (g["method"] == "lowrank")]
            g = with_series(g.assign(variant=g["variant"]), ["method", "compressor"],
                            lambda r: label(r.method, r.compressor), _onpolicy_family)
            styles, metric = styles_of(g), g["quality_metric"].iloc[0]
            with styled():
                fig, (ax,) = figure(1, height=2.1 + legend_room(list(styles), 1, extra_ok=0))
                for name, series in in_order(g):
                    series = series.sort_values("bytes_frac")
                    ax.errorbar(100 * series["bytes_frac"], series["quality"], yerr=error_bars(series, "quality"),
                                label=name, capsize=1.5, elinewidth=0.6, **styles[name])
                log_axis(ax, "x")
                ax.set_xlabel("Bytes per update (% of full sync)")
                quality_axis(ax, metric)
                title(fig, scenario, backend, models_text(g.get("model", [])), seeds_text(g["seeds"]), _updates(g))
                legend(fig, [ax], extra_ok=0)
                budgets = sorted(g["budget_frac"].dropna().unique())
                name = slug("frontier", scenario, backend, task, f"r{int(ref)}" if group["ref_rank"].nunique() > 1
                            else None)
                caption = (f"Quality-vs-bytes frontier: final {QUALITY_LABELS.get(metric, metric).lower()} vs bytes "
                           f"per update, budgets {', '.join(f'{b:.1%}' for b in budgets)} per compressor, low-rank "
                           f"training at its ranks, full sync at 100%; training rank {int(ref)}, "
                           f"{g['rate_mbit'].min():g} Mbit/s{horizon}; task {task}, scenario {scenario}, backend {backend}. "
                           "Error bars: 95% t-interval over seeds (seeds per point: "
                           f"{', '.join(sorted(set(str(int(n)) for n in g['seeds'])))}).")
                finish(log, fig, out_dir, name, caption, CARRIES["frontier"])


def _main_horizon(group: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The configurations of a frontier: the paper's Spar allocation only, at the horizon most of them
    ran (``steps``; a longer-horizon pair and the allocation ablation are other experiments), and
    the caption's words for that horizon."""
    if "allocation" in group:
        alloc = group["allocation"].astype(object).where(group["allocation"].notna(), "").astype(str)
        group = group[alloc.isin(["", "nan", "energy"])]
    if "steps" not in group or not group["steps"].notna().any():
        return group, ""
    main = group["steps"].mode().iloc[0]
    return group[group["steps"].isna() | (group["steps"] == main)], f", {int(main)} updates"


def _bytes_text(budgets: int):
    """Legend text in words; the byte budget is named only when several budgets are drawn."""
    def text(row) -> str:
        return series_label(row.method, row.compressor, budget=row.budget_frac, show_budget=budgets > 1)
    return text


def plot_bytes_vs_rank(hilo: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    """'Train high, ship low': bytes per update (% of full sync at the scenario's rank) vs training rank."""
    data = hilo[hilo["bytes_frac"].notna()] if len(hilo) else hilo
    if data.empty:
        log.skip("bytes_vs_rank", "no configuration has a full-sync baseline")
        return
    for (scenario, backend, task), group in data.groupby(["scenario", "backend", "task"], sort=True):
        if group["rank"].nunique() < 2:
            log.skip(f"bytes_vs_rank {scenario}/{backend}/{task}", "a single training rank")
            continue
        keys = ["method", "compressor", "budget_frac", "rank"]
        mean = group.groupby(keys, dropna=False)[["bytes_frac"]].mean().reset_index().assign(variant="")
        budgets = sorted(mean["budget_frac"].dropna().unique())
        mean = with_series(mean, keys[:3], _bytes_text(len(budgets)), _onpolicy_family)
        styles = styles_of(mean)
        with styled():
            fig, (ax,) = figure(1, height=2.1 + legend_room([*styles, "full sync at rank r"], 1, extra_ok=0))
            ranks = np.array(sorted(group["rank"].unique()), dtype=float)
            if group["ref_rank"].nunique() == 1:
                ref = float(group["ref_rank"].iloc[0])
                ax.plot(ranks, 100 * ranks / ref, color=METHOD_COLOURS["full_sync"], lw=0.8, ls=":", marker="",
                        label="full sync at rank r (∝ r)")
            mean["x"] = dodge(list(mean["rank"]), list(mean["bytes_frac"]))
            for name, series in in_order(mean):
                series = series.sort_values("rank")
                ax.plot(series["x"], 100 * series["bytes_frac"], label=name, **styles[name])
            log_axis(ax, "x", base=2)
            lo = 100 * mean["bytes_frac"].min()
            ax.set_ylim(10 ** np.floor(np.log10(min(lo, 100))), 200)
            log_axis(ax, "y")
            ax.set_xlabel("Training rank r")
            ax.set_ylabel("Bytes per update (% of full sync)")
            title(fig, scenario, backend, models_text(group.get("model", [])), seeds_text(group["seeds"]),
                  _updates(group))
            legend(fig, [ax], extra_ok=0)
            name = slug("bytes_vs_rank", scenario, backend, task)
            caption = ("Train high, ship low: bytes per update as a percentage of full sync at the "
                       "scenario's training rank, vs the rank trained (points at one rank are dodged "
                       "sideways); dotted: the reference full sync's bytes scaled to rank r; "
                       + (f"compression budget {', '.join(f'{b:.1%}' for b in budgets)}; " if budgets else "")
                       + f"task {task}, scenario {scenario}, backend {backend}; mean over link rates.")
            finish(log, fig, out_dir, name, caption)


_SHORT = re.compile(r"layers?\.(\d+)\.(?:.*\.)?([A-Za-z0-9_]+)\.lora_([AB])")


def _matrix_key(name: str) -> tuple:
    m = _SHORT.search(name)
    if not m:
        return (1 << 30, 0, name)
    module = MODULE_ORDER.index(m.group(2)) if m.group(2) in MODULE_ORDER else len(MODULE_ORDER)
    return (int(m.group(1)), module, m.group(2), m.group(3))


def short_matrix_name(name: str) -> str:
    """'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight' -> 'L0 q_proj A'."""
    m = _SHORT.search(name)
    return f"L{m.group(1)} {m.group(2)} {m.group(3)}" if m else name[-28:]


def _decode(cell) -> dict | None:
    if isinstance(cell, dict):
        return cell
    if isinstance(cell, str) and cell.strip().startswith("{"):
        return json.loads(cell)
    return None


def spar_allocations(rows: pd.DataFrame) -> pd.Series:
    """Spar's {matrix: rank k} per learner row: the ``spar_ranks`` column, else the ``ranks`` of
    ``compressor_info`` in Spar runs; None where a row has neither. Index: the learner rows."""
    hub = rows[rows["role"] == "learner"] if "role" in rows else rows.iloc[:0]
    found = pd.Series([None] * len(hub), index=hub.index, dtype=object)
    if "spar_ranks" in hub:
        found = hub["spar_ranks"].map(_decode)
    if "compressor_info" in hub:
        spar = hub["compressor"].astype(str) == "spar" if "compressor" in hub else True
        info = hub["compressor_info"].map(_decode).map(lambda d: d.get("ranks") if isinstance(d, dict) else None)
        found = found.where(found.notna(), info.where(spar))
    return found.where(found.map(lambda d: isinstance(d, dict) and len(d) > 0), None)


def spar_rank_matrix(rows: pd.DataFrame) -> pd.DataFrame:
    """One run's Spar allocation: matrices (rows: layer, module, A/B order) x steps (columns) -> rank k."""
    alloc = spar_allocations(rows).dropna()
    steps = rows.loc[alloc.index, "step"].astype(int)
    frame = pd.DataFrame(dict(zip(steps, alloc))).fillna(0).astype(int).sort_index(axis=1)
    return frame.loc[sorted(frame.index, key=_matrix_key)]


def plot_spar_ranks(rows: pd.DataFrame, out_dir: Path, log: PlotLog) -> None:
    """Heatmap of Spar's allocated rank per matrix over steps (grey: not sent); one run per scenario/backend:
    a HiLo run, the one with the most updates (not a short timing run), then the slowest link."""
    alloc = spar_allocations(rows) if len(rows) else pd.Series(dtype=object)
    if alloc.notna().sum() == 0:
        log.skip("spar_ranks", "no run recorded Spar's ranks (spar_ranks or compressor_info)")
        return
    with_ranks = rows.loc[alloc.dropna().index]
    for (scenario, backend), group in with_ranks.groupby(["scenario", "backend"], sort=True):
        updates = group.groupby("run_id")["step"].transform("nunique")
        first = group.assign(_hilo=group["method"] != "hilo", _short=-updates).sort_values(   # HiLo, longest run,
            ["_hilo", "_short", "rate_mbit", "seed", "run_id"]).iloc[0]                       # slowest link first
        ranks = spar_rank_matrix(rows[rows["run_id"] == first["run_id"]])
        kmax = max(1, int(ranks.to_numpy().max()))
        ramp = matplotlib.colormaps["YlGnBu"]   # light = low rank, dark = high rank; grey = not sent
        colours = ["#e6e6e6"] + [ramp(0.25 + 0.75 * i / max(1, kmax - 1)) for i in range(kmax)]
        cmap, norm = ListedColormap(colours), BoundaryNorm(np.arange(-0.5, kmax + 1), kmax + 1)
        with styled():
            fig, (ax,) = figure(1, height=min(6.0, max(2.3, 0.085 * len(ranks) + 0.8)))
            steps = ranks.columns
            image = ax.imshow(ranks.to_numpy(), aspect="auto", interpolation="nearest", cmap=cmap, norm=norm,
                              extent=(steps.min() - 0.5, steps.max() + 0.5, len(ranks) - 0.5, -0.5))
            layers = [_matrix_key(n)[0] for n in ranks.index]
            for i in range(1, len(layers)):
                if layers[i] != layers[i - 1]:
                    ax.axhline(i - 0.5, color="white", lw=1.0)
            every = max(1, len(ranks) // 40)
            ax.set_yticks(range(0, len(ranks), every))
            ax.set_yticklabels([short_matrix_name(n) for n in ranks.index[::every]], fontsize=5.5)
            ax.grid(False)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("Update step")
            bar = fig.colorbar(image, ax=ax, pad=0.02, ticks=MaxNLocator(integer=True, nbins=min(kmax + 1, 8)))
            bar.set_label("Allocated rank k (0: not sent)")
            title(fig, scenario, backend, models_text([first.get("model")]), f"one run (seed {int(first['seed'])})",
                  horizon_text([len(steps)]))
            name = slug("spar_ranks", scenario, backend, first["variant"])
            trace = first["trace"] if "trace" in first else None
            caption = (f"Spar's rank per gradient matrix over updates (grey: not sent), run {first['run_id']} "
                       f"({link_text(first['rate_mbit'], trace)}); scenario {scenario}, backend {backend}.")
            finish(log, fig, out_dir, name, caption)


def short_module_name(name: str) -> str:
    """'model.layers.0.self_attn.q_proj' -> 'L0 q_proj' (other names unchanged)."""
    m = re.search(r"layers?\.(\d+)\.(?:.*\.)?([A-Za-z0-9_]+)$", str(name))
    return f"L{m.group(1)} {m.group(2)}" if m else str(name).removeprefix("model.")


def plot_snr(snr: pd.DataFrame | None, out_dir: Path, log: PlotLog) -> None:
    """SNR of the projected gradient vs LoRA rank (log-log): one series per module when snr.csv
    has a ``module`` column, the theory ``snr_theory`` dotted and a ``fit`` dashed when present."""
    if snr is None or snr.empty:
        log.skip("snr_vs_rank", "results/tables/snr.csv absent (or without rank, snr columns)")
        return
    groups = list(snr.groupby("module", sort=False)) if "module" in snr else [("measured", snr)]
    colours = SERIES_COLOURS
    with styled():
        fig, (ax,) = figure(1, height=2.6)
        for i, (module, t) in enumerate(groups):
            t = t.sort_values("rank")
            colour = colours[i % len(colours)]
            text = short_module_name(module) + (f" (d_in={int(t['d_in'].iloc[0])})" if "d_in" in t else "")
            ax.plot(t["rank"], t["snr"], "o-", color=colour, ms=3, lw=0.9, label=text)
            if "snr_theory" in t and t["snr_theory"].notna().any():
                ax.plot(t["rank"], t["snr_theory"], ":", color=colour, lw=0.9)
            if "fit" in t and t["fit"].notna().any():
                ax.plot(t["rank"], t["fit"], "--", color=colour, lw=0.9)
        if "snr_theory" in snr:
            ax.plot([], [], ":", color="0.4", lw=0.9, label=r"theory $r/(d_{in}+1)$")
        if "fit" in snr:
            ax.plot([], [], "--", color="0.4", lw=0.9, label="fit")
        log_axis(ax, "x", base=2)
        log_axis(ax, "y")
        ax.set_xlabel("LoRA rank r")
        ax.set_ylabel(r"SNR of $G A^\top A$ vs $G$")
        legend(fig, [ax], extra_ok=2)
        caption = ("Signal-to-noise ratio of the randomly projected gradient against the true gradient vs "
                   "LoRA rank (log-log; linear growth in r is a slope of 1), from tables/snr.csv.")
        finish(log, fig, out_dir, "snr_vs_rank", caption)
