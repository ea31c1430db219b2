"""Every control message, checked before anyone acts on it: one schema per operation.

``parse(body, allowed, limits)`` turns one line's bytes into a dict or raises MessageError, one
line naming the operation, the key, the value and what is allowed. It refuses what is not a JSON
object, an operation that is unknown or not expected in that direction (``allowed``), a missing or
unknown key, and a value of another type or out of range: ranks in the allocation, VXLAN ids
1 .. 2**24 - 2, private overlay subnets, MTU 576 .. 9000, ports 1 .. 65535, byte counts and
timeouts bounded. The length of a line is bounded before it is parsed (harness.multihost.control).
What a value must be *in context* (a role of this host, an address on this run's overlay) is
checked where the operation runs (harness.multihost.agent.handle).
"""
from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

VNI_MAX = 2 ** 24 - 2           # VXLAN ids 1 .. 2**24 - 2 (0 and 2**24 - 1 are reserved by some switches)
MTU_MIN, MTU_MAX = 576, 9000    # bytes, as netem.overlay.OverlaySpec allows
NBYTES_MAX = 2 ** 34            # bytes one calibration probe may send (1 s at ~137 Gbit/s)
TIMEOUT_MAX_S = 3600.0          # seconds any operation may be given
TEXT_MAX = 20_000               # characters of a reason or message (a role's log tail fits)
LIST_MAX = 10_000               # items of any list or dict in a message
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")            # a role or host name
IFNAME = re.compile(r"[^/\s:]{1,15}")                             # a Linux interface name (IFNAMSIZ - 1)
HEX = re.compile(r"[0-9a-f]+")
Check = Callable[[Any], str]    # "" when the value is allowed, else what is allowed


class MessageError(ValueError):
    """A control message that breaks its schema: one line (operation, key, value, what is allowed)."""


@dataclass(frozen=True)
class Limits:
    """What ranges depend on: ``hosts`` in the allocation, ``runs`` planned."""
    hosts: int
    runs: int


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))


def integer(lo: int, hi: int) -> Check:
    return lambda v: "" if _is_int(v) and lo <= v <= hi else f"an integer {lo} .. {hi}"


def number(lo: float, hi: float, low_open: bool = False) -> Check:
    def check(v: Any) -> str:
        ok = _is_num(v) and (lo < v if low_open else lo <= v) and v <= hi
        return "" if ok else f"a number {'>' if low_open else '>='} {lo:g} and <= {hi:g}"
    return check


def text(limit: int = TEXT_MAX) -> Check:
    return lambda v: "" if isinstance(v, str) and len(v) <= limit else f"a string of at most {limit} characters"


def pattern(regex: re.Pattern, what: str) -> Check:
    return lambda v: "" if isinstance(v, str) and regex.fullmatch(v) else what


def hexdigits(n: int) -> Check:
    return lambda v: "" if isinstance(v, str) and len(v) == n and HEX.fullmatch(v) else f"{n} lower-case hex digits"


def boolean(v: Any) -> str:
    return "" if isinstance(v, bool) else "true or false"


def one_of(*values: Any) -> Check:
    return lambda v: "" if any(v == x and type(v) is type(x) for x in values) else f"one of {', '.join(map(repr, values))}"


def ipv4(private: bool = False) -> Check:
    def check(v: Any) -> str:
        try:
            addr = ipaddress.IPv4Address(v) if isinstance(v, str) else None
        except ValueError:
            addr = None
        if addr is None or addr.is_multicast or addr.is_unspecified or (private and not addr.is_private):
            return "a private IPv4 address" if private else "an IPv4 unicast address"
        return ""
    return check


