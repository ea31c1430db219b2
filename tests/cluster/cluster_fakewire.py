"""An in-memory stand-in for GlooWire: N channels in N threads of one process.

Sends complete at once (the bytes are copied into a queue per (src, dst)); a receive takes
the next message of its queue, so the channel's protocol, pacing, delays and bookkeeping
run for real without process groups.
"""
from __future__ import annotations

import datetime
import queue
import threading

import torch


class _Sent:
    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        return True


class _Receive:
    def __init__(self, box: queue.Queue, tensor: torch.Tensor):
        self.box, self.tensor = box, tensor

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        try:
            data = self.box.get(timeout=None if timeout is None else timeout.total_seconds())
        except queue.Empty:
            raise RuntimeError("Timed out waiting for recv operation to complete") from None
        # like gloo: a message may land in a larger posted buffer (its prefix), never a smaller one
        if data.numel() > self.tensor.numel() or data.dtype != self.tensor.dtype:
            raise RuntimeError(f"size mismatch: sent {data.numel()} {data.dtype}, posted {self.tensor.numel()}")
        self.tensor[:data.numel()].copy_(data)
        return True


class MemoryNet:
    def __init__(self, world_size: int):
        self.boxes = {(s, d): queue.Queue() for s in range(world_size) for d in range(world_size)}
        self._barrier = threading.Barrier(world_size)

    def wire(self, rank: int) -> "MemoryWire":
        return MemoryWire(self, rank)


class MemoryWire:
    def __init__(self, net: MemoryNet, rank: int):
        self.net, self.rank = net, rank

    def isend(self, tensor: torch.Tensor, peer: int) -> _Sent:
        self.net.boxes[(self.rank, peer)].put(tensor.clone())
        return _Sent()

    def irecv(self, tensor: torch.Tensor, peer: int) -> _Receive:
        return _Receive(self.net.boxes[(peer, self.rank)], tensor)

    def barrier(self) -> None:
        self.net._barrier.wait(timeout=30)


def run_ranks(links, backend: str, body, seed: int = 0, wait_s: float = 10.0) -> list:
    """Run ``body(channel)`` for every rank in its own thread; returns the results by rank."""
    from harness.wire.transport import Channel

    net = MemoryNet(links.world_size)
    results: list = [None] * links.world_size
    errors: list = []

    def one(rank: int) -> None:
        channel = Channel(rank, links.world_size, links, backend, seed=seed, wait_s=wait_s, wire=net.wire(rank))
        try:
            results[rank] = body(channel)
        except BaseException as err:  # noqa: BLE001 - re-raised in the test thread
            errors.append(err)

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(links.world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return results
