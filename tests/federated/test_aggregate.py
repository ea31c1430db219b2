"""Aggregators are pure: exactness of spra/ffa and flora, inexactness of fedit, on hand-made tensors."""
from __future__ import annotations

import pytest
import torch

from harness.federated import aggregate as agg

D_OUT, D_IN, R_MAX = 6, 5, 4


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _b(rank: int, seed: int) -> torch.Tensor:
    return torch.randn(D_OUT, rank, generator=_gen(seed), dtype=torch.float64)


def _a(rank: int, seed: int) -> torch.Tensor:
    return torch.randn(rank, D_IN, generator=_gen(seed), dtype=torch.float64)


def test_column_average_equal_ranks_is_average_of_products():
    a = _a(R_MAX, 0)
    items = [(_b(R_MAX, 1), 3.0), (_b(R_MAX, 2), 1.0), (_b(R_MAX, 3), 2.0)]
    p = agg.normalised([w for _, w in items])
    out = agg.column_average(items, torch.zeros(D_OUT, R_MAX, dtype=torch.float64))
    expected = sum(pk * (b @ a) for (b, _), pk in zip(items, p))
    torch.testing.assert_close(out @ a, expected, rtol=0, atol=1e-12)


def test_column_average_mixed_ranks_is_per_column_average_of_products():
    """sum over clients and held columns of (w_k / W_j) B_k[:, j] A[j] == (aggregated B) A."""
    a = _a(R_MAX, 0)
    ranks, weights = [4, 2, 1], [1.0, 2.0, 5.0]
    items = [(_b(r, 10 + i), w) for i, (r, w) in enumerate(zip(ranks, weights))]
    out = agg.column_average(items, torch.zeros(D_OUT, R_MAX, dtype=torch.float64))
    expected = torch.zeros(D_OUT, D_IN, dtype=torch.float64)
    for j in range(R_MAX):
        holders = [(b, w) for b, w in items if b.shape[1] > j]
        total = sum(w for _, w in holders)
        for b, w in holders:   # the clients' own rank-1 products, averaged over holders
            expected += (w / total) * torch.outer(b[:, j], a[j])
    torch.testing.assert_close(out @ a, expected, rtol=0, atol=1e-12)
    # column 0 is held by all three: plain weighted mean; column 3 only by the rank-4 client
    torch.testing.assert_close(out[:, 0], sum(w * b[:, 0] for b, w in items) / sum(weights))
    torch.testing.assert_close(out[:, 3], items[0][0][:, 3])


def test_column_average_keeps_unheld_columns_and_empty_round():
    base = _b(R_MAX, 7)
    out = agg.column_average([(_b(2, 8), 1.0)], base)
    torch.testing.assert_close(out[:, 2:], base[:, 2:], rtol=0, atol=0)
    torch.testing.assert_close(agg.column_average([], base), base, rtol=0, atol=0)


def test_column_average_rejects_bad_shapes():
    with pytest.raises(ValueError, match="does not fit"):
        agg.column_average([(_b(R_MAX + 1, 0), 1.0)], torch.zeros(D_OUT, R_MAX))


def test_fedit_average_of_factors_is_not_average_of_products():
    items = [((_b(R_MAX, 1), _a(R_MAX, 2)), 1.0), ((_b(R_MAX, 3), _a(R_MAX, 4)), 1.0)]
    b_avg = agg.column_average([(b, w) for (b, _), w in items], torch.zeros(D_OUT, R_MAX, dtype=torch.float64))
    a_avg = agg.row_average([(a, w) for (_, a), w in items], torch.zeros(R_MAX, D_IN, dtype=torch.float64))
    exact = agg.product_average(items)
    gap = (b_avg @ a_avg - exact).norm() / exact.norm()
    assert gap > 0.1, f"avg(B) avg(A) should differ from avg(B A); relative gap {gap:.3g}"


def test_row_average_is_transpose_of_column_average():
    items = [(_a(3, 1), 1.0), (_a(1, 2), 3.0)]
    out = agg.row_average(items, torch.zeros(R_MAX, D_IN, dtype=torch.float64))
    torch.testing.assert_close(out[0], (items[0][0][0] + 3 * items[1][0][0]) / 4)
    torch.testing.assert_close(out[1:3], items[0][0][1:3])
    assert out[3].abs().sum() == 0


def test_flora_stack_is_exact_with_mixed_ranks():
    items = [((_b(r, i), _a(r, 10 + i)), w) for i, (r, w) in enumerate([(4, 1.0), (2, 2.0), (1, 1.0)])]
    b_s, a_s = agg.stack(items)
    assert b_s.shape == (D_OUT, 7) and a_s.shape == (7, D_IN)
    torch.testing.assert_close(b_s @ a_s, agg.product_average(items), rtol=0, atol=1e-12)


