"""The role process: ``harness.cluster.role.main`` (started by harness.cluster.launch through harness.cluster.spawn).

It is already inside its network namespace when this runs (forked from the warm launcher
and moved in with setns(2), the default; or ``ip netns exec ... python -m harness.cluster.role
PAYLOAD.json RANK`` with NARROWBAND_SPAWN=exec), so torch and gloo only ever see the role's
own veth. In order: read the payload, tell the parent we
started, import torch, join the process group (gloo, env:// rendezvous on the hub's
address), build the RoleContext, call the entry function ``module:function`` with it, and
leave the group after a final barrier (nobody tears down while a peer is mid-transfer). When
some role is ``expendable`` (it may have died mid-run, see harness.cluster.launch) that barrier is
bounded instead: a count in the rendezvous store, waited for at most CLOSING_WAIT_S.

Exit status: 0 when the entry returned; 1 with the traceback on stderr when it raised (no
teardown then: the parent stops the other roles). The parent watches the heartbeat pipe
(its fd in $NARROWBAND_HEARTBEAT_FD): one line per event, ``start``, ``ready``, ``beat <step>``,
``progress``, ``done``.
"""
from __future__ import annotations

import ctypes
import datetime
import importlib
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

PR_SET_PDEATHSIG = 1
HEARTBEAT_EVERY_S = 0.5      # at most this often for repeated, unchanged beats
HEARTBEAT_ENV = "NARROWBAND_HEARTBEAT_FD"
CLOSING_WAIT_S = 15.0        # how long the closing waits for peers when some may be dead
CLOSING_KEY = "narrowband/closing"


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux; else a no-op)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except OSError:
        pass


class Heartbeat:
    """Writes progress lines to the parent's pipe; repeated beats are rate-limited; never raises."""

    def __init__(self, fd: int | None):
        self.fd = fd
        self._last = (None, 0.0)

    def send(self, line: str, force: bool = True) -> None:
        now = time.monotonic()
        if not force and self._last[0] == line and now - self._last[1] < HEARTBEAT_EVERY_S:
            return
        self._last = (line, now)
        if self.fd is None:
            return
        try:
            os.write(self.fd, (line + "\n").encode())
        except OSError:
            self.fd = None       # parent gone: PR_SET_PDEATHSIG ends us


@runtime_checkable
class RoleContext(Protocol):
    """What an entry function ``module:function(ctx)`` may rely on, whoever runs it: a role process
    (:class:`ProcessRoleContext`, below) or an in-process runner (harness.onpolicy.inproc.ThreadCtx,
    harness.federated.inproc.FakeCtx). The entry reads nothing else of ``ctx``.

    ``plan``: what the launch sent the entry: for a run, ``RunPlan.to_dict()`` (the roles decode it
    once, ``harness.runplan.RunPlan.from_dict``); ``channel`` has the Channel interface (send, recv,
    broadcast, scatter, gather, barrier; ``modelled``: transfer seconds are modelled, not measured;
    ``links``: the LinkTable, or None without links); ``run_dir``: the run's folder (None: none of its
    own, in process); ``names[r]``: the role name of rank r; ``backend``: what carries the links.
    """
    rank: int
    world_size: int
    role: str
    device: str                      # cpu | cuda:i
    channel: Any
    run_dir: Path | None
    recorder: Any                    # harness.record.Recorder
    backend: str
    names: list[str]
    plan: dict

    def wire(self) -> Any: ...       # netem.counters.Counters of this role's interface now
    def heartbeat(self, step: int) -> None: ...
    def progress(self) -> None: ...


@dataclass
class ProcessRoleContext:
    """The RoleContext of a role process (harness.cluster.launch): who it is, what the launch sent
    (``payload``: a run's ``{"keys", "plan"}``, or an entry's own options), the channel, the recorder.

    ``device`` is ``cpu`` or ``cuda:i`` (a GPU is used only when asked for and present).
    ``names[r]`` is the role name of rank r; ``backend`` the resolved link backend.
    """

    rank: int
    world_size: int
    role: str
    device: str
    payload: dict
    channel: Any                     # harness.wire.transport.Channel
    run_dir: Path
    recorder: Any                    # harness.record.Recorder
    backend: str = "userspace"
    names: list[str] = field(default_factory=list)
    netns: str | None = None
    ifname: str | None = None
    _beat: Heartbeat = field(default_factory=lambda: Heartbeat(None), repr=False)

    @property
    def plan(self) -> dict:
        """The run's ``RunPlan.to_dict()`` ({} for an entry launched without one, e.g. the self-test)."""
        return dict(self.payload.get("plan") or {})

    @property
    def options(self) -> dict:
        """A non-run entry's own options (``payload["cfg"]``, e.g. the cluster self-test's phases)."""
        return dict(self.payload.get("cfg") or {})

    def wire(self):
        """This role's interface counters now (netem.counters.Counters; zeros without a namespace).

        tx = bytes this role sent (its uplink), rx = bytes it received (its downlink); L2
        frames, so the difference of two readings over a phase includes all protocol overhead.
        """
        from netem.counters import Counters, read

        if self.netns is None or self.ifname is None:
            return Counters(0, 0, 0, 0)
        return read(self.ifname)     # we run inside the namespace already

    def heartbeat(self, step: int) -> None:
        """Tell the parent this role progresses (it detects hangs by silence)."""
        self._beat.send(f"beat {int(step)}", force=False)

    def progress(self) -> None:
        """A finished transfer counts as progress too (called by the channel)."""
        self._beat.send("progress", force=False)


