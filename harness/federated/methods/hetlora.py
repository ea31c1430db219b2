"""hetlora (HetLoRA, Cho et al. 2024): zero-padded, sparsity-weighted averages; clients self-prune."""
from __future__ import annotations

from harness.federated import aggregate as agg
from harness.federated.methods.base import Basis, Merge, Update


class HetLora(Basis):
    """HetLoRA (Cho et al. 2024): zero-pad to r_max, sparsity-weighted average (weights
    ``||C_k Z_k||_F`` per target, aggregate.norm_weights), clients truncate to their current
    rank. Clients self-prune (pruning.py); an update's width is the client's rank from then on."""
    name = "hetlora"
    prunes = True

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        for u in updates:
            self.ranks[u.client] = u.rank
        for n in self.c:
            w = agg.norm_weights([((u.c[n], u.z[n]), u.weight) for u in updates]) if updates else []
            self.c[n] = agg.zero_pad_average([(u.c[n], wk) for u, wk in zip(updates, w)], self.c[n], dim=1)
            self.z[n] = agg.zero_pad_average([(u.z[n], wk) for u, wk in zip(updates, w)], self.z[n], dim=0)
        return None
