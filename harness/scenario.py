"""The runs of a scenario, each composed, validated and planned once, before any of them starts.

    runs = plan_scenario(cfg, overrides)     # ConfigError (one line) on the first bad variant or seed
    for run in runs: ...                     # run.cfg, run.plan, run.run_id, run.run_dir

One loop for every way a scenario runs: ``python -m harness`` (harness.run) and the agents of a
run across hosts (harness.multihost: every agent plans alike, and agent 0 refuses a host whose
plans differ). Seeds are an axis, interleaved: for each seed, every variant in turn, so that the
runs a timing ratio pairs (same seed, two methods) run close in time on the same machine state.
``seed=N`` on the command line runs that one seed only; ``only=[...]`` picks variants.

A run id is ``<variant>-s<seed>-<hash>``: the hash of the resolved config with the run-control
keys left out and ``net.backend=auto`` replaced by what it resolved to here, so re-running the
same config finds its directory (``resume``) and a point done with ``tc`` is never taken for one
done with ``userspace``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.compose import compose_config
from harness.errors import ConfigError
from harness.paths import project_root
from harness.plan import RunPlan, build_plan
from harness.sweeplabel import existing_run_dir, label, labelled, sweep_values

RUN_CONTROL = ("out_dir", "resume", "progress", "variants", "only", "run_id", "seeds")
DEFAULT_PLACEMENT = {"source": "star", "hostfile": None, "pin": True, "mtu": 1400}
LATER_KEYS = {"federated": {"eval_base": True}}   # keys added later: hashed only when not at these


@dataclass
class PlannedRun:
    """One (variant, seed) of a scenario: its composed config, its plan, where it is recorded."""
    scenario: str
    variant: str
    seed: int
    cfg: DictConfig            # the variant's resolved config (run.json records it)
    plan: RunPlan              # what crosses into every role
    run_id: str
    run_dir: Path              # <project root>/<out_dir>/<scenario>/<run_id>

    def resolved_config(self) -> dict:
        """The resolved config as a plain dict, with ``scenario`` and ``variant`` set (what run.json records)."""
        OmegaConf.set_struct(self.cfg, False)
        self.cfg.scenario, self.cfg.variant = self.scenario, self.variant
        return OmegaConf.to_container(self.cfg, resolve=True)

    def payload(self) -> dict:
        """What every role process receives (harness.cluster.launch): the row keys and the plan, nothing else."""
        return {"keys": self.plan.run_keys(self.scenario, self.variant, self.run_id), "plan": self.plan.to_dict()}


def merge_overrides(base: list[str], extra: list[str]) -> list[str]:
    """``extra`` first, then ``base``; a key the user set on the command line wins."""
    keys = {o.split("=", 1)[0].lstrip("+~") for o in base}
    return [o for o in extra if o.split("=", 1)[0].lstrip("+~") not in keys] + list(base)


def scenario_name(overrides: list[str]) -> str:
    for o in overrides:
        if o.startswith("scenario="):
            return o.split("=", 1)[1]
    return "adhoc"


def seeds_of(cfg: DictConfig, overrides: list[str]) -> list[int]:
    """The seeds to run: ``seed=N`` on the command line wins, else ``seeds`` ([]: ``seed``)."""
    if any(o.lstrip("+~").startswith("seed=") for o in overrides) or not cfg.get("seeds"):
        return [int(cfg.seed)]
    seeds = list(cfg.seeds)
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError(f"seeds: {s!r} is not a seed; use a list of integers >= 0, e.g. seeds=[0,1,2]")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: {seeds} lists a seed twice; each seed runs once per variant")
    return seeds


def run_id_of(cfg: DictConfig, variant: str, backend: str | None = None) -> str:
    """``<variant>-s<seed>-<hash of the resolved config>``; ``backend``: what ``net.backend=auto``
    resolved to on this machine (the planner's choice), hashed in its place."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key in RUN_CONTROL + ("scenario", "variant"):
        plain.pop(key, None)
    if plain.get("placement") == DEFAULT_PLACEMENT:     # the one-host star: ids as before placement existed
        plain.pop("placement")
    for group, defaults in LATER_KEYS.items():          # ids as before these keys existed, at their defaults
        section = plain.get(group)
        for key, value in defaults.items():
            if isinstance(section, dict) and key in section and section[key] == value:
                section.pop(key)
    if backend and isinstance(plain.get("net"), dict) and plain["net"].get("backend") == "auto":
        plain["net"]["backend"] = backend
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:8]
    return f"{variant}-s{int(cfg.seed)}-{digest}"


def variants_of(cfg: DictConfig, scenario: str) -> dict[str, list[str]]:
    """The scenario's variants that run (``only`` picks; an unknown name is one ConfigError line)."""
    variants = dict(cfg.variants or {})
    if cfg.only:
        unknown = [v for v in cfg.only if v not in variants]
        if unknown:
            raise ConfigError(f"only: {unknown[0]!r} is not a variant of scenario {scenario}; "
                              f"choose from {', '.join(variants)}")
        variants = {k: v for k, v in variants.items() if k in cfg.only}
    return variants


def planned(cfg: DictConfig, scenario: str, variant: str) -> PlannedRun:
    """Plan one composed config (validated and planned here, once) and say where it is recorded: a
    multirun job's swept values go into its run id after the variant (harness.sweeplabel), and a
    folder of the same run under the other spelling is found again (resume)."""
    plan = build_plan(cfg)
    run_id = cfg.run_id or labelled(run_id_of(cfg, variant, plan.backend.value), variant, label(sweep_values()))
    run_dir = existing_run_dir(project_root() / cfg.out_dir / scenario, run_id, variant)   # the same run, any label
    return PlannedRun(scenario, variant, int(cfg.seed), cfg, plan, run_dir.name, run_dir)


def plan_scenario(cfg: DictConfig, overrides: list[str]) -> list[PlannedRun]:
    """Every (seed, variant) of the composed scenario ``cfg`` (composed from ``overrides``), in run
    order, each composed and planned once; a scenario without variants at its one seed is ``cfg``
    itself (not composed again)."""
    scenario = scenario_name(overrides)
    seeds = seeds_of(cfg, overrides)
    variants = variants_of(cfg, scenario)
    if not variants and seeds == [int(cfg.seed)]:
        return [planned(cfg, scenario, str(cfg.variant))]
    variants = variants or {str(cfg.variant): []}
    table = OmegaConf.to_container(cfg.variants, resolve=False) if cfg.variants else {}
    running = {name: table[name] for name in variants} if table else {}
    return [planned(composed(merge_overrides(overrides, list(extra) + [f"seed={seed}"]), running), scenario, name)
            for seed in seeds for name, extra in variants.items()]


def composed(overrides: list[str], running: dict) -> DictConfig:
    """A variant's config, its ``variants`` table cut to the variants that run: the others' ``${tuned_lr:...}`` are not
    this run's business (a variant ``only`` leaves out may still be untuned; its run id never hashed the table)."""
    cfg = compose_config(overrides)
    if cfg.get("variants"):
        cfg.variants = running
    return cfg
