"""Composing the app's config with Hydra's compose API, inside or outside the app.

Kept apart from harness.run (which imports the planner, and with it torch) so that the
command line's first check, whether the overrides compose at all, costs Hydra's import and
nothing more.
"""
from __future__ import annotations

from omegaconf import DictConfig


def compose_config(overrides: list[str]) -> DictConfig:
    """Compose the app's config with Hydra's compose API (inside or outside the app)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from harness.conf.schema import register
    from harness.validate import translate_argv

    register()
    overrides = translate_argv(list(overrides))
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="config", overrides=overrides)
    with initialize_config_module(config_module="harness.conf", version_base="1.3"):
        return compose(config_name="config", overrides=overrides)
