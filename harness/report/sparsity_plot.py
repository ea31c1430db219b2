"""Plot of bf16 weight-update sparsity (rows of ``python -m harness.commands.sparsity``).

    plot_sparsity(df, path_without_suffix) -> [png, pdf]

Left: the unchanged fraction (k = 1) against the learning rate, LoRA A, B and the whole
adapter, each point the mean over seeds of a run's mean over the second half of its updates,
with its 95% t-interval over seeds. Right: the unchanged fraction against the update index at
the reference learning rate (5e-4, or the sweep's closest), A and B, for each staleness k,
mean over seeds with the seeds' range shaded. Reads only the rows it is given; drawn in the
report's style (harness/report/style.py: sizes, fonts, PART_COLOURS for A, B and the whole adapter).
"""
from __future__ import annotations

from pathlib import Path

REFERENCE_LR = 5e-4


def summary(df):
    """Per (lr, k, matrix, block): mean over seeds of each seed's mean unchanged fraction over
    the second half of its updates; sd, n (seeds), 95% t-interval half-width."""
    import math
    import statistics

    import pandas as pd

    from harness.report.stats import t_quantile

    late = df[df["update"] > df["update"].max() / 2]
    per_seed = late.groupby(["lr", "k", "matrix", "block", "seed"]).unchanged_frac.mean().reset_index()
    out = []
    for key, part in per_seed.groupby(["lr", "k", "matrix", "block"]):
        vals = list(part.unchanged_frac)
        sd = statistics.stdev(vals) if len(vals) > 1 else float("nan")
        out.append(dict(zip(("lr", "k", "matrix", "block"), key), mean=statistics.fmean(vals), sd=sd,
                        n=len(vals), ci95=t_quantile(len(vals)) * sd / math.sqrt(len(vals)) if len(vals) > 1 else float("nan")))
    return pd.DataFrame(out).sort_values(["lr", "k", "matrix", "block"], ascending=[False, True, True, True])


def plot_sparsity(df, path: Path) -> list[Path]:
    """Draw the two panels into ``path``.png and .pdf (the report's style: harness/report/style.py);
    returns the written paths."""
    from harness.report.style import LINESTYLES, PART_COLOURS, figure, save, styled

    table = summary(df)
    names = {"all": "whole adapter", "A": "LoRA A", "B": "LoRA B"}
    with styled():
        fig, (left, right) = figure(2, height=2.6, sharey=True)
        for matrix in ("all", "A", "B"):
            part = table[(table.k == 1) & (table.block == "all") & (table.matrix == matrix)].sort_values("lr")
            left.errorbar(part.lr, part["mean"], yerr=part.ci95.fillna(0), marker="o", capsize=1.5, elinewidth=0.6,
                          color=PART_COLOURS[matrix], label=names[matrix])
        left.set_xscale("log")
        left.set_xlabel("Learning rate (AdamW)")
        left.set_ylabel("bf16 entries unchanged per update")
        left.set_ylim(-0.02, 1.02)
        left.set_title(f"One update apart, updates > {int(df['update'].max()) // 2}, "
                       f"{df.seed.nunique()} seeds, 95% interval")
        left.legend(loc="best")
        lrs = sorted(df.lr.unique())
        ref = min(lrs, key=lambda lr: abs(lr - REFERENCE_LR))
        at = df[(df.lr == ref) & (df.block == "all") & (df.matrix.isin(["A", "B"]))]
        ks = sorted(at["k"].unique())
        for (matrix, k), part in at.groupby(["matrix", "k"]):
            stats = part.groupby("update").unchanged_frac.agg(["mean", "min", "max"])
            right.plot(stats.index, stats["mean"], LINESTYLES[ks.index(k) % len(LINESTYLES)],
                       color=PART_COLOURS[matrix], label=f"{names[matrix]}, {k} update{'s' if k > 1 else ''} apart")
            right.fill_between(stats.index, stats["min"], stats["max"], color=PART_COLOURS[matrix], alpha=0.12, lw=0)
        right.set_xlabel("Update")
        right.set_title(f"Unchanged over k updates, learning rate {ref:g} (band: seed range)")
        right.legend(ncol=2, loc="best")
        task = df.task.iloc[0] if "task" in df else ""
        fig.suptitle(f"bf16 sparsity of LoRA updates (task {task}, rank {df['rank'].iloc[0] if 'rank' in df else '?'})")
        path = Path(path)
        return save(fig, path.parent, path.name)


def sparsity_section(results_dir: Path) -> list[str]:
    """summary.md's section on bf16 update sparsity, from ``tables/sparsity.csv`` when present."""
    import pandas as pd

    csv = Path(results_dir) / "tables" / "sparsity.csv"
    if not csv.is_file():
        return []
    df = pd.read_csv(csv)
    table = summary(df)

    def cell(lr: float, k: int, matrix: str) -> str:
        r = table[(table.lr == lr) & (table.k == k) & (table.matrix == matrix) & (table.block == "all")]
        if r.empty:
            return "–"
        r = r.iloc[0]
        half = "" if pd.isna(r.ci95) else f" ± {r.ci95:.3f}"
        return f"{r['mean']:.3f}{half}"

    n = df.seed.nunique()
    out = ["## bf16 update sparsity of the adapter (PULSE's premise; `python -m harness.commands.sparsity`)", "",
           f"Fraction of bf16 adapter entries unchanged from one update to the next (k=1) and over k updates, "
           f"mean over {n} seeds of each run's mean over the second half of its {int(df['update'].max())} updates, "
           "± 95% t-interval half-width. A lossless patch (`method=patch`) ships the changed ones.", "",
           "| lr (AdamW) | LoRA A | LoRA B | whole adapter, k=1 | k=2 | k=4 | k=8 |", "|---|---|---|---|---|---|---|"]
    for lr in sorted(df.lr.unique(), reverse=True):
        out.append(f"| {lr:g} | {cell(lr, 1, 'A')} | {cell(lr, 1, 'B')} | {cell(lr, 1, 'all')} | "
                   f"{cell(lr, 2, 'all')} | {cell(lr, 4, 'all')} | {cell(lr, 8, 'all')} |")
    out += ["", "Figure: `plots/sparsity.png` (the appendix).", ""]
    return out
