"""The compressor bench names what ran: PowerSGD below rank 1 everywhere is powersgd[subset],
PowerSGD at its native rank-1 cost is powersgd-r1 (bytes of rank 1, no budget applied)."""
from __future__ import annotations

import math

import torch

from harness.commands.compress_bench import table as bench_table


def _grads(steps: int = 3) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [{"a": torch.randn(64, 1024, generator=g), "b": torch.randn(1024, 64, generator=g)} for _ in range(steps)]


def test_powersgd_is_named_subset_only_where_rank_1_does_not_fit():
    grads = _grads()
    rank1 = 2 * (64 + 1024) * 2                      # bf16 bytes of one rank-1 factor pair per matrix
    numel = 2 * 64 * 1024
    low, high = bench_table.evaluate("powersgd", 0.016, grads), bench_table.evaluate("powersgd", 0.05, grads)
    assert 0.016 * 2 * numel < rank1 < 0.05 * 2 * numel   # the premise: rank 1 fits only the 5% budget
    assert low.compressor == "powersgd[subset]" and "subset" in low.note
    assert high.compressor == "powersgd" and high.note == ""
    assert low.bytes <= low.budget_bytes and high.bytes <= high.budget_bytes


def test_powersgd_r1_ships_its_native_rank_1_cost():
    row = bench_table.evaluate("powersgd-r1", 0.016, _grads())
    assert row.compressor == "powersgd-r1" and "native" in row.note
    assert row.bytes > row.budget_bytes              # rank 1 everywhere costs more than 1.6% here
    assert row.err_1 < 1
    # err_ef = ||residual|| / ||sum of the gradients||: a number (NaN would mean a 0/0, i.e. no
    # gradient mass reached the error-feedback sum, or a NaN in the residual), and a norm ratio >= 0
    assert not math.isnan(row.err_ef) and row.err_ef >= 0
