"""The SNR study's estimator on a hand-made gradient: SNR ~ r / (d_in + 1), log-log slope ~ 1."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from harness.commands.snr import measure, slope


def test_projected_gradient_snr_grows_linearly_in_rank():
    g = torch.randn(24, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    g[:, :4] *= 10.0                                    # structure in G must not matter
    table = pd.DataFrame(measure(g, "m", [1, 2, 4, 8, 16], draws=300, seed=0))
    assert slope(table) == pytest.approx(1.0, abs=0.08)
    assert ((table.snr / table.snr_theory - 1).abs() < 0.2).all()
    assert ((table.rel_bias / table.rel_bias_expected) < 2.0).all()     # unbiased: only noise


def test_operating_regime_matches_its_closed_form_and_only_resampling_averages_noise():
    from harness.commands.snr import measure_operating, operating_closed_form

    gen = torch.Generator().manual_seed(1)
    common = torch.randn(12, 16, generator=gen, dtype=torch.float64)
    rounds = [common + 0.3 * torch.randn(12, 16, generator=gen, dtype=torch.float64) for _ in range(6)]
    one = pd.DataFrame(measure_operating(rounds, "m", 0, [4], draws=300, seed=0)).iloc[0]
    each = pd.DataFrame(measure_operating(rounds, "m", 1, [4], draws=300, seed=0)).iloc[0]
    # Monte-Carlo over 300 draws: the SNR estimate's relative spread is ~ sqrt(2/300) ~ 8%; 25% is > 3 sigma
    assert one.snr == pytest.approx(one.snr_closed_form, rel=0.25)
    assert each.snr == pytest.approx(each.snr_closed_form, rel=0.25)
    assert one.snr_closed_form == pytest.approx(4 / 17)            # one A for the horizon: one step's SNR
    assert each.snr_closed_form > 4 * one.snr_closed_form          # 6 periods of aligned gradients: up to 6x
    # the closed form by hand, independent of snr.py: with one A per round the update is
    # sum_t M_t A_t^T A_t, whose noise is sum_t ||M_t||^2 (d_in + 1) / r; the signal is ||sum_t M_t||^2
    signal = float(torch.stack(rounds).sum(0).pow(2).sum())
    noise = sum(float(m.pow(2).sum()) for m in rounds) * (16 + 1) / 4
    assert each.snr_closed_form == pytest.approx(signal / noise, rel=1e-12)
    assert operating_closed_form(rounds, 3, 4) < each.snr_closed_form    # fewer resamplings average less noise
