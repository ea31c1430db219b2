"""``make bench``: the reference reproductions, then the report.

Runs each step as its own process (a fresh Hydra app each), in order, with a progress bar
over steps and each run's own progress below it. A failed step is recorded (its partial
results stay on disk, marked failed) and the rest still run; the exit status says whether
all passed. Complete runs are skipped (resume), so an interrupted bench continues.

    python -m harness.bench [--quick] [--only NAME ...] [--list]
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


PY = sys.executable
STEPS = (
    Step("netem-check", (PY, "-m", "netem", "check"), "what this kernel can emulate"),
    Step("hilo_distill", (PY, "-m", "harness", "scenario=hilo_distill"),
         "HiLo+Spar vs full sync, low rank, delta, other compressors; on-policy distillation"),
    Step("hilo_reward", (PY, "-m", "harness", "scenario=hilo_reward"),
         "the same comparison on reward-guided (GRPO-style) post-training"),
    Step("spra_federated", (PY, "-m", "harness", "scenario=spra_federated"),
         "SPRA-LoRA vs FedIT, FFA-LoRA, FLoRA, HetLoRA/FlexLoRA with heterogeneous ranks and links"),
    Step("grid_hilo", (PY, "-m", "harness", "-m", "scenario=grid_hilo"),
         "rate x rank sweep (Hydra multirun), emulated and model backends"),
    Step("snr", (PY, "-m", "harness.federated.snr"), "SNR of the projected gradient vs rank"),
    Step("report", (PY, "-m", "harness.report"), "tables, summary.md and plots from results/runs"),
)
QUICK = ("netem-check", "hilo_distill", "spra_federated", "snr", "report")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these steps")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    args = parser.parse_args(argv)
    names = [s.name for s in STEPS]
    if args.only:
        bad = [n for n in args.only if n not in names]
        if bad:
            parser.error(f"--only: {bad[0]!r} is not a step; choose from {', '.join(names)}")
    steps = [s for s in STEPS if (not args.only or s.name in args.only) and (not args.quick or s.name in QUICK)]
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
    print("\nmake bench summary")
    for name, rc, seconds in results:
        print(f"  {'ok    ' if rc == 0 else 'FAILED'} {name:<16} {seconds:7.1f} s")
    print("report: results/summary.md, results/tables/*.csv, results/plots/")
    return 0 if all(rc == 0 for _, rc, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
