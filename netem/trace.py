"""Link traces: a rate (and optionally delay) schedule replayed on one direction of a link.

A Trace is a step function of time since the trace's start t0 (seconds): step i holds
``rates_bps[i]`` (and ``delays_s[i]``) from ``starts_s[i]`` to ``starts_s[i+1]``. After the
last step the trace either loops (``period_s``: time t means t mod period) or holds its last
step forever (``period_s`` None). Rates are L2 rates in bits/s, as tc counts them.

Formats (chosen by the file's suffix):
  .csv       ``t_s,rate_mbit[,delay_ms]`` per line, step-wise constant from each t_s. The first
             t_s is 0 and times strictly increase; ``#`` starts a comment, a first line that
             is not numbers is a header. A last line ``T,loop`` makes the trace repeat with
             period T; without it the last rate holds forever.
  otherwise  Mahimahi packet-delivery format: one line per 1500-byte delivery opportunity,
             integer milliseconds, non-decreasing (equal lines = several packets in the same
             ms); the trace loops with period = the last timestamp. It is turned into steps of
             MAHIMAHI_BIN_S: rate = opportunities in the bin * 1500 * 8 / bin length (a bin
             with none gets MIN_RATE_BPS: tbf cannot send at rate 0).

Never imports the harness. Errors are TraceError (a LinkSpecError) naming the key, the
value (file and line) and what is allowed.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from netem.spec import LinkSpec, LinkSpecError

MAHIMAHI_BIN_S = 0.25          # step length a Mahimahi trace is averaged over (tc change granularity)
MAHIMAHI_PACKET_BITS = 1500 * 8
MIN_RATE_BPS = 12_000.0        # one 1500-byte packet per second: the floor for empty bins
SHIPPED = Path(__file__).with_name("traces")
CSV_ALLOWED = "use lines 't_s,rate_mbit[,delay_ms]' with t_s starting at 0 and increasing, rate > 0, delay >= 0, optional last line 'T,loop'"
MAHI_ALLOWED = "use Mahimahi lines: one integer millisecond timestamp >= 0 per line, non-decreasing, the last > 0"


class TraceError(LinkSpecError):
    """A trace that cannot be found or read; the message names the key, the value and what is allowed."""


@dataclass(frozen=True)
class Trace:
    """A rate schedule. Invariants: starts_s[0] == 0, strictly increasing; rates > 0;
    delays_s None or one per step (>= 0); period_s None or > starts_s[-1]."""

    name: str
    starts_s: tuple[float, ...]
    rates_bps: tuple[float, ...]
    delays_s: tuple[float, ...] | None = None
    period_s: float | None = None

    def _step(self, t: float) -> tuple[int, float]:
        """(step index at time t, absolute time that step began), t in seconds since t0 (t < 0 is 0)."""
        t = max(0.0, t)
        base = 0.0
        if self.period_s is not None:
            base = math.floor(t / self.period_s) * self.period_s
            t -= base
        i = bisect.bisect_right(self.starts_s, t) - 1
        return i, base + self.starts_s[i]

    def rate_at(self, t: float) -> float:
        """Rate in force at time t (bits/s)."""
        return self.rates_bps[self._step(t)[0]]

    def delay_at(self, t: float) -> float | None:
        """One-way delay in force at time t (seconds), None when the trace has no delay column."""
        return None if self.delays_s is None else self.delays_s[self._step(t)[0]]

    def next_change_s(self, t: float) -> float:
        """The first step boundary after time t (math.inf when the last step holds forever)."""
        i, began = self._step(t)
        if i + 1 < len(self.starts_s):
            return began + self.starts_s[i + 1] - self.starts_s[i]
        if self.period_s is None:
            return math.inf
        return began - self.starts_s[i] + self.period_s

    def bits_between(self, a: float, b: float) -> float:
        """Bits the schedule carries from time a to time b (b >= a)."""
        bits, t = 0.0, max(0.0, a)
        while t < b:
            end = min(b, self.next_change_s(t))
            bits += self.rate_at(t) * (end - t)
            t = end
        return bits

    def transfer_s(self, nbytes: float, start_s: float) -> float:
        """Seconds to deliver nbytes at the schedule's rate, starting at time start_s (fluid, no delay)."""
        left, t = nbytes * 8.0, max(0.0, start_s)
        while left > 0:
            rate, end = self.rate_at(t), self.next_change_s(t)
            if left <= rate * (end - t):
                return t + left / rate - start_s
            left -= rate * (end - t)
            t = end
        return max(0.0, t - start_s)

    def mean_rate_bps(self, start_s: float | None = None, end_s: float | None = None) -> float:
        """Time-mean rate over [start_s, end_s] (bits/s). Default: the long-run mean, i.e. over one
        period, or for a trace without a loop its last rate (which it holds from then on)."""
        if start_s is None:
            if self.period_s is None:
                return self.rates_bps[-1]
            start_s, end_s = 0.0, self.period_s
        if end_s is None or end_s <= start_s:
            return self.rate_at(start_s)
        return self.bits_between(start_s, end_s) / (end_s - start_s)

    @property
    def max_rate_bps(self) -> float:
        return max(self.rates_bps)


