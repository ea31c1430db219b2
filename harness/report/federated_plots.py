"""The federated figures (SPRA-LoRA and its baselines; PNG + PDF under ``results/plots/``).

Accuracy against communication rounds and against cumulative uplink bytes, each method's own
variant (the one named after it), and the ablations' figure: every variant of a method that has
ablations, each labelled in words by what it changes from the method's own variant
(``federated_labels``). Conventions as plots.py: mean over seeds with a band of the 95%
t-interval, backends never share an axis, absent data is a note in the ``PlotLog``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.report.figkit import (BOUNDS, PlotLog, draw_series, finish, horizon_text, legend, legend_room, log_axis,
                                   models_text, per_series_seeds, quality_axis, seed_counts, seeds_text, styles_of,
                                   title, with_series)
from harness.report.plots import CARRIES
from harness.report.style import figure, label, slug, styled, trace_text

__all__ = ["plot_federated_rounds", "plot_federated_uplink", "plot_federated_ablations", "federated_labels"]


FED_ATTRS = ["optimizer", "lr_rule", "a_variance", "resample_every", "aggregation", "rounds", "ranks",
             "trace"]   # what an ablation changes (those tables.spra holds)
LR_RULES = {"linear": "rank-aware lr", "const": "constant lr", "sqrt": "square-root lr"}
A_VARIANCE = {"rank": "A's variance 1/r", "ref": "A's variance 1/r_ref"}


def _attr_words(name: str, value) -> str:
    if name == "optimizer":
        return {"adamw": "AdamW", "sgd": "SGD"}.get(str(value), str(value))
    if name == "lr_rule":
        return LR_RULES.get(str(value), f"{value} lr")
    if name == "a_variance":
        return A_VARIANCE.get(str(value), f"A's variance {value}")
    if name == "resample_every":
        every = int(float(value))
        return "A never resampled" if every == 0 else "A resampled every round" if every == 1 else \
            f"A resampled every {every} rounds"
    if name == "ranks":
        ranks = [r for r in str(value).replace(" ", "").split(",") if r]
        return f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {value}"
    if name == "trace":
        return f"on the {trace_text(str(value))}"
    if name == "aggregation":
        return {"product": "product aggregation", "column": "per-column aggregation"}.get(str(value),
                                                                                           f"{value} aggregation")
    if name == "rounds":
        return f"{int(float(value))} rounds"
    return f"{name} {value}"


def federated_labels(group: pd.DataFrame, configs: pd.DataFrame | None) -> dict[str, str]:
    """Legend text per variant in words: the method ('SPRA'), and for an ablation what it changes
    from the method's own variant (the one named after the method): 'SPRA, constant lr'."""
    variants = group.drop_duplicates("variant").set_index("variant")
    attrs = pd.DataFrame(index=variants.index)
    if configs is not None and len(configs):
        found = configs.drop_duplicates("variant").set_index("variant")
        for a in FED_ATTRS:
            if a in found:
                attrs[a] = found[a].reindex(attrs.index)
    for a in ("ranks", "trace"):
        if a in variants and (a not in attrs or attrs[a].isna().all()):
            attrs[a] = variants[a]
    out = {}
    for v, row in variants.iterrows():
        base = label(row["method"])
        ref = attrs.loc[row["method"]] if row["method"] in attrs.index and v != row["method"] else None
        changed = [] if ref is None else [
            _attr_words(a, attrs.at[v, a]) for a in attrs.columns
            if str(attrs.at[v, a]) != str(ref[a]) and not (pd.isna(attrs.at[v, a]) and pd.isna(ref[a]))
            and not pd.isna(attrs.at[v, a])]
        out[v] = ", ".join([base, *changed]) if changed or ref is None else f"{base} [{v}]"
    return out


