"""Helpers of the on-policy tests: a very small Llama + LoRA built the same way twice
(learner and worker replicas), and a deterministic LM loss to make real gradients."""
from __future__ import annotations

import torch

TINY = dict(name="tiny", hidden_size=64, intermediate_size=128, num_layers=1, num_heads=4,
            num_kv_heads=4, max_positions=32, dtype="float32", init_seed=0)
VOCAB = 24


def make_peft(rank: int = 8, seed: int = 0):
    from harness.tasks import build_model, make_lora

    model = build_model(TINY, VOCAB)
    return make_lora(model, rank=rank, alpha=None, targets=["q_proj", "v_proj", "up_proj", "down_proj"],
                     init="default", seed=seed)


def lm_backward(model, step: int) -> float:
    """Next-token cross-entropy on a batch drawn from ``step`` (same batch on every call)."""
    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(0, VOCAB, (4, 12), generator=g)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return float(out.loss.detach())


class FakeRollouts:
    """The two things policy_kl reads from rollouts (via the task)."""
    def __init__(self, n=3, t=5):
        g = torch.Generator().manual_seed(0)
        self.sequences = torch.randint(0, VOCAB, (n, 4 + t), generator=g)
        self.completion_mask = torch.ones(n, t, dtype=torch.bool)
        self.completion_mask[0, 3:] = False


class FakeTask:
    def completion_logits(self, model, r):
        return model(input_ids=r.sequences).logits[:, 3:-1].float()


def compressor(name: str, **options):
    """A compressor from harness.compress, built by name."""
    from harness.compress import build

    return build(name, **options)
