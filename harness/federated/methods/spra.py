"""spra (SPRA-LoRA) and ffa (FFA-LoRA): A frozen at a seeded Gaussian draw, only B trained and sent.

spra resamples the draw every ``resample_every`` rounds after a merge-and-reset; ffa never does.
"""
from __future__ import annotations

import torch

from harness.federated import aggregate as agg
from harness.federated.methods.base import Basis, Merge, Update
from harness.federated.projection import draw, period_of


class Spra(Basis):
    """SPRA-LoRA: Z_p from the seed, B only, merge-and-reset every T rounds."""
    name = "spra"
    trains_a = False
    seeded_basis = True

    def begin_round(self, t: int) -> Merge | None:
        period = period_of(t, self.setup.resample_every)
        if period == self.period:
            return None
        merge = Merge(index=-1, c={n: v.clone() for n, v in self.c.items()}, period=self.period)
        self.period = period
        self.c = {n: torch.zeros_like(v) for n, v in self.c.items()}
        self.z = {tg.name: draw(self.setup.seed, period, tg.name, self.setup.r_max, tg.d_in)
                  for tg in self.setup.targets}
        return merge

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        average = agg.padded_update_average if self.setup.aggregation == "product" else agg.column_average
        for n in self.c:
            self.c[n] = average([(u.c[n], u.weight) for u in updates], self.c[n])
        return None

    def basis_extra(self) -> dict[str, Tensor]:
        return dict(self.z)


class Ffa(Spra):
    """FFA-LoRA: A frozen once (T = 0 whatever the config), B only."""
    name = "ffa"

    def begin_round(self, t: int) -> Merge | None:
        return None