def traced(spec: LinkSpec, value: str | None, key: str = "net.trace") -> LinkSpec:
    """``spec`` driven by the trace ``value`` names (unchanged when value is None or ''): the
    trace's resolved path, its first rate as rate_bps and, with a delay column, its first delay."""
    if value is None or not str(value).strip():
        return spec
    trace = load(value, key)
    first_delay = trace.delay_at(0.0)
    return replace(spec, trace=str(find(value, key)), rate_bps=trace.rate_at(0.0),
                   delay_s=spec.delay_s if first_delay is None else first_delay)


def find(value: str, key: str = "net.trace") -> Path:
    """The file a trace value names: a path (absolute, or relative to the current directory or
    the repository), or the name of a shipped trace (netem/traces/NAME[.csv])."""
    text = str(value).strip()
    repo = SHIPPED.parent.parent
    for candidate in (Path(text), repo / text, SHIPPED / text, SHIPPED / f"{text}.csv"):
        if text and candidate.is_file():
            return candidate.resolve()
    shipped = ", ".join(sorted(p.stem for p in SHIPPED.glob("*.csv"))) if SHIPPED.is_dir() else "none"
    raise TraceError(key, value, f"is not a trace file; give a path to a .csv or Mahimahi file, or a shipped trace: {shipped}")


def load(value: str, key: str = "net.trace") -> Trace:
    """Find and parse a trace (cached per file and modification time)."""
    path = find(value, key)
    return _load(str(path), path.stat().st_mtime_ns, key)


@lru_cache(maxsize=64)
def _load(path: str, _mtime: int, key: str) -> Trace:
    text = Path(path).read_text(errors="replace")
    name = Path(path).stem
    return parse_csv(text, name, key, path) if path.endswith(".csv") else parse_mahimahi(text, name, key, path)


def _number(field: str, line: int, raw: str, key: str, where: str, allowed: str) -> float:
    try:
        value = float(field)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(key, f"{where} line {line}: {raw.strip()}", f"has {field.strip()!r}, not a number; {allowed}")
    return value


def parse_csv(text: str, name: str = "trace", key: str = "net.trace", where: str = "trace") -> Trace:
    """Parse the CSV format (see the module docstring)."""
    starts, rates, delays, period = [], [], [], None
    columns = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        bad = lambda why: TraceError(key, f"{where} line {n}: {raw.strip()}", f"{why}; {CSV_ALLOWED}")  # noqa: E731
        if period is not None:
            raise bad("comes after the 'T,loop' line, which must be last")
        if not starts and columns is None and not _is_number(fields[0]):
            columns = fields                              # a header
            continue
        t = _number(fields[0], n, raw, key, where, CSV_ALLOWED)
        if len(fields) == 2 and fields[1].lower() == "loop":
            if not starts or t <= starts[-1]:
                raise bad("loops at a time not after the last step")
            period = t
            continue
        if len(fields) not in (2, 3):
            raise bad(f"has {len(fields)} fields, not 2 or 3")
        if starts and len(fields) != (3 if delays else 2):
            raise bad("has a delay column where other lines do not (or the other way round)")
        if not starts and t != 0:
            raise bad("first time is not 0")
        if starts and t <= starts[-1]:
            raise bad(f"time {t:g} is not after the line above ({starts[-1]:g})")
        rate = _number(fields[1], n, raw, key, where, CSV_ALLOWED)
        if rate <= 0:
            raise bad("rate is not > 0")
        starts.append(t)
        rates.append(rate * 1e6)
        if len(fields) == 3:
            delay = _number(fields[2], n, raw, key, where, CSV_ALLOWED)
            if delay < 0:
                raise bad("delay is negative")
            delays.append(delay / 1e3)
    if not starts:
        raise TraceError(key, where, f"has no steps; {CSV_ALLOWED}")
    return Trace(name, tuple(starts), tuple(rates), tuple(delays) if delays else None, period)


def parse_mahimahi(text: str, name: str = "trace", key: str = "net.trace", where: str = "trace",
                   bin_s: float = MAHIMAHI_BIN_S) -> Trace:
    """Parse a Mahimahi packet-delivery trace into steps of bin_s seconds (see the module docstring)."""
    stamps: list[int] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if not line.isdigit():
            raise TraceError(key, f"{where} line {n}: {line}", f"is not an integer millisecond timestamp; {MAHI_ALLOWED}")
        if stamps and int(line) < stamps[-1]:
            raise TraceError(key, f"{where} line {n}: {line}", f"is before the line above ({stamps[-1]}); {MAHI_ALLOWED}")
        stamps.append(int(line))
    if not stamps or stamps[-1] <= 0:
        raise TraceError(key, where, f"has no delivery opportunity after 0 ms; {MAHI_ALLOWED}")
    period_ms = stamps[-1]
    bin_ms = max(1, min(period_ms, round(bin_s * 1000)))
    bins = -(-period_ms // bin_ms)
    counts = [0] * bins
    for stamp in stamps:
        counts[(stamp % period_ms) // bin_ms] += 1
    starts, rates = [], []
    for i, count in enumerate(counts):
        length_s = (min(period_ms, (i + 1) * bin_ms) - i * bin_ms) / 1000
        rate = max(MIN_RATE_BPS, count * MAHIMAHI_PACKET_BITS / length_s)
        if not rates or rate != rates[-1]:
            starts.append(i * bin_ms / 1000)
            rates.append(rate)
    return Trace(name, tuple(starts), tuple(rates), None, period_ms / 1000)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
