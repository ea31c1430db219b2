"""The recipe of a pretrained base and the name of its cache entry (the hash of the recipe).

Split from harness.tasks.cache (which re-exports every name) so that harness.tasks.source can
name an entry without importing the cache that builds it. See harness/tasks/cache.py for what
a recipe holds and how entries are built, locked and shipped.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping

from harness.errors import ConfigError
from harness.paths import cache_root
from harness.tasks.grow import shape_problem
from harness.tasks.models import plain

RECIPE_VERSION = 1
KINDS = ("teacher", "student")
STUDENT_INITS = ("teacher", "scratch")
TEACHER_INITS = ("scratch", "grow")
_ARCH = ("name", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
         "max_positions", "vocab_size", "init_seed")


def recipe(kind: str, model_cfg: Mapping, task_cfg: Mapping) -> dict:
    """Everything that determines a cache entry (its hash is the entry's name)."""
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not allowed; choose teacher or student")
    m, t = plain(model_cfg), plain(task_cfg)
    out = {
        "version": RECIPE_VERSION, "kind": kind,
        "model": {k: m.get(k) for k in _ARCH},
        "digits": t["digits"], "ops": list(t["ops"]), "reverse": bool(t.get("reverse", False)),
        "steps": int(t["teacher_steps" if kind == "teacher" else "student_steps"]),
        "naive_frac": 0.0 if kind == "teacher" else float(t.get("student_naive_frac", 0.0)),
        "batch": int(t.get("pretrain_batch", 64)),
        "lr": float(t.get("pretrain_lr", 3e-3) if kind == "teacher" else t.get("student_lr", 1e-3)),
        "seed": int(t.get("pretrain_seed", 0)) + (0 if kind == "teacher" else 1),
        "init": str(t.get("teacher_init", "scratch")) if kind == "teacher" else str(t.get("student_init", "teacher")),
    }
    allowed = TEACHER_INITS if kind == "teacher" else STUDENT_INITS
    if out["init"] not in allowed:
        raise ConfigError(f"task.{kind}_init: {out['init']!r} is not allowed; choose one of {', '.join(allowed)}")
    if out["init"] == "grow":                          # a teacher widened from a narrow one
        out["grow"] = {"noise": float(t["grow"]["noise"]), "source": recipe("teacher", *grow_source(m, t))}
    elif kind == "student" and out["init"] == "teacher":
        out["teacher"] = recipe("teacher", model_cfg, task_cfg)
    return out


def grow_source(model_cfg: Mapping, task_cfg: Mapping) -> tuple[dict, dict]:
    """(model_cfg, task_cfg) of the narrow teacher a ``teacher_init=grow`` teacher is widened from:
    ``task.grow``'s sizes at the target's depth, trained from scratch with ``task.grow``'s steps."""
    m, t = plain(model_cfg), plain(task_cfg)
    g = t.get("grow") or {}
    dims = ("hidden_size", "intermediate_size", "num_heads", "num_kv_heads")
    for k in dims + ("steps", "batch"):
        if not isinstance(g.get(k), int) or g[k] < 1:
            raise ConfigError(f"task.grow.{k}: {g.get(k)!r} must be a positive integer")
    if not (isinstance(g.get("noise"), (int, float)) and g["noise"] >= 0):
        raise ConfigError(f"task.grow.noise: {g.get('noise')!r} must be a number >= 0")
    problem = shape_problem(tuple(g[k] for k in dims), tuple(m[k] for k in dims))
    if problem:
        raise ConfigError(f"task.grow: {'/'.join(str(g[k]) for k in dims)} (hidden/MLP/heads/kv heads) cannot be "
                          f"widened into model {'/'.join(str(m[k]) for k in dims)}: {problem}")
    src = {**m, "name": str(g.get("name") or "tiny"), **{k: g[k] for k in dims}}
    task = {**t, "teacher_init": "scratch", "teacher_steps": g["steps"], "pretrain_batch": g["batch"],
            "pretrain_lr": float(g["lr"])}
    return src, task


def entry_name(kind: str, model_cfg: Mapping, task_cfg: Mapping) -> str:
    """``<kind>-<first 16 hex of the recipe's SHA-256>``: the name in the cache and in harness/bases."""
    blob = json.dumps(recipe(kind, model_cfg, task_cfg), sort_keys=True).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:16]}"


def entry_path(kind: str, model_cfg: Mapping, task_cfg: Mapping) -> Path:
    """Where the recipe's entry lives (or would be built) in the cache."""
    return cache_root() / entry_name(kind, model_cfg, task_cfg)
