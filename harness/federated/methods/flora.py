"""flora (FLoRA): a fresh LoRA per round; the server stacks the updates and every party merges them."""
from __future__ import annotations

import torch
from torch import Tensor

from harness.federated import aggregate as agg
from harness.federated.methods.base import Down, Merge, Method, Update


class FLora(Method):
    """FLoRA: fresh LoRA per round; the server stacks the updates (exact) and every party
    merges the stack into its base."""
    name = "flora"

    def down(self, t: int, client: int) -> Down:
        return Down(basis="fresh", period=t)

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        if not updates:
            return None
        c, z = {}, {}
        for n in (tg.name for tg in self.setup.targets):
            c[n], z[n] = agg.stack([((u.c[n], u.z[n]), u.weight) for u in updates])
        return Merge(index=-1, c=c, z=z)

    def delta(self, name: str) -> Tensor:
        tg = next(t for t in self.setup.targets if t.name == name)
        return torch.zeros(tg.d_out, tg.d_in, dtype=torch.float64)
