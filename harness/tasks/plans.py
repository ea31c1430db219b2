"""The typed model and task parts of a run's plan: the schema's own dataclasses (harness/conf/schema.py).

    model = model_plan(cfg["model"])      # ModelConfig: every field set; a missing one is the schema's default
    task = task_plan(cfg["task"])         # TaskConfig (with its ChatConfig and GrowConfig)

The schema is the one place a default lives: the tasks and models read attributes of these objects
(``task.max_new_tokens``), never ``.get(key, default)`` of a mapping, so a caller that hands over a
dict without a key gets what a composed config would hold, not another default restated in code.
An unknown key is a ConfigError naming it (the schema is closed, as when Hydra composes); a group
file's Hydra ``defaults`` list, as read from disk, is not a field and is left out.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, is_dataclass
from typing import Any, TypeVar

from harness.conf.schema import ModelConfig, TaskConfig
from harness.errors import ConfigError

T = TypeVar("T")


_SEEN: dict[tuple[str, str], Any] = {}   # (schema, the data as JSON) -> its typed object; a plan's parts are read ~24 times


def _typed(schema: type[T], cfg: Any, key: str) -> T:
    if isinstance(cfg, schema):
        return cfg
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    data = asdict(cfg) if is_dataclass(cfg) else cfg
    if data is not None and "defaults" in data:      # a config group's YAML as read from disk: Hydra's list, no field
        data = {k: v for k, v in dict(data).items() if k != "defaults"}
    seen = _key(schema, data)
    if seen in _SEEN:
        return copy.deepcopy(_SEEN[seen])            # a copy: a caller may set a field on its own
    try:
        typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), data or {}))
    except OmegaConfBaseException as err:
        where = getattr(err, "full_key", "") or ""
        raise ConfigError(f"{key}.{where}: {str(err).splitlines()[0]}" if where else f"{key}: {err}") from None
    if seen is not None:
        _SEEN[seen] = copy.deepcopy(typed)
    return typed  # type: ignore[return-value]


def _key(schema: type, data: Any) -> tuple[str, str] | None:
    """The memo key of ``data``: its plain content as sorted JSON; None (no memo) for what has no such form
    (an interpolation that does not resolve on its own, a value JSON cannot hold exactly)."""
    from omegaconf import DictConfig, OmegaConf

    try:
        plain = OmegaConf.to_container(data, resolve=True) if isinstance(data, DictConfig) else data
        return schema.__qualname__, json.dumps(plain or {}, sort_keys=True, allow_nan=True)
    except Exception:  # noqa: BLE001 - any value without a plain JSON form is simply not memoized
        return None


def model_plan(cfg: Any) -> ModelConfig:
    """``cfg`` (a ModelConfig, DictConfig or mapping) as a ModelConfig; the schema fills what it lacks."""
    return _typed(ModelConfig, cfg, "model")


def task_plan(cfg: Any) -> TaskConfig:
    """``cfg`` (a TaskConfig, DictConfig or mapping) as a TaskConfig; the schema fills what it lacks."""
    return _typed(TaskConfig, cfg, "task")


def as_dict(part: Any) -> dict:
    """A plan part as a plain, JSON-able dict (what crosses into a role inside the RunPlan)."""
    return asdict(part)
