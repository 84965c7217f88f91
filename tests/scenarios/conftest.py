"""Fixtures shared by several scenario files (the binary cache's: tests/scenarios/test_cache_*.py)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def cache_dir(tmp_path: "os.PathLike[str]") -> str:
    return os.path.join(str(tmp_path), "cache")


@pytest.fixture
def work(tmp_path: "os.PathLike[str]") -> str:
    """The folder a fetch's destination lives in: it must hold nothing afterwards unless the fetch succeeded."""
    path = os.path.join(str(tmp_path), "work")
    os.makedirs(path)
    return path
