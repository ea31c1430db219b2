"""Learning-rate tuning of a scenario's variants on the validation split, federated or on-policy.

    python -m harness.tune scenario=spra_federated [only=[spra,fedit]] [seeds=[0,1]] \\
        [lrs=[0.001,0.003,0.01]] [extend=3] [key=value ...]
    python -m harness.tune scenario=hilo_distill seeds=[0,1,2] [only=[full_sync_10mbit,hilo_spar_10mbit]]
    python -m harness.tune scenario=hilo_real curve=4 onpolicy.steps=32 ...   (on-policy: a horizon study)

For every variant (or those in ``only``) and every seed, runs the variant at each learning
rate of the grid with an in-process backend that runs the training math only: federated
scenarios with harness.federated.inproc (the real server, client and aggregation code,
threads instead of processes and links), on-policy ones with harness.onpolicy.inproc (the real
learner, worker, sync and compressor code, threads and queues instead of processes and
links; in synchronous mode the trajectory is the emulated run's bit for bit,
tests/onpolicy/test_inproc.py). Each point records the final evaluation on the VALIDATION
split (``task.eval_split=validation``: training-side problems, disjoint from the held-out
test problems that report results). Federated: the selected lr is the lowest mean validation
loss (the SFT loss) over the seeds (loss, not accuracy: on a few hundred problems accuracy
moves in coarse steps). On-policy: the highest mean validation accuracy (greedy exact match,
the quality the report's claims judge), ties to the lower val_loss (distill: the reverse KL to
the teacher on the student's own samples; reward: 1 - the mean reward of the greedy
completions); both are recorded for every point. When the selected value is at
an edge of the grid, the grid is extended one step past that edge (ladder 1, 3, 10, 30, ...
x 10^n) and the new point run, up to ``extend`` times.

On-policy variants that differ only in the link (``net.*``) or in the horizon
(``onpolicy.steps``, ``onpolicy.eval_every``, ``onpolicy.eval_base``: the short timing-only runs) train alike, so they
share one entry, named after the first such variant of the scenario; every point runs at the
scenario's own horizon (``onpolicy.steps``; a ``onpolicy.steps=N`` override tunes at N).

``curve=K`` (on-policy) is a horizon study instead of a sweep: each point evaluates on the
validation prompts every K updates (evaluation draws nothing random and changes no bit of the
trajectory) and every evaluation is appended to ``results/tuning/<scenario>.curve.csv``
(variant, lr, seed, steps, step, val_accuracy, val_loss); the grid is run once, not extended,
and nothing is selected: it is how a scenario's horizon is chosen on validation before it is
tuned at that horizon.

Writes ``results/tuning/<scenario>.csv`` (every point, appended as it is measured, so an
interrupted sweep resumes: points already there are not rerun) and
``results/tuning/<scenario>.selected.csv`` (harness.tuned_lr), which the scenario reads via
``${tuned_lr:...}``. Other ``key=value`` arguments are config overrides for every run.
Default grid: 3e-4 .. 1e-2 (SGD) and 1e-4 .. 3e-3 (AdamW: ``federated.optimizer=adamw``, and
the on-policy learner's default).
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
from harness.tuned_lr import POINT_COLUMNS, points_path, select, selected_path

GRIDS = {"sgd": [3e-4, 1e-3, 3e-3, 1e-2], "adamw": [1e-4, 3e-4, 1e-3, 3e-3]}
TUNE_KEYS = ("scenario", "only", "seeds", "lrs", "extend", "curve")
CURVE_COLUMNS = ["variant", "optimizer", "lr", "seed", "steps", "step", "val_loss", "val_accuracy", "run_s"]
ONPOLICY_TASKS = ("distill", "reward")
# on-policy overrides that do not change what trains: the link, the horizon of a timing-only variant, the lr itself
SHARED_PREFIXES = ("net.", "onpolicy.steps=", "onpolicy.eval_every=", "onpolicy.eval_final=", "onpolicy.eval_base=",
                   "onpolicy.lr=")
# an on-policy tuning point: evaluated once, after its last update, on task.validation_prompts validation prompts;
# no policy-mismatch diagnostic (housekeeping outside the update: neither changes a bit of the trajectory)
ONPOLICY_TUNING = ["onpolicy.eval_every=0", "onpolicy.eval_base=false", "onpolicy.policy_kl=false",
                   "task.eval_prompts=${task.validation_prompts}"]


def family(cfg) -> str:
    """``onpolicy`` for a distill / reward task, else ``federated``."""
    return "onpolicy" if str(cfg.task.name) in ONPOLICY_TASKS else "federated"


def lr_key(fam: str) -> str:
    return "onpolicy.lr" if fam == "onpolicy" else "federated.lr"


def select_by(fam: str) -> str:
    """What a selection of this family maximises (harness.tuned_lr.SELECT_BY)."""
    return "val_accuracy" if fam == "onpolicy" else "val_loss"


def training_overrides(extra: list[str]) -> list[str]:
    """An on-policy variant's overrides that change its training (all but the link, the horizon, the lr),
    with ``method=NAME`` written as the method it trains like (harness.onpolicy.methods: the lossless
    patch trains like full sync, bit for bit, so the two share an entry)."""
    return [_trains_like(o) for o in extra if not o.lstrip("+~").startswith(SHARED_PREFIXES)]


def _trains_like(override: str) -> str:
    from harness.onpolicy.methods import configured, lookup

    key, sep, name = override.partition("=")
    if key != "method" or name not in configured():
        return override
    return f"method={lookup(name).trains_like or name}"


def entries(variants: dict[str, list[str]]) -> dict[str, list[str]]:
    """{entry: variants reading it}: on-policy variants with the same training overrides share one
    entry, named after the first of them (in the scenario's order)."""
    out: dict[str, list[str]] = {}
    seen: dict[tuple[str, ...], str] = {}
    for name, extra in variants.items():
        key = tuple(sorted(map(str, training_overrides(list(extra)))))
        seen.setdefault(key, name)
        out.setdefault(seen[key], []).append(name)
    return out


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
    opts: dict[str, Any] = {"scenario": None, "only": [], "seeds": [0, 1], "lrs": None, "extend": 3, "curve": 0}
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
            opts[key] = {"scenario": str, "only": _list, "extend": int, "curve": int,
                         "seeds": lambda v: [int(x) for x in _list(v)],
                         "lrs": lambda v: [float(x) for x in _list(v)]}[key](value)
        except ValueError:
            raise ConfigError(f"{key}: {value!r} is not allowed; seeds a list of integers, lrs a list of positive "
                              "numbers, extend and curve integers >= 0") from None
    if not opts["scenario"]:
        raise ConfigError("scenario: missing; e.g. python -m harness.tune scenario=spra_federated")
    if opts["lrs"] is not None and (not opts["lrs"] or min(opts["lrs"]) <= 0):
        raise ConfigError(f"lrs: {opts['lrs']!r} must be a non-empty list of numbers > 0")
    if len(opts["seeds"]) < 1 or opts["extend"] < 0 or opts["curve"] < 0:
        raise ConfigError(f"seeds: {opts['seeds']!r} needs at least one seed; extend: {opts['extend']} and curve: "
                          f"{opts['curve']} must be >= 0")
    return opts, overrides


class Sweep:
    """The points of one scenario, persisted after every run. Several tune processes may share a
    scenario (e.g. one per ``only=`` entry): each point is appended under an exclusive lock on
    ``<scenario>.csv.lock``, re-reading what the others appended meanwhile. ``curve > 0``: the
    horizon study's evaluations, in ``<scenario>.curve.csv`` (module doc)."""

    def __init__(self, scenario: str, curve: int = 0) -> None:
        self.scenario, self.curve = scenario, curve
        self.path = points_path(scenario).with_suffix(".curve.csv") if curve else points_path(scenario)
        self.columns = CURVE_COLUMNS if curve else POINT_COLUMNS + ["run_s"]
        self.points = self._read()
        self._cache: dict[str, Any] = {}

    def _read(self) -> pd.DataFrame:
        return pd.read_csv(self.path) if self.path.exists() else pd.DataFrame(columns=self.columns)

    def reload(self) -> pd.DataFrame:
        """The points on disk now (other processes' included)."""
        self.points = self._read()
        return self.points

    def _append(self, points: list[dict[str, Any]]) -> None:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.points = pd.concat([self._read(), pd.DataFrame(points)], ignore_index=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            self.points.to_csv(tmp, index=False)
            tmp.replace(self.path)

    def has(self, variant: str, optimizer: str, lr: float, seed: int, rounds: int) -> bool:
        p = self.reload()
        horizon = p["steps"] if self.curve else p["rounds"]
        hit = (p["variant"] == variant) & (p["optimizer"] == optimizer) & (p["seed"] == seed) & (horizon == rounds)
        return bool((hit & ((p["lr"] - lr).abs() <= 1e-12 * lr)).any())

    def run(self, overrides: list[str], variant: str, lr: float, seed: int) -> None:
        from harness.compose import compose_config

        fam = family(compose_config(overrides))
        fixed = [f"{lr_key(fam)}={lr}", f"seed={seed}", "task.eval_split=validation"]
        if fam == "onpolicy":                  # training-neutral: the last update's evaluation only, no diagnostic
            fixed += ONPOLICY_TUNING + ([f"onpolicy.eval_every={self.curve}"] if self.curve else [])
        composed = compose_config([*overrides, *fixed])
        composed.variants = {}                 # the other variants' ${tuned_lr:...} are not this run's business
        cfg = OmegaConf.to_container(composed, resolve=True)
        section = cfg["onpolicy"] if fam == "onpolicy" else cfg["federated"]
        optimizer = str(section.get("optimizer", "sgd"))
        rounds = int(section["steps"] if fam == "onpolicy" else section["rounds"])
        if self.has(variant, optimizer, lr, seed, rounds):
            return
        start = time.perf_counter()
        evals = self._onpolicy(composed, cfg) if fam == "onpolicy" else [self._federated(cfg, seed)]
        run_s = round(time.perf_counter() - start, 1)
        if self.curve:
            points = [{"variant": variant, "optimizer": optimizer, "lr": lr, "seed": seed, "steps": rounds, **e,
                       "run_s": run_s} for e in evals]
        else:
            points = [{"variant": variant, "optimizer": optimizer, "lr": lr, "seed": seed, "rounds": rounds,
                       **{k: v for k, v in evals[-1].items() if k != "step"}, "run_s": run_s}]
        for point in points:
            print(json.dumps(point), flush=True)
        self._append(points)

    def _federated(self, cfg: dict, seed: int) -> dict[str, float]:
        """The final validation loss and accuracy of one federated run (in-process backend)."""
        from harness.federated.inproc import run_in_threads
        from harness.federated.settings import from_cfg
        from harness.record import read_rows
        from harness.tasks.plans import model_plan
        from harness.tasks import build_federated, build_tokenizer, load_base

        fed = cfg["federated"]
        key = json.dumps([cfg["model"], cfg["task"], fed["clients"], seed], sort_keys=True, default=str)
        if key not in self._cache:
            tok = build_tokenizer(cfg["model"])
            self._cache = {key: (build_federated(cfg["task"], tok, int(fed["clients"]), seed),
                                 load_base("student", cfg["model"], cfg["task"], progress=False))}
        task, base = self._cache[key]
        settings = from_cfg(cfg)              # the planner's federated part (the population is refused in process)
        with tempfile.TemporaryDirectory() as tmp:
            run_in_threads(settings, model_plan(cfg["model"]), Path(tmp), task, base)
            rows = read_rows(tmp)
        server = rows[rows.role == "server"].dropna(subset=["eval_loss"]).sort_values("step")
        return {"val_loss": float(server.eval_loss.iloc[-1]), "val_accuracy": float(server.accuracy.iloc[-1])}

    @staticmethod
    def _onpolicy(composed, cfg: dict) -> list[dict[str, float]]:
        """The validation metrics of one on-policy run (harness.onpolicy.inproc) at each evaluation,
        the final one last (``step``: updates done): val_loss is the reverse KL (distill) or 1 - the
        mean reward (reward) on the validation prompts."""
        from harness.onpolicy.inproc import run_in_threads
        from harness.plan import build_plan
        from harness.record import read_rows

        plan = build_plan(composed)            # every knob checked as a real run's
        with tempfile.TemporaryDirectory() as tmp:
            run_in_threads(plan, Path(tmp))
            rows = read_rows(tmp)
        learner = rows[rows.role == "learner"].dropna(subset=["accuracy"]).sort_values("step")
        distill = cfg["task"]["name"] == "distill"
        return [{"step": int(r["step"]) + 1, "val_loss": float(r["reverse_kl"]) if distill else 1.0 - float(r["reward"]),
                 "val_accuracy": float(r["accuracy"])} for _, r in learner.iterrows()]


def tune_variant(sweep: Sweep, base: list[str], variant: str, extra: list[str], opts: dict[str, Any]) -> None:
    from harness.compose import compose_config
    from harness.scenario import merge_overrides

    fam = family(compose_config(base))
    extra = [o for o in extra if not o.lstrip("+~").startswith(f"{lr_key(fam)}=")]
    if fam == "onpolicy":
        extra = training_overrides(extra)      # the entry's training; the scenario's own link and horizon
    over = merge_overrides(base, extra)
    section = compose_config(over)[fam]
    optimizer = str(section.get("optimizer", "sgd"))
    grid = sorted(opts["lrs"] or GRIDS.get(optimizer, GRIDS["sgd"]))
    for step in range(opts["extend"] + 1):
        for lr in grid:
            for seed in opts["seeds"]:
                sweep.run(over, variant, lr, seed)
        if sweep.curve:                        # a horizon study: the grid once, nothing selected
            return
        points = sweep.reload()
        mine = points[(points["variant"] == variant) & points["lr"].isin(grid)]
        best = float(select(mine, select_by(fam)).iloc[0]["lr"])
        if best not in (grid[0], grid[-1]) or step == opts["extend"]:
            return
        grid = sorted(grid + [ladder(best, up=best == grid[-1])])


def main(argv: list[str] | None = None) -> int:
    from harness.compose import compose_config

    try:
        opts, overrides = parse(list(sys.argv[1:] if argv is None else argv))
        base = [f"scenario={opts['scenario']}", *overrides]
        composed = compose_config(base)
        variants = OmegaConf.to_container(composed.variants, resolve=False) or {}
        if family(composed) == "onpolicy":      # link- and horizon-only variants share their method's entry
            variants = {name: variants[name] for name in entries(variants)}
        unknown = [v for v in opts["only"] if v not in variants]
        if unknown:
            raise ConfigError(f"only: {unknown[0]!r} is not a tuning entry of scenario {opts['scenario']}; "
                              f"choose from {', '.join(variants)}")
    except ConfigError as err:
        print(f"[narrowband] {err}", file=sys.stderr)
        return 2
    if opts["curve"] and family(composed) != "onpolicy":
        print(f"[narrowband] curve: {opts['curve']} is not allowed for the federated scenario {opts['scenario']}; "
              "a horizon study is on-policy only (curve=0)", file=sys.stderr)
        return 2
    sweep, by = Sweep(opts["scenario"], opts["curve"]), select_by(family(composed))
    names = opts["only"] or list(variants)             # in the order asked for
    for name in names:
        tune_variant(sweep, base, name, list(variants[name]), opts)
        if not sweep.curve:
            select(sweep.reload(), by).to_csv(selected_path(opts["scenario"]), index=False)   # usable after every variant
    if sweep.curve:
        print(sweep.reload().groupby(["variant", "lr", "step"])["val_accuracy"].agg(["mean", "std", "count"]).to_string())
        return 0
    table = select(sweep.reload(), by)
    print(table.to_string(index=False))
    edge = table[table["at_edge"]]
    if len(edge):
        print(f"[narrowband] selected lr at a grid edge for {', '.join(edge['variant'])}: rerun with a larger extend=",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
