"""Which layers of a model LoRA can adapt, and which ones ``model.targets`` selects.

Pure functions over an ``nn.Module`` (a real model or its meta-device skeleton): a layer is
adaptable when it is an ``nn.Linear`` or a transformers ``Conv1D``; ``resolve_targets`` turns
``model.targets`` (suffixes, ``[all-linear]`` or ``[auto]``; harness.tasks.targets documents
them) into the suffixes to adapt, or raises one ConfigError line listing the model's modules.
Kept below harness.tasks.models and harness.tasks.targets, which both use it.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from harness.errors import ConfigError

KEYWORDS = ("all-linear", "auto")


def is_adaptable(module: nn.Module) -> bool:
    """An ``nn.Linear`` or a transformers ``Conv1D`` (peft LoRA supports both)."""
    if isinstance(module, nn.Linear):
        return True
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")


def layer_shape(module: nn.Module) -> tuple[int, int]:
    """(in_features, out_features) of an adaptable layer; Conv1D stores its weight as in x out."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    return int(module.weight.shape[0]), int(module.nf)


def adaptable_layers(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Every adaptable layer's full name -> (in_features, out_features)."""
    return {name: layer_shape(m) for name, m in model.named_modules() if name and is_adaptable(m)}


def _output_names(model: nn.Module) -> set[str]:
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name.split(".")[-1] for name, m in model.named_modules() if out is not None and m is out}


def _model_type(model: nn.Module) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", "?"))


def resolve_targets(model: nn.Module, targets: Any) -> list[str]:
    """``model.targets`` (list of suffixes or ``[all-linear]`` / ``[auto]``) -> the sorted module-name
    suffixes to adapt. Raises ConfigError (one line, listing the model's adaptable modules) when a
    name matches no adaptable layer, or the model type has no peft default for ``auto``."""
    if isinstance(targets, str):
        targets = [targets]
    targets = [str(t) for t in (targets or [])]
    layers = adaptable_layers(model)
    suffixes = sorted({n.split(".")[-1] for n in layers})
    kind = _model_type(model)
    available = f"the {kind} model has: {', '.join(suffixes)} (or use [all-linear] / [auto])"
    if not targets:
        raise ConfigError(f"model.targets: [] names no module; {available}")
    if len(targets) == 1 and targets[0] == "all-linear":
        chosen = sorted(set(suffixes) - _output_names(model))
        if not chosen:
            raise ConfigError(f"model.targets: [all-linear] finds no linear layer besides the output; {available}")
        return chosen
    if len(targets) == 1 and targets[0] == "auto":
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

        if kind not in DEFAULTS:
            raise ConfigError(f"model.targets: [auto] has no peft default for model_type {kind!r}; {available}")
        targets = list(DEFAULTS[kind])
    bad = [t for t in targets if t in KEYWORDS]
    if bad:
        raise ConfigError(f"model.targets: {bad[0]!r} must be the only entry (model.targets=[{bad[0]}]); {available}")
    missing = [t for t in targets if t not in suffixes]
    if missing:
        which = "" if len(missing) == len(targets) else f" ({', '.join(missing)})"
        raise ConfigError(f"model.targets: {targets!r}{which} match no linear or Conv1D layer; {available}")
    return sorted(set(targets))
