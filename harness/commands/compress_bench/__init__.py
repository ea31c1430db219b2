"""Compressors compared at equal bytes on real LoRA gradients: the README's compressor table.

    python -m harness.commands.compress_bench            # markdown table (a few minutes on one CPU thread)
    python -m harness.commands.compress_bench --json     # the same rows as JSON
    python -m harness.commands.compress_bench --model wide,small --csv results/tables/compress_wide.csv
    python -m harness.commands.compress_bench --allocations --model tiny,wide --seeds 0,1,2 \
        --csv results/tables/spar_allocation.csv      # Spar's allocation ablation (below)
    python -m harness.commands.compress_bench --model smollm2 --rank 16,8,64 --seeds 0,1,2 --steps 12 \
        --csv results/real/tables/compress_real.csv --plot results/real/plots/spar_ranks_real.png   # a real LM

The parts, one module each:
  harness.commands.compress_bench.gradients   the bench's own model and the model presets' gradient streams ("Gradients")
  harness.commands.compress_bench.real        a real chat model's gradient stream ("Real models")
  harness.commands.compress_bench.table       the variants, evaluate (the metrics), the markdown table, write_csv
  harness.commands.compress_bench.ranks       Spar's rank per matrix and step on a real model, plot_real_ranks
  harness.commands.compress_bench.allocation  Spar's allocation ablation (``--allocations``)
  harness.commands.compress_bench.seeds       a real model's table over seeds: mean and 95% interval per row (``*_summary.csv``)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict

import torch

from harness.compress import CompressorError, build
from harness.commands.compress_bench.allocation import allocation_markdown, evaluate_allocation
from harness.commands.compress_bench.gradients import lora_gradients, model_config
from harness.commands.compress_bench.ranks import plot_real_ranks, rank_rows
from harness.commands.compress_bench.real import chat_gradients, check_real, real_source
from harness.commands.compress_bench.seeds import summarize_seeds, summary_markdown, summary_path
from harness.commands.compress_bench.table import (BUDGETS, PRESET_VARIANTS, REAL_VARIANTS, VARIANTS, _diff, _failed, _norm,
                                          evaluate, markdown, time_spectra, write_csv)
from harness.progress import frames


def _real_table(args, m: str, labels: list[str] | None, budgets: list[float], lora_ranks: list[int],
                all_rows: list, reports: list, rank_table: list) -> None:
    """The compressor table of real model ``m`` at each LoRA rank and seed (module doc, "Real models"):
    each seed its own gradient stream (its own LoRA draw and SFT batches); Spar's ranks are recorded for
    the first seed (the plot). The CSVs are rewritten after each (rank, seed), so a bounded run keeps what
    it measured; with several seeds, ``*_summary.csv`` holds each row's mean and 95% t-interval over them."""
    from tqdm import tqdm

    labels = labels or list(REAL_VARIANTS)
    warmup = 3 if args.warmup is None else args.warmup
    seeds = [int(x) for x in args.seeds.split(",")]
    for r in lora_ranks:
        for seed in seeds:
            t0 = time.perf_counter()
            torch.set_num_threads(args.train_threads or args.threads)
            grads = chat_gradients(real_source(m), steps=args.steps, warmup=warmup, seed=seed, rank=r, lr=args.lr,
                                   overrides=tuple(args.overrides), progress=True)
            torch.set_num_threads(args.threads)
            train_s = time.perf_counter() - t0
            dense = 2 * sum(t.numel() for t in grads[0].values())
            rows = []
            for c, b in tqdm([(c, b) for b in budgets for c in labels], desc=f"compressors ({m}, r={r}, seed {seed})",
                             disable=not frames()):
                ranks: list[dict[str, int]] | None = [] if c == "spar" and seed == seeds[0] else None
                rows.append(evaluate(c, b, grads, ranks=ranks))
                if ranks is not None and not _failed(rows[-1]):
                    rank_table += rank_rows(m, r, b, ranks)
            for row in rows:
                row.model, row.lora_rank, row.seed = m, r, seed
            spectra_ms = time_spectra(grads[0])
            all_rows += rows
            reports.append({"model": m, "lora_rank": r, "seed": seed, "dense_bf16_bytes": dense, "steps": len(grads),
                            "matrices": len(grads[0]), "gradients_s": train_s, "spectra_ms": spectra_ms,
                            "rows": [asdict(x) for x in rows]})
            if not args.json:
                print(f"## {m}, LoRA r={r}, seed {seed}\n\n" + markdown(rows, dense, spectra_ms, len(grads[0])))
                print(f"\n{len(grads)} steps after {warmup} warm-up steps (gradients: {train_s:.0f} s at "
                      f"{args.train_threads or args.threads} threads); torch {torch.__version__}, "
                      f"{torch.get_num_threads()} threads for the compressors; load {os.getloadavg()[0]:.1f}\n",
                      flush=True)
            del grads
            if args.csv:
                write_csv(all_rows, args.csv)
                if len(seeds) > 1:
                    write_csv(summarize_seeds(all_rows), summary_path(args.csv))
            if args.ranks_csv and rank_table:
                write_csv(rank_table, args.ranks_csv)
        if args.plot and any(x.lora_rank == r for x in rank_table):
            stem = args.plot[:-4] if args.plot.endswith(".png") else args.plot
            path = args.plot if r == lora_ranks[0] else f"{stem}_r{r}.png"
            print(f"{path}: {plot_real_ranks(rank_table, path, r)}", file=sys.stderr, flush=True)
    if len(seeds) > 1 and not args.json:
        print(summary_markdown(summarize_seeds(all_rows)), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.compress_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="gradients (steps) per run (default 50)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="optimizer steps before the first recorded gradient (default 5; real models 3)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="fractions of the bf16 adapter bytes, comma-separated")
    parser.add_argument("--compressors", default=None,
                        help=f"subset of {', '.join(VARIANTS)} (default: {', '.join(PRESET_VARIANTS)}; "
                             f"real models: {', '.join(REAL_VARIANTS)})")
    parser.add_argument("--model", default="bench",
                        help="comma-separated: bench (default) and/or model presets (tiny, small, wide), "
                             "or a real chat model: smollm2, hf:DIR or hf:FILE.gguf")
    parser.add_argument("--rank", default="16", help="real models: comma-separated LoRA ranks (default 16)")
    parser.add_argument("--lr", type=float, default=3e-4, help="real models: AdamW's learning rate (default 3e-4)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared machine, more threads than free cores make "
                             "OpenMP timings swing 100x)")
    parser.add_argument("--train-threads", type=int, default=None,
                        help="real models: torch threads for the forward and backward passes (default --threads)")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of markdown")
    parser.add_argument("--allocations", action="store_true",
                        help="Spar's allocation ablation (energy, normalized, preconditioned) at --budgets' first budget")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (--allocations and real models; default 0)")
    parser.add_argument("--csv", help="also write the rows to this CSV (e.g. results/tables/compress_wide.csv)")
    parser.add_argument("--ranks-csv", help="real models: Spar's rank per matrix and step (default: --csv's "
                                            "name with _spar_ranks)")
    parser.add_argument("--plot", help="real models: draw where Spar puts its ranks to this PNG (first --rank)")
    parser.add_argument("overrides", nargs="*", help="real models: task.KEY=VALUE on conf/task/chat_sft.yaml")
    args = parser.parse_intermixed_args(argv)
    torch.set_num_threads(args.threads)
    from tqdm import tqdm

    labels = args.compressors.split(",") if args.compressors else None
    unknown = [c for c in labels or [] if c not in VARIANTS]
    if unknown:
        print(f"--compressors: {unknown[0]!r} is not allowed; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    budgets = [float(b) for b in args.budgets.split(",")]
    models = args.model.split(",")
    bad = [o for o in args.overrides if not o.startswith("task.") or "=" not in o]
    if bad:
        print(f"overrides: {bad[0]!r} is not allowed; write task.KEY=VALUE", file=sys.stderr)
        return 2
    try:
        lora_ranks = [int(r) for r in args.rank.split(",")]
    except ValueError:
        lora_ranks = [0]
    if any(r < 1 for r in lora_ranks):
        print(f"--rank: {args.rank!r} is not allowed; give comma-separated integers >= 1", file=sys.stderr)
        return 2
    if args.steps < 1:
        print(f"--steps: {args.steps} is not allowed; need >= 1", file=sys.stderr)
        return 2
    if args.warmup is not None and args.warmup < 0:
        print(f"--warmup: {args.warmup} is not allowed; need >= 0", file=sys.stderr)
        return 2
    try:
        for m in models:
            if real_source(m) is None:
                model_config(m)
            else:
                check_real(m)
    except CompressorError as err:
        print(str(err), file=sys.stderr)
        return 2
    if args.allocations:
        from harness.compress.spar import ALLOCATIONS

        if any(real_source(m) for m in models):
            print("--allocations: real models are not allowed here; choose bench or a model preset", file=sys.stderr)
            return 2
        rows = []
        for m in models:
            for seed in [int(x) for x in args.seeds.split(",")]:
                grads = lora_gradients(steps=args.steps, warmup=5 if args.warmup is None else args.warmup, seed=seed,
                                       progress=True, model=m)
                for allocation in ALLOCATIONS:
                    rows.append(evaluate_allocation(allocation, budgets[0], grads, seed=seed, model=m))
                    print(json.dumps(asdict(rows[-1])), file=sys.stderr, flush=True)
        print(f"Spar's allocation at {budgets[0]:.1%}, {args.steps} steps; mean [min, max] over seeds "
              f"{args.seeds}; torch {torch.__version__}, {torch.get_num_threads()} threads\n")
        print(allocation_markdown(rows))
        if args.csv:
            write_csv(rows, args.csv)
        return 0
    if args.csv and not args.ranks_csv and any(real_source(m) for m in models):
        stem = args.csv[:-4] if args.csv.endswith(".csv") else args.csv
        args.ranks_csv = f"{stem}_spar_ranks.csv"
    all_rows, reports, rank_table = [], [], []
    for m in models:
        if real_source(m) is not None:
            _real_table(args, m, labels, budgets, lora_ranks, all_rows, reports, rank_table)
            continue
        grads = lora_gradients(steps=args.steps, warmup=5 if args.warmup is None else args.warmup, progress=True,
                               model=m)
        dense = 2 * sum(t.numel() for t in grads[0].values())
        ident = build("identity")
        ident_err = statistics.fmean(_norm(_diff(g, ident.decode(ident.encode(g)))) / _norm(g) for g in grads)
        preset_labels = labels or list(PRESET_VARIANTS)
        rows = [evaluate(c, b, grads) for c, b in tqdm([(c, b) for b in budgets for c in preset_labels],
                                                       desc=f"compressors ({m})", disable=not frames())]
        lora_rank = model_config(m)[1] or 64
        for r in rows:
            r.model, r.lora_rank = m, lora_rank
        spectra_ms = time_spectra(grads[0])
        all_rows += rows
        reports.append({"model": m, "dense_bf16_bytes": dense, "steps": len(grads), "identity_bf16_err": ident_err,
                        "matrices": len(grads[0]), "spectra_ms": spectra_ms, "rows": [asdict(r) for r in rows]})
        if not args.json:
            print(f"## {m}\n\n" + markdown(rows, dense, spectra_ms, len(grads[0])))
            print(f"\nidentity bf16: {dense} B, err {ident_err:.5f}; {len(grads)} steps; "
                  f"torch {torch.__version__}, {torch.get_num_threads()} threads\n", flush=True)
    if args.csv:
        write_csv(all_rows, args.csv)
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=1))
    return 0
