"""The client loop: receive, catch up on base merges, load factors, train E steps, send back.

Per round the client receives its DownMsg (every client gets one; unselected ones only
idle), applies the base merges it missed, checks its base (+ seeded Z) against the
server's checksum, loads C (and Z) into its rank-r_k LoRA, runs E local steps with a fresh
optimizer at its learning rate eta_k, and sends C back (and Z when A was trained). A
frozen A has requires_grad False, so backward computes no gradient for it.

Row per selected round (role ``client<k>``): rank, lr, loss (mean train loss), forward_s,
backward_s (summed over E steps), client_compute_s (the whole local training),
transfer_down_s / transfer_up_s (receiver-measured: this client's / the server's
Transfer), send_s (how long the client's send was busy), round_s (down + compute + up),
payload and tensor bytes per direction, wire bytes (interface counters: rx over the
downlink, tx from the downlink until the server's next message), in_sync, merges applied.

Compute, measured so it means something (issue 14): ``client_flops`` (exact matmul FLOPs of
the E steps, flops.py; split into ``flops_forward``, ``flops_input_grad``,
``flops_weight_grad``; ``client_adapter_flops``: LoRA's own part of them, flops.adapter_flops)
and ``client_compute_isolated_s``: with ``federated.isolate_compute``
(default) each client trains while holding the run's compute token, so no two clients
compute at once and the time is not CPU contention between clients; ``compute_wait_s`` is
the time queued for it. Transfers happen outside the token and still overlap. Chosen over
a separate measurement pass because it times the very steps whose updates are used, on
the same batches, at no extra cost; the price is that the wall-clock ``round_s`` of the
server includes the queueing (the server's ``slowest_client_s`` = max over clients of down
+ isolated compute + up is the round time clients on their own machines would see).
``isolate_compute=false`` gives the old contended figure (client_compute_isolated_s NaN).

Links: every row carries this client's own link, ``up_rate_mbit``, ``down_rate_mbit``,
``up_delay_ms``, ``down_delay_ms``, and the key columns ``rate_mbit`` / ``delay_ms`` are its
downlink's (not the config default); ``rank`` is its configured LoRA rank.

HetLoRA's rank self-pruning (pruning.py, ``Settings.self_prunes``): the local loss carries the
tail penalty, and after the local steps the client prunes its rank when training shrank the
tail. ``current_rank`` (row) is the rank it trained at this round, ``pruned_to`` the rank it
uploads and keeps (equal unless it pruned), ``tail_before`` / ``tail_after`` the tail's update
norm; other methods: current_rank = pruned_to = rank, tails NaN.
"""
from __future__ import annotations

import fcntl
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from harness import optim
from harness.federated import pruning
from harness.federated.flops import Flops, batch_tokens, observe, step_adapter_flops, step_flops
from harness.federated.messages import DownMsg, UpMsg
from harness.federated.methods import fresh_basis
from harness.federated.party import Bases, Party, apply_merge, sync_device, weight_of
from harness.wire.transport import trace_rate_columns


@contextmanager
def compute_token(path: Path | None) -> Iterator[float]:
    """Hold the run's compute token (an exclusive ``flock`` on ``path``) for the block.

    Yields the seconds spent waiting for it. ``path`` None: no token (compute may overlap).
    Every client of a run locks the same file in the run folder (processes in separate
    network namespaces still share the file system), so local trainings run one at a time
    while transfers, which happen outside the block, still overlap.
    """
    if path is None:
        yield 0.0
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - t0
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def link_columns(ctx: Any, rank: int) -> dict[str, float]:
    """This client's own link (rank ``rank`` of the star): up/down rate (Mbit/s) and delay (ms).

    ``rate_mbit`` / ``delay_ms`` (key columns) are set to the downlink's, the direction the
    model and merges come down. Unshaped or unknown: NaN rate, 0 delay.
    """
    links = ctx.channel.links
    if links is None:
        return {}

    def mbit(spec: Any) -> float:
        rate = links.nominal_rate_bps(spec)         # a traced link: the trace's mean rate
        return rate / 1e6 if rate is not None else math.nan

    up, down = links.up[rank], links.down[rank]
    return {"rate_mbit": mbit(down), "delay_ms": down.delay_s * 1e3, "up_rate_mbit": mbit(up),
            "down_rate_mbit": mbit(down), "up_delay_ms": up.delay_s * 1e3, "down_delay_ms": down.delay_s * 1e3}


def make_optimizer(params: list, name: str, lr: float, momentum: float) -> torch.optim.Optimizer:
    """The client's fresh optimizer of a round (harness.optim's factory; no weight decay)."""
    return optim.make_optimizer(params, name, lr, momentum=momentum, key="federated.optimizer")


