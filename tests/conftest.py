from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, make_repo
from tests.helpers.workspace import Workspace, host_cache_env

REAL_DEFAULT_BASE = "/opt/flydsl"


TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config: pytest.Config) -> None:
    """One file for the whole run (xdist workers inherit the variable) where each fault point that fires
    writes its name: a point that stops firing is caught even where a test would accept a finished run."""
    if not hasattr(config, "workerinput"):
        fd, path = tempfile.mkstemp(prefix="ensure-flydsl-faults-", suffix=".txt")
        os.close(fd)
        os.environ["ENSURE_FLYDSL_FAULT_LOG"] = path
        config.stash[_FAULT_LOG] = path


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    path = config.stash.get(_FAULT_LOG, None)
    if path is None:
        return
    with open(path) as handle:
        fired = set(handle.read().split())
    os.unlink(path)
    whole_suite = (not config.option.keyword and not config.option.markexpr and not config.option.collectonly
                   and not getattr(config.option, "lf", False)
                   and all(os.path.abspath(a) == TESTS_DIR for a in config.args))
    if whole_suite and exitstatus == 0:
        from ensure_flydsl.support.faults import POINTS

        missing = sorted(set(POINTS) - fired)
        if missing:
            print(f"\nfault points that never fired in the whole suite: {', '.join(missing)}")
            session.exitstatus = 1


_FAULT_LOG = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def fixture_repo(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    return make_repo(str(tmp_path_factory.mktemp("upstream") / "FlyDSL.git"))


@pytest.fixture(autouse=True)
def _never_touch_the_real_default_root() -> Iterator[None]:
    before = os.path.exists(REAL_DEFAULT_BASE)
    yield
    assert os.path.exists(REAL_DEFAULT_BASE) == before, "a test touched the real default root /opt/flydsl"


@pytest.fixture(autouse=True)
def _host_cache_of_the_test(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test is one host with a cache folder of its own (XDG_CACHE_HOME, which workspaces and in-process
    calls inherit): the tool's host files (the ETA history) never go into the real home, and one test's
    history never steers another's ETA.  (A session-scoped factory, so hypothesis' tests may use it.)"""
    saved = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "PIP_CACHE_DIR", "UV_CACHE_DIR")}
    os.environ.update(host_cache_env(str(tmp_path_factory.mktemp("host-cache"))))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def ws(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> Workspace:
    return Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)


@pytest.fixture
def own_repo(tmp_path: "os.PathLike[str]") -> FixtureRepo:
    """A fixture repository this test may change (add commits, submodules)."""
    return make_repo(os.path.join(str(tmp_path), "own-upstream", "FlyDSL.git"))


@pytest.fixture
def which_git() -> str:
    path = shutil.which("git")
    assert path
    return path
