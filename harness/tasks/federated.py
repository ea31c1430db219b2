"""The federated task: supervised fine-tuning data split non-IID across K clients.

Data: ``task.examples`` distinct training problems of the arithmetic language (drawn with
the run seed; never an evaluation problem). Each belongs to a sub-distribution, its
category ``(op, hard)`` (see ``harness.tasks.arith``).

Split (``dirichlet_split``): client k draws category proportions p_k ~ Dirichlet(alpha * 1)
and then its ``n_k`` examples one by one: a category from p_k (renormalised over the
categories that still have examples), an example of that category without replacement.
Lower alpha => each client sees fewer categories (more non-IID); alpha -> inf => IID.
Sizes: ``task.client_sizes`` (cycled over the clients), or ``examples`` split equally. The
sizes must fit the data: asking for more examples than exist is an error, never a silent
reuse. Everything is a function of ``seed``.

Loss: mean next-token cross-entropy on the answer and eos tokens (``data.sft_loss``).
Evaluation: ``eval_loss`` (same loss) and ``accuracy`` (greedy exact match) on
``task.eval_prompts`` fixed held-out problems, the same for every client, seed and method.
With ``task.eval_split=validation`` (learning-rate tuning, harness.tune) it uses instead
``task.validation_prompts`` problems of the training side that no client holds: the next
problems of the same seeded permutation the training pool is cut from (so disjoint from
every client's data), and disjoint from the held-out test problems by the language's
train/eval split. Tuning never sees the problems that report the result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np
import pandas as pd
import torch

from harness.tasks.arith import OPS, Arithmetic, Problems
from harness.tasks.chat_eval import _answer_logprob_plain
from harness.tasks.data import correct, encode_prompts, prompt_attention, sft_batch, sft_loss
from harness.tasks.plans import task_plan
from harness.seeds import derive
from harness.tasks.onpolicy import EVAL_SEED
from harness.tasks.rollouts import generate
from harness.tasks.tokenizer import Tokenizer
from harness.errors import ConfigError


@dataclass(frozen=True)
class ClientData:
    """One client's examples and their category indices (``FederatedTask.categories``)."""
    problems: Problems
    categories: torch.Tensor

    def __len__(self) -> int:
        return len(self.problems)

    def counts(self, n_categories: int) -> list[int]:
        return torch.bincount(self.categories, minlength=n_categories).tolist()


