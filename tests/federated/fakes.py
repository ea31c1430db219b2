"""In-process stand-ins for the federated loops' collaborators (threads, queues, a tiny task).

``run_in_threads`` (harness.federated.inproc, with a tiny task and model here) runs the real server and client loops (harness.federated.server / client)
in one process, one thread per party, joined by a queue-backed channel with the Channel
interface (send, recv, scatter, gather). It tests the protocol and the math (rows, merges,
checksums, drops) in seconds, without namespaces or process start-up.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import OmegaConf

from harness.conf.schema import Config, MethodConfig
from harness.federated import inproc
from harness.federated.settings import from_cfg
from harness.seeds import derive
from harness.tasks.arith import Arithmetic, Problems
from harness.tasks.data import sft_batch, sft_loss
from harness.tasks.models import build_model
from harness.tasks.plans import model_plan
from harness.tasks.tokenizer import Tokenizer

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

    def batches(self, k: int, batch_size: int, generator: torch.Generator | None = None):
        generator = generator or torch.Generator().manual_seed(derive("batches", 0, k))   # as FederatedTask.batches
        while True:
            yield self._batch(batch_size, generator)

    def loss(self, model, batch) -> torch.Tensor:
        return sft_loss(model, batch)

    def evaluate(self, model) -> dict[str, float]:
        with torch.no_grad():
            loss = float(sft_loss(model, self.eval_batch))
        return {"eval_loss": loss, "accuracy": 0.0}

    def evaluate_prompts(self, model, progress=None) -> tuple[dict[str, float], pd.DataFrame]:
        """As FederatedTask.evaluate_prompts (what the server calls): the metrics and one record per prompt."""
        if progress is not None:
            progress()
        return self.evaluate(model), pd.DataFrame({"prompt": range(len(self.eval_batch["input_ids"]))})


def run_in_threads(cfg: dict, run_dir: Path, dead: set[int] | None = None, *, task: Any = None,
                   base: Any = None) -> dict[int, Any]:
    """harness.federated.inproc.run_in_threads with a TinyTask and a fresh tiny model by default."""
    settings = from_cfg(cfg)                    # the planner's federated part, as build_plan makes it
    model = model_plan(cfg["model"])
    tok = Tokenizer.synthetic()
    base = base if base is not None else build_model(model, tok.vocab_size)
    task = task if task is not None else TinyTask(tok, settings.clients)
    return inproc.run_in_threads(settings, model, run_dir, task, base, dead)
