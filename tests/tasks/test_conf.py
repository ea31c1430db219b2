"""Every model and task option file validates against its schema; the headroom CLI loads them."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.conf.schema import ModelConfig, TaskConfig
from harness.commands.headroom import load_section

CONF = Path(__file__).resolve().parents[2] / "harness" / "conf"


@pytest.mark.parametrize("group,schema", [("model", ModelConfig), ("task", TaskConfig)])
def test_option_files_validate(group, schema):
    files = sorted((CONF / group).glob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text()
        assert text.startswith("#"), f"{path.name} should open with a comment saying what it is"
        data = OmegaConf.load(path)
        assert list(data.pop("defaults")) == [f"{group}_schema", "_self_"]
        cfg = OmegaConf.merge(OmegaConf.structured(schema), data)
        if group == "model" and cfg.name == "hf" and path.stem != "hf":
            assert cfg.path, f"{path.name}: a preset of the hf source names its model.path"    # e.g. smollm2
        elif group == "task" and cfg.get("format") == "chat":
            mode = {"federated": "sft"}.get(cfg.name, cfg.name)          # the federated task is SFT
            assert path.stem == f"chat_{mode}", f"{path.name}: a chat task file is chat_<mode>"
        else:
            assert cfg.name == path.stem


def test_sections_take_overrides():
    cfg = load_section("model", "tiny", ["model.rank=8", "task.digits=3"])
    assert cfg.rank == 8 and cfg.name == "tiny"
    assert load_section("task", "reward", ["task.digits=3"]).digits == 3
    with pytest.raises(SystemExit, match="model: 'huge' is not allowed"):
        load_section("model", "huge", [])


def test_headroom_cli_ends_with_one_json_line(capsys):
    import json

    from harness.commands.headroom import main
    micro = ["model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=1", "model.num_heads=2",
             "model.num_kv_heads=2", "model.rank=4", "task.teacher_steps=3", "task.student_steps=2",
             "task.prompt_batch=2", "task.samples_per_prompt=2", "task.examples=64"]
    main(["--json", "--steps", "2", "--eval", "8", "--every", "1", *micro])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    out = json.loads(last)
    for key in ("teacher_accuracy", "student_accuracy", "distill_accuracy", "reward_accuracy"):
        assert 0.0 <= out[key] <= 1.0
    assert [s for s, _ in out["distill_curve"]] == [0, 1, 2]
    assert 0.0 <= out["federated_accuracy"] <= 1.0 and out["federated_eval_loss"] > 0
