"""Composed tier: every scenario (and each of its variants) composes and plans,
and bad input fails with one line naming the key, the value and what is allowed."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from harness.paths import scenario_names
from harness.errors import ConfigError
from harness.plan import RunPlan, build_plan
from harness.compose import compose_config
from harness.scenario import merge_overrides, run_id_of
from harness.validate import group_options


@pytest.mark.parametrize("scenario", scenario_names())
def test_every_scenario_and_variant_composes_and_validates(scenario):
    cfg = compose_config([f"scenario={scenario}"])
    variants = dict(cfg.variants or {}) or {"default": []}
    ids = set()
    for name, extra in variants.items():
        vcfg = compose_config(merge_overrides([f"scenario={scenario}"], list(extra)))
        plan = build_plan(vcfg)
        assert plan.role_specs() and plan.roles[0].rank == 0, name
        assert RunPlan.from_dict(plan.to_dict()) == plan, name       # what the roles receive is the plan
        ids.add(run_id_of(vcfg, name))
    assert len(ids) == len(variants), "two variants resolve to the same run"


@pytest.mark.parametrize("scenario", [s for s in scenario_names() if s.endswith("_bytes")])
def test_an_equal_bytes_scenario_runs_its_base_scenarios_variants_unchanged(scenario):
    """X_bytes copies X's settings (its header says so): a variant both name must be the same run, the same id,
    so that a seed gives X's trajectory and the records of both agree (docs/onpolicy.md)."""
    base = scenario.removesuffix("_bytes")
    tables = {s: dict(compose_config([f"scenario={s}"]).variants) for s in (scenario, base)}
    shared = sorted(set(tables[scenario]) & set(tables[base]))
    assert shared, f"{scenario} shares no variant with {base}"
    for name in shared:
        ids = {s: run_id_of(compose_config(merge_overrides([f"scenario={s}"], list(table[name]))), name)
               for s, table in tables.items()}
        assert ids[scenario] == ids[base], f"{scenario}.{name} drifted from {base}.{name}: {ids}"


def test_scenario_files_open_with_what_command_and_expectation():
    from harness.paths import scenarios_root

    for path in scenarios_root().glob("*.yaml"):
        head = path.read_text().split("\n\n")[0].lower()
        assert head.startswith("#"), f"{path.name} must open with a comment"
        assert "python -m harness" in head, f"{path.name}: the header must give the command"
        assert "expect" in head, f"{path.name}: the header must say what result to expect"
        assert "measures" in head and "compares" in head, f"{path.name}: say what it measures and compares"
        # figures go stale: they live in the generated report, not in the header
        assert not re.search(r"measured:? [0-9~]|\(?[0-9.]+x measured|[0-9.]+ s on 2", head), path.name


def test_user_override_wins_over_variant():
    merged = merge_overrides(["model.rank=8", "scenario=x"], ["method=hilo", "model.rank=64"])
    assert merged == ["method=hilo", "model.rank=8", "scenario=x"]


@pytest.mark.parametrize("override, key", [
    (["net.rate=10mbps"], "net.rate"),
    (["net.rate=-5mbit"], "net.rate"),
    (["net.loss=150%"], "net.loss"),
    (["net.delay=20parsecs"], "net.delay"),
    (["compressor.budget=0"], "compressor.budget"),
    (["compressor.budget=1.5"], "compressor.budget"),
    (["model.rank=0"], "model.rank"),
    (["model.rank=100000"], "model.rank"),
    (["model=hf", "model.path=/nonexistent/model"], "model.path"),
    (["net.backend=carrier-pigeon"], "net.backend"),
    (["compressor.dtype=fp8"], "compressor.dtype"),
])
def test_bad_values_name_key_and_value(override, key):
    cfg = compose_config(override)
    with pytest.raises(ConfigError) as err:
        build_plan(cfg)
    message = str(err.value)
    assert message.startswith(key), message
    assert "\n" not in message


def test_more_clients_than_data_is_rejected():
    if "spra" not in group_options("method"):
        pytest.skip("federated methods not present")
    cfg = compose_config(["method=spra", "task=federated", "federated.clients=50", "task.examples=10"])
    with pytest.raises(ConfigError, match="federated.clients"):
        build_plan(cfg)


def _command_line(arg: str, real: bool, monkeypatch, capsys) -> tuple[int, str]:
    """``python -m harness arg``: (exit status, stderr). ``real``: in a process of its own, as a user
    runs it; else harness.__main__.main() in this one (the same code up to the first line of error:
    these inputs never reach the Hydra app). One real command per table keeps the process's own
    exit status and stream honest; the rest of the table costs no interpreter start-up each."""
    if real:
        out = subprocess.run([sys.executable, "-m", "harness", arg], capture_output=True, text=True, timeout=120)
        return out.returncode, out.stderr
    from harness.commands.app import main

    monkeypatch.setattr(sys, "argv", ["harness", arg])
    with pytest.raises(SystemExit) as ended:
        main()
    return ended.value.code, capsys.readouterr().err


@pytest.mark.parametrize("arg, key, real", [("method=nonesuch", "method", True), ("compressor=zip", "compressor", False),
                                            ("task=chess", "task", False), ("model=gpt9", "model", False),
                                            ("scenario=nope", "scenario", False)])
def test_unknown_names_on_the_command_line_give_one_line(arg, key, real, monkeypatch, capsys):
    code, err = _command_line(arg, real, monkeypatch, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {key}:") and arg.split("=")[1] in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("arg, key, kind, real", [("model.rank=abc", "model.rank", "is not an int", True),
                                                  ("net.hang_timeout_s=soon", "net.hang_timeout_s", "is not a float", False),
                                                  ("model.nonesuch=3", "model.nonesuch", "not a key of model", False),
                                                  ("model.rank=[1", "model.rank=[1", "override grammar", False)])
def test_bad_overrides_on_the_command_line_give_one_line(arg, key, kind, real, monkeypatch, capsys):
    code, err = _command_line(arg, real, monkeypatch, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {key}:") and kind in lines[0], lines[0]
    assert "Traceback" not in err


def test_an_override_that_does_not_compose_is_reported_before_torch_is_imported():
    """The command line's first check composes the config and runs the field checks only: its error
    line must not wait for the planner's imports (torch, transformers), which cost seconds in a
    fresh interpreter. A bad value of a key the user gave is judged there too; a scenario's own
    values (which a variant may complete) are not."""
    probe = ("import sys\n"
             "from harness.commands.app import compose_error\n"
             "err = compose_error(['scenario=smoke_hilo', 'model.nonesuch=3'])\n"
             "assert err and err.startswith('model.nonesuch:'), err\n"
             "err = compose_error(['scenario=smoke_hilo', 'model.rank=-1'])\n"
             "assert err and err.startswith('model.rank: -1 is not a rank'), err\n"
             "err = compose_error(['scenario=smoke_spra', 'compressor.budget=1.5'])\n"
             "assert err and err.startswith('compressor.budget: 1.5'), err\n"
             "assert compose_error(['scenario=hilo_distill', 'seeds=[0]']) is None\n"
             "heavy = sorted(m for m in ('torch', 'transformers', 'peft', 'harness.plan') if m in sys.modules)\n"
             "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"imported before the error line: {out.stdout.strip()}"
