"""Composed tier: ``net.trace`` / ``net.nodes[i].trace`` are checked before anything exists and
land in the plan (each direction's LinkSpec) and the row keys."""
from __future__ import annotations


import pytest
import warm_cli

from harness.errors import ConfigError
from harness.plan import RunPlan, build_plan
from harness.compose import compose_config
from harness.scenario import merge_overrides
from netem.trace import load

HILO = ["scenario=smoke_hilo", "net.backend=model"]


def test_one_trace_for_every_node_both_directions():
    plan = build_plan(compose_config([*HILO, "net.trace=lte_uplink"]))
    lte = load("lte_uplink")
    for role in plan.roles[1:]:
        assert role.up.trace == role.down.trace and role.up.trace.endswith("netem/traces/lte_uplink.csv")
        assert role.up.rate_bps == lte.rate_at(0) and role.up.delay_s == lte.delay_at(0)
    assert plan.roles[0].up.trace is None                       # the hub's own link is untouched
    assert plan.keys["trace"] == "lte_uplink" and plan.keys["rate_mbit"] == pytest.approx(lte.mean_rate_bps() / 1e6)
    assert RunPlan.from_dict(plan.to_dict()) == plan


def test_per_node_up_and_down_traces(tmp_path):
    step = tmp_path / "step.csv"
    step.write_text("0,20\n2,2\n")
    nodes = f"+net.nodes=[{{trace: {{up: {step}}}}}, {{rate: 5mbit}}]"
    plan = build_plan(compose_config([*HILO, nodes]))
    w0, w1 = plan.roles[1], plan.roles[2]
    assert w0.up.trace == str(step) and w0.up.rate_bps == 20e6 and w0.down.trace is None
    assert w1.up.trace is None and w1.up.rate_bps == 5e6
    assert plan.keys["trace"] == "step"


def test_untraced_plans_have_no_trace_key():
    assert "trace" not in build_plan(compose_config(HILO)).keys


@pytest.mark.parametrize("overrides, start", [
    (["net.trace=/nonexistent/x.csv"], "net.trace: '/nonexistent/x.csv' is not a trace file"),
    (["+net.nodes=[{trace: {sideways: lte_uplink}}]"], "net.nodes[0].trace: "),
    (["net.trace=lte_uplink", "net.backend=userspace"], "net.backend (with net.trace set): 'userspace'"),
])
def test_bad_trace_values_fail_in_the_planner(overrides, start):
    with pytest.raises(ConfigError) as err:
        build_plan(compose_config([*HILO, *overrides]))
    assert str(err.value).startswith(start) and "\n" not in str(err.value)


def test_bad_trace_line_exits_2_with_one_line_and_creates_nothing(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("t_s,rate_mbit\n0,10\n3,1\n2,5\n")
    proc = warm_cli.run("harness", ["scenario=smoke_hilo", "only=[hilo_spar]", f"net.trace={bad}",
                                    f"out_dir={tmp_path / 'out'}"], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert lines == [f"error: net.trace: '{bad} line 4: 2,5' time 2 is not after the line above (3); use lines "
                     "'t_s,rate_mbit[,delay_ms]' with t_s starting at 0 and increasing, rate > 0, delay >= 0, "
                     "optional last line 'T,loop'"], proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_shipped_scenario_trace_variants_plan():
    for scenario, variant in (("hilo_distill", "hilo_spar_trace"), ("spra_federated", "spra_trace")):
        base = [f"scenario={scenario}", "net.backend=model"]
        cfg = compose_config(base)
        plan = build_plan(compose_config(merge_overrides(base, list(cfg.variants[variant]))))
        assert plan.keys["trace"] and any(r.up.trace for r in plan.roles)
