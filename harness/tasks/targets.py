"""Launcher-side checks of the ``model`` section, before any process exists (STUB).

STUB written by branch ``plan`` so that the plan builder (harness/plan.py) has its one call
site for the model checks. Branch ``wide`` owns this module: its version also resolves
``model.targets`` against the architecture and raises ConfigError listing the available
module names; merge that version over this one (same signature).
"""
from __future__ import annotations

from typing import Any, Mapping

from harness.errors import ConfigError


def check_model(model_cfg: Mapping[str, Any]) -> None:
    """Raise ConfigError (one line: key, value, allowed) for a bad model.dtype, lora_init or
    targets list (model.name is checked by harness.validate)."""
    from harness.tasks.models import LORA_INITS, model_dtype, plain

    cfg = plain(model_cfg)
    model_dtype(cfg)                          # model.dtype: one of DTYPES
    init = cfg.get("lora_init", "default")
    if init not in LORA_INITS:
        raise ConfigError(f"model.lora_init: {init!r} is not allowed; choose one of {', '.join(LORA_INITS)}")
    targets = cfg.get("targets")
    if not targets or not all(isinstance(t, str) and t for t in targets):
        raise ConfigError(f"model.targets: {targets!r} must be a non-empty list of module names, e.g. [q_proj, v_proj]")
