"""An in-process backend of the on-policy loop: the learner and every worker as threads of one
process, joined by queues.

Labelled extra backend (house rule: a simulation may exist only as a labelled extra): the real
learner and worker loops (harness.onpolicy.loop ``run_learner`` / ``run_worker``, stale.py in
the overlap mode), the real sync methods, compressors and optimizers, with a queue-backed
channel (send, recv, broadcast, scatter, gather, barrier) instead of links, processes and
namespaces. Transfers take 0 s and no wire bytes are counted, so it measures the training
math only: its timing columns are not update times, and it never produces a row of a
reported timing.

What it is for: in synchronous mode (``onpolicy.staleness=0``) an update's rollouts, loss,
payload and step depend on the seed, the policy and the bytes, never on the link, so the
trajectory here is the emulated run's bit for bit (tests/onpolicy/test_inproc.py compares
the losses and accuracies of every update against a real run over shaped links). Learning-rate
tuning (harness.tune) and long horizons (the plateau horizon, docs/onpolicy.md) therefore cost
compute, not link time.

Bit-equality rests on three things the real run also does: every role runs torch with
ROLE_THREADS (1) intra-op threads; every random draw of the loop uses an explicit seeded
generator; and setups are built one after another (make_lora seeds the global generator
inside fork_rng, which two threads at once would interleave).
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.federated.inproc import QueueChannel, Wire
from harness.record import Recorder
from harness.wire.transport import Transfer

JOIN_S = 3600.0        # how long the caller waits for a role thread (a hang, not a slow run)


class BarrierChannel(QueueChannel):
    """The federated QueueChannel plus what the on-policy loop also calls: broadcast and barrier."""

    def __init__(self, rank: int, world_size: int, boxes: dict, barrier: threading.Barrier,
                 abort: threading.Event) -> None:
        super().__init__(rank, world_size, boxes, set(), abort)
        self._barrier = barrier

    def broadcast(self, data: bytes | None, tag: str) -> tuple[bytes, list[Transfer]]:
        """Hub -> every node (nodes pass None), as Channel.broadcast."""
        if self.rank == self.hub:
            if data is None:
                raise ValueError("broadcast: the hub must pass the bytes to send, got None")
            return data, [self.send(r, data, tag) for r in self.nodes]
        got, tr = self.recv(self.hub, tag)
        return got, [tr]

    def barrier(self) -> None:
        try:
            self._barrier.wait(timeout=JOIN_S)
        except threading.BrokenBarrierError:
            raise RuntimeError("another party failed") from None


@dataclass
class ThreadCtx:
    """A RoleContext (harness.cluster.role) of one role thread: no links, no folder, no interface."""
    rank: int
    world_size: int
    role: str
    channel: BarrierChannel
    recorder: Recorder
    device: str = "cpu"
    backend: str = "inproc"
    names: list[str] = field(default_factory=list)
    plan: dict = field(default_factory=dict)     # RunPlan.to_dict() (the setups were built from the RunPlan)
    run_dir: Path | None = None

    def wire(self) -> Wire:
        return Wire()

    def heartbeat(self, step: int) -> None:
        pass

    def progress(self) -> None:
        pass


def role_names(workers: int) -> list[str]:
    """``learner`` then ``worker0`` .. ``worker<n-1>``: the role names of a real run (harness/plan.py)."""
    return ["learner"] + [f"worker{i}" for i in range(workers)]


def run_in_threads(plan: Any, run_dir: Path, keys: dict[str, Any] | None = None) -> None:
    """Run the learner and every worker of ``plan`` (the RunPlan of an on-policy run, what the roles
    would receive) in threads; rows go to ``run_dir`` as a real run's (harness.record, one file set
    per role). Raises the first exception of any thread, after every thread has ended (a failed
    role breaks the barrier and the queues, so the others end too).
    """
    from harness.cluster.launch import ROLE_THREADS
    from harness.onpolicy.loop import run_learner, run_worker
    from harness.onpolicy.setup import build_setup
    from harness.tasks.cache import ensure_pretrained

    op_plan = plan.onpolicy
    world = op_plan.workers + 1
    names = role_names(op_plan.workers)
    keys = keys or {"run_id": "inproc", "method": op_plan.method, "seed": op_plan.seed}
    ensure_pretrained(plan.model, plan.task, plan.model_source, 0)   # the cached bases, built once before any role
    threads_before = torch.get_num_threads()
    torch.set_num_threads(ROLE_THREADS)              # the bits of training depend on the thread count
    boxes = {(a, b): queue.Queue() for a in range(world) for b in range(world) if a != b}
    abort, barrier = threading.Event(), threading.Barrier(world)
    errors: list[BaseException] = []
    setups = []
    try:
        for rank in range(world):                    # one after another: make_lora seeds the global generator
            setup = build_setup(op_plan, plan.model, plan.task, plan.model_source,
                                "learner" if rank == 0 else "worker", "cpu")
            setup.sync.warm_up()
            setups.append(setup)

        def role(rank: int) -> None:
            recorder = Recorder(run_dir, keys, names[rank])
            ctx = ThreadCtx(rank, world, names[rank], BarrierChannel(rank, world, boxes, barrier, abort),
                            recorder, names=names, plan=plan.to_dict())
            try:
                torch.set_num_threads(ROLE_THREADS)  # OpenMP's count is per thread
                (run_learner if rank == 0 else run_worker)(ctx, setups[rank])
                recorder.close()
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                errors.append(err)
                abort.set()
                barrier.abort()

        threads = [threading.Thread(target=role, args=(r,), daemon=True, name=names[r]) for r in range(world)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=JOIN_S)
    finally:
        torch.set_num_threads(threads_before)
    if errors:
        raise errors[0]
