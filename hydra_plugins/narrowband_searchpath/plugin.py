"""Adds the project's ``scenarios/`` folder, and nothing else of the project, to Hydra's search path.

The folder ``scenarios/`` is shown to Hydra as the config group ``scenario``, placed at the
global package by config.yaml's defaults (``- scenario@_global_: null``), so that
``python -m harness scenario=NAME`` is a plain group override: a scenario file overrides the
whole config (``# @package _global_``), and Hydra's own lines (``#0 : scenario=grid_hilo
net.rate=5mbit ...``, ``hydra.runtime.choices``) say ``scenario``.

A group backed by ``scenarios/`` needs a search-path entry at the folder *above* it: the project
root, which also holds .venv, results/runs and the caches. A plain ``file://`` entry there
let Hydra's help (which lists every config group recursively) walk all of them: with
thousands of run folders ``--help`` never returned. The ``narrowband://`` source below is a
file source rooted at the project whose only visible entry is ``scenarios/``.

It also names each scenario in its own config: a scenario file that does not set ``scenario``
gets ``scenario: <its name>`` and ``hydra.job.name: <its name>``, so ``--cfg job``, the run's
run.json and Hydra's job (its sweep folder, outputs/multirun/<name>/...) all say which scenario
this is, not the schema's ``adhoc``.
"""
from __future__ import annotations

import os
from typing import List, Optional

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra._internal.core_plugins.file_config_source import FileConfigSource
from omegaconf import DictConfig, open_dict

GROUP = "scenario"        # the config group's name, as a user types it (scenario=NAME)
FOLDER = "scenarios"      # the folder that holds it, at the project root


def _inside(config_path: str) -> bool:
    """True for the scenario group itself and what lies under it."""
    path = config_path.strip("/")
    return path == GROUP or path.startswith(f"{GROUP}/")


def _folder(config_path: str) -> str:
    """The group path in the folder's name: ``scenario/grid_hilo`` -> ``scenarios/grid_hilo``."""
    path = config_path.strip("/")
    return FOLDER + path[len(GROUP):]


class ScenariosConfigSource(FileConfigSource):
    """A file config source that shows only the ``scenarios`` folder of its root."""

    @staticmethod
    def scheme() -> str:
        return "narrowband"

    def available(self) -> bool:
        return super().is_group(FOLDER)

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") == "" or (_inside(config_path) and super().is_group(_folder(config_path)))

    def is_config(self, config_path: str) -> bool:
        return _inside(config_path) and super().is_config(_folder(config_path))

    def load_config(self, config_path: str) -> ConfigResult:
        result = super().load_config(_folder(config_path))
        cfg = result.config
        if _inside(config_path) and isinstance(cfg, DictConfig):
            name = config_path.strip("/")[len(GROUP) + 1:].removesuffix(".yaml")
            with open_dict(cfg):
                if "scenario" not in cfg:
                    cfg.scenario = name
                if cfg.get("hydra", {}).get("job", {}).get("name") is None:
                    cfg.merge_with({"hydra": {"job": {"name": name}}})
        return result

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        if config_path.strip("/") == "":
            return [GROUP] if results_filter in (None, ObjectType.GROUP) and self.available() else []
        if not _inside(config_path):
            return []
        folder = os.path.join(self.path, _folder(config_path))
        found = set()
        for name in os.listdir(folder):
            full = os.path.join(folder, name)
            if os.path.isdir(full) and name != "__pycache__" and results_filter in (None, ObjectType.GROUP):
                found.add(name)
            if name.endswith(".yaml") and os.path.isfile(full) and results_filter in (None, ObjectType.CONFIG):
                found.add(name[: -len(".yaml")])
        return sorted(found)


class NarrowbandSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from harness.paths import scenarios_root

        search_path.append(provider="narrowband", path=f"narrowband://{scenarios_root().parent}")
