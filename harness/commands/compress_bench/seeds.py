"""A real model's compressor table over seeds: each row's mean and 95% t-interval.

Each seed is its own gradient stream (its LoRA draw and SFT batches, harness.commands.compress_bench.real),
so the interval is over streams, the project's unit of replication. Per (model, LoRA rank,
compressor as it ran, budget): err_1 and err_ef (harness.commands.compress_bench.table) as mean, sd, n and
the interval; and, for each compressor other than Spar, the per-seed difference of its err_ef
from Spar's at the same rank and budget (``vs_spar_err_ef``: > 0 means Spar drifts less), since a
comparison is judged on paired seeds.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.commands.compress_bench.table import Row, _failed


@dataclass
class SeedSummary:
    model: str
    lora_rank: int
    compressor: str
    budget: float
    n: int
    bytes: float                    # mean payload bytes (header included)
    err_1: float
    err_1_low: float
    err_1_high: float
    err_ef: float
    err_ef_low: float
    err_ef_high: float
    vs_spar_err_ef: float           # mean over seeds of (this err_ef - Spar's err_ef); NaN for Spar itself
    vs_spar_low: float
    vs_spar_high: float


def summary_path(csv: str) -> str:
    stem = csv[:-4] if csv.endswith(".csv") else csv
    return f"{stem}_summary.csv"


def summarize_seeds(rows: list[Row]) -> list[SeedSummary]:
    """One SeedSummary per (model, rank, compressor, budget) over the seeds of ``rows`` (failed rows:
    a budget the compressor cannot hold, skipped)."""
    from harness.report.stats import summarize

    ok = [r for r in rows if not _failed(r)]
    spar = {(r.model, r.lora_rank, r.budget, r.seed): r.err_ef for r in ok if r.compressor == "spar"}
    keys = list(dict.fromkeys((r.model, r.lora_rank, r.compressor, r.budget) for r in ok))
    out = []
    for model, rank, comp, budget in keys:
        mine = [r for r in ok if (r.model, r.lora_rank, r.compressor, r.budget) == (model, rank, comp, budget)]
        e1, ef = summarize(r.err_1 for r in mine), summarize(r.err_ef for r in mine)
        diffs = [r.err_ef - spar[(model, rank, budget, r.seed)] for r in mine
                 if comp != "spar" and (model, rank, budget, r.seed) in spar]
        d = summarize(diffs)
        out.append(SeedSummary(model, rank, comp, budget, len(mine), sum(r.bytes for r in mine) / len(mine),
                               e1.mean, e1.ci_low, e1.ci_high, ef.mean, ef.ci_low, ef.ci_high,
                               d.mean, d.ci_low, d.ci_high))
    return out


def summary_markdown(rows: list[SeedSummary]) -> str:
    """The summary as a markdown table: mean [95% interval] over the seeds."""
    def cell(mean: float, low: float, high: float) -> str:
        if mean != mean:
            return "–"
        return f"{mean:.3f}" if low != low else f"{mean:.3f} [{low:.3f}, {high:.3f}]"

    lines = ["| model | r | compressor | budget | n | err_1 | err_ef | err_ef minus Spar's |",
             "|---|---:|---|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.lora_rank} | {r.compressor} | {r.budget:.1%} | {r.n} | "
                     f"{cell(r.err_1, r.err_1_low, r.err_1_high)} | {cell(r.err_ef, r.err_ef_low, r.err_ef_high)} | "
                     f"{cell(r.vs_spar_err_ef, r.vs_spar_low, r.vs_spar_high)} |")
    return "\n".join(lines)
