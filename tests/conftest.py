from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Optional

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from flydsl_fixture import FixtureRepo, make_repo  # noqa: E402

REAL_DEFAULT_BASE = "/opt/flydsl"


def other_python(not_tag: str) -> Optional[str]:
    """A pyenv interpreter of another minor version than ``not_tag`` (cpython-311 ...), if one exists."""
    for candidate in sorted(glob.glob("/root/.pyenv/versions/3.1[0-3]*/bin/python3")):
        out = subprocess.run([candidate, "-c", "import sys; print(sys.implementation.cache_tag)"],
                             stdout=subprocess.PIPE, check=False)
        if out.returncode == 0 and out.stdout.decode().strip() != not_tag:
            return candidate
    return None


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
    whole_suite = (not config.option.keyword and not config.option.markexpr
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


class Workspace:
    """A base folder with the root in it, the settings pointing at the fixture repo, and helpers."""

    def __init__(self, base: str, repo: FixtureRepo) -> None:
        self.base = base
        self.root = os.path.join(base, "FlyDSL")
        self.repo = repo
        self.counter = os.path.join(os.path.dirname(base), "counters")
        os.makedirs(self.base, exist_ok=True)
        os.makedirs(self.counter, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
        env.update({
            "FLYDSL_ROOT": self.root,
            "FLYDSL_REPO": repo.url,
            "FLYDSL_PIN": repo.commits["dev"],
            "FLYDSL_PYTHON": sys.executable,
            # The fixture's tags v0.2.2 and v0.2.3 would send `auto` to PyPI for the real wheels; tests of
            # the release path ask for it themselves.
            "FLYDSL_STRATEGY": "source",
            "ROCM_PATH": os.path.join(os.path.dirname(base), "no-rocm"),
            "FIXTURE_COUNTER_DIR": self.counter,
        })
        self.env: Dict[str, str] = env

    @property
    def env_file(self) -> str:
        return os.path.join(self.root, "flydsl_env.sh")

    @property
    def env_json(self) -> str:
        return os.path.join(self.root, "flydsl_env.json")

    @property
    def fail_marker(self) -> str:
        return os.path.join(self.base, ".flydsl_build.failed")

    @property
    def lock_file(self) -> str:
        return os.path.join(self.base, ".flydsl_build.lock")

    @property
    def log(self) -> str:
        return os.path.join(self.base, "ensure_flydsl.log")

    def cmd(self, *args: str) -> List[str]:
        return [sys.executable, "-m", "ensure_flydsl", *args]

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        full = dict(self.env)
        full.update(env)
        return subprocess.run(self.cmd(*args), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, text=True, check=False)

    def popen(self, *args: str, **env: str) -> subprocess.Popen:
        full = dict(self.env)
        full.update(env)
        return subprocess.Popen(self.cmd(*args), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def marker(self) -> Dict[str, object]:
        with open(self.fail_marker) as handle:
            data = json.load(handle)
        assert isinstance(data, dict)
        return data

    def env_twin(self) -> Dict[str, object]:
        with open(self.env_json) as handle:
            data = json.load(handle)
        assert isinstance(data, dict)
        return data

    def source_and_import(self, python: str = sys.executable, extra: str = "") -> subprocess.CompletedProcess:
        """The seed document's last step: source the env file, import from ONE tree, print the files."""
        script = (
            f'. "$1" && {python} -c "import flydsl, kernels.moe_gemm_2stage as k; '
            f'print(flydsl.__file__); print(k.__file__); print(flydsl.__version__)"'
        )
        env = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        return subprocess.run(["bash", "-c", extra + script, "bash", self.env_file], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", check=False)

    def count(self, name: str) -> int:
        from flydsl_fixture import counts

        return len(counts(self.counter, name))


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
