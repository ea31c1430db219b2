"""The SNR study's estimator on a hand-made gradient: SNR ~ r / (d_in + 1), log-log slope ~ 1."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from harness.federated.snr import measure, slope


def test_projected_gradient_snr_grows_linearly_in_rank():
    g = torch.randn(24, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    g[:, :4] *= 10.0                                    # structure in G must not matter
    table = pd.DataFrame(measure(g, "m", [1, 2, 4, 8, 16], draws=300, seed=0))
    assert slope(table) == pytest.approx(1.0, abs=0.08)
    assert ((table.snr / table.snr_theory - 1).abs() < 0.2).all()
    assert ((table.rel_bias / table.rel_bias_expected) < 2.0).all()     # unbiased: only noise
