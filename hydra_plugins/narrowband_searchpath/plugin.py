"""Adds the project folder that holds ``scenarios/`` to Hydra's search path.

The group is ``scenarios`` (the folder's name); ``python -m harness scenario=NAME`` is
translated to ``scenarios@_global_=NAME`` by harness.__main__ so that a scenario file
overrides the whole config (``# @package _global_``).
"""
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class NarrowbandSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from harness.paths import scenarios_root

        search_path.append(provider="narrowband", path=f"file://{scenarios_root().parent}")
