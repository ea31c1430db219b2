"""An in-process backend of the federated loops: one thread per party, joined by queues.

Labelled extra backend (house rule: a simulation may exist only as a labelled extra):
the real server and client loops (harness.federated.server / client) and the real
aggregation, with a queue-backed channel (send, recv, scatter, gather) instead of links,
processes and namespaces. Transfers take 0 s and no wire bytes are counted, so it measures
the training math only: what learning-rate tuning (harness.tune) and the protocol tests
need, in seconds. It never produces a row of a reported scenario.
"""
from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.federated import client as fclient
from harness.federated import methods as fmethods
from harness.federated import server as fserver
from harness.federated.party import build_party
from harness.conf.schema import ModelConfig
from harness.federated.settings import Settings
from harness.record import Recorder
from harness.wire.transport import Transfer


class QueueChannel:
    """The Channel interface over in-process queues; transfers take 0 s; ``dead`` ranks fail."""
    links = None             # no links: no rate or delay columns
    modelled = False         # transfers are not modelled: they take 0 s

    def __init__(self, rank: int, world_size: int, boxes: dict, dead: set[int], abort: threading.Event) -> None:
        self.rank, self.world_size, self.hub = rank, world_size, 0
        self.boxes, self.dead, self.abort = boxes, dead, abort
        self.transfers: list[Transfer] = []

    @property
    def nodes(self) -> list[int]:
        return [r for r in range(self.world_size) if r != self.hub]

    def send(self, dst: int, data: bytes, tag: str) -> Transfer:
        if dst in self.dead:
            raise RuntimeError(f"rank {dst} is dead")
        self.boxes[(self.rank, dst)].put((tag, bytes(data)))
        tr = Transfer(tag, self.rank, dst, len(data), 0.0, 0.0)
        self.transfers.append(tr)
        return tr

    def recv(self, src: int, tag: str) -> tuple[bytes, Transfer]:
        if src in self.dead:
            raise RuntimeError(f"rank {src} is dead")
        while True:
            if self.abort.is_set():
                raise RuntimeError("another party failed")
            try:
                got_tag, data = self.boxes[(src, self.rank)].get(timeout=0.05)
                break
            except queue.Empty:
                continue
        assert got_tag == tag, f"expected {tag}, got {got_tag}"
        tr = Transfer(tag, src, self.rank, len(data), 0.0, 0.0)
        self.transfers.append(tr)
        return data, tr

    def scatter(self, data, tag):
        if self.rank == self.hub:
            return None, [self.send(r, data[r], tag) for r in self.nodes]
        got, tr = self.recv(self.hub, tag)
        return got, [tr]

    def gather(self, data, tag):
        if self.rank != self.hub:
            return None, [self.send(self.hub, data, tag)]
        results = {r: self.recv(r, tag) for r in self.nodes}
        return {r: d for r, (d, _) in results.items()}, [t for _, t in results.values()]


@dataclass
class Wire:
    rx_bytes: int = 0
    tx_bytes: int = 0


@dataclass
class FakeCtx:
    """A RoleContext (harness.cluster.role) of one party thread: no links, no folder, no interface."""
    rank: int
    world_size: int
    role: str
    channel: QueueChannel
    recorder: Recorder
    device: str = "cpu"
    backend: str = "inproc"
    names: list[str] = field(default_factory=list)
    plan: dict = field(default_factory=dict)          # the parties get their plan parts directly
    run_dir: Path | None = None

    def wire(self) -> Wire:
        return Wire()

    def heartbeat(self, step: int) -> None:
        pass

    def progress(self) -> None:
        pass


def run_in_threads(settings: Settings, model: ModelConfig, run_dir: Path, task: Any, base: Any,
                   dead: set[int] | None = None, keys: dict[str, Any] | None = None) -> dict[int, Any]:
    """Run the server and every client of a planned federated run (``settings``, the typed ``model``)
    in threads.

    ``task`` is the federated task every party shares; ``base`` the student model each
    party deep-copies. Rows go to ``run_dir`` (harness.record). Returns {rank: party};
    raises the first exception of any thread (after all have finished or timed out).
    """
    if settings.population is not None:
        raise ConfigError(f"federated.population: {settings.population.size!r} is not supported by the in-process "
                          "backend (it runs the classic loop, one thread per client); leave it unset here")
    world = settings.clients + 1
    boxes = {(a, b): queue.Queue() for a in range(world) for b in range(world) if a != b}
    dead = set(dead or ())
    abort = threading.Event()
    parties, errors = {}, []
    keys = keys or {"run_id": "inproc", "method": settings.method, "seed": settings.seed}
    names = ["server"] + [f"client{k}" for k in range(settings.clients)]

    def role(rank: int) -> None:
        try:
            name = names[rank]
            r = settings.r_max if rank == 0 else settings.ranks[rank - 1]
            party = build_party(model, None, settings, r, task=task, base=copy.deepcopy(base))
            parties[rank] = party
            method = fmethods.build(settings.method, party.setup)
            ctx = FakeCtx(rank, world, name, QueueChannel(rank, world, boxes, dead, abort),
                          Recorder(run_dir, keys, name), names=names)
            if rank == 0:
                fserver.run(ctx, party, method)
            else:
                fclient.run(ctx, party, method.trains_a)
            ctx.recorder.close()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            errors.append(err)
            abort.set()

    threads = [threading.Thread(target=role, args=(r,), daemon=True) for r in range(world) if r not in dead]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=3600)
    if errors:
        raise errors[0]
    return parties
