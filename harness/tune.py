"""Learning-rate tuning of a federated scenario's variants on the validation split.

    python -m harness.tune scenario=spra_federated [only=[spra,fedit]] [seeds=[0,1]] \\
        [lrs=[0.001,0.003,0.01]] [extend=3] [key=value ...]

For every variant (or those in ``only``) and every seed, runs the variant at each learning
rate of the grid with the in-process backend (harness.federated.inproc: the real server,
client and aggregation code, threads instead of processes and links: training math only)
and records the final evaluation on the VALIDATION split (``task.eval_split=validation``:
training-side problems no client holds, disjoint from the held-out test problems that
report results). The selected lr is the lowest mean validation loss over the seeds
(loss, not accuracy: on a few hundred problems accuracy moves in coarse steps). When the
selected value is at an edge of the grid, the grid is extended one step past that edge
(ladder 1, 3, 10, 30, ... x 10^n) and the new point run, up to ``extend`` times.

Writes ``results/tuning/<scenario>.csv`` (every point, appended as it is measured, so an
interrupted sweep resumes: points already there are not rerun) and
``results/tuning/<scenario>.selected.csv`` (harness.tuning), which the scenario reads via
``${tuned_lr:...}``. Other ``key=value`` arguments are config overrides for every run.
Default grid: 3e-4 .. 1e-2 (SGD) and 1e-4 .. 3e-3 (AdamW, ``federated.optimizer=adamw``).
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.tuning import POINT_COLUMNS, points_path, select, selected_path

GRIDS = {"sgd": [3e-4, 1e-3, 3e-3, 1e-2], "adamw": [1e-4, 3e-4, 1e-3, 3e-3]}
TUNE_KEYS = ("scenario", "only", "seeds", "lrs", "extend")


def ladder(lr: float, up: bool) -> float:
    """The next value of the 1-3-10 ladder above (``up``) or below ``lr``."""
    exp = math.floor(math.log10(lr) + 1e-9)
    mant = round(lr / 10 ** exp)
    if up:
        return float(f"{3 * 10 ** exp:.0e}") if mant < 3 else float(f"{10 ** (exp + 1):.0e}")
    return float(f"{10 ** exp:.0e}") if mant >= 3 else float(f"{3 * 10 ** (exp - 1):.0e}")


def _list(value: str) -> list[str]:
    return [v.strip() for v in value.strip("[]").split(",") if v.strip()]


def parse(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Tune's own keys and the config overrides; a bad one is a ConfigError naming it."""
    opts: dict[str, Any] = {"scenario": None, "only": [], "seeds": [0, 1], "lrs": None, "extend": 3}
    overrides = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"{arg!r}: arguments are key=value (scenario=NAME, only=[..], seeds=[..], lrs=[..], "
                              "extend=N, or a config override)")
        if key not in TUNE_KEYS:
            overrides.append(arg)
            continue
        try:
            opts[key] = {"scenario": str, "only": _list, "extend": int,
                         "seeds": lambda v: [int(x) for x in _list(v)],
                         "lrs": lambda v: [float(x) for x in _list(v)]}[key](value)
        except ValueError:
            raise ConfigError(f"{key}: {value!r} is not allowed; seeds a list of integers, lrs a list of positive "
                              "numbers, extend an integer >= 0") from None
    if not opts["scenario"]:
        raise ConfigError("scenario: missing; e.g. python -m harness.tune scenario=spra_federated")
    if opts["lrs"] is not None and (not opts["lrs"] or min(opts["lrs"]) <= 0):
        raise ConfigError(f"lrs: {opts['lrs']!r} must be a non-empty list of numbers > 0")
    if len(opts["seeds"]) < 1 or opts["extend"] < 0:
        raise ConfigError(f"seeds: {opts['seeds']!r} needs at least one seed; extend: {opts['extend']} must be >= 0")
    return opts, overrides