class Client:
    """Client ``index`` (0-based; its rank in the process group is index + 1)."""

    def __init__(self, party: Party, index: int, trains_a: bool) -> None:
        self.party, self.index, self.trains_a = party, index, trains_a
        self.s = party.settings
        self.rank = self.s.ranks[index]        # configured
        self.current = self.rank               # HetLoRA: lowered by self-pruning, kept for the rest of the run
        self.names = party.adapter.names
        self.bases = Bases(party.setup)
        self.merged = 0                        # base merges applied so far
        self.examples = weight_of(party.task.client_data(index))
        self.batches = party.task.batches(index, self.s.batch_size)      # its stream: derive("batches", seed, index)
        self.shapes: list | None = None           # linear layers seen on the last observed step (flops.py)

    # -- one round ------------------------------------------------------------------------
    def catch_up(self, msg: DownMsg) -> tuple[str, bool]:
        """Apply pending merges, load the factors; returns (checksum, matches the server's)."""
        ad = self.party.adapter
        for entry in sorted(msg.merges, key=lambda m: m.index):
            if entry.index < self.merged:
                continue                       # already have it (sent twice after a retry)
            apply_merge(ad, entry, self.bases)
            self.merged = entry.index + 1
        down = msg.down
        if down.basis == "seed":
            z = self.bases.of(down.period)
            total = ad.base_checksum(extra=z)
        else:
            z = down.z if down.basis == "given" else {
                t.name: fresh_basis(self.s.seed, down.period, self.index, t, self.current) for t in ad.targets}
            total = ad.base_checksum()
        for t in ad.targets:
            c = down.c.get(t.name)
            if c is None:                      # fresh LoRA: B = 0
                c = torch.zeros(t.d_out, self.current)
            ad.load(t.name, c, z[t.name])
        ad.freeze_a(not self.trains_a)
        return total, total == msg.expect

    def train(self, token: Path | None = None) -> dict[str, float]:
        """E local steps; returns summed forward/backward/compute seconds, FLOPs and the mean loss.

        With ``token`` the loop runs while holding the run's compute token
        (:func:`compute_token`): ``client_compute_isolated_s`` is then its wall time with no
        other client computing, ``compute_wait_s`` the time queued for the token. Batches
        are drawn before the token is taken. ``client_flops`` counts the E steps' matmuls
        (harness.federated.flops), from the layer shapes observed on the first step.
        """
        party = self.party
        lr = self.s.lr_of(self.index)
        opt = make_optimizer(party.adapter.trainable(), self.s.optimizer, lr, self.s.momentum)
        batches = [{k: v.to(party.device) for k, v in next(self.batches).items()} for _ in range(self.s.local_steps)]
        with compute_token(token) as wait_s:
            stats = self._steps(batches, opt)
        stats.update(lr=lr, compute_wait_s=wait_s,
                     client_compute_isolated_s=stats["client_compute_s"] if token is not None else math.nan)
        return stats

    def _steps(self, batches: list[dict[str, Any]], opt: torch.optim.Optimizer) -> dict[str, float]:
        party = self.party
        model, task = party.model, party.task
        model.train()
        fwd = bwd = 0.0
        losses = []
        flops = adapter = Flops()
        start = time.perf_counter()
        for batch in batches:
            t0 = time.perf_counter()
            if self.shapes is None:             # trainability is fixed per method: observe once
                with observe(model) as shapes:
                    loss = task.loss(model, batch)
                self.shapes = shapes
            else:
                loss = task.loss(model, batch)
            objective = loss + self.penalty() if self.s.self_prunes else loss
            sync_device(party.device)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            objective.backward()
            sync_device(party.device)
            t2 = time.perf_counter()
            opt.step()
            fwd, bwd = fwd + (t1 - t0), bwd + (t2 - t1)
            losses.append(float(loss.detach()))
            flops = flops + step_flops(self.shapes, batch_tokens(batch))
            adapter = adapter + step_adapter_flops(self.shapes, batch_tokens(batch))
        sync_device(party.device)
        model.eval()
        return {"forward_s": fwd, "backward_s": bwd, "client_compute_s": time.perf_counter() - start,
                "loss": sum(losses) / len(losses), "client_flops": flops.total, "flops_forward": flops.forward,
                "flops_input_grad": flops.input_grad, "flops_weight_grad": flops.weight_grad,
                "client_adapter_flops": adapter.total}

    # -- HetLoRA rank self-pruning (pruning.py) ---------------------------------------------
    def keep(self) -> int:
        return pruning.keep_rank(self.current, self.s.prune_gamma)

    def penalty(self) -> Any:
        """lambda * sum ||B_tail|| ||A_tail|| over the targets (the tail beyond keep())."""
        ad = self.party.adapter
        return self.s.prune_lambda * pruning.tail_penalty(((ad.b(n), ad.a(n)) for n in self.names), self.keep())

    def tail(self) -> float:
        ad = self.party.adapter
        return pruning.tail_norm(((ad.coeffs(n), ad.basis(n)) for n in self.names), self.keep())

    def prune(self, before: float, after: float) -> bool:
        """Prune to keep() when local training shrank the tail; the adapter shrinks with it."""
        keep = self.keep()
        if not pruning.should_prune(self.current, keep, before, after):
            return False
        for n in self.names:
            self.party.adapter.resize(n, keep)
        self.current, self.shapes = keep, None      # shapes changed: FLOPs re-observed next step
        return True

    def update(self, round_index: int, info: dict[str, Any]) -> UpMsg:
        ad = self.party.adapter
        c = {n: ad.coeffs(n) for n in self.names}
        z = {n: ad.basis(n) for n in self.names} if self.trains_a else {}
        return UpMsg(round_index, c, z, info)


