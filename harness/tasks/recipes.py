"""The recipe of a pretrained base and the name of its cache entry (the hash of the recipe).

Split from harness.tasks.cache (which re-exports every name) so that harness.tasks.source can
name an entry without importing the cache that builds it. See harness/tasks/cache.py for what
a recipe holds and how entries are built, locked and shipped.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from dataclasses import replace
from typing import Any

from harness.conf.schema import ModelConfig, TaskConfig
from harness.errors import ConfigError
from harness.paths import cache_root
from harness.tasks.grow import shape_problem
from harness.tasks.plans import model_plan, task_plan

RECIPE_VERSION = 1
KINDS = ("teacher", "student")
STUDENT_INITS = ("teacher", "scratch")
TEACHER_INITS = ("scratch", "grow")
_ARCH = ("name", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
         "max_positions", "vocab_size", "init_seed")


def recipe(kind: str, model_cfg: Any, task_cfg: Any) -> dict:
    """Everything that determines a cache entry (its hash is the entry's name)."""
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not allowed; choose teacher or student")
    m, t = model_plan(model_cfg), task_plan(task_cfg)
    teacher = kind == "teacher"
    out = {
        "version": RECIPE_VERSION, "kind": kind,
        "model": {k: getattr(m, k) for k in _ARCH},
        "digits": t.digits, "ops": list(t.ops), "reverse": bool(t.reverse),
        "steps": int(t.teacher_steps if teacher else t.student_steps),
        "naive_frac": 0.0 if teacher else float(t.student_naive_frac),
        "batch": int(t.pretrain_batch),
        "lr": float(t.pretrain_lr if teacher else t.student_lr),
        "seed": int(t.pretrain_seed) + (0 if teacher else 1),
        "init": str(t.teacher_init if teacher else t.student_init),
    }
    allowed = TEACHER_INITS if kind == "teacher" else STUDENT_INITS
    if out["init"] not in allowed:
        raise ConfigError(f"task.{kind}_init: {out['init']!r} is not allowed; choose one of {', '.join(allowed)}")
    if out["init"] == "grow":                          # a teacher widened from a narrow one
        out["grow"] = {"noise": float(t.grow.noise), "source": recipe("teacher", *grow_source(m, t))}
    elif kind == "student" and out["init"] == "teacher":
        out["teacher"] = recipe("teacher", m, t)
    return out


def grow_source(model_cfg: Any, task_cfg: Any) -> tuple[ModelConfig, TaskConfig]:
    """(model, task) of the narrow teacher a ``teacher_init=grow`` teacher is widened from:
    ``task.grow``'s sizes at the target's depth, trained from scratch with ``task.grow``'s steps."""
    m, t = model_plan(model_cfg), task_plan(task_cfg)
    g = t.grow
    dims = ("hidden_size", "intermediate_size", "num_heads", "num_kv_heads")
    for k in dims + ("steps", "batch"):
        if not isinstance(getattr(g, k), int) or getattr(g, k) < 1:
            raise ConfigError(f"task.grow.{k}: {getattr(g, k)!r} must be a positive integer")
    if not (isinstance(g.noise, (int, float)) and g.noise >= 0):
        raise ConfigError(f"task.grow.noise: {g.noise!r} must be a number >= 0")
    problem = shape_problem(tuple(getattr(g, k) for k in dims), tuple(getattr(m, k) for k in dims))
    if problem:
        raise ConfigError(f"task.grow: {'/'.join(str(getattr(g, k)) for k in dims)} (hidden/MLP/heads/kv heads) "
                          f"cannot be widened into model {'/'.join(str(getattr(m, k)) for k in dims)}: {problem}")
    src = replace(m, name=str(g.name), **{k: getattr(g, k) for k in dims})
    task = replace(t, teacher_init="scratch", teacher_steps=g.steps, pretrain_batch=g.batch, pretrain_lr=float(g.lr))
    return src, task


def entry_name(kind: str, model_cfg: Any, task_cfg: Any) -> str:
    """``<kind>-<first 16 hex of the recipe's SHA-256>``: the name in the cache and in harness/bases."""
    blob = json.dumps(recipe(kind, model_cfg, task_cfg), sort_keys=True).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:16]}"


def entry_path(kind: str, model_cfg: Any, task_cfg: Any) -> Path:
    """Where the recipe's entry lives (or would be built) in the cache."""
    return cache_root() / entry_name(kind, model_cfg, task_cfg)
