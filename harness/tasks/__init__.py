"""Models and tasks: small LMs with peft LoRA, a cached pretraining, on-policy and federated tasks.

Everything a training loop needs to learn something measurable, on CPUs in minutes or on a
GPU with a real Hugging Face model, through one code path. Nothing is ever downloaded
(HF_HUB_OFFLINE=1 is set on import of the model code).

Public API (import from ``harness.tasks``; submodules load lazily, so importing this package
does not import torch):

Models (``harness.tasks.models``)
    build_model(model_cfg: dict, vocab_size: int) -> transformers.PreTrainedModel
        A fresh Llama-style causal LM from the sizes in ``model_cfg`` (conf/model/tiny.yaml,
        small.yaml), or, with ``name=hf`` and ``path=/local/dir``, that local model
        (``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)``).
    build_tokenizer(model_cfg: dict) -> Tokenizer
        The synthetic arithmetic vocabulary for tiny/small, the local directory's tokenizer
        for ``name=hf``.
    make_lora(model, rank: int | dict[str, int], alpha: float | None, targets: list[str],
              init: str = "default") -> peft.PeftModel
        LoRA on ``targets`` (module name suffixes, e.g. "q_proj"); ``rank`` may be a dict of
        per-module ranks (peft rank_pattern; key "default" sets the rest). alpha None: alpha =
        rank (scale 1). init: "default" (A kaiming-uniform, B = 0) | "gaussian" | "zeros"
        (A = B = 0, the caller sets A itself, e.g. SPRA's seeded projection).
        A rank < 1 or > the smallest adapted layer dimension raises ConfigError naming model.rank.

Tokenizer (``harness.tasks.tokenizer``)
    Tokenizer: vocab_size, pad_id, bos_id, eos_id, encode(text) -> list[int] (no specials),
        decode(ids) -> str (specials dropped), save_pretrained(dir), Tokenizer.synthetic(),
        Tokenizer.from_pretrained(dir). Wraps a transformers fast tokenizer, so a saved
        directory loads back with AutoTokenizer.

Pretraining cache (``harness.tasks.cache``)
    pretrained(kind: "teacher" | "student", model_cfg, task_cfg) -> Path
        A local HF model directory (save_pretrained: config, weights, tokenizer, meta.json),
        built on first use and cached under $NARROWBAND_CACHE or <repo>/.cache/narrowband/,
        keyed by a hash of everything that made it; a file lock + atomic rename make two
        processes asking at once build it once. The teacher is trained from scratch; the
        student base is the teacher after a short training with a systematic misconception
        (carries dropped on a share of hard problems), see ``harness.tasks.cache``. For
        ``name=hf`` it returns model.path (teacher: model.teacher_path, default model.path).
    load_base(kind, model_cfg, task_cfg) -> PreTrainedModel   (eval mode, frozen, model.dtype)

On-policy tasks (``harness.tasks.onpolicy``; rollouts in ``harness.tasks.rollouts``)
    build_task(task_cfg, tokenizer, teacher=None, sampler=False) -> OnPolicyTask    names: distill | reward
        (task.format=chat: the chat task, harness.tasks.chat; sampler=True: a worker's sampling-only task)
    OnPolicyTask.prompts(split, n, seed, step) -> LongTensor [n, P]   deterministic in (seed, step)
    OnPolicyTask.rollout(policy, prompts, samples, generator) -> Rollouts
        rows are grouped by prompt: prompt i's samples are rows i*samples .. (i+1)*samples-1.
    OnPolicyTask.loss(policy, rollouts) -> (scalar loss Tensor, metrics: dict[str, float])
    OnPolicyTask.evaluate(policy, n) -> dict: accuracy, and reverse_kl (distill) or reward (reward)
    Rollouts (CPU tensors): prompts [G, P], completions [N, T], completion_mask, logprobs,
        rewards | None, group; .sequences, .attention_mask, .prompt_len; to_bytes(logprob_dtype
        ="fp16")/from_bytes() (uint8 ids, each prompt once), nbytes, Rollouts.cat(list)
    Determinism: prompts are a function of (seed, step); sampling of the generator passed
    in (on the policy's device); no nondeterministic kernels on the CPU.

Federated task (``harness.tasks.federated``)
    build_federated(task_cfg, tokenizer, n_clients, seed) -> FederatedTask   (task.format=chat: ChatSFTTask)
    FederatedTask.client_data(k) -> ClientData; .batches(k, batch_size, generator) -> endless
        iterator of dict(input_ids, attention_mask, labels); .loss(model, batch) -> Tensor
        (next-token cross-entropy on answer tokens); .evaluate(model) -> dict(eval_loss, accuracy)

``python -m harness.commands.headroom [--json]`` shows teacher and student accuracy and what 100
LoRA updates of distill and reward add (docs/tasks.md).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_model": "models", "build_tokenizer": "models", "make_lora": "models",
    "lora_targets": "models", "model_dtype": "models",
    "Tokenizer": "tokenizer",
    "pretrained": "cache", "load_base": "cache", "cache_root": "cache", "meta": "cache",
    "Rollouts": "rollouts", "generate": "rollouts",
    "OnPolicyTask": "onpolicy", "DistillTask": "onpolicy", "RewardTask": "onpolicy",
    "build_task": "chat_formats", "EVAL_SEED": "onpolicy",
    "FederatedTask": "federated", "ClientData": "federated", "build_federated": "chat_formats",
    "ChatTask": "chat", "ChatSFTTask": "chat", "task_format": "chat_formats",
    "dirichlet_split": "federated",
    "Arithmetic": "arith",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness.tasks' has no attribute {name!r}")
    return getattr(importlib.import_module(f"harness.tasks.{module}"), name)


def __dir__() -> list[str]:
    return __all__