def test_hetlora_zero_pad_shrinks_components_held_by_few():
    b4, b1 = _b(3, 1), _b(1, 2)
    base = _b(R_MAX, 9)
    out = agg.zero_pad_average([(b4, 1.0), (b1, 1.0)], base, dim=1)
    torch.testing.assert_close(out[:, 0], (b4[:, 0] + b1[:, 0]) / 2)
    torch.testing.assert_close(out[:, 1:3], b4[:, 1:] / 2)
    torch.testing.assert_close(out[:, 3], base[:, 3])          # nobody holds it: kept
    rows = agg.zero_pad_average([(_a(1, 3), 1.0), (_a(2, 4), 3.0)], _a(R_MAX, 5), dim=0)
    torch.testing.assert_close(rows[1], 0.75 * _a(2, 4)[1])


def test_svd_split_is_best_low_rank_and_exact_at_full_rank():
    items = [((_b(2, 1), _a(2, 2)), 1.0), ((_b(2, 3), _a(2, 4)), 1.0)]
    delta = agg.product_average(items)          # rank <= 4
    b, a = agg.svd_split(delta, 4)
    torch.testing.assert_close(b @ a, delta, rtol=0, atol=1e-10)
    s = torch.linalg.svdvals(delta)
    torch.testing.assert_close(a @ a.T, torch.eye(4, dtype=torch.float64))   # FlexLoRA: A = V^T, orthonormal rows
    torch.testing.assert_close(b.norm(dim=0), s[:4])                         # B = U S
    b1, a1 = agg.svd_split(delta, 1)
    torch.testing.assert_close((delta - b1 @ a1).norm(), s[1:].norm())
    b5, a5 = agg.svd_split(delta, 5)            # above the numerical rank: the 5th has S = 0
    torch.testing.assert_close(b5 @ a5, delta, rtol=0, atol=1e-10)
    assert a5[4].norm() == pytest.approx(1.0) and b5[:, 4].norm() < 1e-10  # a live A row, B = 0: no stabiliser needed
    with pytest.raises(ValueError, match="rank 6 outside"):
        agg.svd_split(delta, 6)


def test_hetlora_weights_are_update_norms():
    b1, a1, b2, a2 = _b(2, 1), _a(2, 2), 3 * _b(1, 3), _a(1, 4)
    w = agg.norm_weights([((b1, a1), 1.0), ((b2, a2), 1.0)])
    assert w == pytest.approx([float((b1 @ a1).norm()), float((b2 @ a2).norm())])
    assert agg.norm_weights([((0 * b1, a1), 5.0), ((0 * b2, a2), 1.0)]) == [1.0, 1.0]   # nothing moved: equal


def test_weights_must_be_positive():
    with pytest.raises(ValueError, match="sum to"):
        agg.normalised([0.0, 0.0])
    with pytest.raises(ValueError, match=">= 0"):
        agg.normalised([1.0, -1.0])


# --------------------------------------------------------------------------- product reading (spra/ffa ablation)
def test_padded_update_average_is_the_weighted_average_of_the_clients_dense_product_updates():
    """Brute force in d_out x d_in: W_new = W + sum_k p_k ((B_k - B[:, :r_k]) A[:r_k]), p over all clients."""
    a, base = _a(R_MAX, 0), _b(R_MAX, 1)
    ranks, weights = [4, 2, 1], [1.0, 2.0, 5.0]
    items = [(base[:, :r] + _b(r, 20 + i), w) for i, (r, w) in enumerate(zip(ranks, weights))]
    out = agg.padded_update_average(items, base)
    dense = base @ a
    for (b, w), r in zip(items, ranks):
        dense = dense + (w / sum(weights)) * ((b - base[:, :r]) @ a[:r])
    torch.testing.assert_close(out @ a, dense, rtol=0, atol=1e-12)
    # column 3 is held by the rank-4 client alone: it moves by that client's share (1/8), not all of it
    torch.testing.assert_close(out[:, 3], base[:, 3] + (1 / 8) * (items[0][0][:, 3] - base[:, 3]))
    assert not torch.allclose(out, agg.column_average(items, base))


def test_padded_update_average_equals_the_column_average_at_equal_ranks():
    base = _b(R_MAX, 2)
    items = [(_b(R_MAX, 30 + i), w) for i, w in enumerate([3.0, 1.0, 2.0])]
    torch.testing.assert_close(agg.padded_update_average(items, base), agg.column_average(items, base),
                               rtol=0, atol=1e-12)


def test_padded_update_average_fixed_point_empty_round_and_shapes():
    base = _b(R_MAX, 3)
    unchanged = [(base[:, :r].clone(), 1.0) for r in (4, 2, 1)]
    torch.testing.assert_close(agg.padded_update_average(unchanged, base), base, rtol=0, atol=0)
    torch.testing.assert_close(agg.padded_update_average([], base), base, rtol=0, atol=0)
    assert agg.padded_update_average([(base[:, :2].float(), 1.0)], base.float()).dtype == torch.float32
    with pytest.raises(ValueError, match="does not fit"):
        agg.padded_update_average([(_b(R_MAX + 1, 4), 1.0)], base)
