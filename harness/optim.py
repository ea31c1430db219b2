"""The one optimizer factory of the adapters' training loops (on-policy replicas, federated clients).

``foreach=False`` everywhere: the per-tensor loop is the same arithmetic on every device
type, which keeps a learner and its workers bit-identical where a fused kernel might not be.
(Pretraining the cached bases in harness.tasks.cache keeps its own recipe: it is part of the
cache key.)

:class:`FlatOptimizer` steps the same optimizer over one flat buffer that the tensors are views
of: element by element the same arithmetic as the per-tensor loop (bit-identical, tested in
tests/onpolicy/test_flat_optimizer.py), one kernel per operation instead of one per tensor. An
AdamW step of the tiny adapter (28 tensors, 279k numbers, gradients set and cleared): median
0.58 ms flat against 1.46 ms per tensor, one thread (tests/benchmarks/test_optimizer_step.py,
2026-12-01).
The on-policy replicas use it (their step is on HiLo's critical path); the federated clients
keep the plain optimizer.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch
from torch import Tensor, nn

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


def second_moments(optimizer: Any, params: Mapping[str, Tensor]
                   ) -> tuple[dict[str, Tensor], int, float, float]:
    """Adam's preconditioner state of ``optimizer`` (torch Adam/AdamW or a FlatOptimizer over
    them) for the named ``params``: (exp_avg_sq per name, shaped like the tensor; the steps
    taken; beta2; eps). Before the first step: ({}, 0, beta2, eps). Views, not copies: read
    them before the next step. ValueError for an optimizer without betas (SGD)."""
    group = optimizer.param_groups[0]
    if "betas" not in group:
        raise ValueError(f"second_moments: {type(optimizer).__name__} keeps no second moment (Adam/AdamW only)")
    moments, steps = {}, 0
    state = optimizer.state
    for name, p in params.items():
        entry = state.get(p, {})
        if "exp_avg_sq" in entry:
            moments[name] = entry["exp_avg_sq"]
            steps = int(entry["step"])
    return moments, steps, float(group["betas"][1]), float(group["eps"])


class FlatOptimizer:
    """The optimizer ``build`` makes, stepped over one flat fp32 buffer instead of tensor by tensor.

    On construction every tensor's ``.data`` becomes a view into one contiguous buffer (same
    values, same Parameter objects: the model keeps using them) and ``inner = build([flat])``.
    ``step`` concatenates the tensors' gradients into the buffer's gradient and steps ``inner``;
    every tensor must have a gradient (a per-tensor loop would skip one without: that is not
    expressible here, so it is an error). ``state``, ``state_dict`` and ``load_state_dict`` speak
    the per-tensor optimizer's format (per tensor, state tensors shaped like it), so checksums
    and resync payloads are those of a plain optimizer over the same tensors.
    """

    def __init__(self, params: Iterable[nn.Parameter], build: Callable[[list[nn.Parameter]], torch.optim.Optimizer]):
        self.params = list(params)
        if not self.params:
            raise ValueError("FlatOptimizer: no tensors to optimize")
        first = self.params[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in self.params):
            raise ValueError("FlatOptimizer: the tensors must share one dtype and device")
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.flat = nn.Parameter(flat)
        self.inner = build([self.flat])          # first: a bad name fails before any tensor is moved
        self.defaults = self.inner.defaults
        self._slices: list[tuple[int, int]] = []
        offset = 0
        for p in self.params:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            self._slices.append((offset, p.numel()))
            offset += p.numel()

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The one group's hyperparameters (writable: ``param_groups[0]["lr"] = ...`` takes effect)."""
        return self.inner.param_groups

    def step(self) -> None:
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if len(missing) == len(self.params):
            return
        if missing:
            raise ValueError(f"FlatOptimizer.step: tensor #{missing[0]} of {len(self.params)} has no gradient; "
                             f"a flat step needs all or none")
        self.flat.grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        self.inner.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        self.flat.grad = None

    def _split(self, value: Any, p: Tensor, offset: int, n: int) -> Any:
        if isinstance(value, Tensor) and value.dim() == 1 and value.numel() == self.flat.numel():
            return value[offset:offset + n].view_as(p)
        return value                     # a scalar entry (AdamW's step counter): shared by every tensor

    @property
    def state(self) -> dict[Tensor, dict[str, Any]]:
        """Per tensor, its state as views into the flat state (writes go through); {} before the first step."""
        inner = self.inner.state.get(self.flat, {})
        if not inner:
            return {}
        return {p: {k: self._split(v, p, o, n) for k, v in inner.items()}
                for p, (o, n) in zip(self.params, self._slices)}

    def state_dict(self) -> dict[str, Any]:
        """A per-tensor optimizer's state_dict (tensor i's state under key i, copies)."""
        group = {k: v for k, v in self.inner.param_groups[0].items() if k != "params"}
        views = self.state
        state = {i: {k: v.clone() if isinstance(v, Tensor) else v for k, v in views[p].items()}
                 for i, p in enumerate(self.params) if p in views}
        return {"state": state, "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a per-tensor state_dict (from :meth:`state_dict`, or a plain optimizer's over the same tensors)."""
        groups, per = state_dict["param_groups"], state_dict["state"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(f"FlatOptimizer.load_state_dict: {sum(len(g['params']) for g in groups)} tensors "
                             f"in {len(groups)} groups, this optimizer has {len(self.params)} in one")
        group = {**{k: v for k, v in groups[0].items() if k != "params"}, "params": [0]}
        flat_state: dict[str, Any] = {}
        if per:
            entries = [per[i] for i in groups[0]["params"]]
            for key, value in entries[0].items():
                if isinstance(value, Tensor) and value.shape == self.params[0].shape and value.dim() > 0:
                    flat_state[key] = torch.cat([e[key].reshape(-1) for e in entries])
                else:
                    if any(not torch.equal(torch.as_tensor(e[key]), torch.as_tensor(value)) for e in entries):
                        raise ValueError(f"FlatOptimizer.load_state_dict: {key!r} differs between tensors")
                    flat_state[key] = value
        self.inner.load_state_dict({"state": {0: flat_state} if flat_state else {}, "param_groups": [group]})
