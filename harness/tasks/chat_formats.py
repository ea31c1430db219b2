"""``task.format`` picks the task family a loop builds: ``synthetic`` or ``chat``.

``harness.tasks.build_task`` and ``build_federated`` resolve here, so every loop (on-policy
learner and workers, federated parties, tuning, the plan's data check) gets the chat task
(harness.tasks.chat) when ``task.format=chat`` and the synthetic arithmetic tasks
(harness.tasks.onpolicy, harness.tasks.federated) otherwise, through one call.
"""
from __future__ import annotations

from typing import Any

from harness.errors import ConfigError
from harness.tasks.plans import task_plan
from harness.tasks.tokenizer import Tokenizer

FORMATS = ("synthetic", "chat")


def task_format(task_cfg: Any) -> str:
    """``task.format`` checked against FORMATS (ConfigError naming the key otherwise)."""
    fmt = str(task_plan(task_cfg).format)
    if fmt not in FORMATS:
        raise ConfigError(f"task.format: {fmt!r} is not allowed; choose one of {', '.join(FORMATS)}")
    return fmt


def build_task(task_cfg: Any, tokenizer: Tokenizer, teacher=None, sampler: bool = False):
    """The on-policy task of ``task.name`` in ``task.format`` (``task_cfg``: the plan's TaskConfig, or a
    mapping the schema completes); ``sampler=True``: the sampling-only task a worker holds (prompts,
    rollouts, rewards; no teacher, no loss)."""
    task_cfg = task_plan(task_cfg)
    if task_format(task_cfg) == "chat":
        from harness.tasks.chat import build_chat_task
        return build_chat_task(task_cfg, tokenizer, teacher, sampler=sampler)
    from harness.tasks import onpolicy
    if sampler:
        return onpolicy.OnPolicyTask(task_cfg, tokenizer)
    return onpolicy.build_task(task_cfg, tokenizer, teacher=teacher)


def build_federated(task_cfg: Any, tokenizer: Tokenizer, n_clients: int, seed: int):
    """The federated SFT task in ``task.format`` over ``n_clients`` clients (data drawn with ``seed``)."""
    task_cfg = task_plan(task_cfg)
    if task_format(task_cfg) == "chat":
        from harness.tasks.chat import ChatSFTTask
        return ChatSFTTask(task_cfg, tokenizer, n_clients, seed)
    from harness.tasks import federated
    return federated.build_federated(task_cfg, tokenizer, n_clients, seed)
