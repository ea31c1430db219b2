"""Pretrained teachers and student bases, built on first use and cached by content.

An entry is a local Hugging Face model directory (``save_pretrained`` of the model and the
tokenizer, plus ``meta.json`` with the recipe, the held-out accuracy and the build time), so
loading it is the same code as ``model=hf``. Its name is ``<kind>-<hash>``, the hash of the
recipe: the architecture, the language (digits, ops, reverse), the pretraining steps, batch,
learning rate, the student's easy fraction, the seed and ``RECIPE_VERSION``. Change any of
them and a new entry is built; the old one stays.

Shipped first: the entries the reference scenarios use are shipped with the project under
``harness/bases/<kind>-<hash>/`` (``harness.tasks.bases``: SHA-256 manifest, rebuild command),
so every machine starts from the same bits; ``pretrained`` returns the shipped folder whenever
the recipe's entry name is one of them and builds into the cache only for other recipes.

GGUF files (``model=hf model.path=FILE.gguf``, the ``model=smollm2`` preset) are materialised
into the same cache as ``gguf-<file hash>`` folders (harness.tasks.gguf_cache); where a run's
bases come from is decided once by the plan (harness.tasks.source, ``RunPlan.model_source``).

Where: $NARROWBAND_CACHE, else <project root>/.cache/narrowband/. Two processes asking for
the same entry build it once: an exclusive ``fcntl`` lock on ``<entry>.lock`` is held while
building into a temporary folder that is renamed into place (atomic on one file system);
whoever waited finds the finished entry.

Pretraining is full-parameter next-token training on the answer tokens of fresh training
problems each step (AdamW, linear warm-up then cosine decay to 10%).
- teacher: from scratch, ``task.teacher_steps`` steps at ``task.pretrain_lr`` on the task's
  distribution (about 98% held-out accuracy with the defaults).
- student base: starts from the teacher's weights (``task.student_init=teacher``; ``scratch``
  starts fresh) and trains ``task.student_steps`` more steps at ``task.student_lr`` on the same
  problems, except that a share ``task.student_naive_frac`` of the hard ones (with a carry
  or borrow) are labelled with the column-by-column answer (07+58 -> 55). It keeps the true
  answer as a minority mode and adopts a systematic misconception as the majority: greedy
  decoding fails on hard problems while sampling still finds the right answer at times. That
  is headroom a hundred post-training updates can recover, from a reward or a teacher. A
  student that is merely trained less lacks the skill itself, which a hundred LoRA updates
  of on-policy data cannot teach (measured: +10 points at best; docs/tasks.md).
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import time
from pathlib import Path
from dataclasses import replace
from typing import Any, Callable

import torch

from harness.tasks.arith import Arithmetic
from harness.tasks.bases import shipped
from harness.tasks.data import encode_prompts, prompt_attention, sft_batch, sft_loss, correct
from harness.tasks.grow import widen
from harness.conf.schema import ModelConfig, TaskConfig
from harness.tasks.models import build_model, hf_dir, hf_key, load_dir, model_dtype
from harness.tasks.plans import model_plan, task_plan
from harness.tasks.rollouts import generate
from harness.tasks.tokenizer import Tokenizer
from harness.errors import ConfigError
from harness.paths import cache_root  # noqa: F401 - re-exported: harness.tasks.cache.cache_root
from harness.tasks.recipes import (KINDS, RECIPE_VERSION, STUDENT_INITS, TEACHER_INITS,  # noqa: F401 - re-exported
                                   entry_name, entry_path, grow_source, recipe)

def locate(kind: str, model_cfg: Any, task_cfg: Any) -> Path:
    """The folder ``pretrained`` returns, without building anything: the shipped reference base
    when the recipe has one (harness.tasks.bases), else the cache entry (which may not exist yet);
    for ``model=hf`` the folder (a GGUF file: the entry it is materialised into)."""
    from harness.tasks.source import base_source

    return Path(base_source(kind, model_cfg, task_cfg).path)


def describe_bases(model_cfg: Any, task_cfg: Any) -> dict:
    """run.json's ``bases`` of a model and task (harness.tasks.source.ModelSource.describe; a run
    records its plan's ``model_source`` instead of resolving the config again)."""
    from harness.tasks.source import resolve

    return resolve(model_cfg, task_cfg).describe()


