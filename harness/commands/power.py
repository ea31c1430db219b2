"""``python -m harness.commands.power``: how many seeds (and prompts) would decide each claim, from pilot runs.

    python -m harness.commands.power [--results DIR] [--claim TEXT] [--prompts 256,512,1024] [--csv PATH]

Reads the runs under ``DIR/runs`` (default ``outputs``; the committed reference: ``results/real``),
judges the claims as the report does (harness/report/claims.py), and for every claim line with at
least 2 seeds prints what a comparison of that design would need for 80% power (DESIGN.md,
"Measurement protocol": sized before it runs):

- ``seeds_80``: seeds for an 80% chance that the 95% t-interval over seeds excludes the claim's
  threshold, if the true per-seed mean were the pilot's estimate and its sd the pilot's sd, in the
  direction the estimate points (``toward``: met or not met). Paired: the per-seed statistic is
  already a ratio or difference of two runs of one seed.
- ``if_equal_80``: for a "within X%" (non-inferiority) claim, the seeds that would show it met if
  the method were truly equal to its baseline (ratio 1.0, a gap of X above the margin): the other
  direction, at the pilot's sd.
- with per-prompt records pairing the two sides (harness/record.py ``prompts/``): the pilot's
  per-seed sd split into a part from training (seeds) and a part from which prompts were scored,
  estimated within each seed from the per-prompt scores (delta method for a ratio:
  Var_p(a - r b) / (P mean(b)^2); for a difference Var_p(a - b) / P), and ``seeds_80`` again at
  other numbers of held-out prompts P' (``--prompts``), assuming the prompt part shrinks as P/P'
  and the training part stays: ``sd(P')^2 = sd_seed^2 + sd_prompt^2 P / P'``, where the prompt part
  is capped at the observed spread (``sd_seed^2 = sd^2 - min(sd_prompt^2, sd^2)``), so that at the
  pilot's own P the pilot's sd comes back. (With the same prompts for every seed, the part of the
  prompt noise shared by all seeds is in no seed-level spread: the two-level bootstrap of the report
  covers it.)

Nothing is written unless ``--csv`` is given. Exit 2 with one line for a folder without runs.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

PROMPTS = (256, 512, 1024, 2048)
COLUMNS = ["method", "claim", "where", "test", "estimate", "threshold", "n_seeds", "sd", "verdict", "toward",
           "seeds_80", "if_equal_80", "prompts", "sd_prompt", "sd_seed"]


@dataclass
class PowerLine:
    """One claim line's pilot and what it would need."""
    row: dict
    sd_prompt: float = math.nan          # the per-seed statistic's sd from the prompts scored, at the pilot's P
    prompts: int = 0                     # the pilot's held-out prompts per evaluation (0: no per-prompt records)
    at_prompts: dict[int, float] = field(default_factory=dict)   # P' -> seeds_80 at P' prompts

    @property
    def sd_prompt_part(self) -> float:
        """The prompt part of the observed per-seed sd (the within-seed estimate, capped at the sd)."""
        return min(self.sd_prompt, self.row["sd"])

    @property
    def sd_seed(self) -> float:
        sd = self.row["sd"]
        if not (math.isfinite(sd) and math.isfinite(self.sd_prompt)):
            return math.nan
        return math.sqrt(max(sd * sd - self.sd_prompt_part ** 2, 0.0))


def within_seed_sd(a: np.ndarray, b: np.ndarray, op: str) -> float:
    """The per-seed statistic's sd from prompt sampling alone (mean over seeds of the within-seed variance)."""
    p = a.shape[1]
    if op == "ratio":
        ma, mb = a.mean(1, keepdims=True), b.mean(1, keepdims=True)
        var = (a - (ma / mb) * b).var(1, ddof=1) / (p * mb[:, 0] ** 2)
    else:
        var = (a - b).var(1, ddof=1) / p
    return float(math.sqrt(np.mean(var)))


