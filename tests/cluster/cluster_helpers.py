"""Helpers of the launch tests: star role lists, selftest outputs, expected byte counts."""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from harness.cluster.launch import RoleSpec
from harness.commands.cluster_selftest import scatter_size
from netem.spec import LinkSpec

OPEN = LinkSpec()


def star(n_nodes: int, hub: LinkSpec = OPEN, down: LinkSpec = OPEN, up: LinkSpec = OPEN) -> list[RoleSpec]:
    """roles[0] = 'hub' (its link both ways), then w0.. with the given up/down links."""
    return [RoleSpec("hub", hub, hub)] + [RoleSpec(f"w{i}", up, down) for i in range(n_nodes)]


def outputs(run_dir: Path, name: str) -> dict:
    return json.loads((Path(run_dir) / "selftest" / f"{name}.json").read_text())


def expected_sent(rank: int, world_size: int, nbytes: int) -> int:
    """Payload bytes that rank `rank` sends in selftest.exchange (see harness/commands/cluster_selftest.py)."""
    nodes = range(1, world_size)
    if rank == 0:
        return sum(nbytes + r for r in nodes) + nbytes * len(nodes) + sum(scatter_size(r, nbytes) for r in nodes)
    return (nbytes + rank) + (nbytes + 2 * rank)


def check_exchange(run_dir: Path, roles: list[RoleSpec], nbytes: int) -> list[dict]:
    """Every role verified its payloads, recorded exactly the bytes it sent, and both ends agree."""
    seen = [outputs(run_dir, f"exchange-{r.name}") for r in roles]
    for rank, out in enumerate(seen):
        assert out["checks"] and all(out["checks"].values()), (roles[rank].name, out["checks"])
        assert out["sent"] == expected_sent(rank, len(roles), nbytes), roles[rank].name
    sent = {(t["tag"], t["src"], t["dst"]): t["nbytes"] for out in seen for t in out["transfers"] if t["src"] == out["rank"]}
    got = {(t["tag"], t["src"], t["dst"]): t["nbytes"] for out in seen for t in out["transfers"] if t["dst"] == out["rank"]}
    assert sent == got
    assert sum(o["sent"] for o in seen) == sum(o["received"] for o in seen)
    return seen


def broadcast_ratio(run_dir: Path) -> tuple[float, list[dict]]:
    """Median over repetitions of (slowest receiver's seconds / ideal), and the records."""
    records = [r for r in outputs(run_dir, "probe")["records"] if r["op"] == "broadcast"]
    assert records and all(r["intact"] for r in records)
    return statistics.median(r["seconds"] / r["ideal_s"] for r in records), records


def wait_for(paths: list[Path], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.1)
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def our_namespaces(pid: int | None = None) -> list[str]:
    """Namespaces of ours owned by ``pid`` (default: this process) that exist now."""
    from netem.names import list_ours

    owner = str(pid if pid is not None else os.getpid())
    return [n.name for n in list_ours() if n.owner == owner]
