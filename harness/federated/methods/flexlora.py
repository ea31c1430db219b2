"""flexlora (FlexLoRA, Bai et al. 2024): the server keeps the product average and hands out its truncated SVD."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from harness.federated import aggregate as agg
from harness.federated.methods.base import Down, Merge, Method, Setup, Update
from harness.federated.projection import draw


class FlexLora(Method):
    """FlexLoRA (Bai et al. 2024): the server keeps the full product average D and gives each
    client the best rank-r_k factors of it (truncated SVD, B = U S, A = V^T: aggregate.svd_split)."""
    name = "flexlora"

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.d = {t.name: torch.zeros(t.d_out, t.d_in, dtype=torch.float64) for t in setup.targets}
        self._svd: dict[str, tuple[Tensor, Tensor, Tensor]] = {}

    def begin_round(self, t: int) -> Merge | None:
        self._svd = {n: torch.linalg.svd(d, full_matrices=False) for n, d in self.d.items()
                     if torch.count_nonzero(d) > 0}
        return None

    def down(self, t: int, client: int) -> Down:
        r = self.setup.ranks[client]
        c, z = {}, {}
        for tg in self.setup.targets:
            if tg.name not in self._svd:       # no update yet: a drawn basis, C = 0 (a fresh LoRA)
                c[tg.name] = torch.zeros(tg.d_out, r)
                z[tg.name] = draw(self.setup.seed, 0, tg.name, self.setup.r_max, tg.d_in)[:r].contiguous()
                continue
            # in LoRA terms (scale 1, A = Z / sqrt(r), adapter.py): B = U S, A = V^T, as in the paper
            b, a = agg.split_factors(*self._svd[tg.name], r)
            c[tg.name], z[tg.name] = (b / math.sqrt(r)).float(), (a * math.sqrt(r)).float()
        return Down(c=c, z=z)

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        if updates:
            for n in self.d:
                self.d[n] = agg.product_average([((u.c[n], u.z[n]), u.weight) for u in updates])
        return None

    def delta(self, name: str) -> Tensor:
        return self.d[name]
