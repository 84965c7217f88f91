from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator, List, Optional, Set, Tuple

import pytest

from ensure_flydsl.layout import host_cache_dir
from tests.helpers.flydsl_fixture import FixtureRepo, make_repo
from tests.helpers.run_folders import remove_run_folders
from tests.helpers.workspace import Workspace, host_cache_env

REAL_DEFAULT_BASE = "/opt/flydsl"


TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> Optional[int]:
    """`-n auto` (README.md's test command): twice the cores this process may run on, since most of a test's
    time is spent waiting for its subprocesses (CONTRIBUTING.md's figures).  PYTEST_XDIST_AUTO_NUM_WORKERS,
    and `-n logical`, stay xdist's."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses == "logical":
        return None
    return 2 * len(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    """One file for the whole run (xdist workers inherit the variable) where each fault point that fires
    writes its name: a point that stops firing is caught even where a test would accept a finished run.
    And one user's cache folder for the whole run (XDG_CACHE_HOME), so that what the session's and the
    modules' fixtures run (a cache seeded by a build) never writes the real user's ETA history either; each
    test then has a folder of its own (``_host_cache_of_the_test``)."""
    if not hasattr(config, "workerinput"):
        fd, path = tempfile.mkstemp(prefix="ensure-flydsl-faults-", suffix=".txt")
        os.close(fd)
        os.environ["ENSURE_FLYDSL_FAULT_LOG"] = path
        config.stash[_FAULT_LOG] = path
        os.environ[_REAL_HOST] = host_cache_dir(os.environ) or ""
        session_host = tempfile.mkdtemp(prefix="ensure-flydsl-host-")
        os.environ.update(host_cache_env(session_host))
        config.stash[_SESSION_HOST] = session_host
        config.stash[_TEMP_BEFORE] = _ours_in_temp()


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """The tests marked ``long`` (one test that runs for minutes: the state machines) first, each file's order
    otherwise kept: with ``-n 2`` they start at once on the first worker while the other works through the
    rest.  Started last, one of them alone would add its minutes to the suite's time."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the rest keep their order


def _ours_in_temp() -> Set[str]:
    """What the tests' helpers make directly in the temporary folder (``ensure-flydsl-*``, outside pytest's
    own folders), by name."""
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("ensure-flydsl-")}


@pytest.hookimpl(trylast=True)  # after xdist's: its workers' sessions have ended
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    remove_run_folders()  # this process's (an xdist worker's own, before the controller looks)
    session_host = config.stash.get(_SESSION_HOST, None)
    if session_host is not None:
        shutil.rmtree(session_host, ignore_errors=True)
    before = config.stash.get(_TEMP_BEFORE, None)
    left = sorted(_ours_in_temp() - before) if before is not None else []  # the fault log and host are in before
    if left and exitstatus == 0:  # a failed test may keep what it made, to be read
        print(f"\nthe run left in {tempfile.gettempdir()}: {', '.join(left)}")
        session.exitstatus = 1
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
_SESSION_HOST = pytest.StashKey[str]()
_TEMP_BEFORE = pytest.StashKey[Set[str]]()
_REAL_HOST = "ENSURE_FLYDSL_TEST_REAL_HOST_DIR"  # the real user's folder, known before the session moved it


@pytest.fixture(scope="session")
def fixture_repo(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    return make_repo(str(tmp_path_factory.mktemp("upstream") / "FlyDSL.git"))


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """This checkout built once as a wheel (``pip wheel --no-deps``, the build a user's ``pip install .`` runs
    first), for the tests that install the tool into a venv of their own: each of them built it again before,
    a build backend fetched and run per test."""
    import glob
    import subprocess
    import sys

    out = str(tmp_path_factory.mktemp("wheel"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", out,
                    os.path.dirname(TESTS_DIR)], check=True, cwd=out)
    (wheel,) = glob.glob(os.path.join(out, "ensure_flydsl-*.whl"))
    return wheel


@pytest.fixture(autouse=True)
def _never_touch_the_real_default_root() -> Iterator[None]:
    before = os.path.exists(REAL_DEFAULT_BASE)
    yield
    assert os.path.exists(REAL_DEFAULT_BASE) == before, "a test touched the real default root /opt/flydsl"


def _real_host_history() -> Optional[Tuple[float, int]]:
    """The real user's ETA history as it is (mtime, size), None when absent: no test may write it."""
    folder = os.environ.get(_REAL_HOST)
    try:
        found = os.stat(os.path.join(folder, "history.json")) if folder else None
    except FileNotFoundError:
        return None
    return None if found is None else (found.st_mtime, found.st_size)


@pytest.fixture(autouse=True)
def _host_cache_of_the_test(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test is one host with a cache folder of its own (XDG_CACHE_HOME, which workspaces and in-process
    calls inherit): the tool's host files (the ETA history) never go into the real home, and one test's
    history never steers another's ETA.  (A session-scoped factory, so hypothesis' tests may use it.)"""
    saved = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "PIP_CACHE_DIR", "UV_CACHE_DIR")}
    real = _real_host_history()
    os.environ.update(host_cache_env(str(tmp_path_factory.mktemp("host-cache"))))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    assert _real_host_history() == real, "a test wrote the real user's ETA history (~/.cache/ensure-flydsl)"


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
