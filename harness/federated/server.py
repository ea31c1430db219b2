"""The server loop: sample, send, gather, aggregate, evaluate, record.

Per round t: the method may merge into the base (spra at a period change); the server
samples clients (seeded), sends every client its DownMsg (selected ones get their factors
and the base merges they missed; the others an idle note), gathers the answers, folds the
updates of the clients that answered into the global state (a dropped client is absent),
applies a returned merge (flora), and evaluates the global model every eval_every rounds.

A client that fails (its process is gone: TransportError, or it answered ``gone``) is
dropped for the rest of the run when ``federated.drop_policy=continue`` (recorded in the
row's ``dropped``), and ends the run with the reason when ``fail``.

Server row per round (role ``server``, step = round + 1; step 0 is the evaluation before
training): round_s (wall clock from the first send to the last answer: the slowest
selected client sets it), slowest_client_s and straggler (per client: its transfer down +
compute + transfer up; with isolated compute the round time clients on their own machines
would see), payload/tensor/wire bytes per direction summed over the round,
merge_bytes_down_dense (the base merges sent this round as dense fp32 deltas instead: FLoRA's
second downlink form, counted not sent),
aggregate_s, eval_loss / accuracy (when evaluated), in_sync (every selected client's base
and projection matched the server's checksum), period, merges, selected, dropped, ranks
(every client's configured rank, the run's key), round_ranks (ranks of this round's updates),
client_ranks (every client's current rank after the round: HetLoRA's pruning lowers them).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from harness.fanout import fan_out
from harness.federated.messages import DownMsg, UpMsg
from harness.federated.methods import Merge, Method, Update
from harness.federated.party import Bases, Party, apply_merge


class ClientFailed(RuntimeError):
    """A client process failed mid-round (drop_policy=fail ends the run with this)."""


class Server:
    def __init__(self, party: Party, method: Method) -> None:
        self.party, self.method = party, method
        self.s = party.settings
        self.names = party.adapter.names
        self.bases = Bases(party.setup)
        self.log: dict[int, Merge] = {}        # base merges every client must apply, by index
        self.merges = 0
        self.sent = [0] * self.s.clients        # merges already sent to client k
        self.alive = list(range(self.s.clients))
        self.last_up_s: list[float | None] = [None] * self.s.clients   # receiver-side seconds

    def add_merge(self, entry: Merge) -> None:
        entry.index = self.merges
        apply_merge(self.party.adapter, entry, self.bases)
        self.log[entry.index] = entry
        self.merges += 1

    def prune(self) -> None:
        """Forget the merges every live client has received."""
        floor = min((self.sent[k] for k in self.alive), default=self.merges)
        for i in [i for i in self.log if i < floor]:
            del self.log[i]

    def expect(self) -> str:
        """The checksum a client must have after catching up (base, and the seeded Z)."""
        extra = self.method.basis_extra() if self.method.seeded_basis else None
        return self.party.adapter.base_checksum(extra=extra)

    def dense_down_bytes(self, selected: list[int]) -> int:
        """Bytes the round's base merges would take as one dense fp32 delta per target per client.

        FLoRA's two downlink forms (Wang et al. 2024): the stacked factors (what is sent and
        measured in ``payload_bytes_down``) or the dense ``sum_k p_k B_k A_k`` (d_out x d_in
        per target). A selected client with pending merges would get one dense delta per
        target (its missed merges summed); one without pending merges gets none.
        """
        dense = sum(4 * t.d_out * t.d_in for t in self.party.adapter.targets)
        return dense * sum(1 for k in selected if k in self.alive and self.sent[k] < self.merges)

    def downlinks(self, t: int, selected: list[int]) -> dict[int, bytes]:
        expect = self.expect()
        out = {}
        for k in self.alive:
            if k in selected:
                pending = [self.log[i] for i in range(self.sent[k], self.merges)]
                msg = DownMsg(t, True, self.method.down(t, k), pending, expect, self.last_up_s[k])
            else:
                msg = DownMsg(t, False, last_up_s=self.last_up_s[k])
            out[k + 1] = msg.to_bytes(self.names)
        return out

    def goodbye(self) -> dict[int, bytes]:
        """The end-of-run note to every live client (carries its last update's transfer time)."""
        return {k + 1: DownMsg(self.s.rounds, False, last_up_s=self.last_up_s[k]).to_bytes(self.names)
                for k in self.alive}

    def evaluate(self, step: int, recorder: Any = None, progress: Any = None) -> dict[str, float]:
        """The held-out metrics of the aggregated model; its per-prompt records go to ``recorder.prompts``
        (view ``server``; ``step`` 0 is the evaluation before round 1, round t's is t + 1). ``progress``
        is called as the evaluation goes (the role's ``ctx.progress``: a long evaluation is not a hang)."""
        deltas = {n: self.method.delta(n) for n in self.names}
        task = self.party.task
        with self.party.adapter.evaluating(deltas) as model:
            if not hasattr(task, "evaluate_prompts"):    # a task that keeps no per-prompt records
                return dict(task.evaluate(model))
            metrics, frame = task.evaluate_prompts(model, progress=progress)
        if recorder is not None and hasattr(recorder, "prompts"):
            recorder.prompts(step, frame, "server")
        return dict(metrics)


def _send_all(channel: Any, payloads: dict[int, bytes], tag: str, tolerant: bool) -> dict[int, Any]:
    """Channel.scatter (one payload per node); with ``tolerant`` one send per node, so that a
    dead node fails alone instead of failing the scatter."""
    if not tolerant:
        _, transfers = channel.scatter(payloads, tag=tag)
        return {tr.dst: tr for tr in transfers}
    return _per_peer(lambda r: channel.send(r, payloads[r], tag), list(payloads))


def _recv_all(channel: Any, ranks: list[int], tag: str) -> dict[int, Any]:
    """One receive per node, concurrently; a failure is returned (not raised) per node."""
    return _per_peer(lambda r: channel.recv(r, tag), ranks)


def _per_peer(job, ranks: list[int]) -> dict[int, Any]:
    """``job(r)`` for every rank at once; a failed peer's exception is its result (drop policy data)."""
    return dict(zip(ranks, fan_out([lambda r=r: job(r) for r in ranks], capture=True, name="peer")))


@dataclass
class Collected:
    """What came back in one round: the updates of the selected clients that answered."""
    updates: list[Update] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    in_sync: list[bool] = field(default_factory=list)
    client_s: dict[str, float] = field(default_factory=dict)   # transfer down + compute + transfer up
    up_bytes: int = 0
    tensor_bytes: int = 0


def collect(srv: Server, t: int, selected: list[int], sent: dict[int, Any], got: dict[int, Any]) -> Collected:
    """Decode the answers; drop (or, with drop_policy=fail, raise for) clients that failed or left."""
    out = Collected()
    for k in list(srv.alive):
        result, send = got[k + 1], sent.get(k + 1)
        failure = result if isinstance(result, Exception) else send if isinstance(send, Exception) else None
        msg = None if failure else UpMsg.from_bytes(result[0], srv.names)
        if failure or msg.gone:
            why = str(failure or "client left (answered gone)")
            if srv.s.drop_policy == "fail":
                raise ClientFailed(f"client{k} failed in round {t}: {why} (federated.drop_policy=fail)")
            srv.alive.remove(k)
            out.dropped.append(f"client{k}")
            continue
        if k not in selected:
            continue
        up = result[1]
        srv.sent[k], srv.last_up_s[k] = srv.merges, up.seconds
        out.up_bytes += len(result[0])
        out.tensor_bytes += msg.tensor_bytes
        out.in_sync.append(bool(msg.info["in_sync"]))
        out.client_s[f"client{k}"] = msg.info["transfer_down_s"] + msg.info["client_compute_s"] + up.seconds
        rank = int(msg.info.get("rank", srv.s.ranks[k]))          # the client's rank now (HetLoRA prunes it)
        out.updates.append(Update(k, rank, float(msg.info["examples"]), msg.c, msg.z or None))
    return out


def open_round(ctx: Any, srv, method: Method, t: int):
    """The start of round t on any server (this loop, pool.py's): heartbeat, the wire counters
    before the round, and the method's merge at a period change (logged for the clients)."""
    ctx.heartbeat(t)
    wire0 = ctx.wire()
    entry = method.begin_round(t)
    if entry is not None:
        srv.add_merge(entry)
    return wire0


def first_row(ctx: Any, srv, **keys: Any) -> None:
    """Row 0 of any server (this loop, pool.py's): the evaluation before round 1 with its ``eval_s``
    (``federated.eval_base``), else row 0 with ``keys`` alone."""
    metrics: dict[str, Any] = {}
    if srv.s.eval_base:
        t_eval = time.perf_counter()
        metrics = {**srv.evaluate(0, ctx.recorder, ctx.progress), "eval_s": time.perf_counter() - t_eval}
    ctx.recorder.row(0, rank=srv.s.r_max, **keys, **metrics)


def run(ctx: Any, party: Party, method: Method) -> None:
    srv = Server(party, method)
    s, ch = srv.s, ctx.channel
    ranks = list(s.ranks)
    first_row(ctx, srv, ranks=ranks)
    for t in range(s.rounds):
        wire0 = open_round(ctx, srv, method, t)
        selected = s.selected(t, srv.alive)
        payloads = srv.downlinks(t, selected)
        dense_down = srv.dense_down_bytes(selected)
        start = time.perf_counter()
        sent = _send_all(ch, payloads, tag=f"fed/down/{t}", tolerant=s.drop_policy == "continue")
        got = _recv_all(ch, [k + 1 for k in srv.alive], tag=f"fed/up/{t}")
        round_s = time.perf_counter() - start
        done = collect(srv, t, selected, sent, got)
        t_agg = time.perf_counter()
        entry = method.aggregate(t, done.updates)
        if entry is not None:
            srv.add_merge(entry)
        aggregate_s = time.perf_counter() - t_agg
        srv.prune()
        row: dict[str, Any] = {}
        if s.evaluates(t):
            t_eval = time.perf_counter()
            row.update(srv.evaluate(t + 1, ctx.recorder, ctx.progress), eval_s=time.perf_counter() - t_eval)
        wire1 = ctx.wire()
        straggler = max(done.client_s, key=done.client_s.get) if done.client_s else None
        ctx.recorder.row(
            t + 1, rank=s.r_max, round_s=round_s, aggregate_s=aggregate_s,
            slowest_client_s=done.client_s[straggler] if straggler else float("nan"), straggler=straggler,
            payload_bytes_down=sum(len(p) for p in payloads.values()), payload_bytes_up=done.up_bytes,
            merge_bytes_down_dense=dense_down,
            tensor_bytes_up=done.tensor_bytes,
            wire_bytes_down=wire1.tx_bytes - wire0.tx_bytes, wire_bytes_up=wire1.rx_bytes - wire0.rx_bytes,
            in_sync=all(done.in_sync) if done.in_sync else None, n_updates=len(done.updates),
            period=getattr(method, "period", 0), merges=srv.merges, selected=[f"client{k}" for k in selected],
            dropped=done.dropped, ranks=ranks, round_ranks=[u.rank for u in done.updates],
            client_ranks=list(getattr(method, "ranks", ranks)), **row)
    end = srv.goodbye()
    if end:
        _per_peer(lambda r: ch.send(r, end[r], tag="fed/end"), list(end))
