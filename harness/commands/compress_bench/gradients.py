"""The bench's own LoRA gradient streams: a small Llama or a model preset's sizes (harness.commands.compress_bench).

Gradients (``--model bench``, the default): a LlamaForCausalLM built from a LlamaConfig (hidden
256, 4 layers, 4 heads, MLP 512, vocab 64; random init, seed 0) with peft LoRA r=64 (alpha 64) on
q,k,v,o,gate,up,down (56 adapter matrices, 1.11 M parameters, 2.23 MB in bf16), next-token loss
on batches of 8 x 32 tokens from a seeded random bigram chain. AdamW (lr 2e-3) takes `warmup`
steps first so that B != 0 and both A- and B-gradients are non-trivial; then `steps`
consecutive gradients are recorded (the optimizer keeps stepping on the true gradient).
``--model tiny|small|wide`` uses the sizes of that model preset (conf/model/*.yaml: hidden,
MLP, layers, heads, kv heads, rank) with the same vocabulary (64), data and procedure; ``wide``
(hidden 1024, GQA 16/4, MLP 2816, r=64) has LLM proportions, where PowerSGD rank 1 fits the
1.6% budget.
"""
from __future__ import annotations

import torch

from harness.compress import CompressorError
from harness.progress import frames

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def model_config(model: str = "bench", vocab: int = 64, seq: int = 32, hidden: int = 256, layers: int = 4):
    """(LlamaConfig, LoRA rank) of ``--model``: the bench's own model, or a model preset's sizes."""
    from transformers import LlamaConfig

    if model == "bench":
        return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                           max_position_embeddings=seq), None
    from pathlib import Path

    import yaml

    from harness.tasks.models import llama_config

    path = Path(__file__).resolve().parents[2] / "conf" / "model" / f"{model}.yaml"
    if not path.is_file() or model == "hf":
        raise CompressorError(f"--model: {model!r} is not allowed; choose bench or a model preset "
                              f"({', '.join(p.stem for p in sorted(path.parent.glob('*.yaml')) if p.stem != 'hf')})")
    cfg = yaml.safe_load(path.read_text())
    return llama_config({**cfg, "max_positions": seq, "vocab_size": vocab}, vocab), int(cfg["rank"])


def lora_gradients(steps: int = 50, warmup: int = 5, seed: int = 0, rank: int = 64, hidden: int = 256,
                   layers: int = 4, vocab: int = 64, batch: int = 8, seq: int = 32,
                   progress: bool = False, model: str = "bench") -> list[dict[str, torch.Tensor]]:
    """`steps` consecutive LoRA gradients (name -> fp32 tensor) of a small Llama (or of the
    ``model`` preset's sizes, at its rank); see module doc."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    from tqdm import tqdm

    torch.manual_seed(seed)
    config, preset_rank = model_config(model, vocab, seq, hidden, layers)
    rank = preset_rank or rank
    net = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0,
                                                              target_modules=TARGETS))
    params = {n: p for n, p in net.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=2e-3)
    g = torch.Generator().manual_seed(seed)
    chain = torch.distributions.Dirichlet(torch.full((vocab,), 0.1)).sample((vocab,))  # bigram rows
    out = []
    for step in tqdm(range(warmup + steps), desc="LoRA gradients", disable=not frames(progress), leave=False):
        tokens = [torch.randint(0, vocab, (batch,), generator=g)]
        for _ in range(seq - 1):
            tokens.append(torch.multinomial(chain[tokens[-1]], 1, generator=g).squeeze(1))
        ids = torch.stack(tokens, dim=1)
        opt.zero_grad()
        net(input_ids=ids, labels=ids).loss.backward()
        if step >= warmup:
            out.append({n: p.grad.detach().clone() for n, p in params.items()})
        opt.step()
    return out
