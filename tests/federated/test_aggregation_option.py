"""federated.aggregation (spra/ffa): column (default) | product; the planner's check, the server
method's state, and a real in-process run that stays in sync."""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from harness.federated import aggregate as agg
from harness.federated.adapter import Target
from harness.federated.methods import Setup, Update
from harness.federated.methods.spra import Spra
from harness.federated.settings import from_cfg
from harness.record import read_rows

from .fakes import config, run_in_threads


def test_column_is_the_default_and_bad_values_name_the_key():
    assert from_cfg(config("spra")).aggregation == "column"
    cfg = config("spra", aggregation="sum")
    with pytest.raises(ConfigError, match=r"^federated.aggregation: 'sum' is not allowed; choose one of column, product"):
        from_cfg(cfg)
    with pytest.raises(ConfigError, match=r"^federated.aggregation: product is not allowed with method 'fedit'"):
        from_cfg(config("fedit", aggregation="product"))
    assert from_cfg(config("ffa", aggregation="product")).aggregation == "product"


@pytest.mark.parametrize("aggregation, average", [("column", agg.column_average),
                                                   ("product", agg.padded_update_average)])
def test_spra_server_uses_the_configured_average(aggregation, average):
    target = Target("w", 3, 4)
    method = Spra(Setup(targets=[target], ranks=[4, 2], seed=0, aggregation=aggregation))
    g = torch.Generator().manual_seed(0)
    method.c["w"] = torch.randn(3, 4, generator=g)
    base = method.c["w"].clone()
    updates = [Update(client=0, rank=4, weight=1.0, c={"w": base + torch.randn(3, 4, generator=g)}),
               Update(client=1, rank=2, weight=3.0, c={"w": base[:, :2] + torch.randn(3, 2, generator=g)})]
    method.aggregate(0, updates)
    torch.testing.assert_close(method.c["w"], average([(u.c["w"], u.weight) for u in updates], base),
                               rtol=0, atol=0)


def test_a_product_run_stays_in_sync_and_differs_from_the_column_run(tmp_path):
    losses = {}
    for aggregation in ("column", "product"):
        run_dir = tmp_path / aggregation
        run_in_threads(config("spra", aggregation=aggregation), run_dir)
        rows = read_rows(run_dir)
        server = rows[rows.role == "server"].sort_values("step")
        assert server.in_sync.dropna().astype(bool).all()
        clients = rows[rows.role != "server"]                    # LoRA's own FLOPs: a part of the step's
        assert (clients.client_adapter_flops > 0).all() and (clients.client_adapter_flops < clients.client_flops).all()
        losses[aggregation] = list(server.eval_loss.dropna())
    assert losses["column"][0] == losses["product"][0]           # the same start
    assert losses["column"][-1] != losses["product"][-1]         # heterogeneous ranks: another average
