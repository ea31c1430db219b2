"""Entry of the federated role processes: ``harness.federated.entry:main`` (see harness.cluster.launch).

Rank 0 is the server, rank k+1 is client k. Every process decodes the same RunPlan (its
Settings, model and task), builds its party (student base + LoRA at its rank, the task) and runs its
loop: server.py or client.py. Nothing here talks to the network except through
``ctx.channel``.
"""
from __future__ import annotations

from typing import Any

from harness.federated import methods
from harness.federated.party import build_party
from harness.runplan import RunPlan
from harness.tasks.cache import ensure_pretrained

# Imported once by the launcher before it forks the role processes (harness.cluster.spawn): the bulk
# of a role's start-up is importing these.
PRELOAD = ("torch.distributed", "transformers", "peft", "harness.federated.client", "harness.federated.server")


def main(ctx: Any) -> None:
    """Run the server (rank 0) or client ``rank - 1`` of the configured federated method."""
    from harness.federated import client, server

    plan = RunPlan.from_dict(ctx.plan)            # decoded once, here; nothing is read from a config
    settings = plan.federated
    pop = settings.population
    processes = (pop.executors if pop else settings.clients) + 1
    if ctx.world_size != processes:
        raise ValueError(f"federated: {processes - 1} {'executors' if pop else 'clients'} need {processes} processes, "
                         f"the cluster has {ctx.world_size}")
    ensure_pretrained(plan.model, plan.task, plan.model_source, ctx.rank, beat=ctx.progress)   # rank 0 builds a missing base
    # a population: rank 0 serves, the others execute sampled clients, starting at client 0's rank (pool.py)
    rank = settings.r_max if ctx.rank == 0 else settings.ranks[0 if pop is not None else ctx.rank - 1]
    party = build_party(plan.model, plan.task, settings, rank, device=ctx.device, source=plan.model_source)
    method = methods.build(settings.method, party.setup)
    if pop is not None:
        from harness.federated import pool

        serve, execute = pool.serve, pool.execute
    else:
        serve, execute = server.run, client.run
    if ctx.rank == 0:
        serve(ctx, party, method)
    else:
        execute(ctx, party, method.trains_a)
