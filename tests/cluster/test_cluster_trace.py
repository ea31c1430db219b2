"""Traced links in the harness: the fluid model integrates a trace, the model backend reports it,
the tc backend's transport delay follows the trace's delay column, rows get the rate in force."""
from __future__ import annotations

import time

import pytest

from cluster_fakewire import run_ranks
from harness.wire.links import Flow, LinkTable
from netem.spec import LinkSpec
from netem.trace import traced

STEP = "t_s,rate_mbit\n0,20\n2,2\n"


@pytest.fixture
def step(tmp_path):
    path = tmp_path / "step.csv"
    path.write_text(STEP)
    return str(path)


def _table(spec: LinkSpec, t0: float) -> LinkTable:
    return LinkTable(up=(LinkSpec(), spec), down=(LinkSpec(), LinkSpec()), t0=t0)


def test_fluid_model_integrates_the_step_trace(step):
    links = _table(traced(LinkSpec(), step), t0=100.0)
    # 5 MB from t=1: 1 s at 20 Mbit/s carries 20 Mbit, the other 20 Mbit take 10 s at 2 Mbit/s
    assert links.ideal_s([Flow(1, 0, 5_000_000)], at=101.0)[0] == pytest.approx(11.0)
    assert links.ideal_s([Flow(1, 0, 5_000_000)], at=103.0)[0] == pytest.approx(20.0)
    assert links.mean_rate_bps(1, 0, 101.0, 112.0) == pytest.approx(40e6 / 11)
    assert links.path_rate_bps(1, 0, at=101.9) == 20e6 and links.path_rate_bps(1, 0, at=102.0) == 2e6
    assert links.slowest_rate_bps(1, 0) == 2e6


def test_two_flows_share_a_traced_hub_downlink(step):
    hub = traced(LinkSpec(), step)
    links = LinkTable(up=(LinkSpec(), LinkSpec(), LinkSpec()), down=(hub, LinkSpec(), LinkSpec()), t0=0.0)
    # 2 x 2.5 MB into a 20 Mbit/s then 2 Mbit/s downlink: 40 Mbit in 2 s at 20, both done at 2 s
    assert links.ideal_s([Flow(1, 0, 2_500_000), Flow(2, 0, 2_500_000)], at=0.0) == pytest.approx([2.0, 2.0])
    assert links.ideal_s([Flow(1, 0, 2_500_000), Flow(2, 0, 3_000_000)], at=0.0) == pytest.approx([2.0, 4.0])


def test_trace_delay_column_sets_the_path_delay(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("0,10,20\n1,10,80\n")
    links = _table(traced(LinkSpec(), str(path)), t0=0.0)
    assert links.path_delay_s(1, 0, at=0.5) == pytest.approx(0.02)
    assert links.path_delay_s(1, 0, at=1.5) == pytest.approx(0.08)
    assert links.delay_sample_s(0, 1, 0, 0, at=1.5) == pytest.approx(0.08)


def _step_seconds(start: float) -> float:
    """5 MB (40 Mbit) sent ``start`` s into STEP, by hand: 20 Mbit/s until 2 s, then 2 Mbit/s."""
    if start >= 2.0:
        return 20.0
    fast_bits = 20e6 * (2.0 - start)
    return (2.0 - start) + (40e6 - fast_bits) / 2e6 if fast_bits < 40e6 else 40e6 / 20e6


def test_model_backend_transfer_takes_the_integrated_time(step):
    t0 = time.time() - 1.0                          # the trace started 1 s ago: 1 s of 20 Mbit/s left
    links = _table(traced(LinkSpec(), step), t0=t0)
    payload = b"x" * 5_000_000

    def body(ch):
        if ch.rank == 1:
            return ch.send(0, payload, "t")
        return ch.recv(1, "t")[1]

    before = time.time() - t0                       # the send starts between these two instants,
    receiver, sender = run_ranks(links, "model", body)
    after = time.time() - t0                        # however late a busy machine starts its thread
    for transfer in (sender, receiver):
        # the model is exact from the send's instant on: 11 s from t0 + 1 s, more the later it starts
        # (2 + 9 s for a start at s in [1, 2]), so the modelled time lies between the bounds' values
        assert _step_seconds(before) - 1e-6 <= transfer.seconds <= _step_seconds(after) + 1e-6, \
            (transfer.seconds, before, after)
        assert transfer.rate_bps == pytest.approx(5_000_000 * 8 / transfer.seconds, rel=0.01)   # the mean in force
    assert _step_seconds(1.0) == pytest.approx(11.0)


def test_model_backend_rate_and_seconds_share_the_send_instant_however_late_the_send_starts(step, monkeypatch):
    """A busy machine starts the send some time after its ideal time was computed: the modelled seconds
    and the mean rate in force are both taken from the instant the ideal was computed for (before the
    fix the rate's window began at the late start: 2.4% off on the loaded CI of 2026-12-06)."""
    t0 = time.time() - 1.0
    links = _table(traced(LinkSpec(), step), t0=t0)
    ideal = LinkTable.ideal_s

    def late(self, flows, at=None):
        out = ideal(self, flows, at=at)
        time.sleep(0.3)                              # the sending thread starts 0.3 s after the ideal's instant
        return out

    monkeypatch.setattr(LinkTable, "ideal_s", late)
    receiver, sender = run_ranks(links, "model", lambda ch: ch.send(0, b"x" * 5_000_000, "t") if ch.rank
                                 else ch.recv(1, "t")[1])
    for transfer in (sender, receiver):
        assert transfer.rate_bps == pytest.approx(5_000_000 * 8 / transfer.seconds, rel=1e-6)


def test_untraced_transfer_records_the_plain_path_rate():
    links = LinkTable(up=(LinkSpec(), LinkSpec(rate_bps=10e6)), down=(LinkSpec(), LinkSpec()))
    out = run_ranks(links, "model", lambda ch: ch.send(0, b"y" * 1000, "t") if ch.rank else ch.recv(1, "t")[1])
    assert out[0].rate_bps == 10e6 and out[1].rate_bps == 10e6


def test_rows_name_a_traced_direction_by_its_mean_rate(step):
    links = _table(traced(LinkSpec(), step), t0=0.0)
    assert links.nominal_rate_bps(links.up[1]) == 2e6                 # no loop: the last step holds
    assert links.nominal_rate_bps(LinkSpec(rate_bps=5e6)) == 5e6
