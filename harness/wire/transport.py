"""Channel: byte payloads between role processes over torch.distributed (gloo) point-to-point.

Every message is a fixed 48-byte header (int64 x 6: magic, payload length, the sender's
wall-clock start in ns, message index on this (src, dst) pair, chunk size, the sender's
ideal time in ns) followed by the payload as uint8 tensors. The header and the payload's
first ``EAGER_BYTES`` (64 KiB; on the userspace backend at most one pacing chunk) travel as
ONE gloo message, which the receiver takes into a buffer of header + 64 KiB posted before
it knows the length (gloo delivers a message into a larger posted buffer; only the bytes
sent cross the wire); the rest follows in further messages once the header has told the
receiver how long the payload is. Why: gloo's TCP pair sends nothing before the receiver
has posted a matching receive (the receiver notifies the sender, a round trip), so a
header and a payload as two messages cost two rendezvous and three process wake-ups; a
small payload (a HiLo update, an ack, a verdict) now costs one. Measured by
tests/benchmarks/test_small_message.py. ``Transfer.nbytes`` is exactly
``len(data)``; the header, gloo's framing and TCP/IP are wire overhead (see the interface
counters for wire bytes).

Routing is explicit: the hub (rank 0) talks to each node over that node's own link, and
collectives run one stream per peer concurrently (a thread each), so a broadcast through
10mbit downlinks takes ~bytes*8/rate while a broadcast through a 10mbit hub uplink takes
~N*bytes*8/rate.

Per backend (``Channel.backend``):
  netem      the kernel shapes rate, delay, jitter and loss; the channel only times.
  tc         the kernel shapes rate; delay and jitter are applied here, per message, at the
             receiver, seeded by (seed, src, dst, message index).
  userspace  loopback; the channel paces bytes with a token bucket per link direction (the
             sender on its uplink, the receiver on its downlink, in ~10 ms chunks), charging
             TCP/IPv4/Ethernet framing (1514 wire bytes per 1448 payload bytes), and applies
             delay/jitter at the receiver. Lower fidelity: no kernel queues, no TCP dynamics.
  model      nothing is paced or delayed; bytes still move (unshaped) so results are real,
             but ``Transfer.seconds`` is the modelled time (ideal plus sampled jitter).

Timing: a receiver's Transfer runs from the moment both sides were ready (max of the
sender's start and the receiver's call) to delivery (last byte in, plus the emulated delay)
and is the authoritative transfer time; a sender's Transfer is how long the sender was
busy (its last byte handed to the kernel). Clocks are shared because all roles run on one
machine. Gloo matches a send with a posted receive before data flows, so each message
costs one extra round trip on the kernel-delay (netem) backend; that shows up as lost
wire efficiency, as it would for any rendezvous protocol.

Timeouts: waiting for a header is bounded by ``wait_s`` (a peer may compute for a while);
a payload by 30 s plus 4x its ideal time at a fair share of the path. A dead peer closes
its sockets and the wait fails at once; a silent one fails at the timeout. Either raises
TransportError, which ends the role process (and so the run).
"""
from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.distributed as dist

from harness.backends import TRANSPORT_BACKENDS as BACKENDS, backend_of
from harness.wire.links import Flow, LinkTable, TokenBucket, chunk_bytes, framed_bytes

MAGIC = 0x6E62_7764           # "nbwd"
HEADER_WORDS = 6
HEADER_BYTES = HEADER_WORDS * 8
EAGER_BYTES = 64 << 10        # payload bytes that ride in the header's message (see module docstring)


class TransportError(RuntimeError):
    """A transfer failed: peer gone, timeout, or a protocol mismatch. Ends the role."""


@dataclass(frozen=True)
class Transfer:
    """One message as seen by one side. nbytes == len(payload); seconds and ideal_s in seconds."""

    tag: str
    src: int
    dst: int
    nbytes: int
    seconds: float
    ideal_s: float
    rate_bps: float | None = None    # mean bottleneck rate of the path over the transfer (a trace's rate in force)


class GlooWire:
    """The channel's only contact with torch.distributed: tagless point-to-point on ``group``.

    Anything with the same three methods (returning objects with ``wait(timedelta)``) can
    stand in, e.g. an in-memory wire for single-process tests.
    """

    def __init__(self, group=None):
        self.group = group

    def isend(self, tensor: torch.Tensor, peer: int):
        return dist.isend(tensor, peer, group=self.group)

    def irecv(self, tensor: torch.Tensor, peer: int):
        return dist.irecv(tensor, peer, group=self.group)

    def barrier(self) -> None:
        dist.barrier(group=self.group)