def subnet24(v: Any) -> str:
    """The first three octets of a private /24 (10/8, 172.16/12, 192.168/16), e.g. "10.77.3"."""
    allowed = "the first three octets of a private /24 in 10/8, 172.16/12 or 192.168/16, e.g. '10.77.3'"
    if not isinstance(v, str) or not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,3}", v):
        return allowed
    try:
        net = ipaddress.IPv4Network(f"{v}.0/24")
    except ValueError:
        return allowed
    private = any(net.subnet_of(ipaddress.IPv4Network(p)) for p in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
    return "" if private else allowed


def list_of(item: Check, limit: int = LIST_MAX) -> Check:
    def check(v: Any) -> str:
        if not isinstance(v, list) or len(v) > limit:
            return f"a list of at most {limit} items"
        bad = next((why for x in v if (why := item(x))), "")
        return f"a list whose items are {bad}" if bad else ""
    return check


def dict_of(key: Check, value: Check, limit: int = LIST_MAX) -> Check:
    def check(v: Any) -> str:
        if not isinstance(v, dict) or len(v) > limit:
            return f"an object of at most {limit} entries"
        bad = next((f"keys {why}" for k in v if (why := key(k))), "") or \
            next((f"values {why}" for x in v.values() if (why := value(x))), "")
        return f"an object whose {bad}" if bad else ""
    return check


def record(fields: dict[str, Check], extra: bool = True) -> Check:
    """An object with at least ``fields`` (each checked); other keys allowed when ``extra`` (a report
    recorded in run.json as it came, whose size the line bound caps)."""
    def check(v: Any) -> str:
        if not isinstance(v, dict):
            return "an object"
        for k, c in fields.items():
            if k not in v:
                return f"an object with {k!r}"
            if (why := c(v[k])):
                return f"an object whose {k!r} is {why}"
        if not extra and set(v) - set(fields):
            return f"an object with only {', '.join(map(repr, fields))}"
        return ""
    return check


def maybe(c: Check) -> Check:
    return lambda v: "" if v is None else c(v)


PORT = integer(1, 65535)
ROLE = pattern(NAME, "a role name (letters, digits, _ . -; at most 64)")
TIMEOUT = number(0, TIMEOUT_MAX_S, low_open=True)
SECONDS = number(0, 2 ** 40)
MAC = hexdigits(64)

# op -> {key: check}; a value of "rank" or "index" is checked against Limits (see _ranged)
TO_PEER: dict[str, dict[str, Check]] = {
    "challenge": {"v": one_of(1), "nonce": MAC},
    "admitted": {"proof": MAC},
    "error": {"message": text()},
    "welcome": {"addrs": dict_of(pattern(re.compile(r"\d{1,4}"), "node ranks"), ipv4(), 4096)},
    "run": {"index": integer(0, 2 ** 31)},
    "build": {"vni": integer(1, VNI_MAX), "subnet": subnet24, "mtu": integer(MTU_MIN, MTU_MAX)},
    "serve": {"role": ROLE},
    "send": {"role": ROLE, "addr": ipv4(private=True), "port": PORT, "nbytes": integer(1, NBYTES_MAX),
             "timeout_s": TIMEOUT},
    "collect": {"role": ROLE, "timeout_s": TIMEOUT},
    "teardown": {},
    "launch": {"master_addr": ipv4(), "master_port": PORT, "trace_t0": SECONDS},
    "stop": {},
    "skip": {"index": integer(0, 2 ** 31)},
    "finish": {"ok": boolean},
}
TO_LEAD: dict[str, dict[str, Check]] = {
    "hello": {"rank": integer(1, 4095), "host": pattern(NAME, "a host name (letters, digits, _ . -; at most 64)"),
              "addr": ipv4(), "iface": pattern(IFNAME, "an interface name (1-15 characters, no / : or space)"),
              "problem": text(2000), "digest": hexdigits(16), "nonce": MAC, "proof": MAC},
    "error": {"message": text()},
    "ok": {},
    "built": {"overlay": record({"nodes": list_of(record({"name": ROLE, "addr": ipv4(private=True)}), 256)})},
    "port": {"port": PORT},
    "sent": {"result": record({"rtt_s": list_of(number(0, TIMEOUT_MAX_S))})},
    "received": {"result": record({"goodput_bps": maybe(number(0, 1e13))})},
    "down": {},
    "done": {"host": pattern(NAME, "a host name"), "status": one_of("ok", "failed", "interrupted"),
             "reason": text(), "exit_codes": dict_of(ROLE, maybe(integer(-255, 255)), 256),
             "dropped": list_of(text(1000), 256), "qdiscs": dict_of(text(200), text(200_000), 256)},
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def decode(body: bytes) -> dict:
    """One line's bytes as a JSON object with a string ``op`` (MessageError otherwise)."""
    try:
        msg = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise MessageError(f"control: not a JSON line ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(msg, dict):
        raise MessageError(f"control: a message is a JSON object, not {type(msg).__name__}")
    if not isinstance(msg.get("op"), str):
        raise MessageError(f"control: op: {_show(msg.get('op'))} is not allowed; a message names its operation in 'op'")
    return msg


def check(msg: dict, schema: dict[str, dict[str, Check]], limits: Limits | None = None) -> dict:
    """``msg`` itself when it fits ``schema[msg['op']]`` (and ``limits``), else MessageError."""
    op = msg.get("op")
    if op not in schema:
        raise MessageError(f"control: op: {_show(op)} is not allowed here; allowed: {', '.join(sorted(schema))}")
    fields = schema[op]
    for key in msg:
        if key != "op" and key not in fields:
            raise MessageError(f"control: op {op!r}: key {_show(key)} is not allowed; allowed: "
                               f"{', '.join(fields) or 'none'}")
    for key, c in fields.items():
        if key not in msg:
            raise MessageError(f"control: op {op!r}: key {key!r} is missing")
        why = c(msg[key]) or _ranged(key, msg[key], limits)
        if why:
            raise MessageError(f"control: op {op!r}: {key}: {_show(msg[key])} is not allowed; allowed: {why}")
    return msg


def parse(body: bytes, schema: dict[str, dict[str, Check]], limits: Limits | None = None) -> dict:
    """decode + check."""
    return check(decode(body), schema, limits)


def _ranged(key: str, value: Any, limits: Limits | None) -> str:
    if limits is None:
        return ""
    if key == "rank" and not value < limits.hosts:
        return f"a node rank 1 .. {limits.hosts - 1} (the hosts of this allocation but agent 0)"
    if key == "index" and not value < limits.runs:
        return f"a run index 0 .. {limits.runs - 1}"
    return ""


def _show(value: Any, limit: int = 60) -> str:
    """A value as the error line shows it: repr, cut to ``limit`` characters."""
    try:
        text_ = repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int too long to print
        text_ = f"<{type(value).__name__}>"
    return text_ if len(text_) <= limit else text_[: limit - 5] + "...'" if text_[0] in "'\"" else text_[: limit - 3] + "..."