def resolve_device(requested: str, rank: int) -> str:
    """``cpu``; ``cuda``/``auto`` -> ``cuda:<rank mod #GPUs>``; ``cuda:i``. Falls back to cpu without GPUs."""
    if requested in ("", "cpu"):
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        if requested != "auto":
            print(f"[role] device {requested!r} asked for but no GPU is visible: using cpu", file=sys.stderr, flush=True)
        return "cpu"
    count = torch.cuda.device_count()
    index = rank % count if requested in ("auto", "cuda") else int(requested.split(":", 1)[1])
    if index >= count:
        print(f"[role] device {requested!r}: only {count} GPU(s); using cuda:{index % count}", file=sys.stderr, flush=True)
        index %= count
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def pin(slots) -> list[int]:
    """Pin this process to its core slots (harness.placement.pin_cpus); the CPUs it may run on after."""
    from harness.placement import pin_cpus

    cpus = pin_cpus(list(slots)) if slots else []
    if cpus:
        os.sched_setaffinity(0, cpus)
    return sorted(os.sched_getaffinity(0))


def oversubscribed(plan: dict | None) -> bool:
    """Whether the run's placement puts more busy roles than cores on some host (False: no placement)."""
    if not plan or not plan.get("placement"):
        return False
    from harness.placement import Placement

    return Placement.from_dict(plan["placement"]).oversubscribed


def load_entry(entry: str):
    module, _, function = entry.partition(":")
    return getattr(importlib.import_module(module), function)


def run(payload_path: Path, rank: int) -> int:
    """Everything a role process does; returns its exit status."""
    spec = json.loads(Path(payload_path).read_text())
    me = spec["roles"][rank]
    fd = os.environ.get(HEARTBEAT_ENV)
    beat = Heartbeat(int(fd) if fd else None)
    beat.send("start")
    import torch.distributed as dist        # after the namespace switch, by construction

    from harness.wire.links import LinkTable
    from harness.record import Recorder
    from harness.wire.transport import Channel

    world_size = len(spec["roles"])
    wait_s = float(spec["wait_s"])
    device = resolve_device(me["device"], rank)
    cpus = pin(me.get("cores") or ())
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=wait_s))
    beat.send("ready")
    run_dir = Path(spec["run_dir"])
    payload = spec["payload"]
    keys = {**(payload.get("keys") or {}), "backend": spec["backend"], "host": me.get("host", "local"),
            "device": device, "cpus": ",".join(map(str, cpus)),
            "oversubscribed": oversubscribed(payload.get("plan"))}
    ctx = ProcessRoleContext(rank=rank, world_size=world_size, role=me["name"], device=device, payload=payload,
                             channel=None, run_dir=run_dir, recorder=Recorder(run_dir, keys, me["name"]),
                             backend=spec["backend"], names=[r["name"] for r in spec["roles"]],
                             netns=me.get("netns"), ifname=me.get("ifname"), _beat=beat)
    links = LinkTable.from_json(spec["links"], t0=float(spec.get("trace_t0") or 0.0))
    ctx.channel = Channel(rank, world_size, links, spec["backend"],
                          seed=int(spec.get("seed", 0)), wait_s=wait_s, on_progress=ctx.progress)
    load_entry(spec["entry"])(ctx)
    ctx.recorder.close()
    if any(r.get("expendable") for r in spec["roles"]):
        bounded_barrier(world_size, min(CLOSING_WAIT_S, wait_s))
        try:
            dist.destroy_process_group()
        except Exception as err:  # noqa: BLE001 - a dead peer must not fail the survivors
            print(f"[role] leaving the group: {err}", file=sys.stderr, flush=True)
    else:
        dist.barrier()
        dist.destroy_process_group()
    beat.send("done")
    return 0


def bounded_barrier(world_size: int, wait_s: float) -> bool:
    """A closing barrier that a dead peer cannot hang: count arrivals in the rendezvous store
    (hosted by rank 0) and wait until all ``world_size`` arrived, at most ``wait_s`` seconds.

    True when all arrived. A store that is gone (rank 0 left first) ends the wait too: rank 0
    leaves only after its own wait, so the peers it still had were done with it.
    """
    import torch.distributed as dist

    deadline = time.monotonic() + wait_s
    try:
        store = dist.distributed_c10d._get_default_store()
        arrived = store.add(CLOSING_KEY, 1)
        while arrived < world_size and time.monotonic() < deadline:
            time.sleep(0.05)
            arrived = store.add(CLOSING_KEY, 0)
    except Exception as err:  # noqa: BLE001 - the store went away with rank 0: nothing left to wait for
        print(f"[role] closing: rendezvous store gone ({type(err).__name__}); leaving", file=sys.stderr, flush=True)
        return False
    if arrived < world_size:
        print(f"[role] closing: {arrived} of {world_size} roles arrived within {wait_s:g}s (the rest are "
              f"expendable and presumably gone); leaving", file=sys.stderr, flush=True)
    return arrived >= world_size


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m harness.cluster.role PAYLOAD.json RANK", file=sys.stderr)
        raise SystemExit(2)
    set_parent_death_signal()
    try:
        status = run(Path(argv[0]), int(argv[1]))
    except BaseException:                     # noqa: BLE001 - the traceback is the report
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)                           # no teardown: peers may be stuck; the parent cleans up
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(status)


if __name__ == "__main__":
    main()