def canonical(group: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Each method's own variant (named after the method; a method without one keeps its variants
    on constant links); returns those rows and the other variants (the ablations)."""
    own = group["variant"] == group["method"]
    has_own = set(group.loc[own, "method"])
    trace = group["trace"] if "trace" in group else pd.Series([np.nan] * len(group), index=group.index)
    constant = trace.isna() | trace.astype(str).isin(["", "nan"])
    keep = own | (~group["method"].isin(has_own) & constant)
    return group[keep], sorted(set(group.loc[~keep, "variant"]))


def _federated_plot(curves: pd.DataFrame, out_dir: Path, log: PlotLog, *, x: str, xtext: str,
                    scale: float, logx: bool, kind: str, what: str, configs: pd.DataFrame | None = None,
                    ablations: bool = False) -> None:
    """One figure per scenario and backend: each method's own variant, or (``ablations``) every
    variant of the methods that have ablations, each labelled by what it changes."""
    if curves.empty or curves["accuracy"].notna().sum() == 0:
        log.skip(kind, "no federated run recorded accuracy")
        return
    for (scenario, backend), group in curves.groupby(["scenario", "backend"], sort=True):
        group = group.dropna(subset=["accuracy"]).rename(columns={"round": "step"})
        if logx and not (group[x] > 0).any():
            log.skip(f"{kind} {scenario}/{backend}", "no uplink bytes recorded")
            continue
        main, others = canonical(group)
        if ablations:
            methods = set(group.loc[group["variant"].isin(others), "method"])
            if not methods:
                log.skip(f"{kind} {scenario}/{backend}", "no method has an ablation (a variant not named after it)")
                continue
            group = group[group["method"].isin(methods)]
        else:
            group = main
        words = federated_labels(group, configs)
        group = with_series(group, ["variant", "method", "ranks"], lambda r: words[r.variant], lambda r: r.method)
        with styled():
            styles = styles_of(group)
            fig, (ax,) = figure(1, height=2.1 + legend_room(list(styles), 1))
            draw_series(ax, group, x, "accuracy", scale, styles, positive_x=logx, bounds=BOUNDS["accuracy"])
            if logx:
                log_axis(ax, "x")
            ax.set_xlabel(xtext)
            quality_axis(ax, "accuracy")
            title(fig, scenario, backend, models_text(group.get("model", [])), seeds_text(per_series_seeds(group)),
                  horizon_text([group["step"].max()], "rounds"))
            legend(fig, [ax])
            name = slug(kind, scenario, backend)
            ranks = ", ".join(sorted(set(group["ranks"].astype(str))))
            left = (f" Ablations ({', '.join(others)}): the fed_ablations figure and tables/spra.csv."
                    if others and not ablations else "")
            caption = (f"Federated held-out accuracy vs {what}; client ranks {ranks}; scenario {scenario}, "
                       f"backend {backend}; mean over seeds (band: 95% t-interval; seeds per series: "
                       f"{seed_counts(group)})." + left)
            finish(log, fig, out_dir, name, caption, "" if ablations else CARRIES.get(kind, ""))


def plot_federated_rounds(curves: pd.DataFrame, out_dir: Path, log: PlotLog,
                          configs: pd.DataFrame | None = None) -> None:
    """Federated accuracy vs communication round, each method's own variant."""
    _federated_plot(curves, out_dir, log, x="step", xtext="Round", scale=1.0, logx=False,
                    kind="fed_accuracy_vs_rounds", what="communication rounds", configs=configs)


def plot_federated_uplink(curves: pd.DataFrame, out_dir: Path, log: PlotLog,
                          configs: pd.DataFrame | None = None) -> None:
    """Federated accuracy vs cumulative uplink payload of all clients (MB, log x), each method's own variant."""
    _federated_plot(curves, out_dir, log, x="cum_uplink_bytes", xtext="Cumulative uplink payload, all clients (MB)",
                    scale=1e6, logx=True, kind="fed_accuracy_vs_uplink", what="cumulative uplink bytes",
                    configs=configs)


def plot_federated_ablations(curves: pd.DataFrame, out_dir: Path, log: PlotLog,
                             configs: pd.DataFrame | None = None) -> None:
    """Federated accuracy vs round of every variant of a method with ablations (SPRA's lr rules,
    A's variance, resampling, optimizer, ranks, traces), labelled by what each changes (``configs``:
    tables.spra, which holds those settings per variant)."""
    _federated_plot(curves, out_dir, log, x="step", xtext="Round", scale=1.0, logx=False, kind="fed_ablations",
                    what="communication rounds, every variant of the methods with ablations", configs=configs,
                    ablations=True)
