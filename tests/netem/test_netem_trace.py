"""Link traces: parsing (CSV, Mahimahi), the schedule's integral, bad input, and a real replay.

The emulated test sends over a link whose trace is 20 Mbit/s for 2 s, then 2 Mbit/s, and
compares the transfer with the trace's rate integrated from the transfer's start. A shaper
caps: no trial may be more than 10% faster than the integral (a late `tc change` can make it
a little faster, never by that much); a loaded machine can be slower, so the 10% bound above
is held by the best of a few trials.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from netem import LinkSpec, NodeSpec, StarTopology
from netem.trace import MIN_RATE_BPS, TraceError, load, parse_csv, parse_mahimahi, traced
from netem_helpers import TRIALS, run_in

STEP = "t_s,rate_mbit\n0,20\n2,2\n"


def test_csv_steps_and_delay_column():
    trace = parse_csv("# comment\nt_s,rate_mbit,delay_ms\n0,10,20\n1.5,2,80  # slow\n4,loop\n")
    assert trace.starts_s == (0.0, 1.5) and trace.rates_bps == (10e6, 2e6)
    assert trace.delays_s == (0.02, 0.08) and trace.period_s == 4.0
    assert trace.rate_at(1.49) == 10e6 and trace.rate_at(1.5) == 2e6 and trace.rate_at(4.2) == 10e6
    assert trace.delay_at(5.6) == 0.08
    assert trace.next_change_s(0.3) == 1.5 and trace.next_change_s(2.0) == 4.0 and trace.next_change_s(4.0) == 5.5


def test_csv_without_loop_holds_the_last_rate():
    trace = parse_csv(STEP)
    assert trace.period_s is None and trace.delays_s is None
    assert trace.rate_at(1e6) == 2e6 and trace.next_change_s(3.0) == float("inf")


def test_mahimahi_hand_computed_rate():
    # period 1000 ms, 0.5 s bins: 100..400 and 1000 (= 0 of the next loop) fall in bin 0 (5 packets),
    # 500 in bin 1 (1 packet): 5 * 1500 * 8 / 0.5 s = 120 kbit/s, then 1 * 12000 / 0.5 = 24 kbit/s
    trace = parse_mahimahi("100\n200\n300\n400\n500\n1000\n", bin_s=0.5)
    assert trace.starts_s == (0.0, 0.5) and trace.rates_bps == (120e3, 24e3) and trace.period_s == 1.0
    assert trace.rate_at(1.25) == 120e3


def test_mahimahi_one_packet_per_ms_is_12_mbit_and_empty_bins_get_the_floor():
    assert parse_mahimahi("1\n").rates_bps == (12e6,)
    gap = parse_mahimahi("1\n1\n2000\n", bin_s=1.0)      # bin 0 holds 1 and 2000 (mod 2000 = 0): 3 packets
    assert gap.rates_bps == (36e3, MIN_RATE_BPS)


def test_transfer_time_integrates_the_schedule():
    trace = parse_csv(STEP)
    # from t=1: 1 s at 20 Mbit/s carries 20 Mbit, the other 20 Mbit take 10 s at 2 Mbit/s
    assert trace.transfer_s(40e6 / 8, 1.0) == pytest.approx(11.0)
    assert trace.transfer_s(10e6 / 8, 0.0) == pytest.approx(0.5)
    assert trace.mean_rate_bps(1.0, 12.0) == pytest.approx(40e6 / 11)
    looped = parse_csv("0,8\n1,4\n2,loop\n")
    assert looped.transfer_s(18e6 / 8, 0.5) == pytest.approx(3.0)   # 4 + 4 + 8 + 2 (half of 1 s at 4)
    assert looped.mean_rate_bps() == pytest.approx(6e6)


@pytest.mark.parametrize("text, fragment", [
    ("0,10\n0,5\n", "time 0 is not after the line above (0)"),
    ("1,10\n", "first time is not 0"),
    ("0,10\n2,x\n", "'x', not a number"),
    ("0,0\n", "rate is not > 0"),
    ("0,10,5\n1,10\n", "delay column"),
    ("0,10\n3,loop\n4,1\n", "after the 'T,loop' line"),
    ("", "has no steps"),
])
def test_bad_csv_names_key_line_and_what_is_allowed(text, fragment):
    with pytest.raises(TraceError) as err:
        parse_csv(text, key="net.nodes[1].trace", where="t.csv")
    message = str(err.value)
    assert message.startswith("net.nodes[1].trace: ") and fragment in message and "t_s,rate_mbit" in message
    assert "\n" not in message


@pytest.mark.parametrize("text, fragment", [("5\n3\n", "before the line above"), ("1.5\n", "not an integer"),
                                            ("0\n", "no delivery opportunity")])
def test_bad_mahimahi(text, fragment):
    with pytest.raises(TraceError, match=fragment):
        parse_mahimahi(text, key="net.trace", where="t.up")


def test_missing_file_lists_the_shipped_traces(tmp_path):
    with pytest.raises(TraceError, match=r"net.trace: '.*nope.csv' is not a trace file;.*lte_uplink"):
        load(str(tmp_path / "nope.csv"))


def test_traced_spec_starts_at_the_first_step(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("0,5,30\n1,1,90\n")
    spec = traced(LinkSpec(delay_s=0.01), str(path))
    assert spec.rate_bps == 5e6 and spec.delay_s == 0.03 and spec.trace == str(path.resolve())
    assert "trace d.csv" in spec.describe()


SEND = """
import json, socket, sys, time
start = time.time(); sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
sock.sendall(b"x" * int(sys.argv[3])); sock.shutdown(socket.SHUT_WR); sock.recv(1)
print(json.dumps({"start": start, "end": time.time()}))
"""
RECEIVE = """
import socket
srv = socket.socket(); srv.bind(("0.0.0.0", 0)); srv.listen(1); print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
while conn.recv(65536): pass
conn.sendall(b"k")
"""


def _trial(path: str, nbytes: int) -> tuple[float, float, dict]:
    """One transfer a -> b through a's traced uplink: (measured s, predicted s, replay summary)."""
    spec = traced(LinkSpec(), path)
    with StarTopology([NodeSpec("a", up=spec), NodeSpec("b")], backend="tc") as topo:
        receiver = subprocess.Popen(topo.exec_prefix("b") + [sys.executable, "-c", textwrap.dedent(RECEIVE)],
                                    stdout=subprocess.PIPE, text=True)
        try:
            port = receiver.stdout.readline().strip()
            before = topo.counters("a")
            done = run_in(topo.exec_prefix("a"), SEND, topo.nodes["b"].addr, port, str(nbytes), timeout=60)
            wire = (topo.counters("a") - before).tx_bytes       # L2 bytes, what tbf meters
        finally:
            receiver.kill()
            receiver.wait()
        assert done.returncode == 0, done.stderr
        times = json.loads(done.stdout)
        predicted = load(path).transfer_s(wire, times["start"] - topo.t0)
        return times["end"] - times["start"], predicted, topo.replay.describe()


@pytest.mark.emulated
def test_transfer_through_a_traced_tc_link_takes_the_integrated_time(emulation, tmp_path):
    path = tmp_path / "step.csv"
    path.write_text(STEP)
    seen = []
    for _ in range(TRIALS):
        measured, predicted, replay = _trial(str(path), 5_000_000)   # ~2 s at 20 Mbit/s, then ~1-3 s at 2
        seen.append((round(measured, 3), round(predicted, 3), replay["late_s_max"]))
        assert replay["changes"] == 1 and not replay["errors"], replay
        assert measured >= 0.9 * predicted, f"faster than the trace allows: {seen}"
        if measured <= 1.1 * predicted:
            break
    assert min(m / p for m, p, _ in seen) <= 1.1, f"every trial slower than the trace by > 10%: {seen}"


def test_shipped_traces_are_what_the_seeded_generator_makes(capsys):
    from netem.tracegen import main

    assert main(["--check"]) == 0, capsys.readouterr().out
    for name in ("lte_uplink", "broadband_diurnal"):
        trace = load(name)
        assert trace.period_s and trace.delays_s and min(trace.rates_bps) > 0
