"""Entry functions that exercise the cluster and the transport (tests, benchmark, `docs/cluster.md`).

    launch(roles, "harness.commands.cluster_selftest:main", {"cfg": {"selftest": {...}}}, ...)

``cfg["selftest"]["phases"]`` runs in order, any of:
  exchange  send/recv, broadcast, scatter (one node gets 0 bytes) and gather of seeded
            random payloads of about ``nbytes``; every role checks what it got and writes
            ``selftest/exchange-<role>.json`` (its Transfers, bytes sent and received, wire
            counter deltas) and one recorder row.
  probe     timed transfers, ``probes: [{op: broadcast|send, nbytes, repeat, dst}]``; the
            hub writes ``selftest/probe.json``: per transfer the slowest receiver's seconds
            and ideal_s, payload bytes, and the interface counter deltas (wire bytes); and
            ``from_start_s``, the last receiver's arrival less the hub's start (one clock: the
            roles of one machine), which a late receiver cannot shorten as it can its own
            seconds (those count from when it posted the receive, if after the send).
  idle      heartbeat for ``idle_s`` seconds (default: until stopped); writes
            ``selftest/idle-<role>.json`` with its pid first, so a test can kill it.
  hang      write ``selftest/hang-<role>.json``, then sleep without heartbeats.
  busy      the hub computes (beating, as a learner evaluates) for ``busy_s`` seconds while the nodes wait at a
            barrier, then broadcasts a few bytes; every role writes ``selftest/busy-<role>.json``.
  damaged   the hub sends node 1 a compressed gradient (``harness.compress.Payload``) with one bit
            flipped in its body; node 1 decodes it as a worker would, so it raises PayloadError
            and its role exits non-zero (docs/failure.md: a damaged payload reaching a live role).
  where     write ``selftest/where-<role>.json``: pid, parent pid, whether the process is in its
            role's namespace, the interfaces it sees, RANK/NARROWBAND_ROLE, how it was started.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict
from pathlib import Path

from harness.cluster.role import RoleContext
from netem.names import NETNS_DIR


def main(ctx: RoleContext) -> None:
    options = ctx.options.get("selftest", {})
    for phase in options.get("phases", ["exchange"]):
        {"exchange": exchange, "probe": probe, "idle": idle, "hang": hang, "where": where,
         "damaged": damaged, "busy": busy}[phase](ctx, options)


def payload_for(rank: int, nbytes: int, salt: str = "") -> bytes:
    """Seeded random bytes: what rank ``rank`` sends (tests recompute it)."""
    return random.Random(f"selftest:{salt}:{rank}").randbytes(nbytes)


def scatter_size(rank: int, nbytes: int) -> int:
    """What the hub scatters to ``rank``: rank 1 gets an empty payload, the others nbytes + rank."""
    return 0 if rank == 1 else nbytes + rank


def exchange(ctx: RoleContext, options: dict) -> None:
    ch, n, hub = ctx.channel, int(options.get("nbytes", 50_000)), 0
    checks: dict[str, bool] = {}
    before = ctx.wire()
    mine = payload_for(ctx.rank, n + ctx.rank, "p2p")
    if ctx.rank == hub:
        for r in ch.nodes:
            got, _ = ch.recv(r, "p2p-up")
            checks[f"p2p-up-{r}"] = got == payload_for(r, n + r, "p2p")
            ch.send(r, got[::-1], "p2p-down")
    else:
        ch.send(hub, mine, "p2p-up")
        got, _ = ch.recv(hub, "p2p-down")
        checks["p2p-down"] = got == mine[::-1]
    got, _ = ch.broadcast(payload_for(hub, n, "bcast") if ctx.rank == hub else None, "broadcast")
    checks["broadcast"] = got == payload_for(hub, n, "bcast")
    parts = {r: payload_for(r, scatter_size(r, n), "scatter") for r in ch.nodes} if ctx.rank == hub else None
    got, _ = ch.scatter(parts, "scatter")
    if ctx.rank != hub:
        checks["scatter"] = got == payload_for(ctx.rank, scatter_size(ctx.rank, n), "scatter")
    gathered, _ = ch.gather(payload_for(ctx.rank, n + 2 * ctx.rank, "gather") if ctx.rank != hub else None, "gather")
    if ctx.rank == hub:
        checks["gather"] = gathered == {r: payload_for(r, n + 2 * r, "gather") for r in ch.nodes}
    ch.barrier()
    wire = ctx.wire() - before
    sent = sum(t.nbytes for t in ch.transfers if t.src == ctx.rank)
    received = sum(t.nbytes for t in ch.transfers if t.dst == ctx.rank)
    ctx.recorder.row(0, payload_bytes_up=sent, payload_bytes_down=received,
                     wire_bytes_up=wire.tx_bytes, wire_bytes_down=wire.rx_bytes)
    ctx.recorder.flush()
    _write(ctx, f"exchange-{ctx.role}", {
        "rank": ctx.rank, "role": ctx.role, "backend": ctx.backend, "device": ctx.device, "checks": checks,
        "sent": sent, "received": received, "wire": wire.to_dict(),
        "transfers": [asdict(t) for t in ch.transfers]})
    ctx.heartbeat(1)


def probe(ctx: RoleContext, options: dict) -> None:
    """Timed transfers; the hub writes one record per repetition (see module docstring)."""
    ch, records = ctx.channel, []
    for number, spec in enumerate(options.get("probes", [])):
        op, nbytes = spec.get("op", "broadcast"), int(spec["nbytes"])
        dst = int(spec.get("dst", 1))
        data = payload_for(0, nbytes, f"probe{number}")
        for repeat in range(int(spec.get("repeat", 1))):
            tag = f"probe{number}.{repeat}"
            ch.barrier()
            before = ctx.wire()
            start = time.time()
            mine: dict = {}
            if op == "broadcast":
                got, transfers = ch.broadcast(data if ctx.rank == 0 else None, tag)
            elif ctx.rank == 0:
                transfers = [ch.send(dst, data, tag)]
            elif ctx.rank == dst:
                got, transfer = ch.recv(0, tag)
                transfers = [transfer]
            else:
                transfers = []
            if ctx.rank != 0 and transfers:
                wire = ctx.wire() - before
                mine = {"seconds": transfers[0].seconds, "ideal_s": transfers[0].ideal_s,
                        "nbytes": transfers[0].nbytes, "intact": got == data, "wire_rx": wire.rx_bytes,
                        "arrived": time.time()}
            reports, _ = ch.gather(json.dumps(mine).encode() if ctx.rank != 0 else None, f"{tag}.report")
            ctx.heartbeat(len(records) + 1)
            if ctx.rank != 0:
                continue
            hub_wall = time.time() - start
            hub_wire = ctx.wire() - before
            got_by = {r: json.loads(v) for r, v in reports.items() if v != b"{}"}
            records.append({
                "op": op, "nbytes": nbytes, "repeat": repeat, "receivers": sorted(got_by),
                "seconds": max(r["seconds"] for r in got_by.values()),
                "ideal_s": max(r["ideal_s"] for r in got_by.values()),
                "payload_bytes": sum(r["nbytes"] for r in got_by.values()),
                "intact": all(r["intact"] for r in got_by.values()),
                "wire_bytes_rx": sum(r["wire_rx"] for r in got_by.values()),
                "hub_wire_tx": hub_wire.tx_bytes, "hub_wall_s": hub_wall,
                "from_start_s": max(r["arrived"] for r in got_by.values()) - start,
                "per_receiver": got_by, "backend": ctx.backend})
    if ctx.rank == 0:
        _write(ctx, "probe", {"records": records})


def idle(ctx: RoleContext, options: dict) -> None:
    _write(ctx, f"idle-{ctx.role}", {"pid": os.getpid(), "role": ctx.role})
    end = time.monotonic() + float(options.get("idle_s", 1e9))
    step = 0
    while time.monotonic() < end:
        step += 1
        ctx.heartbeat(1000 + step)
        time.sleep(0.2)


def busy(ctx: RoleContext, options: dict) -> None:
    if ctx.rank == 0:
        end = time.monotonic() + float(options.get("busy_s", 1.0))
        while time.monotonic() < end:
            ctx.progress()
            time.sleep(0.1)
    ctx.channel.barrier()
    got, _ = ctx.channel.broadcast(b"done" if ctx.rank == 0 else None, "busy")
    _write(ctx, f"busy-{ctx.role}", {"got": got.decode()})


def hang(ctx: RoleContext, options: dict) -> None:
    _write(ctx, f"hang-{ctx.role}", {"pid": os.getpid(), "role": ctx.role})
    while True:
        time.sleep(1.0)


def damaged(ctx: RoleContext, options: dict) -> None:
    """Hub -> node 1: a Payload's bytes with a bit flipped two thirds in; node 1 decodes (and raises)."""
    import torch

    from harness.compress import Payload, build

    ctx.heartbeat(1)
    if ctx.rank == 0:
        gen = torch.Generator().manual_seed(0)
        data = bytearray(build("identity").encode({"w": torch.randn(64, 64, generator=gen)}).to_bytes())
        data[len(data) * 2 // 3] ^= 1 << 3
        ctx.channel.send(1, bytes(data), "damaged")
        ctx.channel.recv(1, "never")                # node 1 never answers: it is gone
    elif ctx.rank == 1:
        got, _ = ctx.channel.recv(0, "damaged")
        Payload.from_bytes(got)                     # raises PayloadError: this role exits 1


def where(ctx: RoleContext, options: dict) -> None:
    from pyroute2 import IPRoute

    own = os.stat("/proc/self/ns/net").st_ino
    with IPRoute() as ipr:
        links = sorted(link.get_attr("IFLA_IFNAME") for link in ipr.get_links())
    _write(ctx, f"where-{ctx.role}", {
        "pid": os.getpid(), "ppid": os.getppid(), "links": links, "netns": ctx.netns,
        "in_netns": ctx.netns is not None and os.stat(NETNS_DIR / ctx.netns).st_ino == own,
        "rank": os.environ.get("RANK"), "role_env": os.environ.get("NARROWBAND_ROLE"),
        "forked": "harness.cluster.role" not in " ".join(open("/proc/self/cmdline").read().split("\0")),
    })


def _write(ctx: RoleContext, name: str, obj: dict) -> None:
    folder = Path(ctx.run_dir) / "selftest"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, folder / f"{name}.json")
