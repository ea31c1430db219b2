"""Fixtures: one synthetic results tree and its report, built once per test session."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.report import build_report
from report_synthetic import make_results, make_small_results


@pytest.fixture(scope="session")
def results(tmp_path_factory) -> Path:
    return make_results(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="session")
def report(results: Path) -> dict:
    return build_report(results)


@pytest.fixture(scope="session")
def small_results(tmp_path_factory) -> Path:
    """Few runs, for the tests that start a Python process (CLI, notebooks)."""
    return make_small_results(tmp_path_factory.mktemp("small_results"))
