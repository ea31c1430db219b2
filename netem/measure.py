"""Measure what a shaped link really carries: TCP goodput and round-trip time between two nodes.

The configured rate is an L2 rate (tc counts Ethernet frames: 1514 bytes for a full packet);
the measured rate is TCP goodput (payload bytes only: 1448 per full packet with timestamps),
so a perfect link shows about 95.6% of the configured rate (`tcp_ceiling_bps`).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from netem.spec import LinkSpec, format_rate
from netem.topology import NodeSpec, StarTopology

PEER = Path(__file__).with_name("peer.py")
TCP_PAYLOAD, L2_FRAME = 1448, 1514        # per full packet: MSS with timestamps / Ethernet frame
PROBE_S = 1.5                             # default transfer length in seconds at the configured rate
MIN_BYTES, MAX_BYTES = 256 * 1024, 64 * 1024 * 1024
UNSHAPED_PROBE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ProbeResult:
    """One probe. Rates in bits/s, times in seconds, bytes in bytes."""

    backend: str
    link: str                       # LinkSpec.describe()
    configured_bps: float | None    # L2 rate configured on both directions of both nodes
    measured_bps: float             # TCP goodput at the receiver
    tcp_ceiling_bps: float | None   # configured * 1448/1514: the most TCP goodput a perfect link gives
    ratio: float | None             # measured / configured
    payload_bytes: int
    wire_bytes: int                 # L2 bytes the sender's veth transmitted during the transfer
    transfer_s: float               # sender's view: first byte written to the receiver's ack
    rtt_s: float                    # median TCP ping-pong round trip (32 bytes each way)
    connect_s: float                # TCP handshake (one round trip)
    delay_in_kernel: bool           # False on tc: the configured delay is the transport's job

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """Human summary, one fact per line."""
        out = [f"backend {self.backend}; link {self.link} on every direction of both nodes"]
        if self.configured_bps:
            out.append(f"configured {format_rate(self.configured_bps)} = {self.configured_bps / 1e6:.3f} Mbit/s "
                       f"(L2 rate: Ethernet frames as tc counts them)")
            out.append(f"measured   {self.measured_bps / 1e6:.3f} Mbit/s TCP goodput = {self.ratio:.1%} of configured "
                       f"(payload only; TCP/IP headers cap a perfect link at {TCP_PAYLOAD / L2_FRAME:.1%})")
        else:
            out.append(f"measured   {self.measured_bps / 1e6:.3f} Mbit/s TCP goodput (unshaped)")
        out.append(f"payload {self.payload_bytes} B, wire {self.wire_bytes} B (x{self.wire_bytes / self.payload_bytes:.3f}), "
                   f"transfer {self.transfer_s:.3f} s")
        out.append(f"rtt {self.rtt_s * 1e3:.3f} ms (median TCP ping-pong), connect {self.connect_s * 1e3:.3f} ms")
        if not self.delay_in_kernel:
            out.append("note: the tc backend does not delay packets in the kernel; the harness transport adds "
                       "delay/jitter per message, so this RTT is the kernel path only")
        return out


def default_bytes(rate_bps: float | None) -> int:
    """About PROBE_S seconds of traffic at the rate, within [MIN_BYTES, MAX_BYTES]."""
    if rate_bps is None:
        return UNSHAPED_PROBE_BYTES
    return int(min(max(rate_bps / 8 * PROBE_S, MIN_BYTES), MAX_BYTES))


@dataclass(frozen=True)
class Transfer:
    """One measured TCP transfer between two nodes of a topology."""

    payload_bytes: int
    goodput_bps: float     # at the receiver: bytes after the first chunk / first-to-last-chunk time
    wire_bytes: int        # L2 bytes the sender's veth transmitted meanwhile
    transfer_s: float      # sender's view: first byte written to the receiver's ack
    rtt_s: float           # median of the ping-pongs before the transfer
    connect_s: float


def transfer(topo: StarTopology, src: str, dst: str, nbytes: int, pings: int = 20,
             progress: bool = False, timeout_s: float = 60.0) -> Transfer:
    """Push `nbytes` over one TCP connection from node `src` to node `dst` of a built topology."""
    server = subprocess.Popen(topo.exec_prefix(dst) + [sys.executable, str(PEER), "serve"],
                              stdout=subprocess.PIPE, text=True)
    procs = [server]
    try:
        port = int(_expect(server, "port ").split()[1])
        before = topo.counters(src)
        client = subprocess.Popen(topo.exec_prefix(src) + [sys.executable, str(PEER), "send",
                                  topo.nodes[dst].addr, str(port), str(nbytes), str(pings)],
                                  stdout=subprocess.PIPE, text=True)
        procs.append(client)
        watchdog = threading.Timer(timeout_s, lambda: [p.kill() for p in procs])
        watchdog.start()
        try:
            received = _follow(server, nbytes, progress)
            sent_out, _ = client.communicate()
        finally:
            watchdog.cancel()
        wire = (topo.counters(src) - before).tx_bytes
        if client.returncode != 0:
            raise RuntimeError(f"probe sender failed (exit {client.returncode}); timeout {timeout_s:.0f} s")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    sent = json.loads(sent_out)
    rtts = sorted(sent["rtt_s"])
    return Transfer(payload_bytes=nbytes, goodput_bps=received["goodput_bps"] or 0.0, wire_bytes=wire,
                    transfer_s=sent["total_s"], rtt_s=rtts[len(rtts) // 2] if rtts else float("nan"),
                    connect_s=sent["connect_s"])


def run(spec: LinkSpec, nbytes: int | None = None, backend: str = "auto", pings: int = 20,
        progress: bool = False, timeout_s: float | None = None) -> ProbeResult:
    """Build a two-node star with `spec` on every link direction, push `nbytes` from node a to b, tear down."""
    nbytes = nbytes or default_bytes(spec.rate_bps)
    expected_s = spec.ideal_s(nbytes) if spec.rate_bps else 1.0
    with StarTopology([NodeSpec("a", spec, spec), NodeSpec("b", spec, spec)], backend=backend) as topo:
        done = transfer(topo, "a", "b", nbytes, pings, progress, timeout_s or 30.0 + 5 * expected_s)
        chosen = topo.backend
    configured = spec.rate_bps
    return ProbeResult(
        backend=chosen, link=spec.describe(), configured_bps=configured, measured_bps=done.goodput_bps,
        tcp_ceiling_bps=configured * TCP_PAYLOAD / L2_FRAME if configured else None,
        ratio=done.goodput_bps / configured if configured else None,
        payload_bytes=nbytes, wire_bytes=done.wire_bytes, transfer_s=done.transfer_s,
        rtt_s=done.rtt_s, connect_s=done.connect_s, delay_in_kernel=chosen == "netem",
    )


def _expect(proc: subprocess.Popen, start: str) -> str:
    line = proc.stdout.readline()
    if not line.startswith(start):
        raise RuntimeError(f"probe peer did not start (said {line!r}, exit {proc.poll()})")
    return line


def _follow(server: subprocess.Popen, nbytes: int, progress: bool) -> dict:
    """Read the receiver's progress lines (drawing a bar) until its JSON result."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=nbytes, unit="B", unit_scale=True, desc="probe", leave=False,
                   disable=not sys.stderr.isatty())   # frames only on a terminal (as harness.progress)
    try:
        for line in server.stdout:
            if line.startswith("progress "):
                if bar is not None:
                    bar.n = int(line.split()[1])
                    bar.refresh()
            elif line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"probe receiver ended without a result (exit {server.wait()})")
    finally:
        if bar is not None:
            bar.close()