def plan(results: Path, claim: str | None, prompts: tuple[int, ...]) -> list[PowerLine]:
    """Every claim line of the runs under ``results`` (with ``claim`` in its text), with its power figures."""
    from harness.report.collect import collect
    from harness.report.claimkit import Line
    from harness.report.claims import SPECS, judge, prompt_scores
    from harness.report.inference import seeds_for_power
    from harness.report.tables import build_tables

    tables = build_tables(collect(results))
    out = []
    for spec in SPECS:
        if claim and claim.lower() not in spec.claim.lower():
            continue
        for found in spec.find(tables):
            line = found if isinstance(found, Line) else Line(*found)
            row = judge(spec, line, prompts=tables.prompts)
            if row["n_seeds"] < 2 or row["test"] == "cap":
                continue
            gap, sd = row["estimate"] - spec.threshold, row["sd"]
            censored = row.get("censored")
            if isinstance(censored, str) and censored:     # some seeds never reached the target: a bound, not
                row.update(seeds_80=math.nan, if_equal_80=math.nan,   # an estimate; more seeds do not decide it
                           toward=f"censored ({censored} seeds): a longer run decides it, not more seeds")
                out.append(PowerLine(row))
                continue
            row["seeds_80"] = seeds_for_power(gap, sd)
            row["toward"] = ("met" if (gap > 0) == (spec.direction == ">=") else "not met") if gap else ""
            row["if_equal_80"] = (seeds_for_power(abs(1.0 - spec.threshold), sd)
                                  if spec.test == "non-inferiority" else math.nan)
            p = PowerLine(row)
            scores = prompt_scores(tables.prompts, line.pairs)
            if scores is not None:
                p.prompts, p.sd_prompt = scores[0].shape[1], within_seed_sd(*scores, line.op)
                for n in prompts:
                    predicted = math.sqrt(p.sd_seed ** 2 + p.sd_prompt_part ** 2 * p.prompts / n)
                    p.at_prompts[n] = seeds_for_power(gap, predicted)
            out.append(p)
    return out


def frame(lines: list[PowerLine], prompts: tuple[int, ...]) -> pd.DataFrame:
    rows = []
    for p in lines:
        r = {k: p.row.get(k) for k in COLUMNS if k in p.row}
        r.update(prompts=p.prompts, sd_prompt=p.sd_prompt, sd_seed=p.sd_seed)
        r.update({f"seeds_80_at_{n}_prompts": p.at_prompts.get(n, math.nan) for n in prompts})
        rows.append(r)
    return pd.DataFrame(rows, columns=COLUMNS + [f"seeds_80_at_{n}_prompts" for n in prompts])


def _n(v: float) -> str:
    return "-" if v != v else "> 100000" if v == math.inf else f"{int(v)}"


def screen(table: pd.DataFrame, prompts: tuple[int, ...]) -> str:
    if table.empty:
        return "no claim line with >= 2 seeds: run the pilot at 2 or more seeds first"
    out = []
    for _, r in table.iterrows():
        out.append(f"{r['method']}: {r['claim']}\n  {r['where']}\n  pilot: {r['estimate']:.4g} (threshold "
                   f"{r['threshold']:g}, {r['test']}), sd {r['sd']:.3g} over {int(r['n_seeds'])} seeds -> {r['verdict']}")
        more = f"; if truly equal (ratio 1): {_n(r['if_equal_80'])} seeds to show it met" if r["if_equal_80"] == r[
            "if_equal_80"] else ""
        out.append(f"  80% power: {_n(r['seeds_80'])} seeds ({r['toward'] or 'no direction: on the threshold'}){more}")
        if r["prompts"]:
            by = ", ".join(f"{n} prompts -> {_n(r[f'seeds_80_at_{n}_prompts'])}" for n in prompts)
            out.append(f"  sd from the {int(r['prompts'])} prompts scored {r['sd_prompt']:.3g}, from training "
                       f"{r['sd_seed']:.3g}: {by}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.power", description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="outputs", help="folder holding runs/ (default: outputs)")
    parser.add_argument("--claim", default=None, help="only claims whose text contains this")
    parser.add_argument("--prompts", default=",".join(map(str, PROMPTS)), help="held-out prompt counts to size for")
    parser.add_argument("--csv", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    try:
        prompts = tuple(int(x) for x in args.prompts.split(",") if x.strip())
        if not prompts or min(prompts) < 2:
            raise ValueError
    except ValueError:
        print(f"error: --prompts: {args.prompts!r} is not allowed; give counts >= 2 separated by commas, e.g. 256,512",
              file=sys.stderr)
        return 2
    results = Path(args.results)
    if not (results / "runs").is_dir():
        print(f"error: --results: {str(results)!r} has no runs/ folder; point it at the pilot runs' folder "
              "(e.g. outputs, results/real)", file=sys.stderr)
        return 2
    table = frame(plan(results, args.claim, prompts), prompts)
    print(screen(table, prompts))
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False, float_format="%.6g")
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
