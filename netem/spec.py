"""LinkSpec: what one direction of one emulated link does, parsed from strings a person writes.

Units: rates in bits per second (the L2 rate, Ethernet header included, as tc counts it),
times in seconds, loss as a fraction in [0, 1], queue in bytes.

Accepted spellings (case-insensitive, optional space before the unit):
  rate   500kbit, 10mbit, 1.5gbit, 64000 (plain number = bit/s); none / "" -> unshaped.
         Byte-per-second spellings (kbps, mbps, MB/s ...) are rejected: 'mbps' means
         megabits to some people and megabytes to others.
  time   20ms, 1s, 500us, 0. A Python int/float is seconds; a string needs a unit (except 0).
  loss   0.1%, 0. A Python float is a fraction; a string needs '%' (except 0).
  queue  64kb, 1mb, 1500 (plain number = bytes). kb = 1024 bytes, as in tc.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
_UNSET = {"", "none", "null", "off", "unshaped", "unlimited"}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z%/]*)\s*$", re.IGNORECASE)


class LinkSpecError(ValueError):
    """Bad link setting. The message names the field, the value and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}: {value!r} {allowed}")


def _split(text: str, field: str, what: str, allowed: str) -> tuple[float, str]:
    match = _NUMBER_UNIT.match(text)
    if match is None or not math.isfinite(float(match.group(1))):
        raise LinkSpecError(field, text, f"is not {what}; {allowed}")
    return float(match.group(1)), match.group(2).lower()


def _number(value: float | int, field: str, allowed: str) -> float:
    if isinstance(value, bool) or not math.isfinite(float(value)):
        raise LinkSpecError(field, value, f"is not a finite number; {allowed}")
    return float(value)


def parse_rate(text: str | float | int | None, field: str = "rate") -> float | None:
    """Rate in bits per second (> 0), or None for an unshaped link."""
    allowed = "use e.g. 500kbit, 10mbit, 1gbit (units: bit, kbit, mbit, gbit; a plain number is bit/s; none = unshaped)"
    if text is None or (isinstance(text, str) and text.strip().lower() in _UNSET):
        return None
    if isinstance(text, str):
        value, unit = _split(text, field, "a rate", allowed)
        if unit not in RATE_UNITS and unit != "":
            raise LinkSpecError(field, text, f"is not a rate; {allowed}")
        bps = value * RATE_UNITS.get(unit, 1)
    else:
        bps = _number(text, field, allowed)
    if bps <= 0:
        raise LinkSpecError(field, text, f"must be > 0; {allowed}")
    return bps


def parse_time(text: str | float | int | None, field: str = "delay") -> float:
    """Time in seconds (>= 0). None or "" is 0."""
    allowed = "use e.g. 500us, 20ms, 1s (units: us, ms, s)"
    if text is None or (isinstance(text, str) and text.strip() == ""):
        return 0.0
    if isinstance(text, str):
        value, unit = _split(text, field, "a time", allowed)
        if unit == "" and value == 0:
            return 0.0
        if unit not in TIME_UNITS:
            raise LinkSpecError(field, text, f"is not a time; {allowed}")
        seconds = value * TIME_UNITS[unit]
    else:
        seconds = _number(text, field, allowed)
    if seconds < 0:
        raise LinkSpecError(field, text, f"must be >= 0; {allowed}")
    return seconds


def parse_loss(text: str | float | int | None, field: str = "loss") -> float:
    """Loss probability as a fraction in [0, 1]. None or "" is 0."""
    allowed = "use a percentage from 0% to 100%, e.g. 0.1%"
    if text is None or (isinstance(text, str) and text.strip() == ""):
        return 0.0
    if isinstance(text, str):
        value, unit = _split(text, field, "a loss", allowed)
        if unit == "" and value == 0:
            return 0.0
        if unit != "%":
            raise LinkSpecError(field, text, f"is not a loss; {allowed}")
        fraction = value / 100.0
    else:
        fraction = _number(text, field, allowed)
    if not 0.0 <= fraction <= 1.0:
        raise LinkSpecError(field, text, f"is out of range; {allowed}")
    return fraction


