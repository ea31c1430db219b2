"""The on-policy tuning path: python -m harness.tune on an on-policy scenario runs the one-process
loop (harness.onpolicy.inproc) on the VALIDATION prompts, which are disjoint from the held-out
test prompts by construction, and writes points and selections the scenarios read."""
from __future__ import annotations

import pandas as pd
import pytest
import warm_cli
import torch

from harness.errors import ConfigError


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A project root of its own (results/tuning written there), the real scenarios and model cache."""
    from harness.paths import project_root, scenarios_root
    from harness.tasks.cache import cache_root

    cache, scenarios = cache_root(), scenarios_root()
    (tmp_path / "scenarios").symlink_to(scenarios)
    monkeypatch.setenv("NARROWBAND_CACHE", str(cache))
    monkeypatch.setenv("NARROWBAND_ROOT", str(tmp_path))
    assert project_root() == tmp_path.resolve()
    return tmp_path


def _task(split: str):
    from harness.tasks import build_tokenizer
    from harness.tasks.onpolicy import OnPolicyTask

    tok = build_tokenizer({"name": "tiny"})
    return OnPolicyTask({"digits": 2, "ops": ["+", "-"], "eval_split": split, "max_new_tokens": 6}, tok)


def test_validation_prompts_are_training_side_and_disjoint_from_the_held_out_ones() -> None:
    from harness.tasks.data import problems_of

    test, val = _task("test"), _task("validation")
    n = 1200
    held = problems_of(test.tok, test.lang, test.eval_prompts(n))
    valp = problems_of(val.tok, val.lang, val.eval_prompts(n))
    assert bool(test.lang.is_eval(held).all())               # the held-out side of the fixed hash split
    assert not bool(val.lang.is_eval(valp).any())            # validation: the training side, every one
    key = lambda p: set(zip(p.a.tolist(), p.op.tolist(), p.b.tolist()))   # noqa: E731
    assert not key(held) & key(valp)
    assert torch.equal(val.eval_prompts(n), val.eval_prompts(n))   # fixed: seed-free and step-free


def test_a_bad_eval_split_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="task.eval_split: 'train' is not allowed; choose one of test, validation"):
        _task("train")


def test_link_and_horizon_only_variants_share_their_methods_entry() -> None:
    from harness.commands.tune import entries

    variants = {"full_sync_10mbit": ["method=full_sync"],
                "hilo_10mbit": ["method=hilo", "compressor=spar"],
                "full_sync_100mbit": ["method=full_sync", "net.rate=100mbit", "onpolicy.steps=30",
                                      "onpolicy.eval_every=0"],
                "hilo_trace": ["method=hilo", "compressor=spar", "net.trace=lte_uplink", "onpolicy.steps=40",
                               "onpolicy.lr=${tuned_lr:x,hilo_10mbit}"],
                "hilo_stale": ["method=hilo", "compressor=spar", "onpolicy.staleness=1"],
                "patch_2mbit": ["method=patch", "net.rate=2mbit"]}      # lossless: trains like full sync
    assert entries(variants) == {"full_sync_10mbit": ["full_sync_10mbit", "full_sync_100mbit", "patch_2mbit"],
                                 "hilo_10mbit": ["hilo_10mbit", "hilo_trace"], "hilo_stale": ["hilo_stale"]}


def test_onpolicy_tuning_runs_a_tiny_grid_on_validation_and_selects(root, capsys) -> None:
    from harness.commands.tune import main
    from harness.tuned_lr import points_path, selected_path

    argv = ["scenario=smoke_hilo", "only=[hilo_spar]", "seeds=[0]", "lrs=[0.0001,0.01]", "extend=0",
            "onpolicy.steps=2", "task.validation_prompts=16"]
    assert main(argv) == 0
    points = pd.read_csv(points_path("smoke_hilo"))
    assert sorted(points.lr) == [0.0001, 0.01] and set(points.rounds) == {2} and set(points.variant) == {"hilo_spar"}
    assert points.val_loss.notna().all() and (points.val_loss > 0).all()     # distill: reverse KL on validation
    assert points.val_loss.iloc[0] != points.val_loss.iloc[1]               # the lr reached the learner
    chosen = pd.read_csv(selected_path("smoke_hilo"))
    best = points.sort_values(["val_accuracy", "val_loss"], ascending=[False, True]).iloc[0]   # on-policy: accuracy
    assert chosen.lr.iloc[0] == float(best.lr) and chosen.selected_by.iloc[0] == "val_accuracy"
    assert bool(chosen.at_edge.iloc[0])                                      # two points: an edge, said so
    assert "grid edge" in capsys.readouterr().err
    assert main(argv) == 0                                                  # resumable: nothing rerun
    assert len(pd.read_csv(points_path("smoke_hilo"))) == 2


def test_a_horizon_curve_evaluates_every_k_updates_without_changing_the_trajectory(root) -> None:
    """curve=K writes every evaluation to <scenario>.curve.csv, no sweep point and no selection; its
    last evaluation is the ordinary tuning point's, bit for bit (evaluating draws nothing random)."""
    from harness.commands.tune import main
    from harness.tuned_lr import points_path, selected_path

    common = ["scenario=smoke_hilo", "only=[hilo_spar]", "seeds=[0]", "lrs=[0.001]", "extend=0", "onpolicy.steps=2",
              "task.validation_prompts=16"]
    assert main(common + ["curve=1"]) == 0
    curve = pd.read_csv(points_path("smoke_hilo").with_suffix(".curve.csv"))
    assert list(curve.step) == [1, 2] and set(curve.steps) == {2} and set(curve.lr) == {0.001}
    assert not points_path("smoke_hilo").exists() and not selected_path("smoke_hilo").exists()
    assert main(common) == 0
    point = pd.read_csv(points_path("smoke_hilo")).iloc[0]
    assert (point.val_loss, point.val_accuracy) == (curve.val_loss.iloc[-1], curve.val_accuracy.iloc[-1])
    assert main(common + ["curve=1"]) == 0                                   # resumable: nothing rerun
    assert len(pd.read_csv(points_path("smoke_hilo").with_suffix(".curve.csv"))) == 2
    assert main(["scenario=smoke_spra", "curve=2"]) == 2                    # federated: refused, one line