def run(ctx: Any, party: Party, trains_a: bool) -> None:
    """The client side of the protocol, round after round (or until the fault injection drops it).

    A round's row is written when the next message from the server arrives: by then the
    update has fully left this node (so the interface counters hold all its bytes), and
    the server has told us how long the update took to arrive (the receiver's time is the
    authoritative transfer time; the sender only knows when the kernel took the bytes).
    """
    client = Client(party, ctx.rank - 1, trains_a)
    names, s = client.names, client.s
    pending: dict[str, Any] = {}
    links = link_columns(ctx, ctx.rank)
    run_dir = ctx.run_dir
    token = Path(run_dir) / ".compute.token" if s.isolate_compute and run_dir is not None else None

    def finish(msg: DownMsg, wire_now: Any) -> None:
        if not pending:
            return
        row = dict(pending)
        pending.clear()
        up_s = float(msg.last_up_s) if msg.last_up_s is not None else float("nan")
        row.update(transfer_up_s=up_s, round_s=row["transfer_down_s"] + row["client_compute_s"] + up_s,
                   wire_bytes_up=wire_now.tx_bytes - row.pop("_tx"))
        ctx.recorder.row(row.pop("_step"), **row)

    for t in range(s.rounds):
        ctx.heartbeat(t)
        wire_before = ctx.wire()
        data, (down_tr,) = ctx.channel.scatter(None, tag=f"fed/down/{t}")
        wire_after = ctx.wire()
        msg = DownMsg.from_bytes(data, names)
        finish(msg, wire_after)
        if not msg.selected:
            ctx.channel.gather(UpMsg(t, info={"idle": True}).to_bytes(names), tag=f"fed/up/{t}")
            continue
        if t >= s.fault_drop_round >= 0 and client.index == s.fault_drop_client:
            # test fault: this client leaves the federation (answers 'gone', then stops)
            ctx.channel.gather(UpMsg(t, gone=True).to_bytes(names), tag=f"fed/up/{t}")
            return
        checksum, in_sync = client.catch_up(msg)
        trained_at = client.current
        before = client.tail() if s.self_prunes else math.nan
        stats = client.train(token)
        after = client.tail() if s.self_prunes else math.nan
        if s.self_prunes:
            client.prune(before, after)
        up = client.update(t, {"examples": client.examples, "checksum": checksum, "in_sync": in_sync,
                               "transfer_down_s": down_tr.seconds, "rank": client.current, **stats})
        payload = up.to_bytes(names)
        _, (send_tr,) = ctx.channel.gather(payload, tag=f"fed/up/{t}")
        pending.update(
            _step=t + 1, _tx=wire_after.tx_bytes, rank=client.rank, current_rank=trained_at, pruned_to=client.current,
            tail_before=before, tail_after=after, lr=stats["lr"], loss=stats["loss"],
            examples=client.examples, forward_s=stats["forward_s"], backward_s=stats["backward_s"],
            client_compute_s=stats["client_compute_s"], transfer_down_s=down_tr.seconds, send_s=send_tr.seconds,
            **{k: stats[k] for k in ("client_compute_isolated_s", "compute_wait_s", "client_flops", "flops_forward",
                                     "flops_input_grad", "flops_weight_grad", "client_adapter_flops")}, **links,
            payload_bytes_down=len(data), payload_bytes_up=len(payload), tensor_bytes_up=up.tensor_bytes,
            wire_bytes_down=wire_after.rx_bytes - wire_before.rx_bytes, in_sync=in_sync, merges=client.merged,
            period=msg.down.period, **trace_rate_columns(ctx.channel, down=[down_tr], up=[send_tr]))
    data, _ = ctx.channel.recv(0, tag="fed/end")
    finish(DownMsg.from_bytes(data, names), ctx.wire())
