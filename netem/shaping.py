"""Qdisc recipes: how one LinkSpec becomes the egress qdisc of one interface.

Backends:
  netem  one `netem` root qdisc: rate, delay, jitter, loss; its packet limit is sized to hold
         rate * (delay + jitter) plus the queue, so delay alone never drops packets.
  tc     one `tbf` root qdisc for the rate. Delay and jitter are left to the transport (the
         harness adds them per message). Loss cannot be emulated: this kernel has no
         sch_netem and no act_gact (`action drop` is refused), and dropping packets from
         userspace is not possible for a TCP transport, so loss > 0 on `tc` is refused with a
         clear error rather than silently ignored.

tbf sizing (measured, see docs/netem.md): the bucket (burst) must absorb the qdisc timer's
lateness, or tokens are lost and goodput falls below the rate; a large bucket lets the first
burst/rate seconds of a transfer pass at line rate, so short transfers look faster than the
link. BURST_S = 4 ms of traffic (at least two frames) keeps TCP goodput at the 95.6%
header-limited ceiling from 500kbit to 100mbit while a 1 MB message is delayed by at most 4 ms.
The topology turns GSO off on every veth (one skb per frame), so a frame is never larger than
the bucket. The queue (limit) holds QUEUE_S of traffic plus the bucket, at least
QUEUE_MIN_BYTES, unless LinkSpec.queue_bytes says otherwise.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from netem.spec import LinkSpec, LinkSpecError, format_rate, format_time

MTU = 1500
FRAME = MTU + 14                   # bytes on the wire per full packet as tc counts them
BURST_S = 0.004                    # tbf bucket depth in seconds of traffic at the rate (timer slack)
BURST_MIN_BYTES = 2 * FRAME        # ... but at least two full frames
QUEUE_S = 0.050                    # queue in seconds of traffic at the rate
QUEUE_MIN_BYTES = 64 * 1024
NETEM_MIN_LIMIT = 1000             # packets (the kernel default)
UNSHAPED_RATE_BPS = 10e9           # what a veth carries at most, for sizing netem queues without a rate
TBF_MAX_RATE_BPS = 8 * (2**32 - 1) # tbf's 32-bit bytes/s field (pyroute2 does not send TCA_TBF_RATE64)


@dataclass(frozen=True)
class Qdisc:
    """One qdisc to add as the root of an interface: `ipr.tc("add", kind, index=i, **options)`."""

    kind: str
    options: dict = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in self.options.items())


def tbf_burst_bytes(rate_bps: float) -> int:
    """Bucket depth (bytes) for tbf at `rate_bps`."""
    return int(max(rate_bps / 8 * BURST_S, BURST_MIN_BYTES))


def tbf_limit_bytes(rate_bps: float, queue_bytes: int | None = None) -> int:
    """Queue (bytes) for tbf at `rate_bps`; an explicit queue_bytes wins but never goes below the burst."""
    burst = tbf_burst_bytes(rate_bps)
    if queue_bytes is not None:
        return max(queue_bytes, FRAME)
    return int(max(rate_bps / 8 * QUEUE_S + burst, QUEUE_MIN_BYTES))


def netem_limit_packets(spec: LinkSpec) -> int:
    """netem queue (packets): everything in flight during delay+jitter at the rate, plus the queue."""
    rate = spec.rate_bps or UNSHAPED_RATE_BPS
    in_flight = rate / 8 * (spec.delay_s + spec.jitter_s)
    queue = spec.queue_bytes if spec.queue_bytes is not None else rate / 8 * QUEUE_S
    return max(NETEM_MIN_LIMIT, math.ceil((in_flight + queue) / FRAME))


def check(spec: LinkSpec, backend: str, where: str = "link", field: Callable[[str], str] | None = None) -> None:
    """Raise LinkSpecError when `backend` cannot do `spec`.

    Errors name `field(name)` (default `<where>.<name>`, e.g. 'worker0.up.loss').
    """
    field = field or (lambda name: f"{where}.{name}")
    if backend not in ("netem", "tc"):
        raise LinkSpecError(field("backend"), backend, "is not a kernel backend; use netem or tc")
    if backend == "tc" and spec.loss > 0:
        raise LinkSpecError(field("loss"), f"{spec.loss * 100:g}%",
                            "cannot be emulated on the tc backend (kernel has no sch_netem and no "
                            "gact drop action); use loss 0% or a kernel with netem")
    if backend == "tc" and spec.trace and peak_rate_bps(spec) > TBF_MAX_RATE_BPS:
        raise LinkSpecError(field("trace"), spec.trace, f"peaks at {format_rate(peak_rate_bps(spec))}, above "
                            f"tbf's limit of {format_rate(TBF_MAX_RATE_BPS)}")
    if backend == "tc" and spec.rate_bps is not None and spec.rate_bps > TBF_MAX_RATE_BPS:
        raise LinkSpecError(field("rate"), format_rate(spec.rate_bps),
                            f"is above tbf's limit; use at most {format_rate(TBF_MAX_RATE_BPS)} or none")


def peak_rate_bps(spec: LinkSpec) -> float | None:
    """The highest rate this direction will be set to (a traced one's peak): what queues are sized for."""
    if not spec.trace:
        return spec.rate_bps
    from netem.trace import load

    return max(load(spec.trace).max_rate_bps, spec.rate_bps or 0.0)


def retune(qdisc: Qdisc, rate_bps: float, delay_s: float | None = None) -> Qdisc:
    """The same root qdisc at another rate (netem: and delay), for `tc change`; burst follows the
    rate, the queue stays as planned (sized for the trace's peak, so a rate drop never drops packets
    already queued). tbf refills its bucket on every change (tbf_change), so each change may let one
    bucket (BURST_S of traffic) through early."""
    options = {**qdisc.options, "rate": f"{int(round(rate_bps))}bit"}
    if qdisc.kind == "tbf":
        options["burst"] = tbf_burst_bytes(rate_bps)
    if qdisc.kind == "netem" and delay_s is not None:
        options["delay"] = int(round(delay_s * 1e6))
    return Qdisc(qdisc.kind, options)


def plan(spec: LinkSpec, backend: str, where: str = "link") -> list[Qdisc]:
    """The root qdisc(s) for one direction; [] when the direction is left unshaped.

    A traced direction starts at spec.rate_bps (the trace's first rate) with its queue sized
    for the trace's peak rate; netem.replay changes the rate on schedule."""
    check(spec, backend, where)
    peak = peak_rate_bps(spec)
    if backend == "netem":
        if not spec.shaped and spec.queue_bytes is None:
            return []
        options: dict = {"handle": "1:", "limit": netem_limit_packets(replace(spec, rate_bps=peak))}
        if spec.delay_s:
            options["delay"] = int(round(spec.delay_s * 1e6))          # microseconds
        if spec.jitter_s:
            options["jitter"] = int(round(spec.jitter_s * 1e6))        # microseconds
        if spec.loss:
            options["loss"] = spec.loss * 100.0                         # percent
        if spec.rate_bps is not None:
            options["rate"] = f"{int(round(spec.rate_bps))}bit"
        return [Qdisc("netem", options)]
    if spec.rate_bps is None:
        return []
    return [Qdisc("tbf", {
        "handle": "1:",
        "rate": f"{int(round(spec.rate_bps))}bit",
        "burst": tbf_burst_bytes(spec.rate_bps),
        "limit": tbf_limit_bytes(peak, spec.queue_bytes),
    })]


def apply(ipr, index: int, qdiscs: list[Qdisc], command: str = "replace") -> None:
    """Install `qdiscs` as the root of interface `index` through the pyroute2 handle `ipr`
    (command "change": alter the installed ones in place, e.g. a traced rate)."""
    for qdisc in qdiscs:
        ipr.tc(command, qdisc.kind, index=index, **qdisc.options)


def summary(spec: LinkSpec, backend: str) -> str:
    """What the kernel does and what is left to the transport, for logs."""
    if backend == "tc" and (spec.delay_s or spec.jitter_s):
        rate = format_rate(spec.rate_bps)
        extra = format_time(spec.delay_s) + (f" jitter {format_time(spec.jitter_s)}" if spec.jitter_s else "")
        return f"kernel tbf {rate}; transport {extra}"
    return f"kernel {backend} {spec.describe()}"