def pretrained(kind: str, model_cfg: Any, task_cfg: Any, progress: bool = True) -> Path:
    """The directory of the ``kind`` model ("teacher" | "student"), built once and cached.

    For ``model.name == "hf"`` nothing is built: the student is ``model.path`` and the
    teacher ``model.teacher_path`` (default ``model.path``); a GGUF file there is materialised
    into the cache once (harness.tasks.gguf_cache).
    """
    m = model_plan(model_cfg)
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not allowed; choose teacher or student")
    if m.name == "hf":
        return hf_dir(m, hf_key(m, kind), progress=progress)
    ref = shipped(entry_name(kind, m, task_cfg))
    if ref is not None:
        return ref
    entry = entry_path(kind, m, task_cfg)
    if (entry / "meta.json").is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_name(entry.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (entry / "meta.json").is_file():      # built by someone else while we waited
            return entry
        tmp = entry.with_name(f".tmp-{entry.name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build(kind, m, task_plan(task_cfg), tmp, progress)
            shutil.rmtree(entry, ignore_errors=True)   # a partial entry without meta.json
            os.rename(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry


def load_base(kind: str, model_cfg: Any, task_cfg: Any, progress: bool = True, source=None):
    """The pretrained ``kind`` model in ``model.dtype``, eval mode, every parameter frozen.

    ``source``: the plan's ``model_source`` (harness.tasks.source.ModelSource, e.g.
    ``ModelSource.from_dict(payload["plan"]["model_source"])`` in a role): the folder it names is
    loaded as it is, without resolving the config again (no GGUF is hashed); only a cache entry
    not built yet is built from the config."""
    path = Path(source.of(kind).path) if source is not None else None
    if path is None or not (path / "config.json").is_file():
        path = pretrained(kind, model_cfg, task_cfg, progress)
    model = load_dir(path, model_dtype(model_cfg))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def meta(kind: str, model_cfg: Any, task_cfg: Any) -> dict:
    """meta.json of a built entry (recipe, accuracy, seconds)."""
    return json.loads((pretrained(kind, model_cfg, task_cfg) / "meta.json").read_text())


def _build(kind: str, model_cfg: ModelConfig, task_cfg: TaskConfig, out: Path, progress: bool) -> None:
    r = recipe(kind, model_cfg, task_cfg)
    if r["steps"] < 0:
        raise ConfigError(f"task.{kind}_steps: {r['steps']} must be >= 0")
    tok = Tokenizer.synthetic()
    lang = Arithmetic(r["digits"], r["ops"], reverse=r["reverse"])
    grown = {}
    if r["init"] == "teacher":
        model = load_dir(pretrained("teacher", model_cfg, task_cfg, progress), torch.float32)
        for p in model.parameters():
            p.requires_grad_(True)
    elif r["init"] == "grow":
        narrow = load_dir(pretrained("teacher", *grow_source(model_cfg, task_cfg), progress), torch.float32)
        model = widen(narrow, build_model(replace(model_cfg, dtype="float32"), tok.vocab_size),
                      noise=r["grow"]["noise"], seed=r["seed"])
        grown = {"grown_accuracy": accuracy(model, tok, lang, n=512)}   # before any wide step
    else:
        model = build_model(replace(model_cfg, dtype="float32"), tok.vocab_size)
    start = time.perf_counter()
    pretrain(model, tok, lang, steps=r["steps"], batch=r["batch"], lr=r["lr"], naive_frac=r["naive_frac"],
             seed=r["seed"], desc=f"pretrain {kind}", progress=progress)
    seconds = time.perf_counter() - start
    acc = accuracy(model, tok, lang, n=512)
    model.save_pretrained(str(out))
    if not (out / "config.json").is_file():
        # transformers writes nothing on a non-zero torch.distributed rank: never mark such an
        # entry complete (meta.json), or every later run would load an empty directory.
        raise RuntimeError(f"pretrained {kind}: save_pretrained wrote no config.json to {out} (a non-zero "
                           "torch.distributed rank?); build the cache on rank 0: harness.tasks.cache.ensure_pretrained")
    tok.save_pretrained(out)
    info = {"recipe": r, "accuracy": acc, "seconds": round(seconds, 2), "eval_prompts": 512, **grown}
    (out / "meta.json").write_text(json.dumps(info, indent=2) + "\n")


def pretrain(model, tok: Tokenizer, lang: Arithmetic, *, steps: int, batch: int, lr: float,
             naive_frac: float = 0.0, seed: int = 0, desc: str = "pretrain", progress: bool = True) -> float:
    """Full-parameter SFT on fresh training problems; returns the last loss (nats/token).

    ``naive_frac``: the share of hard problems labelled with the column-by-column answer
    (``Arithmetic.naive_answers``) instead of the true one.
    """
    from tqdm import tqdm
    from harness.progress import frames

    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, min(100, steps // 10))

    def schedule(i: int) -> float:
        if i < warm:
            return (i + 1) / warm
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (i - warm) / max(1, steps - warm)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    loss_value = float("nan")
    bar = tqdm(range(steps), desc=desc, disable=not frames(progress), leave=False, mininterval=0.5)
    for i in bar:
        problems = lang.sample("train", batch, gen)
        values = lang.answers(problems)
        if naive_frac > 0:
            wrong = lang.hard(problems) & (torch.rand(batch, generator=gen) < naive_frac)
            values = torch.where(wrong, lang.naive_answers(problems), values)
        batch_ = sft_batch(tok, lang, problems, values)
        loss = sft_loss(model, batch_)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        loss_value = float(loss.detach())
        if i % 20 == 0:
            bar.set_postfix(loss=f"{loss_value:.3f}")
    model.eval()
    return loss_value


@torch.no_grad()
def accuracy(model, tok: Tokenizer, lang: Arithmetic, n: int = 512, seed: int = 1234,
             max_new_tokens: int | None = None, chunk: int = 256) -> float:
    """Greedy exact-match accuracy on ``n`` held-out problems (fixed ``seed``)."""
    problems = lang.sample("eval", n, torch.Generator().manual_seed(seed))
    prompts = encode_prompts(tok, lang, problems)
    steps = max_new_tokens or lang.max_answer_len + 1
    hits = 0
    for i in range(0, n, chunk):
        p = prompts[i:i + chunk]
        comp, mask, _ = generate(model, p, prompt_attention(tok, p), steps, eos_id=tok.eos_id, pad_id=tok.pad_id)
        hits += int(correct(tok, lang, p, comp, mask).sum())
    return hits / n


def ensure_pretrained(model: ModelConfig, task: TaskConfig, source: Any, rank: int,
                      beat: Callable[[], None] = lambda: None, poll_s: float = 2.0) -> None:
    """Make sure the cached student (and teacher, for distill) exist before anyone loads them.

    Rank 0 builds what is missing (transformers' save_pretrained writes nothing on another
    torch.distributed rank); the others wait for the finished entries. Both call ``beat``
    while they wait, so a long first-time pretraining is not taken for a hang. The waiting
    assumes one file system (one machine): on several machines, pre-build the cache.

    ``model``, ``task``, ``source``: the RunPlan's typed parts and its ``model_source``
    (harness.tasks.source.ModelSource): the folders it names are the ones waited for, and nothing is
    resolved from a config again (no GGUF is hashed).
    """
    import threading

    kinds = source.kinds
    if all((Path(b.path) / "config.json").is_file() for b in source.bases):
        return                               # shipped, a built cache entry, a folder, a materialised GGUF
    hf = model.name == "hf"
    if rank == 0:
        errors: list[BaseException] = []

        def build() -> None:
            import torch

            # The other roles only wait meanwhile: pretrain on every core, not on this role's
            # share (OMP_NUM_THREADS = cores / roles). Set in this thread: OpenMP's thread
            # count is per thread, so the role's own threads keep their share.
            share = torch.get_num_threads()
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
            try:
                if hf:                                   # a GGUF of the plan not materialised yet (run_one does it first)
                    from harness.tasks.source import materialise

                    materialise(source, progress=False)
                for kind in (() if hf else kinds):
                    pretrained(kind, model, task, progress=False)
            except BaseException as err:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(err)
            finally:
                torch.set_num_threads(share)             # (MKL's count is process-wide)
        worker = threading.Thread(target=build, daemon=True, name="pretrain")
        worker.start()
        while worker.is_alive():
            beat()
            worker.join(poll_s)
        if errors:
            raise errors[0]
        return
    marker = "config.json" if hf else "meta.json"    # a GGUF entry appears whole (renamed into place)
    paths = [Path(source.of(kind).path) / marker for kind in kinds]
    while not all(p.is_file() for p in paths):
        beat()
        time.sleep(poll_s)
