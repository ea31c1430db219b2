"""Fixtures of the tasks tests: a very small model config, a task config with few
pretraining steps, and a private model cache per test session."""
from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from harness.conf.schema import TaskConfig

MICRO = dict(name="tiny", path=None, vocab_size=0, hidden_size=32, intermediate_size=64, num_layers=1,
             num_heads=2, num_kv_heads=2, max_positions=32, rank=4, alpha=None,
             targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
             dtype="float32", device="cpu", teacher_path=None, init_seed=0, lora_init="default")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nbcache")


@pytest.fixture(autouse=True)
def _private_cache(cache_dir, monkeypatch):
    monkeypatch.setenv("NARROWBAND_CACHE", str(cache_dir))


@pytest.fixture
def model_cfg() -> dict:
    return dict(MICRO)


@pytest.fixture
def task_cfg() -> dict:
    cfg = asdict(TaskConfig())
    cfg.update(teacher_steps=4, student_steps=2, pretrain_batch=16, eval_prompts=16, prompt_batch=4,
               samples_per_prompt=4, examples=256)
    return cfg


@pytest.fixture(scope="session")
def tok():
    from harness.tasks import Tokenizer
    return Tokenizer.synthetic()
