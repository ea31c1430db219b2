"""The runs every agent plans alike (harness.scenario.plan_scenario, the loop python -m harness runs
too), what a run across hosts allows, and their digest (agent 0 refuses a host whose digest differs)."""
from __future__ import annotations

import json

from harness.errors import ConfigError
from harness.scenario import PlannedRun

Planned = PlannedRun      # one (variant, seed) of the scenario: cfg, plan, run_id, run_dir


def planned_runs(overrides: list[str]) -> list[PlannedRun]:
    """Every (seed, variant) of the composed scenario, in python -m harness's order, planned (ConfigError
    first), each checked for what a run across hosts needs: a placement of several hosts, a backend
    that works across hosts (harness.backends: ``across_hosts``), no link traces."""
    from harness.backends import REGISTRY, backend_of
    from harness.compose import compose_config
    from harness.scenario import plan_scenario

    from harness.cluster.spawn import single_threaded_launcher

    single_threaded_launcher()                   # before any torch op here: the roles are forked (spawn.py)
    runs = plan_scenario(compose_config(overrides), overrides)
    for run in runs:
        plan = run.plan
        if plan.placement is None or not plan.placement.multihost:
            raise ConfigError(f"placement.source: {run.cfg.placement.source!r} gives one host; python -m "
                              f"harness.commands.node runs across hosts (hostfile, slurm, torchrun); on one host "
                              f"use python -m harness")
        if not backend_of(plan.backend).across_hosts:
            allowed = [n for n, b in REGISTRY.items() if b.across_hosts]
            raise ConfigError(f"net.backend: {plan.backend.value!r} across hosts is not allowed; choose one of "
                              f"{', '.join(allowed)} (kernel shaping on the overlay, or the transport's pacing)")
        if any(r.up.trace or r.down.trace for r in plan.roles):
            raise ConfigError("net.trace: link traces across hosts are not replayed yet (netem/overlay.py has no "
                              "replay); drop net.trace or run on one host")
    return runs


def digest(runs: list[PlannedRun]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps([r.plan.to_dict() for r in runs], sort_keys=True, default=str).encode()).hexdigest()[:16]
