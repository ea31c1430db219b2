"""The one optimizer factory of the adapters' training loops (on-policy replicas, federated clients).

``foreach=False`` everywhere: the per-tensor loop is the same arithmetic on every device
type, which keeps a learner and its workers bit-identical where a fused kernel might not be.
(Pretraining the cached bases in harness.tasks.cache keeps its own recipe: it is part of the
cache key.)
"""
from __future__ import annotations

from typing import Iterable

import torch

from harness.errors import ConfigError

OPTIMIZERS = ("adamw", "adam", "sgd")


def make_optimizer(params: Iterable[torch.nn.Parameter], name: str = "adamw", lr: float = 1e-3,
                   weight_decay: float = 0.0, momentum: float = 0.0,
                   key: str = "onpolicy.optimizer") -> torch.optim.Optimizer:
    """``name`` over ``params`` (lr per step; momentum: SGD only). ConfigError names ``key`` otherwise."""
    plist = list(params)
    if name == "adamw":
        return torch.optim.AdamW(plist, lr=lr, weight_decay=weight_decay, foreach=False)
    if name == "adam":
        return torch.optim.Adam(plist, lr=lr, weight_decay=weight_decay, foreach=False)
    if name == "sgd":
        return torch.optim.SGD(plist, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=False)
    raise ConfigError(f"{key}: {name!r} is not allowed; choose one of {', '.join(OPTIMIZERS)}")
