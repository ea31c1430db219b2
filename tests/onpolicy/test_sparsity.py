"""Pure tier of the sparsity measurement (harness.commands.sparsity): groups pick the right
tensors and the unchanged fraction over k updates compares the two end versions only."""
from __future__ import annotations

import pandas as pd
import torch

from harness.commands.sparsity import GROUPS, Group, unchanged_rows
from harness.report.sparsity_plot import summary

A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
B = "base_model.model.model.layers.0.mlp.down_proj.lora_B.default.weight"


def test_groups_split_a_b_attention_mlp():
    assert Group("A", "attn").holds(A) and not Group("B", "all").holds(A) and not Group("all", "mlp").holds(A)
    assert Group("B", "mlp").holds(B) and Group("all", "all").holds(B) and not Group("A", "all").holds(B)
    assert len(GROUPS) == 9


def test_unchanged_over_k_compares_the_two_ends():
    v0 = {A: torch.zeros(4, dtype=torch.int16), B: torch.zeros(6, dtype=torch.int16)}
    v1 = {A: torch.tensor([1, 0, 0, 0], dtype=torch.int16), B: torch.zeros(6, dtype=torch.int16)}
    v2 = {A: torch.tensor([0, 0, 0, 0], dtype=torch.int16), B: torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.int16)}
    rows = {(r["k"], r["matrix"], r["block"]): r for r in unchanged_rows([v0, v1, v2], 2, (1, 2, 4))}
    assert (4, "all", "all") not in rows                        # no version 2 - 4
    assert rows[(1, "A", "all")]["unchanged"] == 3              # entry 0 moved back: a change for k=1
    assert rows[(2, "A", "all")]["unchanged"] == 4              # ... and none over k=2
    assert rows[(2, "B", "mlp")]["unchanged"] == 4 and rows[(2, "B", "mlp")]["entries"] == 6
    assert rows[(1, "all", "all")]["unchanged_frac"] == (3 + 4) / 10


def test_summary_aggregates_over_seeds_on_the_second_half():
    rows = [dict(seed=s, lr=1e-4, update=u, k=1, matrix="all", block="all", unchanged_frac=f)
            for s, fs in ((0, (0.0, 0.0, 0.5, 0.5)), (1, (0.0, 0.0, 0.7, 0.7))) for u, f in enumerate(fs, 1)]
    table = summary(pd.DataFrame(rows))
    row = table.iloc[0]
    assert row.n == 2 and abs(row["mean"] - 0.6) < 1e-12    # exact up to float rounding of a mean
