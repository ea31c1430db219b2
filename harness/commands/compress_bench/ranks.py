"""Where Spar puts its ranks on a real model (harness.commands.compress_bench ``--ranks-csv``, ``--plot``).

Spar's ranks per matrix and step (with error feedback, as hilo's learner ships them) go to
``--ranks-csv`` (default: next to ``--csv``, ``*_spar_ranks.csv``) and ``--plot`` draws where they
go (mean rank per layer and module, A and B; ``plot_real_ranks``) at the first ``--rank``, and at
the others to ``*_r<rank>.png``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from harness.commands.compress_bench.gradients import TARGETS


@dataclass
class RankRow:
    """Spar's rank of one matrix at one step (with error feedback, as hilo's learner ships it)."""
    model: str
    lora_rank: int
    budget: float
    step: int
    matrix: str                     # "L<layer> <module> <A|B>" (the parameter's name where it has no layer)
    layer: int                      # decoder layer index (-1: none in the name)
    module: str                     # q_proj ... down_proj
    part: str                       # A or B
    k: int                          # allocated rank (0: not sent)


_MATRIX = re.compile(r"layers\.(\d+)\..*?(\w+_proj)\.lora_([AB])\b")


def rank_rows(model: str, lora_rank: int, budget: float, ranks: list[dict[str, int]]) -> list[RankRow]:
    """``evaluate``'s per-step ``{matrix: rank}`` as tidy rows (layer, module, A/B from the name)."""
    out = []
    for step, alloc in enumerate(ranks):
        for name, k in alloc.items():
            m = _MATRIX.search(name)
            layer, module, part = (int(m.group(1)), m.group(2), m.group(3)) if m else (-1, name, "")
            short = f"L{layer} {module} {part}" if m else name
            out.append(RankRow(model, lora_rank, budget, step, short, layer, module, part, int(k)))
    return out


def plot_real_ranks(rows: list[RankRow], path: str, lora_rank: int | None = None) -> str:
    """Where Spar puts its ranks: one panel per budget, a heatmap of layers (rows) x module and
    A/B (columns), colour = allocated rank averaged over steps (grey: never sent; the title: the
    share of (step, matrix) pairs of A and of B with rank > 0), at one LoRA
    rank (``lora_rank``; None: the first in ``rows``). The report's style (harness.report.style);
    writes the PNG at ``path`` and returns its caption."""
    import matplotlib
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    from harness.report.style import DOUBLE, figure, styled

    lora_rank = rows[0].lora_rank if lora_rank is None else lora_rank
    rows = [r for r in rows if r.lora_rank == lora_rank and r.layer >= 0]
    if not rows:
        raise ValueError(f"plot_real_ranks: no Spar ranks at LoRA rank {lora_rank}")
    budgets = sorted({r.budget for r in rows})
    modules = [t for t in TARGETS if any(r.module == t for r in rows)]
    columns = [(m, part) for m in modules for part in ("A", "B")]
    layers = max(r.layer for r in rows) + 1
    steps = max(r.step for r in rows) + 1
    ramp = matplotlib.colormaps["YlGnBu"]
    cmap = LinearSegmentedColormap.from_list("ranks", [ramp(0.2 + 0.8 * i / 63) for i in range(64)]).with_extremes(
        bad="#e6e6e6")
    grids, shares = [], []
    for budget in budgets:
        grid = np.zeros((layers, len(columns)))
        for r in rows:
            if r.budget == budget:
                grid[r.layer, columns.index((r.module, r.part))] += r.k / steps
        sent = {part: sum(r.k > 0 for r in rows if r.budget == budget and r.part == part) /
                max(1, sum(1 for r in rows if r.budget == budget and r.part == part)) for part in ("A", "B")}
        grids.append(np.ma.masked_equal(grid, 0.0))
        shares.append(sent)
    vmax = max(float(g.max()) for g in grids if g.count()) if any(g.count() for g in grids) else 1.0
    with styled():
        fig, axes = figure(len(budgets), height=min(8.0, 0.12 * layers + 1.4))
        fig.set_size_inches(DOUBLE, min(8.0, 0.12 * layers + 1.4))
        for ax, budget, grid, sent in zip(axes, budgets, grids, shares):
            image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=vmax)
            ax.set_xticks(range(len(columns)))
            ax.set_xticklabels([f"{m.replace('_proj', '')} {p}" for m, p in columns], rotation=90, fontsize=5.5)
            for i in range(2, len(columns), 2):
                ax.axvline(i - 0.5, color="white", lw=1.0)
            ax.set_yticks(range(0, layers, max(1, layers // 15)))
            ax.grid(False)
            ax.set_title(f"{budget:.1%} budget: sent A {sent['A']:.0%}, B {sent['B']:.0%}", fontsize=7)
        axes[0].set_ylabel("Decoder layer")
        bar = fig.colorbar(image, ax=axes, pad=0.01)
        bar.set_label(f"Allocated rank k, mean over {steps} steps (grey: never sent)")
        from pathlib import Path

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        matplotlib.pyplot.close(fig)
    return (f"Spar's rank per LoRA matrix (layer x module, A and B), mean over {steps} consecutive SFT gradients "
            f"with error feedback, LoRA r={lora_rank}, at budgets {', '.join(f'{b:.1%}' for b in budgets)}.")
