"""HetLoRA (Cho et al. 2024): sparsity-weighted aggregation on a hand-computed case, rank
self-pruning (pure rule, the adapter's resize, and the loop: a pruned rank persists and is what
the client sends)."""
from __future__ import annotations

import json

import pytest
import torch

from harness.errors import ConfigError
from harness.federated import pruning
from harness.federated.adapter import Target
from harness.federated.methods import Setup, Update
from harness.federated.methods.hetlora import HetLora
from harness.federated.settings import from_cfg
from harness.record import read_rows

from .fakes import config, run_in_threads


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_sparsity_weighted_aggregation_by_hand():
    """Client 0 (rank 1): B A = [[3, 4], [0, 0]], ||.||_F = 5. Client 1 (rank 2): B A = [[0, 1], [0, 0]],
    ||.||_F = 1. Weights 5/6 and 1/6 (the example counts 1 and 100 play no part); zero-padded averages:
    B = 5/6 [[1, 0], [0, 0]] + 1/6 [[1, 0], [0, 2]] = [[1, 0], [0, 1/3]],
    A = 5/6 [[3, 4], [0, 0]] + 1/6 [[0, 1], [0, 0]] = [[2.5, 3.5], [0, 0]]."""
    method = HetLora(Setup(targets=[Target("w", 2, 2)], ranks=[1, 2], seed=0))
    updates = [Update(0, 1, 1.0, {"w": _t([[1], [0]])}, {"w": _t([[3, 4]])}),
               Update(1, 2, 100.0, {"w": _t([[1, 0], [0, 2]])}, {"w": _t([[0, 1], [0, 0]])})]
    method.aggregate(0, updates)
    torch.testing.assert_close(method.c["w"], _t([[1, 0], [0, 1 / 3]]))
    torch.testing.assert_close(method.z["w"], _t([[2.5, 3.5], [0, 0]]))


def test_keep_rank_and_penalty():
    assert [pruning.keep_rank(r, 0.99) for r in (64, 4, 2, 1)] == [63, 3, 1, 1]
    assert pruning.keep_rank(8, 0.5) == 4
    b, a = _t([[1, 0, 3], [0, 0, 4]]), _t([[1, 1], [0, 0], [0, 2]])
    # tail beyond keep = 2: B[:, 2] = (3, 4), A[2] = (0, 2): ||.|| ||.|| = 5 * 2
    assert float(pruning.tail_penalty([(b, a)], 2)) == pytest.approx(10.0)
    assert float(pruning.tail_penalty([(b, a)], 3)) == 0.0
    assert pruning.tail_norm([(b, a)], 2) == pytest.approx(float((b[:, 2:] @ a[2:]).norm()))


def test_a_tail_made_tiny_is_pruned_one_that_is_not_is_kept():
    g = torch.Generator().manual_seed(0)
    c, z = torch.randn(6, 4, generator=g), torch.randn(4, 5, generator=g)
    keep = pruning.keep_rank(4, 0.75)
    before = pruning.tail_norm([(c, z)], keep)
    shrunk, grown = c.clone(), c.clone()
    shrunk[:, keep:] *= 1e-3
    grown[:, keep:] *= 2
    assert pruning.should_prune(4, keep, before, pruning.tail_norm([(shrunk, z)], keep))
    assert not pruning.should_prune(4, keep, before, pruning.tail_norm([(grown, z)], keep))
    assert not pruning.should_prune(4, keep, before, before)                  # unchanged: kept
    assert not pruning.should_prune(1, pruning.keep_rank(1, 0.5), 1.0, 0.0)    # rank 1 has no tail


def test_bad_prune_settings_name_the_key():
    cfg = config("hetlora")
    cfg["method"]["prune_gamma"] = 1.5
    with pytest.raises(ConfigError, match=r"method.prune_gamma: 1.5 is outside \(0, 1\]"):
        from_cfg(cfg)
    cfg = config("fedit")
    cfg["method"]["prune_gamma"] = 0.9
    with pytest.raises(ConfigError, match="only hetlora self-prunes"):
        from_cfg(cfg)


def test_resize_keeps_the_first_components_product(tmp_path):
    cfg = config("hetlora", rounds=1)
    parties = run_in_threads(cfg, tmp_path)
    ad = parties[1].adapter
    name = ad.names[0]
    c, z = ad.coeffs(name), ad.basis(name)
    ad.resize(name, 3)
    assert ad.rank(name) == 3 and ad.a(name).shape[0] == 3 and ad.b(name).shape[1] == 3
    torch.testing.assert_close(ad.coeffs(name) @ ad.basis(name), c[:, :3] @ z[:3])


def test_pruned_rank_persists_and_is_what_the_client_sends(tmp_path):
    """A strong tail penalty (lambda 1, gamma 1/2) makes the tails shrink during local training from
    round 2 on (round 1 starts from B = 0: no tail to shrink), so each client halves its rank per round."""
    cfg = config("hetlora", rounds=4, eval_every=0)
    cfg["method"].update(prune_gamma=0.5, prune_lambda=1.0)
    run_in_threads(cfg, tmp_path)
    rows = read_rows(tmp_path)
    server = rows[rows.role == "server"].sort_values("step")
    client0 = rows[rows.role == "client0"].sort_values("step")
    assert list(client0["rank"]) == [8, 8, 8, 8]                   # configured: the key
    assert list(client0.current_rank) == [8, 8, 4, 2]              # trained at
    assert list(client0.pruned_to) == [8, 4, 2, 1]                 # kept and uploaded
    assert (client0.tail_after.iloc[1:] < client0.tail_before.iloc[1:]).all()
    assert json.loads(server.client_ranks.iloc[-1]) == [1, 1, 1]
    assert sorted(json.loads(server.round_ranks.iloc[2])) == [1, 2, 4]   # round 2's uploads, at the pruned ranks
    assert server.in_sync.dropna().astype(bool).all()


def test_gamma_one_never_prunes(tmp_path):
    cfg = config("hetlora", rounds=2, eval_every=0)
    cfg["method"].update(prune_gamma=1.0, prune_lambda=0.0)
    run_in_threads(cfg, tmp_path)
    clients = read_rows(tmp_path).query("role != 'server'")
    assert (clients.current_rank == clients["rank"]).all() and (clients.pruned_to == clients["rank"]).all()
