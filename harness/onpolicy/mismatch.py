"""Policy mismatch: how far the workers' policy is from the learner's, measured on rollouts.

``policy_kl`` is the mean, over the completion tokens of a batch of rollouts, of the exact
KL(worker || learner) between the two next-token distributions (temperature 1, natural log,
nats per token). The learner computes it by running its model twice, once with its own
adapter and once with the workers' adapter loaded in (``swapped``, restored bit for bit).

It is measured for every method, never assumed: the workers' adapter is the learner's exact
copy of what they hold (``LearnerSync.worker_params``: delta's tracked view, bf16 full sync's
rounded adapter, and for hilo / fp32 full sync a copy of the learner's own tensors, which the
checksum verification (``in_sync``) proves the workers hold bit for bit). Equal tensors give
equal logits and so exactly 0.0; any difference shows.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def swapped(params: dict[str, torch.nn.Parameter], view: dict[str, torch.Tensor]) -> Iterator[None]:
    """Temporarily load ``view`` into ``params``; the originals are restored afterwards."""
    saved = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(view[n])
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved[n])


@torch.no_grad()
def policy_kl(task, policy, params: dict[str, torch.nn.Parameter], view: dict[str, torch.Tensor],
              rollouts, learner: dict[str, torch.Tensor] | None = None) -> float:
    """KL(worker || learner) per completion token (nats), with the workers' adapter ``view``
    swapped in for the second forward (and ``learner``, when given, for the first instead of
    the adapter in ``params``: two stored policy versions). ``task.completion_logits(policy, rollouts)`` gives the
    [N, T, V] logits predicting each completion token. 0.0 for rollouts without completion tokens."""
    sel = rollouts.completion_mask
    if not bool(sel.any()):
        return 0.0

    def logp() -> torch.Tensor:
        logits = task.completion_logits(policy, rollouts)
        return torch.log_softmax(logits, -1)[sel.to(logits.device)]

    was_training = policy.training
    policy.eval()
    try:
        if learner is None:
            mine = logp()
        else:
            with swapped(params, learner):
                mine = logp()
        with swapped(params, view):
            worker = logp()
    finally:
        policy.train(was_training)
    per_token = (worker.exp() * (worker - mine)).sum(-1)
    return max(0.0, float(per_token.mean()))      # >= 0; fp32 noise of near-equal policies is ~1e-9
