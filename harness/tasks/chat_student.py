"""The distillation pair of the chat task: an fp32 teacher and a re-quantized, weaker student.

The teacher is the pretrained model as loaded (SmolLM2-135M-Instruct dequantized to fp32).
The student is the same model with every linear weight of its decoder layers (q/k/v/o and
gate/up/down: the matrices LoRA adapts) rounded to ``bits`` bits per weight, per group of
``group`` consecutive weights along the input dimension: asymmetric min-max round-to-nearest,

    scale = (max - min) / (2**bits - 1),  w' = min + round((w - min) / scale) * scale

(a group whose weights are all equal is kept). Embeddings (tied to the output), norms and
biases stay fp32. It is deterministic (no randomness, elementwise on the CPU), so the same
teacher gives the same student bits on every machine. This is QLoRA's situation made
harsher: LoRA on a low-bit base has something to recover, and the fp32 model says what.

    python -m harness.tasks.chat_student TEACHER_DIR [--bits 3] [--group 32]

writes (once) ``<cache>/chat-student-<hash>/`` (save_pretrained + tokenizer + meta.json),
keyed by the teacher's weights SHA-256, bits and group; it prints the folder, which
``model.path`` can name (``model.teacher_path`` = the teacher) for ``task=chat_distill``.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from torch import nn

VERSION = 1
DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_rtn(w: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """``w`` [out, in] rounded to ``bits`` bits per group of ``group`` input weights (module doc)."""
    if not 1 <= bits <= 8:
        raise ValueError(f"task.chat.student_bits: {bits} is not allowed; choose 1..8")
    out_f, in_f = w.shape
    if group < 2 or in_f % group:
        raise ValueError(f"task.chat.student_group: {group} must be >= 2 and divide the input width {in_f}")
    g = w.detach().float().reshape(out_f, in_f // group, group)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = (hi - lo) / (2 ** bits - 1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((g - lo) / safe).clamp(0, 2 ** bits - 1)
    return torch.where(scale > 0, lo + q * scale, g).reshape(out_f, in_f).to(w.dtype)


@torch.no_grad()
def degrade(model: nn.Module, bits: int, group: int) -> int:
    """Round every decoder linear weight of ``model`` in place; returns how many matrices."""
    count = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name.split(".")[-1] in DECODER_LINEARS:
            module.weight.copy_(quantize_rtn(module.weight, bits, group))
            count += 1
    if count == 0:
        raise ValueError(f"chat_student: no decoder linear layer ({', '.join(DECODER_LINEARS)}) to quantize")
    return count


def student_path(identity: str, bits: int, group: int, root: Path | None = None) -> Path:
    """Where the student of the teacher ``identity`` (the SHA-256 of its weights, or of the GGUF file it
    is dequantized from) at ``bits`` / ``group`` lives in the cache: a pure function, nothing is built."""
    from harness.paths import cache_root

    key = hashlib.sha256(json.dumps({"teacher": identity, "bits": bits, "group": group, "v": VERSION}).encode()).hexdigest()
    return (root or cache_root()) / f"chat-student-{key[:16]}"


def student_dir(teacher: str | Path, bits: int, group: int, root: Path | None = None) -> Path:
    """The cached student folder of ``teacher`` (a local HF folder), built once (file lock +
    atomic rename, as the pretraining cache)."""
    from harness.tasks.bases import dir_weights_sha256

    teacher = Path(teacher)
    return build_student(teacher, student_path(dir_weights_sha256(teacher), bits, group, root), bits, group)


def build_student(teacher: Path, entry: Path, bits: int, group: int) -> Path:
    """Build the student of the ``teacher`` folder into ``entry`` unless it is there (module doc)."""
    from harness.tasks.bases import dir_weights_sha256
    from harness.tasks.models import load_dir

    teacher, entry = Path(teacher), Path(entry)
    if (entry / "meta.json").is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_name(entry.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (entry / "meta.json").is_file():
            return entry
        tmp = entry.with_name(f".tmp-{entry.name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            from transformers import AutoTokenizer

            model = load_dir(teacher, torch.float32)
            n = degrade(model, bits, group)
            model.save_pretrained(str(tmp))
            AutoTokenizer.from_pretrained(str(teacher), local_files_only=True).save_pretrained(str(tmp))
            meta = {"recipe": {"kind": "chat-student", "teacher_sha256": dir_weights_sha256(teacher), "bits": bits,
                               "group": group, "version": VERSION}, "matrices": n, "teacher": str(teacher),
                    "weights_sha256": dir_weights_sha256(tmp)}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
            shutil.rmtree(entry, ignore_errors=True)
            os.rename(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("teacher", help="local Hugging Face folder of the fp32 teacher")
    parser.add_argument("--bits", type=int, default=3)
    parser.add_argument("--group", type=int, default=32)
    args = parser.parse_args(argv)
    path = student_dir(args.teacher, args.bits, args.group)
    print(path)
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
