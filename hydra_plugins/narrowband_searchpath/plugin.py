"""Adds the project's ``scenarios/`` folder, and nothing else of the project, to Hydra's search path.

The group is ``scenarios`` (the folder's name); ``python -m harness scenario=NAME`` is
translated to ``scenarios@_global_=NAME`` by harness.commands.app so that a scenario file
overrides the whole config (``# @package _global_``).

A group named ``scenarios`` needs a search-path entry at the folder *above* it: the project
root, which also holds .venv, results/runs and the caches. A plain ``file://`` entry there
let Hydra's help (which lists every config group recursively) walk all of them: with
thousands of run folders ``--help`` never returned. The ``narrowband://`` source below is a
file source rooted at the project whose only visible entry is ``scenarios/``.
"""
from __future__ import annotations

from typing import List, Optional

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra._internal.core_plugins.file_config_source import FileConfigSource

GROUP = "scenarios"


def _inside(config_path: str) -> bool:
    """True for the scenarios group itself and what lies under it."""
    path = config_path.strip("/")
    return path == GROUP or path.startswith(f"{GROUP}/")


class ScenariosConfigSource(FileConfigSource):
    """A file config source that shows only the ``scenarios`` folder of its root."""

    @staticmethod
    def scheme() -> str:
        return "narrowband"

    def available(self) -> bool:
        return super().is_group(GROUP)

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") == "" or (_inside(config_path) and super().is_group(config_path))

    def is_config(self, config_path: str) -> bool:
        return _inside(config_path) and super().is_config(config_path)

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        if config_path.strip("/") == "":
            return [GROUP] if results_filter in (None, ObjectType.GROUP) and self.available() else []
        if not _inside(config_path):
            return []
        return super().list(config_path, results_filter)


class NarrowbandSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from harness.paths import scenarios_root

        search_path.append(provider="narrowband", path=f"narrowband://{scenarios_root().parent}")
