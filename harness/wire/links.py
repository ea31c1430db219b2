"""What the links of a star promise: ideal transfer times, seeded delays, token buckets.

The star has one link per role; each link has two directions, ``up`` (egress at the role,
towards the switch) and ``down`` (egress at the switch port, towards the role). A message
from rank ``s`` to rank ``d`` crosses ``s.up`` then ``d.down``; its bottleneck rate is the
smaller of the two and its one-way delay is the sum of the two delays.

Units: bytes, bits per second (``*_bps``), bytes per second (``*_Bps``), seconds (``*_s``).

The ideal time of concurrent transfers (a broadcast, a gather) is a fluid model with
max-min fair sharing of every direction of every link (what TCP flows sharing a shaped
link get, minus TCP's own overhead), plus the path delay. It is the denominator of wire
efficiency and the whole clock of the ``model`` backend.

A direction with a trace (``LinkSpec.trace``, netem/trace.py) has the trace's rate (and,
with a delay column, its delay) at time ``at - t0``, where ``t0`` is the wall-clock instant
the traces started (StarTopology.t0 on kernel backends, the launch on the others); the
fluid model then integrates the schedule: rates are re-read at every step boundary.
"""
from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass

from harness.seeds import derive
from netem.spec import LinkSpec
from netem.trace import Trace, load


@dataclass(frozen=True)
class Flow:
    """``nbytes`` from rank ``src`` to rank ``dst``, all starting at the same instant."""

    src: int
    dst: int
    nbytes: int


@dataclass(frozen=True)
class LinkTable:
    """The links of every rank: ``up[r]`` and ``down[r]`` (both LinkSpec), rank 0 is the hub."""

    up: tuple[LinkSpec, ...]
    down: tuple[LinkSpec, ...]
    t0: float = 0.0               # wall clock (s since the epoch) at which every trace started

    def __post_init__(self) -> None:
        if len(self.up) != len(self.down):
            raise ValueError(f"links: {len(self.up)} uplinks but {len(self.down)} downlinks; one of each per rank")

    @classmethod
    def unshaped(cls, world_size: int) -> "LinkTable":
        return cls(up=(LinkSpec(),) * world_size, down=(LinkSpec(),) * world_size)

    @property
    def world_size(self) -> int:
        return len(self.up)

    @property
    def traced(self) -> bool:
        return any(s.trace for s in (*self.up, *self.down))

    def _trace(self, spec: LinkSpec) -> Trace | None:
        return load(spec.trace) if spec.trace else None

    def rate_bps(self, spec: LinkSpec, at: float | None = None) -> float | None:
        """Rate of one direction (bits/s) at wall-clock time ``at`` (None: t0), None when unshaped."""
        trace = self._trace(spec)
        return spec.rate_bps if trace is None else trace.rate_at((self.t0 if at is None else at) - self.t0)

    def nominal_rate_bps(self, spec: LinkSpec) -> float | None:
        """The rate a row names for one direction: a trace's time-mean over one period, else rate_bps."""
        trace = self._trace(spec)
        return spec.rate_bps if trace is None else trace.mean_rate_bps()

    def _delay_s(self, spec: LinkSpec, at: float | None) -> float:
        trace = self._trace(spec)
        traced = None if trace is None else trace.delay_at((self.t0 if at is None else at) - self.t0)
        return spec.delay_s if traced is None else traced

    def path_rate_bps(self, src: int, dst: int, at: float | None = None) -> float | None:
        """Bottleneck rate of src -> dst in bits/s at ``at``, None when neither direction is shaped."""
        rates = [r for r in (self.rate_bps(self.up[src], at), self.rate_bps(self.down[dst], at)) if r is not None]
        return min(rates) if rates else None

    def slowest_rate_bps(self, src: int, dst: int) -> float | None:
        """The lowest bottleneck rate src -> dst ever has (a trace's slowest step), None when unshaped."""
        rates = [min(self._trace(s).rates_bps) if s.trace else s.rate_bps for s in (self.up[src], self.down[dst])]
        return min((r for r in rates if r is not None), default=None)

    def path_delay_s(self, src: int, dst: int, at: float | None = None) -> float:
        """Nominal one-way delay of src -> dst (seconds) at ``at`` (a trace's delay column wins)."""
        return self._delay_s(self.up[src], at) + self._delay_s(self.down[dst], at)

    def mean_rate_bps(self, src: int, dst: int, start: float, end: float) -> float | None:
        """Time-mean bottleneck rate of src -> dst over wall-clock [start, end] (bits/s)."""
        specs = (self.up[src], self.down[dst])
        if not any(s.trace for s in specs) or end <= start:
            return self.path_rate_bps(src, dst, start)
        bits, t = 0.0, start
        while t < end:
            edges = [self._trace(s).next_change_s(t - self.t0) + self.t0 for s in specs if s.trace]
            stop = min([end, *edges])
            bits += (self.path_rate_bps(src, dst, t) or math.inf) * (stop - t)
            t = stop
        return bits / (end - start)

    def _next_change(self, at: float) -> float:
        """The first wall-clock instant after ``at`` at which a traced direction changes (inf: none)."""
        return min((self._trace(s).next_change_s(at - self.t0) + self.t0 for s in (*self.up, *self.down)
                    if s.trace), default=math.inf)

    def _capacity(self, at: float) -> dict[tuple[str, int], float]:
        """Bytes/s of every direction of every link at wall-clock ``at`` (inf: unshaped)."""
        capacity: dict[tuple[str, int], float] = {}
        for d in range(self.world_size):
            for side, spec in (("up", self.up[d]), ("down", self.down[d])):
                rate = self.rate_bps(spec, at)
                capacity[(side, d)] = math.inf if rate is None else rate / 8.0
        return capacity

    def ideal_s(self, flows: list[Flow], at: float | None = None) -> list[float]:
        """Ideal completion time of each flow (seconds since their common start ``at``, wall clock;
        None: t0), fluid model.

        Every direction of every link is shared max-min fairly among the flows crossing it;
        a flow's time is its path delay plus the time its last byte leaves the bottleneck.
        A single flow on untraced links gets ``delay + nbytes*8/bottleneck_rate``; on traced
        links the rates are re-read at each step boundary (the schedule is integrated).
        """
        start = self.t0 if at is None else at
        paths = [[("up", f.src), ("down", f.dst)] for f in flows]
        left = [float(f.nbytes) for f in flows]
        done = [0.0 if f.nbytes == 0 else math.nan for f in flows]
        now = 0.0
        active = {i for i, f in enumerate(flows) if f.nbytes > 0}
        fixed = None if self.traced else self._capacity(start)     # constant links: the same every step
        while active:
            rate = _max_min_rates(active, paths, fixed or self._capacity(start + now))
            finite = [left[i] / rate[i] for i in active if not math.isinf(rate[i])]
            step = min(finite) if finite else 0.0          # unshaped flows finish at once
            edge = self._next_change(start + now)
            if edge - start - now <= 1e-12:                # on a boundary (float): the next one
                edge = self._next_change(start + now + 1e-9)
            step = min(step, edge - start - now)
            now += step
            for i in list(active):
                left[i] = 0.0 if math.isinf(rate[i]) else left[i] - rate[i] * step
                if left[i] <= 1e-9 * flows[i].nbytes:
                    done[i] = now
                    active.discard(i)
        return [done[i] + self.path_delay_s(f.src, f.dst, start) for i, f in enumerate(flows)]

    def delay_sample_s(self, seed: int, src: int, dst: int, index: int, at: float | None = None) -> float:
        """One-way delay of message number ``index`` on src -> dst, jitter included (seconds).

        Jitter is uniform in +-jitter per direction (netem's default distribution), drawn
        from a generator seeded by (seed, src, dst, index): the same run gives the same
        delays. Never negative.
        """
        up, down = self.up[src], self.down[dst]
        delay = self.path_delay_s(src, dst, at)
        if up.jitter_s or down.jitter_s:
            rng = random.Random(derive("delay", seed, src, dst, index))
            delay += rng.uniform(-up.jitter_s, up.jitter_s) + rng.uniform(-down.jitter_s, down.jitter_s)
        return max(0.0, delay)

    def to_json(self) -> list[dict]:
        return [{"up": vars(u), "down": vars(d)} for u, d in zip(self.up, self.down)]

    @classmethod
    def from_json(cls, rows: list[dict], t0: float = 0.0) -> "LinkTable":
        return cls(up=tuple(LinkSpec(**r["up"]) for r in rows), down=tuple(LinkSpec(**r["down"]) for r in rows),
                   t0=float(t0))


