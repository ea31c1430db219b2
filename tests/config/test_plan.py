"""Composed tier: the RunPlan is built once, round-trips to the roles, and every knob a role
used to check fails on the real command line (one line, exit 2) before anything exists."""
from __future__ import annotations

import importlib


import pytest

from harness.errors import ConfigError
from harness.federated.settings import Settings
from harness.onpolicy.setup import OnPolicyPlan
from harness.plan import Backend, MethodKind, RunPlan, build_plan
from harness.compose import compose_config
from harness.scenario import merge_overrides
from netem.spec import parse_rate, parse_time

HILO = ["scenario=smoke_hilo"]
SPRA = ["scenario=smoke_spra"]


def variant_cfg(base: list[str], variant: str, *extra: str):
    cfg = compose_config(base)
    return compose_config(merge_overrides([*base, *extra], list(cfg.variants[variant])))


def test_onpolicy_plan_reads_the_config_once_and_round_trips():
    cfg = variant_cfg(HILO, "hilo_spar", "net.delay=5ms")
    plan = build_plan(cfg)
    assert plan.kind is MethodKind.ONPOLICY and plan.backend is not Backend.AUTO and plan.backend_reason
    assert [r.name for r in plan.roles] == ["learner"] + [f"worker{i}" for i in range(cfg.onpolicy.workers)]
    assert [r.rank for r in plan.roles] == list(range(len(plan.roles)))
    rate = parse_rate(cfg.net.rate)                      # the links come from net.*, parsed by netem
    assert all(r.up.rate_bps == rate == r.down.rate_bps for r in plan.roles[1:])
    assert plan.keys["rate_mbit"] == rate / 1e6 and plan.keys["delay_ms"] == parse_time("5ms") * 1e3
    assert plan.onpolicy.compressor.name == cfg.compressor.name
    assert plan.onpolicy.optimizer == cfg.onpolicy.optimizer and plan.onpolicy.workers == cfg.onpolicy.workers
    assert RunPlan.from_dict(plan.to_dict()) == plan
    assert OnPolicyPlan.from_dict(plan.to_dict()["onpolicy"]) == plan.onpolicy       # what a role rebuilds
    keys = plan.run_keys("s", "v", "id")
    assert (keys["run_id"], keys["method"], keys["compressor"]) == ("id", "hilo", cfg.compressor.name)


def test_full_sync_plans_no_compressor():
    plan = build_plan(variant_cfg(HILO, "full_sync"))
    assert plan.onpolicy.compressor is None and plan.keys["compressor"] == "none"


def test_federated_plan_carries_the_settings_and_client_ranks():
    cfg = compose_config(SPRA)
    plan = build_plan(cfg)
    assert plan.kind is MethodKind.FEDERATED and plan.onpolicy is None
    ranks = list(cfg.federated.ranks)
    assert [r.lora_rank for r in plan.roles[1:]] == [ranks[k % len(ranks)] for k in range(cfg.federated.clients)]
    assert Settings.from_dict(plan.to_dict()["federated"]) == plan.federated
    assert RunPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize("override, key", [
    ("task.prompt_batch=1", "task.prompt_batch"),
    ("+compressor.options.bogus=1", "compressor.options"),
    ("model.dtype=float77", "model.dtype"),
    ("onpolicy.optimizer=adamx", "onpolicy.optimizer"),
    ("method.sync_dtype=fp8", "method.sync_dtype"),
    ("method.sync=harness.onpolicy.patch", "method.sync"),
    ("onpolicy.fault_flip_target=grad", "onpolicy.fault_flip_target"),
    ("onpolicy.staleness=2", "onpolicy.staleness"),
    ("task.temperature=0", "task.temperature"),
    ("task.max_new_tokens=1", "task.max_new_tokens"),
    ("task.student_init=nope", "task.student_init"),
    ("model.lora_init=nope", "model.lora_init"),
    ("task.digits=9", "task.digits"),
    ("model.device=gpu0", "model.device"),
])
def test_role_side_knobs_fail_in_the_planner(override, key):
    with pytest.raises(ConfigError) as err:
        build_plan(variant_cfg(HILO, "hilo_spar", override))
    assert str(err.value).startswith(f"{key}:") and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("override, words", [
    (["compressor=quant", "compressor.budget=0.016"], "below what quant can reach"),
    (["compressor.budget_bytes=500"], "cannot hold the header"),
    (["compressor=powersgd", "+compressor.options.rank=64"], "cannot hold rank 64"),
    (["compressor=demo", "+compressor.options.topk=1000"], "cannot hold topk=1000 coefficients per chunk"),
])
def test_a_budget_the_compressor_cannot_hold_fails_in_the_planner(override: list[str], words: str):
    """The planner dry-encodes the adapter's shapes: what would fail in the learner's first encode fails here."""
    with pytest.raises(ConfigError) as err:
        build_plan(variant_cfg(HILO, "hilo_spar", *override))
    assert str(err.value).startswith("compressor.budget:") and words in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("override, key", [
    ("federated.optimizer=lion", "federated.optimizer"),
    ("method.lr_rule=cubic", "method.lr_rule"),
    ("task.alpha=0", "task.alpha"),
])
def test_federated_knobs_fail_in_the_planner(override, key):
    with pytest.raises(ConfigError) as err:
        build_plan(compose_config([*SPRA, override]))
    assert str(err.value).startswith(f"{key}:") and "\n" not in str(err.value), str(err.value)


# The table, through the real command line: one line naming the key, exit 2, and no
# namespace owned by that process (names carry the owner's PID; other runs may own some now).
# One row per kind of check (a knob's value, a compressor option): every row of the table fails
# in the planner above, which is what the command line reaches before anything exists.
@pytest.mark.parametrize("override, key", [
    ("task.prompt_batch=1", "task.prompt_batch"),
    ("+compressor.options.bogus=1", "compressor.options"),
    ("compressor.budget_bytes=500", "compressor.budget"),   # below spar's header (the planner's dry encode)
])
def test_table_overrides_fail_before_anything_exists(override, key, tmp_path, harness_cli):
    code, _, err, seen = harness_cli("scenario=smoke_hilo", "only=[hilo_spar]", override, f"out_dir={tmp_path}")
    lines = err.strip().splitlines()
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}:"), err[-2000:]
    assert not seen, f"namespaces were created: {seen}"
    assert not list(tmp_path.iterdir()), "a run directory was created"


def test_every_registered_method_and_compressor_has_its_yaml_and_back():
    """Registering one is one module + one YAML (docs/interfaces.md): the two lists agree."""
    from harness.compress import REGISTRY
    from harness.federated.methods import METHODS as FED
    from harness.onpolicy.methods import configured, lookup
    from harness.validate import group_options

    assert set(REGISTRY) == set(group_options("compressor"))
    assert set(configured()) | set(FED) == set(group_options("method"))
    for name, module in configured().items():          # each on-policy YAML names a module that declares it
        assert lookup(name, module) is importlib.import_module(module).SYNCS[name]
