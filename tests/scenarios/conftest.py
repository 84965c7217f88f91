"""Fixtures shared by several scenario files: the binary cache's (tests/scenarios/test_cache_*.py) and the
release way's (the real flydsl 0.2.2 wheel, downloaded once per run, and a repository whose v0.2.2 holds
its sources), and the warm path's interpreter with a site folder of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, Iterator

import filelock
import pytest

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.release_fixture import download_wheelhouse, make_release_repo

_REPORTS = pytest.StashKey[Dict[str, pytest.TestReport]]()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """Each phase's report kept on the test, for the fixture below to know whether the test passed."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    item.stash.setdefault(_REPORTS, {})[report.when] = report


@pytest.fixture(autouse=True)
def _real_wheel_trees_go_when_passed(request: pytest.FixtureRequest) -> Iterator[None]:
    """A passed test that installed the real wheel (it asked for ``wheelhouse``) leaves no ``tmp_path``; a
    failed one's is kept to read.  Each holds a 273 MB tree unpacked from the wheel: kept, the kernel wrote
    them all back to the disk while the suite ran (4.6 GB from the release tests alone), and the tool's fsyncs
    waited behind it.  Every other test's folder stays, as pytest keeps them: removing their two million small
    files at each test's end cost more than it saved (CONTRIBUTING.md, "Disk")."""
    names = request.fixturenames
    path = request.getfixturevalue("tmp_path") if "wheelhouse" in names and "tmp_path" in names else None
    yield  # torn down before tmp_path and after every fixture that uses it
    reports = request.node.stash.get(_REPORTS, {})
    if path is not None and "call" in reports and all(r.passed for r in reports.values()):
        shutil.rmtree(str(path), ignore_errors=True)


@pytest.fixture
def cache_dir(tmp_path: "os.PathLike[str]") -> str:
    return os.path.join(str(tmp_path), "cache")


@pytest.fixture
def work(tmp_path: "os.PathLike[str]") -> str:
    """The folder a fetch's destination lives in: it must hold nothing afterwards unless the fetch succeeded."""
    path = os.path.join(str(tmp_path), "work")
    os.makedirs(path)
    return path


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    """flydsl 0.2.2 for the test interpreter, downloaded once from the package index for the whole run: the
    xdist workers share it, the first one that needs it downloads it under a lock (tests only read it)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's folder, above the workers'
    folder = os.path.join(str(shared), "wheelhouse")
    with filelock.FileLock(folder + ".lock"):
        if not os.path.isdir(folder):
            staging = tempfile.mkdtemp(prefix="wheelhouse-", dir=str(shared))
            download_wheelhouse(staging)
            os.rename(staging, folder)  # whole or not at all: a worker that failed leaves no half of it
    return folder


@pytest.fixture(scope="session")
def release_repo(tmp_path_factory: pytest.TempPathFactory, wheelhouse: str) -> FixtureRepo:
    return make_release_repo(str(tmp_path_factory.mktemp("release-upstream") / "FlyDSL.git"), wheelhouse)


@pytest.fixture
def venv_python(tmp_path: "os.PathLike[str]") -> str:
    """An interpreter of our own (a venv without pip), so its site folder can change."""
    folder = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True)
    return os.path.join(folder, "bin", "python")


@pytest.fixture(scope="session")
def uv_tool(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``ensure-flydsl`` installed from this worktree with `uv tool install` (its tool folders in a temp
    folder): its interpreter has no pip."""
    from uv import find_uv_bin

    folder = str(tmp_path_factory.mktemp("uv-tool"))
    env = dict(os.environ, UV_TOOL_DIR=os.path.join(folder, "tools"), UV_TOOL_BIN_DIR=os.path.join(folder, "bin"),
               UV_CACHE_DIR=os.path.join(folder, "cache"))
    subprocess.run([find_uv_bin(), "tool", "install", "--quiet", "--python", sys.executable, "--from",
                    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "ensure-flydsl"], env=env, check=True)
    python = os.path.join(folder, "tools", "ensure-flydsl", "bin", "python")
    no_pip = subprocess.run([python, "-c", "import pip"], stderr=subprocess.DEVNULL, check=False)
    assert no_pip.returncode != 0, "uv's tool environment is expected to have no pip"
    return os.path.join(folder, "bin", "ensure-flydsl")


@pytest.fixture(scope="session")
def python_without_pip(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv of the test interpreter made without pip (`python -m venv --without-pip`)."""
    folder = str(tmp_path_factory.mktemp("venv-without-pip"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True)
    python = os.path.join(folder, "bin", "python")
    assert subprocess.run([python, "-c", "import pip"], stderr=subprocess.DEVNULL, check=False).returncode != 0
    return python
