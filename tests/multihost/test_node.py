"""Pure tier of the per-host agent: which pairs are calibrated at which rate, the gate's one-line
refusal naming the pair, and agent 0's verdict on the hosts' hellos (missing, unable, other plan)."""
from __future__ import annotations

from types import SimpleNamespace

from harness.multihost.agent import Agent
from harness.multihost.calibration import calibration_problem, pairs
from harness.multihost.host import Me
from netem.spec import LinkSpec


def _role(name: str, up: str | None, down: str | None):
    return SimpleNamespace(name=name, up=LinkSpec.parse(rate=up), down=LinkSpec.parse(rate=down))


def test_pairs_are_hub_to_node_both_ways_at_the_slower_direction():
    plan = SimpleNamespace(roles=[_role("server", None, None), _role("client0", "20mbit", "50mbit"),
                                  _role("client1", None, None)])
    assert pairs(plan) == [("server", "client0", 50e6), ("client0", "server", 20e6)]   # client1 is unshaped
    capped = SimpleNamespace(roles=[_role("learner", "10mbit", "10mbit"), _role("worker0", "100mbit", "100mbit")])
    assert pairs(capped) == [("learner", "worker0", 10e6), ("worker0", "learner", 10e6)]


def test_the_gate_refuses_with_one_line_naming_the_pair():
    good = {"pair": "learner->worker0", "src_host": "h0", "dst_host": "h1", "configured_bps": 10e6,
            "tcp_ceiling_bps": 9.56e6, "measured_bps": 9.5e6, "ratio": 9.5 / 9.56}
    assert calibration_problem([good]) == ""
    bad = {**good, "pair": "worker0->learner", "src_host": "h1", "dst_host": "h0", "measured_bps": 7e6,
           "ratio": 7 / 9.56}
    text = calibration_problem([good, bad])
    assert "pair worker0->learner (h1 -> h0)" in text and "27% off" in text and "\n" not in text


def test_agent_zero_names_the_host_that_is_missing_unable_or_planned_otherwise():
    agent = Agent(Me(0, "h0", "10.0.0.1", "eth0"), 3, ["h0", "h1", "h2"])
    hello = {"problem": "", "digest": "abc"}
    assert agent._judge({0: hello, 1: hello, 2: hello}) == ""
    assert agent._judge({0: hello, 2: hello}).startswith("host h1: its agent did not connect")
    unable = {**hello, "problem": "cannot shape: needs root or CAP_NET_ADMIN"}
    assert agent._judge({0: hello, 1: hello, 2: unable}) == "host h2: cannot shape: needs root or CAP_NET_ADMIN"
    assert agent._judge({0: hello, 1: {**hello, "digest": "xyz"}, 2: hello}).startswith("host h1: planned other runs")