def parse_size(text: str | float | int | None, field: str = "queue") -> int | None:
    """Size in bytes (> 0), or None (sized automatically from the rate)."""
    allowed = "use e.g. 1500, 64kb, 1mb (units: b, kb, mb, gb with kb = 1024 bytes; a plain number is bytes; none = automatic)"
    if text is None or (isinstance(text, str) and text.strip().lower() in _UNSET):
        return None
    if isinstance(text, str):
        value, unit = _split(text, field, "a size", allowed)
        if unit not in SIZE_UNITS and unit != "":
            raise LinkSpecError(field, text, f"is not a size; {allowed}")
        nbytes = value * SIZE_UNITS.get(unit, 1)
    else:
        nbytes = _number(text, field, allowed)
    if nbytes < 1:
        raise LinkSpecError(field, text, f"must be at least 1 byte; {allowed}")
    return int(round(nbytes))


def format_rate(bps: float | None) -> str:
    """10e6 -> '10mbit', 1.5e6 -> '1500kbit', None -> 'unshaped' (the shortest exact tc spelling)."""
    if bps is None:
        return "unshaped"
    for unit in ("gbit", "mbit", "kbit"):
        scaled = bps / RATE_UNITS[unit]
        if scaled >= 1 and abs(scaled - round(scaled)) < 1e-9:
            return f"{int(round(scaled))}{unit}"
    return f"{int(round(bps))}bit"


def format_time(seconds: float) -> str:
    """0.02 -> '20ms', 5e-4 -> '500us', 1.5 -> '1500ms'."""
    if seconds == 0:
        return "0ms"
    for unit in ("s", "ms"):
        scaled = seconds / TIME_UNITS[unit]
        if scaled >= 1 and abs(scaled - round(scaled)) < 1e-9:
            return f"{int(round(scaled))}{unit}"
    return f"{seconds / TIME_UNITS['us']:g}us"


@dataclass(frozen=True)
class LinkSpec:
    """One direction of a link. Invariants: rate_bps is None or > 0; times >= 0; 0 <= loss <= 1."""

    rate_bps: float | None = None   # L2 rate (bits/s, Ethernet header included); None: unshaped
    delay_s: float = 0.0            # one-way added delay
    jitter_s: float = 0.0           # +- uniform-ish spread around delay_s (netem semantics)
    loss: float = 0.0               # probability that a packet is dropped
    queue_bytes: int | None = None  # qdisc queue; None: sized from rate and delay
    trace: str | None = None        # path of a rate trace replayed on this direction (netem/trace.py);
                                    # rate_bps is then the trace's first rate (what is installed first)

    @classmethod
    def parse(cls, rate=None, delay=None, jitter=None, loss=None, queue=None, prefix: str = "net") -> "LinkSpec":
        """Build from person-written strings; errors name `<prefix>.<field>`."""
        at = (lambda name: f"{prefix}.{name}") if prefix else (lambda name: name)
        return cls(
            rate_bps=parse_rate(rate, at("rate")),
            delay_s=parse_time(delay, at("delay")),
            jitter_s=parse_time(jitter, at("jitter")),
            loss=parse_loss(loss, at("loss")),
            queue_bytes=parse_size(queue, at("queue")),
        )

    @property
    def shaped(self) -> bool:
        """True when anything at all is applied to this direction."""
        return bool(self.rate_bps is not None or self.delay_s or self.jitter_s or self.loss or self.trace)

    def ideal_s(self, nbytes: int) -> float:
        """Ideal one-way time of `nbytes` (seconds): delay + nbytes*8/rate (no transfer term when unshaped)."""
        transfer = 0.0 if self.rate_bps is None else nbytes * 8.0 / self.rate_bps
        return self.delay_s + transfer

    def describe(self) -> str:
        """Short human form, e.g. '10mbit 20ms' or '10mbit 20ms jitter 2ms loss 0.1%' or 'unshaped'."""
        parts = [] if self.rate_bps is None else [format_rate(self.rate_bps)]
        if self.delay_s:
            parts.append(format_time(self.delay_s))
        if self.jitter_s:
            parts.append(f"jitter {format_time(self.jitter_s)}")
        if self.loss:
            parts.append(f"loss {self.loss * 100:g}%")
        if self.queue_bytes is not None:
            parts.append(f"queue {self.queue_bytes}b")
        if self.trace:
            parts.append(f"trace {self.trace.rsplit('/', 1)[-1]}")
        return " ".join(parts) or "unshaped"