def _max_min_rates(active: set[int], paths: list[list[tuple[str, int]]],
                   capacity: dict[tuple[str, int], float]) -> dict[int, float]:
    """Max-min fair rates (bytes/s) of the active flows by progressive filling."""
    rate: dict[int, float] = {}
    left = dict(capacity)
    unfixed = set(active)
    while unfixed:
        users: dict[tuple[str, int], list[int]] = {}
        for i in unfixed:
            for link in paths[i]:
                users.setdefault(link, []).append(i)
        link, share = min(((l, left[l] / len(u)) for l, u in users.items()), key=lambda x: x[1])
        if math.isinf(share):
            for i in unfixed:
                rate[i] = math.inf
            break
        for i in users[link]:
            rate[i] = share
            unfixed.discard(i)
            for other in paths[i]:
                left[other] = max(0.0, left[other] - share)
    return rate


class TokenBucket:
    """Paces bytes to ``rate_Bps`` (bytes/s) with bursts up to ``burst`` bytes; thread-safe.

    ``reserve(n)`` books ``n`` bytes and returns how long to sleep before sending them.
    Bookings are taken in call order and may drive the bucket into debt, so concurrent
    streams sharing one bucket share its rate fairly (chunk by chunk).
    """

    def __init__(self, rate_Bps: float, burst: int):
        if rate_Bps <= 0 or burst <= 0:
            raise ValueError(f"token bucket: rate {rate_Bps} B/s and burst {burst} B must be > 0")
        self.rate_Bps, self.burst = float(rate_Bps), float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> float:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate_Bps)
            self._stamp = now
            self._tokens -= nbytes
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_Bps

    def take(self, nbytes: int) -> None:
        """Block until ``nbytes`` may go."""
        wait = self.reserve(nbytes)
        if wait > 0:
            time.sleep(wait)


FRAME_BYTES = 1514        # one full TCP segment on the wire as tc counts it (Ethernet header, no FCS)
SEGMENT_BYTES = 1448      # its payload: 1500 MTU - 20 IPv4 - 20 TCP - 12 TCP timestamps


def framed_bytes(nbytes: int) -> int:
    """Bytes a payload costs on an Ethernet link carrying TCP/IPv4 (what the userspace pacer charges)."""
    return -(-nbytes * FRAME_BYTES // SEGMENT_BYTES)


def chunk_bytes(rate_bps: float | None) -> int:
    """Chunk size for pacing at ``rate_bps``: ~10 ms of the link, 8 KiB .. 1 MiB; 0 = one piece."""
    if rate_bps is None:
        return 0
    return int(min(1 << 20, max(8 << 10, rate_bps / 8.0 * 0.010)))
