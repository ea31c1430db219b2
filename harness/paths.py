"""Where things live: the project root, scenarios, results and the model cache (cache_root).

The project root is the folder with ``scenarios/``: $NARROWBAND_ROOT, else the current
directory if it has one, else the checkout this package was installed from (editable).
"""
from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def project_root() -> Path:
    env = os.environ.get("NARROWBAND_ROOT")
    if env:
        return Path(env).resolve()
    cwd = Path.cwd()
    if (cwd / "scenarios").is_dir():
        return cwd
    return _PACKAGE_ROOT


def cache_root() -> Path:
    """The content-addressed model cache: $NARROWBAND_CACHE, else <project root>/.cache/narrowband."""
    env = os.environ.get("NARROWBAND_CACHE")
    if env:
        return Path(env)
    return project_root() / ".cache" / "narrowband"


def scenarios_root() -> Path:
    return project_root() / "scenarios"


def results_root() -> Path:
    return project_root() / "results"


def scenario_names() -> list[str]:
    return sorted(p.stem for p in scenarios_root().glob("*.yaml"))
