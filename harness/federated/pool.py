"""The population loops: the server samples K of N clients a round, P executors take them on.

Per round t the server samples K clients (population.py), notes the unavailable ones and
deals the available ones round-robin to the live executors. Per executor (one thread each on
the server) and per client of its list, one after another:

  server -> executor   plan of the round: [(client, its link, its past participations)]
  executor             takes on client k: qdiscs + link table (relink.py), its rank's LoRA,
                       its data shard and batch stream, the base merges its party has
  executor -> server   ready (a few bytes, on k's link: control traffic, not k's bytes)
  server -> executor   k's DownMsg (the same message a classic client gets)
  executor             k's local training (client.Client, under the compute token)
  executor -> server   k's UpMsg, or a ``late`` note when down + compute already exceed the deadline

Optimizer state: every method starts a fresh optimizer each round, so no identity carries
one; the batch stream does: client k's stream is rebuilt and advanced by uses x local_steps.
A client's time is its own down + compute + up (receiver-measured transfers, isolated compute);
with ``federated.deadline_s`` a client whose time exceeds it is dropped (``late``), as FedScale
does with simulated completion times. An executor that fails drops its current and remaining
clients of the round (``failed``) and leaves the pool (drop_policy=continue) or ends the run.

Rows: server (step = round + 1): sampled, unavailable, finished, late, failed, dropped (late +
failed), executors, n_updates, round_s (wall clock), virtual_round_s (the deadline when a client
was late, else the slowest finished client's time), bytes; ``population`` (written by the
server): one row per sampled client and round with its status, executor, rank, link and the
payload bytes down and up; executor<e>: one row per client it ran (its link, compute, transfers).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.fanout import fan_out
from harness.federated.client import Client, link_columns
from harness.federated.messages import DownMsg, UpMsg
from harness.federated.methods import Method, Update
from harness.federated.party import Party, build_party
from harness.federated.population import assign
from harness.federated.relink import specs, take_link, use_link
from harness.federated.server import ClientFailed, Server, first_row, open_round
from harness.record import Recorder


def _plan_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True).encode()


class PoolServer(Server):
    """The classic server's state (log of merges, global adapter) plus the population's bookkeeping."""

    def __init__(self, party: Party, method: Method) -> None:
        super().__init__(party, method)
        self.pop = self.s.population
        self.uses = [0] * self.s.clients
        self.party_merged: dict[tuple[int, int], int] = {}     # (executor rank, lora rank) -> merges applied
        self.executors = list(range(1, self.pop.executors + 1))

    def down_for(self, t: int, k: int, e: int) -> bytes:
        start = min(self.sent[k], self.party_merged.get((e, self.s.ranks[k]), 0))
        pending = [self.log[i] for i in range(start, self.merges)]
        return DownMsg(t, True, self.method.down(t, k), pending, self.expect(), None).to_bytes(self.names)

    def run_executor(self, ch: Any, t: int, e: int, clients: list[int]) -> list[dict[str, Any]]:
        """Everything of round t with executor rank e; one record per client (never raises)."""
        out: list[dict[str, Any]] = []
        for i, k in enumerate(clients):
            rec: dict[str, Any] = {"client": k, "executor": e, "status": "failed"}
            out.append(rec)
            try:       # the job goes out only after the previous client's upload has arrived: a link is never
                       # changed under bytes still queued for the previous identity
                ch.send(e, _plan_bytes({"client": k, "uses": self.uses[k], "link": self.pop.link(k)}), tag=f"pop/job/{t}")
                ch.recv(e, tag=f"pop/ready/{t}/{k}")
                use_link(ch, e, *specs(self.pop.link(k)))
                down = self.down_for(t, k, e)
                rec["payload_bytes_down"] = len(down)
                ch.send(e, down, tag=f"pop/down/{t}/{k}")
                data, up = ch.recv(e, tag=f"pop/up/{t}/{k}")
            except Exception as err:  # noqa: BLE001 - a dead executor is data (drop policy)
                rec["why"] = str(err)
                out.extend({"client": j, "executor": e, "status": "failed", "why": "executor failed"}
                           for j in clients[i + 1:])
                return out
            msg = UpMsg.from_bytes(data, self.names)
            info = msg.info
            self.sent[k] = self.party_merged[(e, self.s.ranks[k])] = self.merges
            self.uses[k] += 1
            rec.update(payload_bytes_up=len(data), tensor_bytes_up=msg.tensor_bytes, transfer_down_s=info["transfer_down_s"],
                       client_compute_s=info["client_compute_s"], transfer_up_s=up.seconds, in_sync=info["in_sync"])
            rec["client_s"] = info["transfer_down_s"] + info["client_compute_s"] + up.seconds
            late = info.get("late") or (self.pop.deadline_s is not None and rec["client_s"] > self.pop.deadline_s)
            rec["status"] = "late" if late else "finished"
            if not late:
                rec["update"] = Update(k, self.s.ranks[k], float(info["examples"]), msg.c, msg.z or None)
        try:
            ch.send(e, _plan_bytes({"done": True}), tag=f"pop/job/{t}")     # the round is over for e
        except Exception as err:  # noqa: BLE001
            out.append({"client": None, "executor": e, "status": "lost", "why": str(err)})
        return out


def serve(ctx: Any, party: Party, method: Method) -> None:
    """The server of a population run (entry.py calls it when federated.population is set)."""
    srv = PoolServer(party, method)
    s, pop, ch = srv.s, srv.pop, ctx.channel
    clients_rec = Recorder(ctx.run_dir, dict(ctx.recorder.keys), "population")
    first_row(ctx, srv)
    for t in range(s.rounds):
        wire0 = open_round(ctx, srv, method, t)
        sampled = pop.sample(t)
        unavailable = [k for k in sampled if not pop.available(k, t)]
        work = assign([k for k in sampled if k not in unavailable], srv.executors)
        start = time.perf_counter()
        results = fan_out([lambda e=e, t=t, jobs=work[e]: srv.run_executor(ch, t, e, jobs) for e in srv.executors],
                          name="executor")
        round_s = time.perf_counter() - start
        every = [r for rs in results for r in rs]
        recs = sorted((r for r in every if r["client"] is not None), key=lambda r: r["client"])
        lost = sorted({r["executor"] for r in every if r["status"] in ("failed", "lost")})
        if lost and s.drop_policy == "fail":
            why = next(r["why"] for r in every if r["status"] in ("failed", "lost"))
            raise ClientFailed(f"executor{lost[0] - 1} failed in round {t}: {why} (federated.drop_policy=fail)")
        srv.executors = [e for e in srv.executors if e not in lost]
        if not srv.executors:
            raise ClientFailed(f"every executor failed by round {t}")
        updates = [r.pop("update") for r in recs if "update" in r]
        t_agg = time.perf_counter()
        entry = method.aggregate(t, updates)
        if entry is not None:
            srv.add_merge(entry)
        aggregate_s = time.perf_counter() - t_agg
        row: dict[str, Any] = {}
        if s.evaluates(t):
            t_eval = time.perf_counter()
            row.update(srv.evaluate(t + 1, ctx.recorder, ctx.progress), eval_s=time.perf_counter() - t_eval)
        wire1 = ctx.wire()
        names = {status: [f"client{r['client']}" for r in recs if r["status"] == status]
                 for status in ("finished", "late", "failed")}
        done = {f"client{r['client']}": r["client_s"] for r in recs if r["status"] == "finished"}
        straggler = max(done, key=done.get) if done else None
        late = names["late"]
        virtual = pop.deadline_s if late else (done[straggler] if straggler else float("nan"))
        ctx.recorder.row(
            t + 1, rank=s.r_max, round_s=round_s, virtual_round_s=virtual, aggregate_s=aggregate_s,
            slowest_client_s=done[straggler] if straggler else float("nan"), straggler=straggler,
            sampled=[f"client{k}" for k in sampled], unavailable=[f"client{k}" for k in unavailable],
            finished=names["finished"], late=late, failed=names["failed"], dropped=late + names["failed"],
            executors=[f"executor{e - 1}" for e in srv.executors], n_updates=len(updates),
            payload_bytes_down=sum(r.get("payload_bytes_down", 0) for r in recs),
            payload_bytes_up=sum(r.get("payload_bytes_up", 0) for r in recs),
            tensor_bytes_up=sum(r.get("tensor_bytes_up", 0) for r in recs),
            wire_bytes_down=wire1.tx_bytes - wire0.tx_bytes, wire_bytes_up=wire1.rx_bytes - wire0.rx_bytes,
            in_sync=all(r["in_sync"] for r in recs if "in_sync" in r) if updates else None,
            period=getattr(method, "period", 0), merges=srv.merges, round_ranks=[u.rank for u in updates], **row)
        for k in unavailable:
            recs.append({"client": k, "status": "unavailable"})
        for r in sorted(recs, key=lambda r: r["client"]):
            k = r.pop("client")
            link = pop.link(k)
            e = r.pop("executor", None)
            clients_rec.row(t + 1, client=f"client{k}", executor=None if e is None else f"executor{e - 1}",
                            rank=s.ranks[k], up_rate_mbit=link["up_bps"] / 1e6, down_rate_mbit=link["down_bps"] / 1e6,
                            rate_mbit=link["down_bps"] / 1e6, delay_ms=link["delay_s"] * 1e3,
                            available=r["status"] != "unavailable", **r)
    clients_rec.close()
    fan_out([lambda e=e: ch.send(e, _plan_bytes({"end": True}), tag=f"pop/job/{s.rounds}") for e in srv.executors],
            capture=True, name="executor")


class Identities:
    """An executor's parties, one per LoRA rank (built on first use), and their merge counts."""

    def __init__(self, ctx: Any, first: Party, trains_a: bool) -> None:
        self.ctx, self.trains_a, self.first = ctx, trains_a, first
        self.parties: dict[int, Party] = {first.settings.ranks[0]: first}   # entry.py built it at ranks[0]
        self.merged: dict[int, int] = {}
        self.shapes: dict[int, Any] = {}

    def become(self, k: int, uses: int) -> Client:
        s = self.first.settings
        rank = s.ranks[k]
        if rank not in self.parties:
            self.parties[rank] = build_party(self.first.model_plan, self.first.task_plan, s, rank, device=self.ctx.device,
                                             task=self.first.task, source=self.first.source)
        client = Client(self.parties[rank], k, self.trains_a)
        for _ in range(uses * s.local_steps):     # k's batch stream, where its last round left it
            next(client.batches)
        client.merged, client.shapes = self.merged.get(rank, 0), self.shapes.get(rank)
        return client

    def keep(self, client: Client) -> None:
        self.merged[client.rank], self.shapes[client.rank] = client.merged, client.shapes


