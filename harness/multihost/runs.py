"""The runs every agent composes and plans alike (harness.run's order), and their digest (agent 0
refuses a host whose digest differs)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError


@dataclass
class Planned:
    scenario: str
    variant: str
    cfg: Any
    plan: Any
    run_id: str
    run_dir: Path


def planned_runs(overrides: list[str]) -> list[Planned]:
    """Every (seed, variant) of the composed scenario, in harness.run's order, planned (ConfigError first)."""
    from harness.paths import project_root
    from harness.plan import build_plan
    from harness.run import _merge_overrides, compose_config, run_id_of, scenario_name, seeds_of

    cfg = compose_config(overrides)
    scenario = scenario_name(overrides)
    variants = dict(cfg.variants or {}) or {cfg.variant: []}
    if cfg.only:
        unknown = [v for v in cfg.only if v not in variants]
        if unknown:
            raise ConfigError(f"only: {unknown[0]!r} is not a variant of scenario {scenario}; choose from {', '.join(variants)}")
        variants = {k: v for k, v in variants.items() if k in cfg.only}
    runs = []
    for seed in seeds_of(cfg, overrides):
        for name, extra in variants.items():
            vcfg = compose_config(_merge_overrides(overrides, list(extra) + [f"seed={seed}"]))
            plan = build_plan(vcfg)
            if plan.placement is None or not plan.placement.multihost:
                raise ConfigError(f"placement.source: {vcfg.placement.source!r} gives one host; python -m harness.commands.node "
                                  f"runs across hosts (hostfile, slurm, torchrun); on one host use python -m harness")
            if plan.backend.value not in ("tc", "netem", "userspace"):
                raise ConfigError(f"net.backend: {plan.backend.value!r} across hosts is not allowed; use tc (kernel "
                                  f"shaping on the overlay) or userspace (no CAP_NET_ADMIN)")
            if any(r.up.trace or r.down.trace for r in plan.roles):
                raise ConfigError("net.trace: link traces across hosts are not replayed yet (netem/overlay.py has no "
                                  "replay); drop net.trace or run on one host")
            run_id = vcfg.run_id or run_id_of(vcfg, name, plan.backend.value)
            runs.append(Planned(scenario, name, vcfg, plan, run_id, project_root() / vcfg.out_dir / scenario / run_id))
    return runs


def digest(runs: list[Planned]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps([r.plan.to_dict() for r in runs], sort_keys=True, default=str).encode()).hexdigest()[:16]
