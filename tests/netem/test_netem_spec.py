"""Pure tier: parsing link settings, sizing qdiscs, recognising our names (no kernel needed)."""
from __future__ import annotations

import math

import pytest

from netem.names import parse, subnet_of
from netem.shaping import FRAME, netem_limit_packets, plan, tbf_burst_bytes, tbf_limit_bytes
from netem.spec import (LinkSpec, LinkSpecError, format_rate, format_time, parse_loss, parse_rate,
                        parse_size, parse_time)


@pytest.mark.parametrize("text, bps", [
    ("500kbit", 500e3), ("10mbit", 10e6), ("1gbit", 1e9), ("1.5mbit", 1.5e6), ("10Mbit", 10e6),
    ("10 mbit", 10e6), ("64000", 64e3), (64000, 64e3), (2.5e6, 2.5e6), ("8bit", 8.0),
])
def test_rates_parse_to_bits_per_second(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", [None, "", "none", "None", "unshaped"])
def test_unset_rate_means_unshaped(text):
    assert parse_rate(text) is None


@pytest.mark.parametrize("text", ["10mbps", "10kbps", "1MB/s", "10mb", "fast", "-1mbit", "0", 0, "1e400", True, "10 mbit/s"])
def test_bad_rates_name_field_value_and_units(text):
    with pytest.raises(LinkSpecError) as info:
        parse_rate(text, "net.rate")
    message = str(info.value)
    assert message.startswith("net.rate: ")
    assert repr(text) in message
    assert "kbit" in message and "mbit" in message and "gbit" in message
    assert info.value.field == "net.rate"


@pytest.mark.parametrize("text, seconds", [
    ("20ms", 0.02), ("1s", 1.0), ("500us", 5e-4), ("0", 0.0), (0, 0.0), (0.25, 0.25), (None, 0.0), ("2.5 ms", 2.5e-3),
])
def test_times_parse_to_seconds(text, seconds):
    assert parse_time(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["20", "20 min", "-5ms", "soon", -1.0])
def test_bad_times_name_the_field(text):
    with pytest.raises(LinkSpecError, match=r"^net\.delay: .* (us, ms, s|must be >= 0)"):
        parse_time(text, "net.delay")


@pytest.mark.parametrize("text, fraction", [("0.1%", 0.001), ("5%", 0.05), ("0", 0.0), ("100%", 1.0), (0.02, 0.02)])
def test_loss_parses_to_a_fraction(text, fraction):
    assert parse_loss(text) == pytest.approx(fraction)


@pytest.mark.parametrize("text", ["101%", "0.1", "-1%", "lots", 1.5])
def test_bad_loss_names_the_field(text):
    with pytest.raises(LinkSpecError, match=r"^net\.loss: .*%"):
        parse_loss(text, "net.loss")


@pytest.mark.parametrize("text, nbytes", [("64kb", 65536), ("1mb", 1048576), (1500, 1500), ("1500", 1500), ("2b", 2)])
def test_sizes_parse_to_bytes(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["64kbit", "0", "-3kb", "big"])
def test_bad_sizes_name_the_field(text):
    with pytest.raises(LinkSpecError, match=r"^net\.queue: .*kb = 1024"):
        parse_size(text, "net.queue")


def test_linkspec_parse_prefixes_field_names():
    spec = LinkSpec.parse(rate="10mbit", delay="20ms", jitter="2ms", loss="0.1%", queue="64kb")
    assert spec == LinkSpec(10e6, 0.02, 0.002, 0.001, 65536)
    with pytest.raises(LinkSpecError, match=r"^net\.jitter: '2'"):
        LinkSpec.parse(jitter="2")
    with pytest.raises(LinkSpecError, match=r"^net\.nodes\.0\.rate: "):
        LinkSpec.parse(rate="10mbps", prefix="net.nodes.0")


def test_ideal_time_and_description():
    spec = LinkSpec.parse(rate="10mbit", delay="20ms")
    assert spec.ideal_s(1_250_000) == pytest.approx(0.02 + 1.0)
    assert LinkSpec().ideal_s(10**9) == 0.0
    assert spec.describe() == "10mbit 20ms"
    assert LinkSpec().describe() == "unshaped" and not LinkSpec().shaped
    assert LinkSpec(delay_s=0.02).shaped
    assert LinkSpec.parse(rate="1.5mbit", jitter="2ms", loss="0.1%").describe() == "1500kbit jitter 2ms loss 0.1%"


@pytest.mark.parametrize("bps", [500e3, 1.5e6, 10e6, 1e9, 64000, 12345])
def test_format_rate_round_trips(bps):
    assert parse_rate(format_rate(bps)) == pytest.approx(bps)


def test_format_time():
    assert [format_time(s) for s in (0.02, 1.0, 5e-4, 1.5, 0)] == ["20ms", "1s", "500us", "1500ms", "0ms"]


@pytest.mark.parametrize("rate", [500e3, 5e6, 20e6, 100e6, 1e9])
def test_tbf_is_sized_for_the_rate(rate):
    (qdisc,) = plan(LinkSpec(rate_bps=rate), "tc")
    assert qdisc.kind == "tbf" and qdisc.options["rate"] == f"{int(rate)}bit"
    burst, limit = qdisc.options["burst"], qdisc.options["limit"]
    assert burst >= 2 * FRAME                      # a full frame always fits
    assert burst >= rate / 8 * 0.004 - 1           # 4 ms of timer slack at high rates
    assert limit >= burst + rate / 8 * 0.04        # a queue of tens of ms: TCP keeps the link busy
    assert tbf_limit_bytes(rate, queue_bytes=4000) == 4000
    assert tbf_burst_bytes(rate) == burst


def test_tc_backend_leaves_delay_to_the_transport_and_refuses_loss():
    assert plan(LinkSpec(delay_s=0.02), "tc") == []
    (qdisc,) = plan(LinkSpec(rate_bps=1e7, delay_s=0.02), "tc")
    assert "delay" not in qdisc.options
    with pytest.raises(LinkSpecError, match=r"^w0\.up\.loss: '1%' cannot be emulated on the tc backend"):
        plan(LinkSpec(loss=0.01), "tc", "w0.up")


def test_netem_plan_carries_everything_in_kernel_units():
    spec = LinkSpec.parse(rate="10mbit", delay="20ms", jitter="2ms", loss="0.1%")
    (qdisc,) = plan(spec, "netem")
    assert qdisc.kind == "netem"
    assert qdisc.options["delay"] == 20000 and qdisc.options["jitter"] == 2000      # microseconds
    assert qdisc.options["loss"] == pytest.approx(0.1)                             # percent
    assert qdisc.options["rate"] == "10000000bit"
    # the queue holds everything in flight during delay+jitter at the rate
    assert qdisc.options["limit"] >= math.ceil(10e6 / 8 * 0.022 / FRAME)
    assert netem_limit_packets(LinkSpec.parse(rate="1gbit", delay="100ms")) > 8000
    assert plan(LinkSpec(), "netem") == []


def test_netem_options_encode_with_pyroute2():
    """The netem recipe is accepted by pyroute2's netem encoder (the kernel here has no netem to try it)."""
    from pyroute2.netlink.rtnl.tcmsg import sched_netem

    (qdisc,) = plan(LinkSpec.parse(rate="10mbit", delay="20ms", jitter="2ms", loss="1%"), "netem")
    opts = sched_netem.get_parameters(dict(qdisc.options))
    assert opts["delay"] > 0 and opts["jitter"] > 0 and opts["loss"] == int((2**32 - 1) * 0.01)
    assert ["TCA_NETEM_RATE", {"rate": 10**7 // 8, "packet_overhead": 0, "cell_size": 0, "cell_overhead": 0}] in opts["attrs"]


def test_names_are_recognised_strictly():
    assert parse("nb-1234-a3f0-sw").owner == "1234"
    assert parse("nb-up-a3f0-n12").role == "n12"
    assert parse("nb-1234-a3f0-n0").prefix == "nb-1234-a3f0"
    for foreign in ("nb-1234-a3f0", "nb-x-a3f0-sw", "mynb-1234-a3f0-sw", "nb-1234-A3F0-sw", "nb-1234-a3f0-sw2", "docker0"):
        assert parse(foreign) is None
    assert subnet_of("a3f0") == "10.163.240"

