"""Names of what netem creates, and how to tell ours (and whose) from everything else.

Every namespace we create is named `nb-<owner>-<tag>-<role>`:
  owner  the creating process's PID, or `up` for topologies left standing by `python -m netem up`
  tag    4 hex digits, unique among existing `nb-` namespaces; it also fixes the topology's
         subnet 10.<tag byte 0>.<tag byte 1>.0/24, so two topologies never share names or subnets
  role   `sw` (switch), `n<i>` (node i) or `caps` (capability probe)
Anything not matching this pattern is never touched.
"""
from __future__ import annotations

import fcntl
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
LOCK_PATH = Path("/tmp/narrowband-netns.lock")
PERSISTENT_OWNER = "up"
_NAME = re.compile(r"^nb-(?P<owner>[0-9]+|up)-(?P<tag>[0-9a-f]{4})-(?P<role>sw|n[0-9]+|caps)$")


@dataclass(frozen=True)
class OurName:
    """A parsed namespace name of ours."""

    name: str
    owner: str      # PID as text, or "up"
    tag: str
    role: str

    @property
    def prefix(self) -> str:
        return f"nb-{self.owner}-{self.tag}"


def parse(name: str) -> OurName | None:
    """The parts of one of our namespace names; None for anything else."""
    match = _NAME.match(name)
    return None if match is None else OurName(name, **match.groupdict())


def list_ours() -> list[OurName]:
    """Our namespaces that exist now (any owner)."""
    from pyroute2 import netns

    return [n for n in map(parse, netns.listnetns()) if n is not None]


def subnet_of(tag: str) -> str:
    """'a3f0' -> '10.163.240' (the first three octets of the topology's /24)."""
    value = int(tag, 16)
    return f"10.{value >> 8}.{value & 0xFF}"


def allocate_prefix(owner: str | None = None, first: str | None = None) -> str:
    """A fresh `nb-<owner>-<tag>` prefix whose tag no existing namespace uses.

    With `first` (a role, e.g. "sw"), the namespace `<prefix>-<first>` is created while a file
    lock is held, so concurrent callers in other processes cannot pick the same tag.
    """
    from pyroute2 import netns

    owner = owner or str(os.getpid())
    LOCK_PATH.touch(exist_ok=True)
    with open(LOCK_PATH, "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = {n.tag for n in list_ours()}
        for _ in range(1000):
            tag = secrets.token_hex(2)
            if tag not in used and tag[:2] not in ("00", "ff") and tag[2:] not in ("00", "ff"):
                break
        else:
            raise RuntimeError("no free topology tag: run `python -m netem clean`")
        prefix = f"nb-{owner}-{tag}"
        if first is not None:
            netns.create(f"{prefix}-{first}")
        return prefix


def owner_alive(entry: OurName) -> bool:
    """True while the owner of `entry` runs (persistent `up` topologies count as alive).

    A PID that was reused by a process started after the namespace was created counts as dead.
    """
    if entry.owner == PERSISTENT_OWNER:
        return True
    pid = int(entry.owner)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = _process_start_time(pid)
    try:
        created = (NETNS_DIR / entry.name).stat().st_mtime
    except OSError:
        return True
    return started is None or started <= created + 2.0


def _process_start_time(pid: int) -> float | None:
    """Wall-clock start of `pid` (seconds since the epoch), from /proc; None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")

