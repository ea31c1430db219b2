"""LoRA gradient streams of a real chat model (harness.commands.compress_bench ``--model smollm2|hf:PATH``).

Real models (``--model smollm2``, the model preset's packaged GGUF, or ``--model hf:PATH``, a
local HF chat-model folder or a GGUF file; GGUFs are materialised once into the cache, fp32):
peft LoRA at each ``--rank`` (scale 1, every linear layer but the output: 210 adapted layers, 420
matrices for SmolLM2) trained by SFT on the chat task's training split (conf/task/chat_sft.yaml:
"17 + 5 = 22" and eos after the chat prompt, batches of ``task.batch_size`` = 8, one client
holding the task's 512 training examples); AdamW (lr ``--lr``, 3e-4, no weight decay, gradient
norm clipped at 1: the recipe of harness.commands.chat_headroom) applies every step, ``--warmup``
steps first, then ``steps`` consecutive gradients are recorded before clipping (what hilo's
learner hands its compressor).
"""
from __future__ import annotations

import torch

from harness.compress import CompressorError
from harness.progress import frames

SMOLLM2_PRESET = "smollm2"        # conf/model/smollm2.yaml: the packaged GGUF of SmolLM2-135M-Instruct


def real_source(model: str) -> str | None:
    """The model path of a real ``--model`` (``smollm2``: its preset's ``path``; ``hf:PATH``: PATH),
    None for the bench's own model and the synthetic presets."""
    if model.startswith("hf:"):
        if not model[3:]:
            raise CompressorError("--model: 'hf:' needs a path (hf:DIR, a local HF folder, or hf:FILE.gguf)")
        return model[3:]
    if model == SMOLLM2_PRESET:
        from pathlib import Path

        import yaml

        path = Path(__file__).resolve().parents[2] / "conf" / "model" / f"{model}.yaml"
        return str(yaml.safe_load(path.read_text())["path"])
    return None


def check_real(model: str) -> None:
    """Fail before any work when a real ``--model``'s file or folder is missing (CompressorError:
    one line naming the fix). GGUFs are resolved here, not materialised."""
    from pathlib import Path

    from harness.errors import ConfigError
    from harness.tasks.gguf_cache import is_gguf, resolve_file

    source = real_source(model)
    try:
        if is_gguf(source):
            resolve_file(source, "--model")
        elif not (Path(source) / "config.json").is_file():
            raise CompressorError(f"--model: {model!r} is not allowed; hf:PATH needs a local HF model folder "
                                  f"(with config.json) or a .gguf file")
    except ConfigError as err:
        raise CompressorError(str(err)) from None


def chat_gradients(source: str, steps: int = 10, warmup: int = 3, seed: int = 0, rank: int = 16, lr: float = 3e-4,
                   overrides: tuple[str, ...] = (), progress: bool = False) -> list[dict[str, torch.Tensor]]:
    """``steps`` consecutive LoRA gradients (name -> fp32 tensor, before clipping) of the chat
    model at ``source`` (a local HF folder or a GGUF file), SFT on the chat task's training
    split with AdamW applying each step (module doc, "Real models"); ``overrides``: task.KEY=VALUE."""
    from tqdm import tqdm

    from harness.tasks.chat import ChatSFTTask
    from harness.commands.chat_headroom import fresh, model_folder, task_cfg
    from harness.tasks.tokenizer import Tokenizer

    folder = model_folder(source)
    task = ChatSFTTask(task_cfg("sft", list(overrides)), Tokenizer.from_pretrained(folder), n_clients=1, seed=seed)
    policy = fresh(folder, rank, seed).train()
    params = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=0.0)
    batches = task.batches(0)
    out = []
    for step in tqdm(range(warmup + steps), desc=f"LoRA gradients (r={rank})", disable=not frames(progress),
                     leave=False):
        opt.zero_grad(set_to_none=True)
        task.loss(policy, next(batches)).backward()
        if step >= warmup:
            out.append({n: p.grad.detach().clone() for n, p in params.items()})
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
    return out
