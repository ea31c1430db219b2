"""Pure tests of harness.wire.links: the fluid model of ideal times, seeded delays, token buckets."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from harness.wire.links import Flow, LinkTable, TokenBucket, chunk_bytes
from netem.spec import LinkSpec

MB = 1_000_000
OPEN = LinkSpec()
TEN = LinkSpec(rate_bps=10e6)


def star(hub_up=OPEN, hub_down=OPEN, up=(OPEN,) * 3, down=(OPEN,) * 3) -> LinkTable:
    return LinkTable(up=(hub_up, *up), down=(hub_down, *down))


def test_single_flow_is_delay_plus_bytes_over_bottleneck():
    links = star(down=(LinkSpec(rate_bps=5e6, delay_s=0.02), OPEN, OPEN), hub_up=LinkSpec(rate_bps=20e6, delay_s=0.01))
    assert links.path_rate_bps(0, 1) == 5e6
    assert links.path_delay_s(0, 1) == pytest.approx(0.03)
    assert links.ideal_s([Flow(0, 1, MB)]) == pytest.approx([0.03 + MB * 8 / 5e6])
    assert links.ideal_s([Flow(0, 1, MB)])[0] == pytest.approx(LinkSpec(rate_bps=5e6, delay_s=0.03).ideal_s(MB))


def test_broadcast_through_downlinks_takes_one_payload_time():
    links = star(down=(TEN, TEN, TEN))
    assert links.ideal_s([Flow(0, r, MB) for r in (1, 2, 3)]) == pytest.approx([0.8] * 3)


def test_broadcast_through_hub_uplink_shares_it():
    links = star(hub_up=TEN)
    assert links.ideal_s([Flow(0, r, MB) for r in (1, 2, 3)]) == pytest.approx([2.4] * 3)


def test_max_min_sharing_gives_leftover_to_unconstrained_flows():
    # hub up 20mbit; node 3's downlink is 2.5mbit: nodes 1, 2 split the remaining 17.5mbit
    links = star(hub_up=LinkSpec(rate_bps=20e6), down=(TEN, TEN, LinkSpec(rate_bps=2.5e6)))
    fast, _, slow = links.ideal_s([Flow(0, r, MB) for r in (1, 2, 3)])
    assert fast == pytest.approx(MB * 8 / 8.75e6)
    assert slow == pytest.approx(MB * 8 / 2.5e6)


def test_gather_shares_hub_downlink_and_zero_byte_flows_cost_only_delay():
    links = star(hub_down=TEN, up=(LinkSpec(delay_s=0.01),) * 3)
    times = links.ideal_s([Flow(1, 0, MB), Flow(2, 0, MB), Flow(3, 0, 0)])
    assert times == pytest.approx([1.6 + 0.01, 1.6 + 0.01, 0.01])


def test_unshaped_links_have_no_transfer_term():
    assert LinkTable.unshaped(3).ideal_s([Flow(0, 1, 10 * MB), Flow(0, 2, MB)]) == [0.0, 0.0]
    assert LinkTable.unshaped(3).path_rate_bps(0, 1) is None


def test_delay_samples_are_seeded_bounded_and_vary_by_message():
    jittery = LinkSpec(delay_s=0.02, jitter_s=0.005)
    links = star(down=(jittery, OPEN, OPEN), hub_up=jittery)
    first = [links.delay_sample_s(7, 0, 1, i) for i in range(50)]
    assert first == [links.delay_sample_s(7, 0, 1, i) for i in range(50)]
    assert first != [links.delay_sample_s(8, 0, 1, i) for i in range(50)]
    assert all(0.03 <= d <= 0.05 for d in first)
    assert len(set(first)) == 50
    assert star(down=(LinkSpec(delay_s=0.02),) * 3).delay_sample_s(0, 0, 1, 3) == pytest.approx(0.02)


def test_link_table_round_trips_through_json():
    links = star(hub_up=LinkSpec(rate_bps=1e6, delay_s=0.1, jitter_s=0.01, queue_bytes=65536), down=(TEN, TEN, TEN))
    assert LinkTable.from_json(links.to_json()) == links
    with pytest.raises(ValueError, match="uplinks"):
        LinkTable(up=(OPEN,), down=(OPEN, OPEN))


def test_chunks_are_about_ten_milliseconds_of_the_link():
    assert chunk_bytes(None) == 0
    assert chunk_bytes(1e6) == 8 << 10               # floor
    assert chunk_bytes(100e6) == 125_000
    assert chunk_bytes(100e9) == 1 << 20             # ceiling


def test_token_bucket_paces_to_its_rate_and_shares_it(monkeypatch):
    from harness.wire import links as links_mod

    bucket = TokenBucket(rate_Bps=400_000, burst=8_000)   # 40 chunks of 8 kB = 320 kB -> ~0.78 s
    start = time.monotonic()
    for _ in range(40):
        bucket.take(8_000)
    elapsed = time.monotonic() - start
    assert elapsed >= 0.7, elapsed                 # (320 kB - one 8 kB burst) / 400 kB/s = 0.78 s at least;
    # no upper bound: a loaded machine may only add time (the pacing figure is in tests/benchmarks/test_pacing.py)
    # two reservations booked back to back: the second waits for the first (on a stopped clock,
    # so that a preemption between the two calls cannot refill the bucket)
    clock = [1000.0]
    monkeypatch.setattr(links_mod, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
    bucket = TokenBucket(rate_Bps=1_000_000, burst=10_000)
    assert bucket.reserve(10_000) == 0.0
    assert bucket.reserve(10_000) == pytest.approx(10_000 / 1_000_000)      # 10 kB at 1 MB/s
    clock[0] += 0.004                                                      # 4 ms refill 4 kB of the 10 kB debt
    assert bucket.reserve(0) == pytest.approx(0.006)
    with pytest.raises(ValueError, match="must be > 0"):
        TokenBucket(0, 1)


def test_userspace_pacing_charges_tcp_ip_ethernet_framing():
    from harness.wire.links import framed_bytes

    assert framed_bytes(1448) == 1514
    assert framed_bytes(0) == 0
    assert framed_bytes(1_000_000) / 1_000_000 == pytest.approx(1514 / 1448, rel=1e-5)
