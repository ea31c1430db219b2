"""The calibration gate (harness.commands.node's docstring, step 3): every shaped pair (hub -> node and
node -> hub) is probed with netem's probe (peer.py: receiver on the destination's host, sender on
the source's) for CALIBRATION_S at the pair's rate; a pair more than CALIBRATION_TOLERANCE off the
TCP ceiling of its configured L2 rate is probed again, up to CALIBRATION_TRIES times. Every try is
recorded (run.json ``calibration``), the closest counts, and a pair that stays off fails the run
with one line naming it (nothing is launched)."""
from __future__ import annotations

from harness.multihost.agent import Agent, ask
from harness.multihost.runs import Planned

CALIBRATION_S = 1.0                 # seconds of traffic per probed pair at its configured rate
CALIBRATION_TOLERANCE = 0.10        # |measured / TCP ceiling - 1| above this refuses the run
CALIBRATION_TRIES = 3               # a pair off by more is probed again (a loaded CPU slows one probe), at most this often


def pairs(plan) -> list[tuple[str, str, float]]:
    """Every shaped pair (hub <-> each node, both ways) and its configured L2 rate (bits/s): the
    slower of the source's uplink and the destination's downlink."""
    hub = plan.roles[0]
    out = []
    for node in plan.roles[1:]:
        for src, dst in ((hub, node), (node, hub)):
            rates = [r for r in (src.up.rate_bps, dst.down.rate_bps) if r]
            if rates:
                out.append((src.name, dst.name, min(rates)))
    return out


def calibrate(agent: Agent, run: Planned, overlays: dict[int, dict]) -> list[dict]:
    """Probe every shaped pair, one at a time; the records for run.json (see the module docstring)."""
    from netem.measure import L2_FRAME, TCP_PAYLOAD

    placement = run.plan.placement
    addr = {n["name"]: n["addr"] for o in overlays.values() for n in o["nodes"]}
    delay = {r.name: (r.up.delay_s, r.down.delay_s) for r in run.plan.roles}
    records = []
    for src, dst, rate in pairs(run.plan):
        nbytes = int(max(256 * 1024, rate / 8 * CALIBRATION_S))
        timeout_s = 30.0 + 5 * nbytes * 8 / rate
        src_host, dst_host = placement.of(src).host_index, placement.of(dst).host_index
        ceiling = rate * TCP_PAYLOAD / L2_FRAME
        tries: list[float] = []
        while len(tries) < CALIBRATION_TRIES:
            port = ask(agent, dst_host, {"op": "serve", "role": dst}, timeout=30)["port"]
            sent = ask(agent, src_host, {"op": "send", "role": src, "addr": addr[dst], "port": port, "nbytes": nbytes,
                                         "timeout_s": timeout_s}, timeout=timeout_s + 10)["result"]
            got = ask(agent, dst_host, {"op": "collect", "role": dst, "timeout_s": 30}, timeout=40)["result"]
            tries.append(got["goodput_bps"] or 0.0)
            if abs(tries[-1] / ceiling - 1) <= CALIBRATION_TOLERANCE:
                break
        best = min(tries, key=lambda bps: abs(bps / ceiling - 1))
        rtts = sorted(sent["rtt_s"])
        records.append({"pair": f"{src}->{dst}", "src_host": placement.hosts[src_host].name,
                        "dst_host": placement.hosts[dst_host].name, "configured_bps": rate,
                        "tcp_ceiling_bps": ceiling, "measured_bps": best, "tries_bps": tries,
                        "ratio": best / ceiling, "bytes": nbytes,
                        "rtt_s": rtts[len(rtts) // 2] if rtts else None,
                        "configured_rtt_s": delay[src][0] + delay[dst][1] + delay[dst][0] + delay[src][1],
                        "rtt_in_kernel": False})
    return records


def calibration_problem(records: list[dict]) -> str:
    for rec in records:
        off = abs(rec["ratio"] - 1)
        if off > CALIBRATION_TOLERANCE:
            return (f"calibration: pair {rec['pair']} ({rec['src_host']} -> {rec['dst_host']}) measured "
                    f"{(rec['measured_bps'] or 0) / 1e6:.2f} Mbit/s against {rec['tcp_ceiling_bps'] / 1e6:.2f} Mbit/s "
                    f"(the TCP ceiling of {rec['configured_bps'] / 1e6:g} Mbit/s configured): {off:.0%} off, more than "
                    f"{CALIBRATION_TOLERANCE:.0%}")
    return ""
