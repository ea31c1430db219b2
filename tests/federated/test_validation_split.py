"""The tuning split: validation problems disjoint from every client's data and from the test set."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.conf.schema import TaskConfig
from harness.errors import ConfigError
from harness.tasks.federated import build_federated
from harness.tasks.tokenizer import Tokenizer


def _task(**over):
    cfg = OmegaConf.to_container(OmegaConf.structured(TaskConfig(name="federated", examples=1024, eval_prompts=128)))
    cfg.update(over)
    return build_federated(cfg, Tokenizer.synthetic(), 4, seed=3)


def _keys(problems) -> set[tuple[int, int, int]]:
    return set(zip(problems.a.tolist(), problems.op.tolist(), problems.b.tolist()))


def test_validation_is_disjoint_from_training_and_test() -> None:
    test = _task()
    val = _task(eval_split="validation", validation_prompts=200)
    train = set().union(*(_keys(val.client_data(k).problems) for k in range(4)))
    assert train == set().union(*(_keys(test.client_data(k).problems) for k in range(4)))   # same clients' data
    v = _keys(val.eval_problems)
    assert len(v) == 200
    assert not v & train
    assert not v & _keys(test.eval_problems)


def test_bad_split_is_named() -> None:
    with pytest.raises(ConfigError, match="task.eval_split"):
        _task(eval_split="holdout")