class Sweep:
    """The points of one scenario, persisted after every run."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.path = points_path(scenario)
        self.points = pd.read_csv(self.path) if self.path.exists() else pd.DataFrame(columns=POINT_COLUMNS + ["run_s"])
        self._cache: dict[str, Any] = {}

    def has(self, variant: str, optimizer: str, lr: float, seed: int, rounds: int) -> bool:
        p = self.points
        hit = (p["variant"] == variant) & (p["optimizer"] == optimizer) & (p["seed"] == seed) & (p["rounds"] == rounds)
        return bool((hit & ((p["lr"] - lr).abs() <= 1e-12 * lr)).any())

    def run(self, overrides: list[str], variant: str, lr: float, seed: int) -> None:
        from harness.federated.inproc import run_in_threads
        from harness.record import read_rows
        from harness.run import compose_config
        from harness.tasks import build_federated, build_tokenizer, load_base

        composed = compose_config([*overrides, f"federated.lr={lr}", f"seed={seed}", "task.eval_split=validation"])
        composed.variants = {}                 # the other variants' ${tuned_lr:...} are not this run's business
        cfg = OmegaConf.to_container(composed, resolve=True)
        fed = cfg["federated"]
        optimizer, rounds = str(fed.get("optimizer", "sgd")), int(fed["rounds"])
        if self.has(variant, optimizer, lr, seed, rounds):
            return
        key = json.dumps([cfg["model"], cfg["task"], fed["clients"], seed], sort_keys=True, default=str)
        if key not in self._cache:
            tok = build_tokenizer(cfg["model"])
            self._cache = {key: (build_federated(cfg["task"], tok, int(fed["clients"]), seed),
                                 load_base("student", cfg["model"], cfg["task"], progress=False))}
        task, base = self._cache[key]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            run_in_threads(cfg, Path(tmp), task, base)
            rows = read_rows(tmp)
        server = rows[rows.role == "server"].dropna(subset=["eval_loss"]).sort_values("step")
        point = {"variant": variant, "optimizer": optimizer, "lr": lr, "seed": seed, "rounds": rounds,
                 "val_loss": float(server.eval_loss.iloc[-1]), "val_accuracy": float(server.accuracy.iloc[-1]),
                 "run_s": round(time.perf_counter() - start, 1)}
        print(json.dumps(point), flush=True)
        self.points = pd.concat([self.points, pd.DataFrame([point])], ignore_index=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.points.to_csv(self.path, index=False)


def tune_variant(sweep: Sweep, base: list[str], variant: str, extra: list[str], opts: dict[str, Any]) -> None:
    from harness.run import _merge_overrides, compose_config

    extra = [o for o in extra if not o.lstrip("+~").startswith("federated.lr=")]
    over = _merge_overrides(base, extra)
    optimizer = str(compose_config(over).federated.get("optimizer", "sgd"))
    grid = sorted(opts["lrs"] or GRIDS.get(optimizer, GRIDS["sgd"]))
    for step in range(opts["extend"] + 1):
        for lr in grid:
            for seed in opts["seeds"]:
                sweep.run(over, variant, lr, seed)
        mine = sweep.points[(sweep.points["variant"] == variant) & sweep.points["lr"].isin(grid)]
        best = float(select(mine).iloc[0]["lr"])
        if best not in (grid[0], grid[-1]) or step == opts["extend"]:
            return
        grid = sorted(grid + [ladder(best, up=best == grid[-1])])


def main(argv: list[str] | None = None) -> int:
    from harness.run import compose_config

    try:
        opts, overrides = parse(list(sys.argv[1:] if argv is None else argv))
        base = [f"scenario={opts['scenario']}", *overrides]
        variants = OmegaConf.to_container(compose_config(base).variants, resolve=False) or {}
        unknown = [v for v in opts["only"] if v not in variants]
        if unknown:
            raise ConfigError(f"only: {unknown[0]!r} is not a variant of scenario {opts['scenario']}; "
                              f"choose from {', '.join(variants)}")
    except ConfigError as err:
        print(f"[narrowband] {err}", file=sys.stderr)
        return 2
    sweep = Sweep(opts["scenario"])
    names = opts["only"] or list(variants)             # in the order asked for
    for name in names:
        tune_variant(sweep, base, name, list(variants[name]), opts)
        select(sweep.points).to_csv(selected_path(opts["scenario"]), index=False)   # usable after every variant
    table = select(sweep.points)
    print(table.to_string(index=False))
    edge = table[table["at_edge"]]
    if len(edge):
        print(f"[narrowband] selected lr at a grid edge for {', '.join(edge['variant'])}: rerun with a larger extend=",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
