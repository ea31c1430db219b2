"""The shared projection: seeded draw, variance convention, coefficients, merge, lr rule."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from harness.federated import aggregate as agg
from harness.federated import projection as proj


def test_draw_is_a_pure_function_of_seed_period_module():
    a = proj.draw(3, 1, "layers.0.q_proj", 8, 16)
    assert torch.equal(a, proj.draw(3, 1, "layers.0.q_proj", 8, 16))
    assert not torch.equal(a, proj.draw(3, 2, "layers.0.q_proj", 8, 16))
    assert not torch.equal(a, proj.draw(3, 1, "layers.0.k_proj", 8, 16))
    assert not torch.equal(a, proj.draw(4, 1, "layers.0.q_proj", 8, 16))


def test_draw_identical_in_another_process_with_other_threads():
    """Server and clients are separate processes: the same seed must give the same bits."""
    code = ("import torch; torch.set_num_threads(1); from harness.federated.projection import draw, checksum; "
            "print(checksum({'z': draw(7, 3, 'layers.1.down_proj', 64, 256)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    here = proj.checksum({"z": proj.draw(7, 3, "layers.1.down_proj", 64, 256)})
    assert out.stdout.strip() == here


def test_client_a_is_unbiased_projection():
    """Variance 1/r: E[A^T A] = I (averaged over draws)."""
    d, r, n = 12, 4, 3000
    acc = torch.zeros(d, d, dtype=torch.float64)
    for i in range(n):
        a = proj.client_a(proj.draw(0, i, "m", 8, d), r).double()
        acc += a.t() @ a
    torch.testing.assert_close(acc / n, torch.eye(d, dtype=torch.float64), rtol=0, atol=0.1)
    z = proj.draw(0, 0, "m", 64, 256)
    assert abs(proj.client_a(z, 16).var().item() - 1 / 16) < 0.01


def test_coefficients_make_mixed_rank_scales_exact():
    """Clients with different ranks and LoRA scales: averaging coefficients == averaging products."""
    z = proj.draw(1, 0, "m", 4, 5).double()
    clients = [(4, 2.0, 1.0), (2, 0.5, 3.0)]        # (rank, scale alpha/r, weight)
    items, bs, products = [], [], []
    for i, (r, s, w) in enumerate(clients):
        b = torch.randn(6, r, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
        bs.append(b)
        products.append(s * b @ proj.client_a(z, r))
        items.append((proj.to_coeff(b, r, s), w))
    c = agg.column_average(items, torch.zeros(6, 4, dtype=torch.float64))
    # expected from the clients' own B and A (not from their coefficients): column j of the merged
    # product is the weighted average, over the clients holding column j, of s * outer(B[:, j], A[j]);
    # columns 0, 1 are held by both, 2, 3 only by the rank-4 client
    expected = torch.zeros(6, 5, dtype=torch.float64)
    for j in range(4):
        holders = [k for k in range(2) if clients[k][0] > j]
        total = sum(clients[k][2] for k in holders)
        for k in holders:
            r, s, w = clients[k]
            expected += (w / total) * s * torch.outer(bs[k][:, j], proj.client_a(z, r)[j])
    torch.testing.assert_close(c @ z, expected, rtol=0, atol=1e-12)
    # the rank-2 client's whole product is in columns 0, 1: there the merge is the plain weighted
    # average of the two clients' products (the rank-4 client's restricted to its first two columns)
    first_two = clients[0][1] * bs[0][:, :2] @ proj.client_a(z, 4)[:2]
    torch.testing.assert_close(c[:, :2] @ z[:2], (1.0 * first_two + 3.0 * products[1]) / 4.0, rtol=0, atol=1e-12)
    # (the column pieces used for `expected` are the products': they sum back to each client's product)
    for k, (r, s, _) in enumerate(clients):
        pieces = sum(s * torch.outer(bs[k][:, j], proj.client_a(z, r)[j]) for j in range(r))
        torch.testing.assert_close(pieces, products[k], rtol=0, atol=1e-12)
    b_back = proj.from_coeff(c, 2, 0.5)
    torch.testing.assert_close(0.5 * b_back @ proj.client_a(z, 2), c[:, :2] @ z[:2], rtol=0, atol=1e-12)


def test_merge_is_deterministic_and_adds_the_product():
    w = torch.randn(6, 5)
    c, z = torch.randn(6, 3), proj.draw(0, 0, "m", 4, 5)
    w1, w2 = w.clone(), w.clone()
    proj.merge(w1, c, z)
    proj.merge(w2, c, z)
    assert proj.checksum({"w": w1}) == proj.checksum({"w": w2})
    torch.testing.assert_close(w1, w + c @ z[:3], rtol=1e-6, atol=1e-6)


def test_checksum_sees_one_bit():
    t = torch.randn(10)
    flipped = t.clone()
    flipped.view(torch.int32)[3] ^= 1
    assert proj.checksum({"t": t}) != proj.checksum({"t": flipped})


@pytest.mark.parametrize("rule,expected", [("linear", 0.25), ("sqrt", 0.5), ("const", 1.0)])
def test_rank_lr(rule, expected):
    assert math.isclose(proj.rank_lr(1.0, 4, 16, rule), expected)


def test_rank_lr_rejects_unknown_rule():
    with pytest.raises(ValueError, match="method.lr_rule: 'cubic'"):
        proj.rank_lr(1.0, 4, 16, "cubic")


def test_period_of():
    assert [proj.period_of(i, 3) for i in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert proj.period_of(100, 0) == 0
