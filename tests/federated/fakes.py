"""In-process stand-ins for the federated loops' collaborators (threads, queues, a tiny task).

``run_in_threads`` runs the real server and client loops (harness.federated.server / client)
in one process, one thread per party, joined by a queue-backed channel with the Channel
interface (send, recv, scatter, gather). It tests the protocol and the math (rows, merges,
checksums, drops) in seconds, without namespaces or process start-up.
"""
from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from harness.conf.schema import Config, MethodConfig
from harness.federated import client as fclient
from harness.federated import methods as fmethods
from harness.federated import server as fserver
from harness.federated.party import build_party
from harness.federated.settings import from_cfg
from harness.record import Recorder
from harness.tasks.arith import Arithmetic, Problems
from harness.tasks.data import sft_batch, sft_loss
from harness.tasks.models import build_model
from harness.tasks.tokenizer import Tokenizer
from harness.transport import Transfer

METHOD_DEFAULTS = {
    "spra": {"lr_rule": "linear", "resample_every": 2},
    "ffa": {"lr_rule": "const", "resample_every": 0},
}


def config(method: str, **federated: Any) -> dict:
    """A resolved config (plain dict) for a tiny federated run of ``method``."""
    cfg = OmegaConf.structured(Config(method=MethodConfig(name=method, kind="federated")))
    cfg.method.lr_rule = "const"
    for k, v in METHOD_DEFAULTS.get(method, {}).items():
        cfg.method[k] = v
    cfg.model.hidden_size, cfg.model.intermediate_size, cfg.model.num_layers = 32, 48, 1
    cfg.model.num_heads = cfg.model.num_kv_heads = 2
    cfg.model.targets = ["q_proj", "v_proj", "down_proj"]
    cfg.task.name, cfg.task.batch_size = "federated", 8
    cfg.federated.update(clients=3, ranks=[8, 4, 2], rounds=4, local_steps=2, lr=0.05, eval_every=2)
    cfg.federated.update(federated)
    return OmegaConf.to_container(cfg, resolve=True)


@dataclass
class ClientData:
    size: int


class TinyTask:
    """Two-digit addition, supervised answer tokens; client k sees its own seeded problems."""

    def __init__(self, tok: Tokenizer, clients: int) -> None:
        self.tok, self.lang, self.clients = tok, Arithmetic(2, ["+"]), clients
        g = torch.Generator().manual_seed(99)
        self.eval_batch = self._batch(32, g)

    def _batch(self, n: int, g: torch.Generator) -> dict[str, torch.Tensor]:
        a, b = torch.randint(0, 100, (n,), generator=g), torch.randint(0, 100, (n,), generator=g)
        return sft_batch(self.tok, self.lang, Problems(a, torch.zeros(n, dtype=torch.long), b))

    def client_data(self, k: int) -> ClientData:
        return ClientData(size=100 * (k + 1))

    def batches(self, k: int, batch_size: int, generator: torch.Generator):
        while True:
            yield self._batch(batch_size, generator)

    def loss(self, model, batch) -> torch.Tensor:
        return sft_loss(model, batch)

    def evaluate(self, model) -> dict[str, float]:
        with torch.no_grad():
            loss = float(sft_loss(model, self.eval_batch))
        return {"eval_loss": loss, "accuracy": 0.0}


class QueueChannel:
    """The Channel interface over in-process queues; transfers take 0 s; ``dead`` ranks fail."""

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
    rank: int
    world_size: int
    cfg: dict
    channel: QueueChannel
    recorder: Recorder
    device: str = "cpu"

    def wire(self) -> Wire:
        return Wire()

    def heartbeat(self, step: int) -> None:
        pass


def run_in_threads(cfg: dict, run_dir: Path, dead: set[int] | None = None, *, task: Any = None,
                   base: Any = None) -> dict[int, Any]:
    """Run the server and every client of ``cfg`` in threads; returns {rank: party}.

    ``task`` / ``base`` default to TinyTask and a fresh tiny model. Raises the first
    exception of any thread (after all have finished or timed out).
    """
    settings = from_cfg(cfg)
    world = settings.clients + 1
    tok = Tokenizer.synthetic()
    base = base if base is not None else build_model(cfg["model"], tok.vocab_size)
    task = task if task is not None else TinyTask(tok, settings.clients)
    boxes = {(a, b): queue.Queue() for a in range(world) for b in range(world) if a != b}
    dead = set(dead or ())
    abort = threading.Event()
    parties, errors = {}, []
    keys = {"run_id": "test", "method": settings.method, "seed": settings.seed}

    def role(rank: int) -> None:
        try:
            name = "server" if rank == 0 else f"client{rank - 1}"
            r = settings.r_max if rank == 0 else settings.ranks[rank - 1]
            party = build_party(cfg, settings, r, task=task, base=copy.deepcopy(base))
            parties[rank] = party
            method = fmethods.build(settings.method, party.setup)
            ctx = FakeCtx(rank, world, cfg, QueueChannel(rank, world, boxes, dead, abort), Recorder(run_dir, keys, name))
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
        th.join(timeout=300)
    if errors:
        raise errors[0]
    return parties
