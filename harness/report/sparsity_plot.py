"""Plot of bf16 weight-update sparsity (rows of ``python -m harness.onpolicy.sparsity``).

    plot_sparsity(df, path_without_suffix) -> [png, pdf]

Left: the unchanged fraction (k = 1) against the learning rate, LoRA A, B and the whole
adapter, each point the mean over seeds of a run's mean over the second half of its updates,
with its 95% t-interval over seeds. Right: the unchanged fraction against the update index at
the reference learning rate (5e-4, or the sweep's closest), A and B, for each staleness k,
mean over seeds with the seeds' range shaded. Reads only the rows it is given.
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
    """Draw the two panels into ``path``.png and .pdf; returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = summary(df)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = {"all": "0.3", "A": "tab:blue", "B": "tab:orange"}
    for matrix in ("all", "A", "B"):
        part = table[(table.k == 1) & (table.block == "all") & (table.matrix == matrix)].sort_values("lr")
        left.errorbar(part.lr, part["mean"], yerr=part.ci95.fillna(0), marker="o", capsize=3,
                      color=colors[matrix], label=f"LoRA {matrix}" if matrix != "all" else "whole adapter")
    left.set_xscale("log")
    left.set_xlabel("learning rate (AdamW)")
    left.set_ylabel("bf16 entries unchanged per update")
    left.set_ylim(-0.02, 1.02)
    left.set_title(f"k=1, updates > {int(df['update'].max()) // 2}, n={df.seed.nunique()} seeds, 95% CI")
    left.legend(fontsize=8)
    lrs = sorted(df.lr.unique())
    ref = min(lrs, key=lambda lr: abs(lr - REFERENCE_LR))
    at = df[(df.lr == ref) & (df.block == "all") & (df.matrix.isin(["A", "B"]))]
    styles = {1: "-", 2: "--", 4: "-.", 8: ":"}
    for (matrix, k), part in at.groupby(["matrix", "k"]):
        stats = part.groupby("update").unchanged_frac.agg(["mean", "min", "max"])
        right.plot(stats.index, stats["mean"], styles.get(k, "-"), color=colors[matrix], label=f"{matrix}, k={k}")
        right.fill_between(stats.index, stats["min"], stats["max"], color=colors[matrix], alpha=0.12)
    right.set_xlabel("update")
    right.set_ylabel(f"unchanged over k updates (lr {ref:g})")
    right.set_ylim(-0.02, 1.02)
    right.legend(fontsize=7, ncol=2)
    task = df.task.iloc[0] if "task" in df else ""
    fig.suptitle(f"bf16 sparsity of LoRA updates ({task}, rank {df['rank'].iloc[0] if 'rank' in df else '?'})",
                 fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix in (".png", ".pdf"):
        fig.savefig(path.with_suffix(suffix), dpi=130)
        written.append(path.with_suffix(suffix))
    plt.close(fig)
    return written


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
    out = ["## bf16 update sparsity of the adapter (PULSE's premise; `python -m harness.onpolicy.sparsity`)", "",
           f"Fraction of bf16 adapter entries unchanged from one update to the next (k=1) and over k updates, "
           f"mean over {n} seeds of each run's mean over the second half of its {int(df['update'].max())} updates, "
           "± 95% t-interval half-width. A lossless patch (`method=patch`) ships the changed ones.", "",
           "| lr (AdamW) | LoRA A | LoRA B | whole adapter, k=1 | k=2 | k=4 | k=8 |", "|---|---|---|---|---|---|---|"]
    for lr in sorted(df.lr.unique(), reverse=True):
        out.append(f"| {lr:g} | {cell(lr, 1, 'A')} | {cell(lr, 1, 'B')} | {cell(lr, 1, 'all')} | "
                   f"{cell(lr, 2, 'all')} | {cell(lr, 4, 'all')} | {cell(lr, 8, 'all')} |")
    out += ["", "![sparsity](plots/sparsity.png)", ""]
    return out
