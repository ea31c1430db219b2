"""Learning rates come from the committed tuning files, never by hand (harness.tuned_lr, harness.tune)."""
from __future__ import annotations

import re

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.paths import scenarios_root
from harness.commands.tune import ladder, parse
from harness.tuned_lr import read_selected, select, selected_path

TUNED = re.compile(r"^federated\.lr=\$\{tuned_lr:([\w-]+),([\w-]+)\}$")


def _federated_scenarios() -> dict[str, dict]:
    out = {}
    for path in sorted(scenarios_root().glob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        variants = cfg.get("variants") or {}
        if any(any(str(o).startswith("federated.lr=") for o in over) for over in variants.values()):
            out[path.stem] = variants
    return out


def _tuned(scenario: str) -> bool:
    return selected_path(scenario).exists()


def _training(over: list) -> list[str]:
    """A variant's overrides that change the training math (the tuning's subject): all but the lr and the link."""
    return sorted(str(o) for o in over if not str(o).startswith(("federated.lr=", "net.")))


def _entry(scenario: str, name: str, over: list, variants: dict) -> str:
    """The tuning entry a variant reads: its own, or (link-only variants such as spra_trace) that of the
    variant whose training overrides it shares exactly."""
    lrs = [o for o in over if str(o).startswith("federated.lr=")]
    assert len(lrs) == 1, f"{scenario}.{name}: one federated.lr override, got {lrs}"
    m = TUNED.match(lrs[0])
    assert m, f"{scenario}.{name}: {lrs[0]!r} is a hand-copied lr; use ${{tuned_lr:{scenario},{name}}}"
    assert m.group(1) == scenario, f"{scenario}.{name} reads another scenario's tuning: {m.groups()}"
    source = m.group(2)
    if source != name:
        assert source in variants and _training(variants[source]) == _training(over), \
            f"{scenario}.{name} reads {source}'s entry but differs from it in more than the link"
    return source


def test_every_variant_lr_is_read_from_its_own_tuning_entry() -> None:
    scenarios = {k: v for k, v in _federated_scenarios().items() if _tuned(k)}
    if not scenarios:
        pytest.skip("no committed results/tuning/<scenario>.selected.csv yet (spra_federated's lrs are provisional, "
                    "see its header): run python -m harness.tune scenario=spra_federated seeds=[0,1]")
    for scenario, variants in scenarios.items():
        for name, over in variants.items():
            _entry(scenario, name, over, variants)


def test_scenario_lrs_agree_with_the_committed_tuning_file() -> None:
    from harness.compose import compose_config
    from harness.scenario import merge_overrides

    scenarios = {k: v for k, v in _federated_scenarios().items() if _tuned(k)}
    if not scenarios:
        pytest.skip("no committed tuning file yet: python -m harness.tune scenario=spra_federated seeds=[0,1]")
    for scenario, variants in scenarios.items():
        table = read_selected(scenario)
        assert not table["at_edge"].any(), f"{selected_path(scenario)}: selected at a grid edge: " \
                                           f"{list(table[table['at_edge']]['variant'])}"
        assert (table["seeds"] >= 2).all(), "every selected lr needs >= 2 seeds"
        chosen = dict(zip(table["variant"], table["lr"]))
        for name, over in variants.items():
            cfg = compose_config(merge_overrides([f"scenario={scenario}"], list(over)))
            entry = _entry(scenario, name, over, variants)
            assert entry in chosen, f"{scenario}.{entry} is not in {selected_path(scenario)}"
            assert float(cfg.federated.lr) == chosen[entry]


def test_select_picks_lowest_mean_loss_and_flags_edges() -> None:
    points = pd.DataFrame([
        {"variant": "a", "optimizer": "sgd", "lr": lr, "seed": s, "rounds": 4, "val_loss": loss + 0.01 * s,
         "val_accuracy": 0.5}
        for lr, loss in ((1e-3, 1.0), (3e-3, 0.8), (1e-2, 0.9)) for s in (0, 1)] + [
        {"variant": "b", "optimizer": "sgd", "lr": lr, "seed": 0, "rounds": 4, "val_loss": loss, "val_accuracy": 0.5}
        for lr, loss in ((1e-3, 1.0), (3e-3, 0.7))])
    table = select(points).set_index("variant")
    assert table.loc["a", "lr"] == 3e-3 and not table.loc["a", "at_edge"] and table.loc["a", "seeds"] == 2
    assert table.loc["b", "lr"] == 3e-3 and table.loc["b", "at_edge"]


def test_ladder_and_arguments() -> None:
    assert [ladder(x, True) for x in (1e-3, 3e-3)] == [3e-3, 1e-2]
    assert [ladder(x, False) for x in (1e-3, 3e-3)] == [3e-4, 1e-3]
    opts, over = parse(["scenario=s", "seeds=[0,1,2]", "lrs=[0.001,0.01]", "federated.rounds=4"])
    assert opts["seeds"] == [0, 1, 2] and opts["lrs"] == [0.001, 0.01] and over == ["federated.rounds=4"]
    with pytest.raises(ConfigError, match="seeds"):
        parse(["scenario=s", "seeds=[a]"])
    with pytest.raises(ConfigError, match="scenario"):
        parse(["seeds=[0]"])


def test_missing_tuning_entry_names_the_command(tmp_path, monkeypatch) -> None:
    from harness.tuned_lr import tuned_lr

    (tmp_path / "scenarios").mkdir()
    monkeypatch.setenv("NARROWBAND_ROOT", str(tmp_path))
    with pytest.raises(ConfigError, match="python -m harness.tune scenario=x"):
        tuned_lr("x", "v")