def client_batches(task, k: int, encode, batch_size: int | None = None,
                   generator: torch.Generator | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Endless shuffled epochs of ``task.client_data(k)``'s problems, ``encode``d a batch at a time
    (the last batch of an epoch may be smaller); ``task.batch_size`` by default, seeded by
    (task.seed, k) unless ``generator`` is given. Shared by the synthetic and the chat tasks."""
    data = task.client_data(k)
    bs = int(batch_size or task.cfg.batch_size)
    if bs < 1:
        raise ConfigError(f"task.batch_size: {bs} must be >= 1")
    gen = generator or torch.Generator().manual_seed(derive("batches", task.seed, k))
    while True:
        order = torch.randperm(len(data), generator=gen)
        for i in range(0, len(data), bs):
            j = order[i:i + bs]
            yield encode(Problems(data.problems.a[j], data.problems.op[j], data.problems.b[j]))


def dirichlet_split(categories: torch.Tensor, n_categories: int, sizes: list[int], alpha: float,
                    seed: int) -> list[torch.Tensor]:
    """Indices into the pool for each client (module doc); disjoint, deterministic in seed."""
    if alpha <= 0:
        raise ConfigError(f"task.alpha: {alpha} must be > 0 (Dirichlet concentration; lower = more non-IID)")
    if sum(sizes) > len(categories):
        raise ConfigError(f"task.client_sizes: the clients need {sum(sizes)} examples but the task has "
                          f"{len(categories)} (task.examples); fewer clients, smaller sizes or more examples")
    rng = np.random.default_rng(seed)
    cats = categories.numpy()
    pools = [list(rng.permutation(np.flatnonzero(cats == c))) for c in range(n_categories)]
    out = []
    for size in sizes:
        p = rng.dirichlet(np.full(n_categories, float(alpha)))
        take = []
        for _ in range(size):
            left = np.array([len(pool) > 0 for pool in pools], dtype=float)
            q = p * left
            q = q / q.sum() if q.sum() > 0 else left / left.sum()
            take.append(pools[int(rng.choice(n_categories, p=q))].pop())
        out.append(torch.tensor(sorted(int(i) for i in take), dtype=torch.long))
    return out


class FederatedTask:
    """K clients' non-IID SFT data over one arithmetic language (module doc)."""

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer, n_clients: int, seed: int) -> None:
        cfg = task_plan(task_cfg)
        self.cfg, self.tok, self.seed = cfg, tokenizer, seed
        try:
            self.lang = Arithmetic(cfg.digits, list(cfg.ops), reverse=bool(cfg.reverse))
        except ValueError as err:
            raise ConfigError(str(err)) from None
        examples = int(cfg.examples)
        if n_clients < 1:
            raise ConfigError(f"federated.clients: {n_clients} must be >= 1")
        if n_clients > examples:
            raise ConfigError(f"federated.clients: {n_clients} clients but only {examples} examples "
                              "(task.examples); each client needs data")
        self.sizes = self._sizes(list(cfg.client_sizes), n_clients, examples)
        split = str(cfg.eval_split)
        if split not in ("test", "validation"):
            raise ConfigError(f"task.eval_split: {split!r} is not allowed; choose test or validation")
        n_val = int(cfg.validation_prompts) if split == "validation" else 0
        if split == "validation" and n_val < 1:
            raise ConfigError(f"task.validation_prompts: {n_val} must be >= 1 with task.eval_split=validation")
        self.pool, validation = self._pool(examples, n_val)
        self.categories = self.lang.categories
        pool_cats = self.lang.category(self.pool)
        idx = dirichlet_split(pool_cats, len(self.categories), self.sizes, float(cfg.alpha),
                              derive("federated-split", seed))
        self.clients = [ClientData(Problems(self.pool.a[i], self.pool.op[i], self.pool.b[i]), pool_cats[i])
                        for i in idx]
        n_eval = int(cfg.eval_prompts)
        self.eval_problems = self.lang.sample("eval", n_eval, torch.Generator().manual_seed(EVAL_SEED))
        if validation is not None:
            self.eval_problems = validation
        self.eval_batch = sft_batch(tokenizer, self.lang, self.eval_problems)

    @staticmethod
    def _sizes(client_sizes: list[int], n_clients: int, examples: int) -> list[int]:
        if client_sizes:
            sizes = [int(client_sizes[k % len(client_sizes)]) for k in range(n_clients)]
            if min(sizes) < 1:
                raise ConfigError(f"task.client_sizes: {list(client_sizes)} has a size < 1; every client needs data")
            return sizes
        return [examples // n_clients + (1 if k < examples % n_clients else 0) for k in range(n_clients)]

    def _pool(self, examples: int, validation: int = 0) -> tuple[Problems, Problems | None]:
        """The training pool and (``validation`` > 0) the validation problems, disjoint from it."""
        gen = torch.Generator().manual_seed(derive("federated-pool", self.seed))
        if self.lang.digits <= 3:
            every = self.lang.all_problems("train")
            if examples + validation > len(every):
                raise ConfigError(f"task.examples: {examples} (+ {validation} validation problems) is more than the "
                                  f"{len(every)} distinct training problems of {self.lang.digits}-digit "
                                  f"{''.join(self.lang.ops)}")
            perm = torch.randperm(len(every), generator=gen)
            pick, val = perm[:examples], perm[examples:examples + validation]
            held = Problems(every.a[val], every.op[val], every.b[val]) if validation else None
            return Problems(every.a[pick], every.op[pick], every.b[pick]), held
        pool = self.lang.sample("train", examples, gen)
        if not validation:
            return pool, None
        # > 3 digits: a fresh draw of the training side; a repeat of a pool problem is possible but rare
        vgen = torch.Generator().manual_seed(derive("federated-validation", self.seed))
        return pool, self.lang.sample("train", validation, vgen)

    # -- per-client access ---------------------------------------------------------------------
    def client_data(self, k: int) -> ClientData:
        if not 0 <= k < len(self.clients):
            raise IndexError(f"client {k}: there are {len(self.clients)} clients")
        return self.clients[k]

    def batches(self, k: int, batch_size: int | None = None,
                generator: torch.Generator | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Endless iterator of client k's SFT batches (input_ids, attention_mask, labels):
        shuffled epochs (by ``generator``), the last batch of an epoch may be smaller."""
        return client_batches(self, k, lambda p: sft_batch(self.tok, self.lang, p), batch_size, generator)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean next-token cross-entropy (nats/token) on the batch's answer tokens."""
        return sft_loss(model, batch)

    @torch.no_grad()
    def evaluate(self, model, chunk: int = 256) -> dict[str, float]:
        """eval_loss and greedy accuracy on the fixed held-out problems."""
        return self.evaluate_prompts(model, chunk)[0]

    @torch.no_grad()
    def evaluate_prompts(self, model, chunk: int = 256, progress=None) -> tuple[dict[str, float], pd.DataFrame]:
        """(eval_loss and greedy accuracy, one row per held-out problem: correct, ended and the answer's
        teacher-forced log-probability ``answer_logprob`` [nats]); ``progress`` is called after each chunk."""
        eval_loss = float(sft_loss(model, self.eval_batch))
        prompts = encode_prompts(self.tok, self.lang, self.eval_problems)
        ok, ended = [], []
        for i in range(0, len(prompts), chunk):
            p = prompts[i:i + chunk]
            comp, mask, _ = generate(model, p, prompt_attention(self.tok, p), self.lang.max_answer_len + 1,
                                     eos_id=self.tok.eos_id, pad_id=self.tok.pad_id)
            ok.append(correct(self.tok, self.lang, p, comp, mask))
            ended.append(((comp == self.tok.eos_id) & mask).any(1))
            if progress is not None:
                progress()
        hits = torch.cat(ok)
        answers = [self.tok.encode(t) + [self.tok.eos_id] for t in self.lang.answer_text(self.eval_problems)]
        score = _answer_logprob_plain(model, prompts, prompt_attention(self.tok, prompts), answers, self.tok.pad_id)
        p = self.eval_problems
        frame = pd.DataFrame({"prompt": range(len(prompts)), "a": p.a.tolist(), "op": [OPS[o] for o in p.op.tolist()],
                              "b": p.b.tolist(), "correct": hits.tolist(), "ended": torch.cat(ended).tolist(),
                              "answer_logprob": score.numpy()})
        return {"eval_loss": eval_loss, "accuracy": int(hits.sum()) / len(prompts)}, frame


def build_federated(task_cfg: Any, tokenizer: Tokenizer, n_clients: int, seed: int) -> FederatedTask:
    """The federated task of ``task_cfg`` over ``n_clients`` clients (data drawn with ``seed``)."""
    return FederatedTask(task_cfg, tokenizer, n_clients, seed)
