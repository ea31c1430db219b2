"""fedit (FedIT, Zhang et al. 2024): plain federated LoRA, A and B averaged separately; the report's reference."""
from __future__ import annotations

from harness.federated import aggregate as agg
from harness.federated.methods.base import Basis, Merge, Update


class FedIt(Basis):
    """FedIT: A and B trained, sent and averaged separately (column / row average)."""
    name = "fedit"
    report_reference = True      # plain federated LoRA: the baseline every other method's ratios are taken against

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        for n in self.c:
            self.c[n] = agg.column_average([(u.c[n], u.weight) for u in updates], self.c[n])
            self.z[n] = agg.row_average([(u.z[n], u.weight) for u in updates], self.z[n])
        return None