def test_a_missing_selected_file_is_one_config_error_naming_the_command(root) -> None:
    from omegaconf import OmegaConf

    from harness.compose import compose_config
    from harness.tuned_lr import config_error_in

    over = OmegaConf.to_container(compose_config(["scenario=hilo_distill"]).variants, resolve=False)["hilo_spar_10mbit"]
    assert any(str(o).startswith("onpolicy.lr=${tuned_lr:hilo_distill,") for o in over)
    cfg = compose_config(["scenario=hilo_distill", *over])
    with pytest.raises(Exception) as info:
        float(cfg.onpolicy.lr)
    err = config_error_in(info.value)
    assert err is not None and "python -m harness.tune scenario=hilo_distill" in str(err)
    out = warm_cli.run("harness", ["scenario=hilo_distill", "only=[hilo_spar_100mbit]"], cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "tuned_lr" in lines[0] and "python -m harness.tune scenario=hilo_distill" in lines[0]


def test_every_tuned_onpolicy_variant_reads_a_committed_interior_entry_of_its_own_training() -> None:
    import re

    from omegaconf import OmegaConf

    from harness.paths import scenarios_root
    from harness.commands.tune import training_overrides
    from harness.tuned_lr import read_selected

    pattern = re.compile(r"^onpolicy\.lr=\$\{tuned_lr:([\w-]+),([\w-]+)\}$")
    checked = 0
    for path in sorted(scenarios_root().glob("hilo_*.yaml")):
        variants = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get("variants") or {}
        for name, over in variants.items():
            lrs = [str(o) for o in over if str(o).startswith("onpolicy.lr=")]
            if not lrs:
                continue
            m = pattern.match(lrs[0])
            assert len(lrs) == 1 and m, f"{path.stem}.{name}: {lrs} is not one ${{tuned_lr:...}} (a hand-copied rate?)"
            scenario, entry = m.groups()
            table = read_selected(scenario).set_index("variant")
            assert entry in table.index, f"{path.stem}.{name} reads {entry!r}, not in {scenario}'s selected file"
            row = table.loc[entry]
            assert not row.at_edge and row.seeds >= 3 and row.grid_points >= 3, (name, dict(row))
            source = variants.get(entry) if scenario == path.stem else None
            if source is not None:                  # a link- or horizon-only sibling of the entry's variant
                assert sorted(map(str, training_overrides(list(source)))) == \
                    sorted(map(str, training_overrides(list(over)))), f"{name} trains unlike {entry}"
            checked += 1
    assert checked >= 2


def test_onpolicy_selection_maximises_validation_accuracy_ties_to_the_lower_loss() -> None:
    from harness.tuned_lr import select

    rows = [(1e-4, 0.80, 1.0), (3e-4, 0.85, 0.6), (1e-3, 0.85, 0.4), (3e-3, 0.70, 0.9)]
    points = pd.DataFrame([{"variant": "v", "optimizer": "adamw", "lr": lr, "seed": s, "rounds": 8,
                            "val_loss": loss, "val_accuracy": acc} for lr, acc, loss in rows for s in (0, 1, 2)]
                          + [{"variant": "v", "optimizer": "adamw", "lr": 1e-2, "seed": 0, "rounds": 2,
                              "val_loss": 0.1, "val_accuracy": 0.99}])      # a shorter pilot: never mixed in
    by_acc = select(points, "val_accuracy").iloc[0]
    assert by_acc.lr == 1e-3 and by_acc.selected_by == "val_accuracy" and not by_acc.at_edge
    assert by_acc.rounds == 8 and by_acc.grid_points == 4 and by_acc.seeds == 3
    assert select(points).iloc[0].lr == 1e-3                                  # by loss: the same here
    with pytest.raises(ConfigError, match="select: 'reward' is not allowed"):
        select(points, "reward")


def test_a_variant_left_out_by_only_may_be_untuned(root) -> None:
    """A run plans the variants it runs: another variant's ${tuned_lr:...} (here unresolvable: this root has no
    tuning files) is not its business, as in harness.tune; the run id never hashed the variants table."""
    from harness.compose import compose_config
    from harness.scenario import plan_scenario

    over = ["scenario=hilo_wide", "only=[hilo_powersgd_r1_10mbit]", "seeds=[0]"]
    (run,) = plan_scenario(compose_config(over), over)
    assert list(run.cfg.variants) == ["hilo_powersgd_r1_10mbit"] and run.variant == "hilo_powersgd_r1_10mbit"
    assert "tuned_lr" not in str(run.resolved_config())
    over = ["scenario=hilo_wide", "only=[hilo_spar_10mbit]", "seeds=[0]"]
    with pytest.raises(Exception) as info:                                  # the variant that runs still needs its entry
        plan_scenario(compose_config(over), over)
    assert "python -m harness.tune scenario=hilo_wide" in str(info.value)