class Channel:
    """Byte messages between ranks of one process group; rank ``hub`` is the star's centre.

    ``transfers`` lists every Transfer of this process, in call order. With world size 1
    every collective does nothing (and returns what a one-rank run needs).
    """

    def __init__(self, rank: int, world_size: int, links: LinkTable, backend: str, *,
                 seed: int = 0, hub: int = 0, wait_s: float = 600.0,
                 on_progress: Callable[[], None] | None = None, group=None, wire=None):
        if backend not in BACKENDS:
            raise ValueError(f"net.backend: {backend!r} is not a transport backend; choose one of {', '.join(BACKENDS)}")
        if links.world_size != world_size:
            raise ValueError(f"links: {links.world_size} ranks described but world size is {world_size}")
        self.rank, self.world_size, self.hub = rank, world_size, hub
        self.links, self.backend, self.seed = links, backend, seed
        self.wait_s = wait_s
        self.transfers: list[Transfer] = []
        self._on_progress = on_progress or (lambda: None)
        self._wire = wire or GlooWire(group)
        self._sent = [0] * world_size        # next message index to each peer
        self._received = [0] * world_size    # next message index from each peer
        self.link = backend_of(backend)      # what carries the bytes: kernel-shaped, paced here, or modelled
        self.modelled = self.link.modelled   # a transfer's seconds are its modelled ideal, not a measurement
        self._pace = self.link.paces
        self._delay = self.link.transport_delay
        self._up = self._bucket(links.up[rank].rate_bps)
        self._down = self._bucket(links.down[rank].rate_bps)

    def _bucket(self, rate_bps: float | None) -> TokenBucket | None:
        if not self._pace or rate_bps is None:
            return None
        return TokenBucket(rate_bps / 8.0, burst=2 * chunk_bytes(rate_bps))

    @property
    def nodes(self) -> list[int]:
        """Every rank but the hub."""
        return [r for r in range(self.world_size) if r != self.hub]

    # ----- public API -------------------------------------------------------------------
    def send(self, dst: int, data: bytes, tag: str) -> Transfer:
        """Send ``data`` to ``dst``; returns the sender's Transfer."""
        self._check_peer(dst)
        at = time.time()
        ideal = self.links.ideal_s([Flow(self.rank, dst, len(data))], at=at)[0]
        transfer = self._send_one(dst, _as_tensor(data), tag, ideal, at)
        self.transfers.append(transfer)
        return transfer

    def recv(self, src: int, tag: str) -> tuple[bytes, Transfer]:
        """Receive the next message from ``src``; returns it with the receiver's Transfer."""
        self._check_peer(src)
        data, transfer = self._recv_one(src, tag)
        self.transfers.append(transfer)
        return data, transfer

    def broadcast(self, data: bytes | None, tag: str) -> tuple[bytes, list[Transfer]]:
        """Hub -> every node, concurrently, each on its own link. Nodes pass None."""
        if self.rank == self.hub:
            if data is None:
                raise ValueError("broadcast: the hub must pass the bytes to send, got None")
            tensor = _as_tensor(data)
            at = time.time()
            ideals = self.links.ideal_s([Flow(self.hub, r, len(data)) for r in self.nodes], at=at)
            jobs = [(lambda r=r, i=i: self._send_one(r, tensor, tag, i, at)) for r, i in zip(self.nodes, ideals)]
            transfers = self._concurrent(jobs)
            self.transfers.extend(transfers)
            return data, transfers
        received, transfer = self._recv_one(self.hub, tag)
        self.transfers.append(transfer)
        return received, [transfer]

    def scatter(self, data: dict[int, bytes] | None, tag: str) -> tuple[bytes | None, list[Transfer]]:
        """Hub -> node-specific payloads ({rank: bytes} for every node), concurrently."""
        if self.rank == self.hub:
            if data is None or set(data) - {self.hub} != set(self.nodes):
                have = sorted(data) if data is not None else None
                raise ValueError(f"scatter: the hub must pass one payload per node rank {self.nodes}, got {have}")
            at = time.time()
            ideals = self.links.ideal_s([Flow(self.hub, r, len(data[r])) for r in self.nodes], at=at)
            jobs = [(lambda r=r, i=i: self._send_one(r, _as_tensor(data[r]), tag, i, at))
                    for r, i in zip(self.nodes, ideals)]
            transfers = self._concurrent(jobs)
            self.transfers.extend(transfers)
            return data.get(self.hub), transfers
        received, transfer = self._recv_one(self.hub, tag)
        self.transfers.append(transfer)
        return received, [transfer]

    def gather(self, data: bytes | None, tag: str) -> tuple[dict[int, bytes] | None, list[Transfer]]:
        """Nodes -> hub, concurrently. The hub gets {rank: bytes} (its own data too, if not None).

        The hub's Transfers carry the fluid-model ideal of all flows together; a node's
        Transfer carries the ideal of its flow alone (it cannot know the others' sizes).
        """
        if self.rank != self.hub:
            if data is None:
                raise ValueError("gather: a node must pass the bytes to send, got None")
            transfer = self.send(self.hub, data, tag)
            return None, [transfer]
        posted = time.time()
        jobs = [(lambda r=r: self._recv_one(r, tag)) for r in self.nodes]
        results = self._concurrent(jobs)
        flows = [Flow(r, self.hub, len(d)) for r, (d, _) in zip(self.nodes, results)]
        transfers = [self._reideal(t, i) for (_, t), i in zip(results, self.links.ideal_s(flows, at=posted))]
        self.transfers.extend(transfers)
        gathered = {r: d for r, (d, _) in zip(self.nodes, results)}
        if data is not None:
            gathered[self.hub] = data
        return gathered, transfers

    def barrier(self) -> None:
        if self.world_size > 1:
            self._wire.barrier()

    # ----- one message ------------------------------------------------------------------
    def _send_one(self, dst: int, tensor: torch.Tensor, tag: str, ideal_s: float, at: float | None = None) -> Transfer:
        """One message to ``dst``. ``ideal_s``: its ideal time, computed for a send at ``at``; on the model
        backend ``at`` is the send's instant (the header's and the rate's), so that a late start on a busy
        machine cannot set the modelled seconds and the mean rate in force over two different windows."""
        start = time.time()
        clock = at if (self.modelled and at is not None) else None
        nbytes = tensor.numel()
        index = self._sent[dst]
        self._sent[dst] += 1
        chunk = chunk_bytes(self.links.path_rate_bps(self.rank, dst)) if self._pace else 0
        eager = min(nbytes, EAGER_BYTES, chunk or EAGER_BYTES)
        sent_ns = time.time_ns() if clock is None else int(clock * 1e9)
        header = torch.tensor([MAGIC, nbytes, sent_ns, index, chunk, int(ideal_s * 1e9)], dtype=torch.int64)
        first = torch.cat([header.view(torch.uint8), tensor[:eager]])
        if self._up is not None and eager:
            self._up.take(framed_bytes(eager))
        self._wait(self._wire.isend(first, dst), self.wait_s, f"sending message #{index} to rank {dst}")
        deadline = time.monotonic() + self._payload_timeout_s(self.rank, dst, nbytes)
        for offset in range(eager, nbytes, chunk or max(nbytes, 1)):
            piece = tensor[offset:offset + (chunk or nbytes)]
            if self._up is not None:
                self._up.take(framed_bytes(piece.numel()))
            self._wait(self._wire.isend(piece, dst), deadline - time.monotonic(),
                       f"sending {nbytes} bytes (#{index}) to rank {dst}")
        seconds = ideal_s if self.modelled else time.time() - start
        self._on_progress()
        began = start if clock is None else clock
        return Transfer(tag, self.rank, dst, nbytes, seconds, ideal_s,
                        self.links.mean_rate_bps(self.rank, dst, began, began + seconds))

    def _recv_one(self, src: int, tag: str) -> tuple[bytes, Transfer]:
        posted = time.time()
        first = torch.empty(HEADER_BYTES + EAGER_BYTES, dtype=torch.uint8)
        expected = self._received[src]
        self._wait(self._wire.irecv(first, src), self.wait_s,
                   f"waiting for message #{expected} from rank {src}")
        header = first[:HEADER_BYTES].view(torch.int64)
        magic, nbytes, sent_ns, index, chunk, ideal_ns = header.tolist()
        if magic != MAGIC or index != expected:
            raise TransportError(f"rank {self.rank}: protocol mismatch from rank {src}: header {header.tolist()}, "
                                 f"expected magic {MAGIC} and message #{expected}")
        self._received[src] += 1
        eager = min(nbytes, EAGER_BYTES, chunk or EAGER_BYTES)
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        buffer[:eager] = first[HEADER_BYTES:HEADER_BYTES + eager]
        if self._down is not None and eager:
            self._down.take(framed_bytes(eager))
        deadline = time.monotonic() + self._payload_timeout_s(src, self.rank, nbytes)
        for offset in range(eager, nbytes, chunk or max(nbytes, 1)):
            piece = buffer[offset:offset + (chunk or nbytes)]
            if self._down is not None:
                self._down.take(framed_bytes(piece.numel()))
            self._wait(self._wire.irecv(piece, src), deadline - time.monotonic(),
                       f"receiving {nbytes} bytes (#{index}) from rank {src}")
        arrived = time.time()
        sent = sent_ns / 1e9
        ideal_s = ideal_ns / 1e9
        if self.modelled:                 # delays as of the send (the model's clock)
            delay = self.links.delay_sample_s(self.seed, src, self.rank, index, at=sent)
            seconds = ideal_s + delay - self.links.path_delay_s(src, self.rank, at=sent)
            began = sent
        else:                                       # a trace's delay in force when the bytes arrived
            delay = self.links.delay_sample_s(self.seed, src, self.rank, index, at=arrived)
            if self._delay and delay > 0:
                time.sleep(max(0.0, arrived + delay - time.time()))
            began = max(posted, sent)
            seconds = time.time() - began
        self._on_progress()
        return buffer.numpy().tobytes(), Transfer(tag, src, self.rank, nbytes, seconds, ideal_s,
                                                  self.links.mean_rate_bps(src, self.rank, began, began + seconds))

    def _reideal(self, transfer: Transfer, ideal_s: float) -> Transfer:
        """Replace a transfer's ideal (and, on the model backend, its modelled seconds)."""
        if self.modelled:
            return replace(transfer, ideal_s=ideal_s, seconds=transfer.seconds - transfer.ideal_s + ideal_s)
        return replace(transfer, ideal_s=ideal_s)

    def _payload_timeout_s(self, src: int, dst: int, nbytes: int) -> float:
        rate = self.links.path_rate_bps(src, dst)
        if self.links.traced:                        # a traced path may fall to its slowest step
            rate = self.links.slowest_rate_bps(src, dst)
        fair = nbytes * 8.0 / rate * max(1, self.world_size - 1) if rate else nbytes / 50e6
        return 30.0 + 4.0 * (fair + self.links.path_delay_s(src, dst) + 1.0)

    def _wait(self, work, timeout_s: float, what: str) -> None:
        try:
            work.wait(datetime.timedelta(seconds=max(0.001, timeout_s)))
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise TransportError(f"rank {self.rank}: {what} failed ({first})") from err

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"peer rank {peer} is not another rank of 0..{self.world_size - 1} (this is rank {self.rank})")

    def _concurrent(self, jobs: list[Callable]) -> list:
        """Run jobs in daemon threads (one per peer stream); first error wins; results in order."""
        if len(jobs) <= 1:
            return [job() for job in jobs]
        results: list = [None] * len(jobs)
        errors: list[BaseException] = []
        finished = threading.Semaphore(0)

        def run(i: int) -> None:
            try:
                results[i] = jobs[i]()
            except BaseException as err:   # noqa: BLE001 - handed to the calling thread
                errors.append(err)
            finally:
                finished.release()

        for i in range(len(jobs)):
            threading.Thread(target=run, args=(i,), daemon=True, name=f"channel-{i}").start()
        for _ in jobs:
            finished.acquire()
            if errors:
                raise errors[0]
        return results


def _as_tensor(data: bytes) -> torch.Tensor:
    """A uint8 tensor over a copy of ``data`` (gloo needs a writable, contiguous buffer)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, got {type(data).__name__}")
    if len(data) == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def trace_rate_columns(channel, **groups: list[Transfer]) -> dict[str, float]:
    """Row columns ``trace_rate_<group>_mbit``: the mean bottleneck rate in force during each group of
    transfers (Mbit/s; the mean of their ``rate_bps``), for runs on traced links; {} otherwise, so
    untraced rows keep their columns."""
    links = getattr(channel, "links", None)
    if links is None or not links.traced:
        return {}
    out = {}
    for name, transfers in groups.items():
        rates = [t.rate_bps for t in transfers if t.rate_bps]
        out[f"trace_rate_{name}_mbit"] = sum(rates) / len(rates) / 1e6 if rates else float("nan")
    return out
