"""What every federated party builds: the student base with its LoRA, the task, the method.

The server holds the global adapter at r_max (for evaluation); client k holds its own at
r_k. Every party loads the same cached student base, so all bases start bit-identical;
base merges (spra periods, flora stacks) are applied with :func:`apply_merge` by everyone,
in the same order, and compared by checksum.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from harness.conf.schema import ModelConfig, TaskConfig
from harness.federated import methods as fm
from harness.federated.adapter import Adapter, Target
from harness.federated.projection import draw, merge
from harness.federated.settings import Settings


@dataclass
class Party:
    settings: Settings
    model: Any                   # peft.PeftModel on the party's device
    adapter: Adapter
    task: Any                    # harness.tasks FederatedTask
    setup: fm.Setup
    device: str
    model_plan: ModelConfig      # the RunPlan's typed model and task (another rank's party is built
    task_plan: TaskConfig | None  # from them: pool.py; the task None where a test handed one over)
    source: Any = None           # the plan's ModelSource it was loaded from (None: a base handed over in tests)

    @property
    def targets(self) -> list[Target]:
        return self.adapter.targets


def build_party(model_cfg: ModelConfig, task_cfg: TaskConfig, settings: Settings, rank: int, device: str = "cpu", *,
                task: Any = None, base: Any = None, source: Any = None) -> Party:
    """Load the student base, wrap it with LoRA at ``rank`` (A and B zero: set by the method).

    ``model_cfg``, ``task_cfg``: the RunPlan's typed parts. ``task`` and ``base`` (a plain
    transformers model, used as is) replace the planned ones in tests and the tuning protocol;
    otherwise every party loads the student from the folder the RunPlan's ``model_source`` names
    and builds the task.
    """
    from harness.tasks import make_lora

    if base is None:
        from harness.tasks import load_base
        base = load_base("student", model_cfg, task_cfg, progress=False, source=source)
    model = make_lora(base, rank=int(rank), alpha=model_cfg.alpha, targets=list(model_cfg.targets),
                      init="zeros", seed=settings.seed).to(device)
    adapter = Adapter(model, a_var_rank=settings.a_var_rank)
    if task is None:
        from harness.tasks import build_federated, build_tokenizer
        task = build_federated(task_cfg, build_tokenizer(model_cfg, source), settings.clients, settings.seed)
    setup = fm.Setup(targets=adapter.targets, ranks=list(settings.ranks), seed=settings.seed,
                     resample_every=settings.resample_every, aggregation=settings.aggregation)
    return Party(settings, model, adapter, task, setup, device, model_cfg, task_cfg, source)


class Bases:
    """The seeded Z of the current period per target (r_max rows), cached per period."""

    def __init__(self, setup: fm.Setup) -> None:
        self.setup = setup
        self.period: int | None = None
        self.z: dict[str, Tensor] = {}

    def of(self, period: int) -> dict[str, Tensor]:
        if period != self.period:
            self.z = {t.name: draw(self.setup.seed, period, t.name, self.setup.r_max, t.d_in)
                      for t in self.setup.targets}
            self.period = period
        return self.z


def apply_merge(adapter: Adapter, entry: fm.Merge, bases: Bases) -> None:
    """W <- W + C Z in every target (Z from the entry, or the seeded draw of its period)."""
    z_all = entry.z if entry.z is not None else bases.of(int(entry.period))
    for name in adapter.names:
        merge(adapter.base(name), entry.c[name], z_all[name])


def weight_of(data: Any) -> float:
    """A client's aggregation weight: its number of training examples."""
    for attr in ("size", "n", "examples", "num_examples"):
        value = getattr(data, attr, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return float(len(data))


def sync_device(device: str) -> None:
    """Wait for queued GPU work so wall-clock timings are honest (no-op on CPU)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize(device)