def execute(ctx: Any, party: Party, trains_a: bool) -> None:
    """An executor: round after round, take on each client the server assigns and run its round."""
    ids = Identities(ctx, party, trains_a)
    s, names, ch = party.settings, party.adapter.names, ctx.channel
    deadline = s.population.deadline_s
    run_dir = ctx.run_dir
    token = Path(run_dir) / ".compute.token" if s.isolate_compute and run_dir is not None else None
    t = 0
    while True:
        ctx.heartbeat(t)
        job = json.loads(ch.recv(0, tag=f"pop/job/{t}")[0])
        if job.get("end"):
            return
        if job.get("done"):
            t += 1
            continue
        k = int(job["client"])
        take_link(ctx, job["link"])
        client = ids.become(k, int(job["uses"]))
        wire0 = ctx.wire()
        ch.send(0, b"ready", tag=f"pop/ready/{t}/{k}")
        data, down_tr = ch.recv(0, tag=f"pop/down/{t}/{k}")
        wire1 = ctx.wire()
        msg = DownMsg.from_bytes(data, names)
        checksum, in_sync = client.catch_up(msg)
        stats = client.train(token)
        info = {"examples": client.examples, "checksum": checksum, "in_sync": in_sync,
                "transfer_down_s": down_tr.seconds, **stats}
        late = deadline is not None and down_tr.seconds + stats["client_compute_s"] > deadline
        up = UpMsg(t, info={**info, "late": True}) if late else client.update(t, info)
        payload = up.to_bytes(names)
        send_tr = ch.send(0, payload, tag=f"pop/up/{t}/{k}")
        ids.keep(client)
        ctx.recorder.row(
            t + 1, client=f"client{k}", rank=client.rank, lr=stats["lr"], loss=stats["loss"], late=late,
            examples=client.examples, uses=int(job["uses"]), in_sync=in_sync, merges=client.merged,
            transfer_down_s=down_tr.seconds, send_s=send_tr.seconds, payload_bytes_down=len(data),
            payload_bytes_up=len(payload), tensor_bytes_up=up.tensor_bytes,
            wire_bytes_down=wire1.rx_bytes - wire0.rx_bytes, **link_columns(ctx, ctx.rank),
            **{key: stats[key] for key in ("forward_s", "backward_s", "client_compute_s", "client_compute_isolated_s",
                                           "compute_wait_s", "client_flops", "client_adapter_flops")})
