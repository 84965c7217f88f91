"""What an agent is told must be true: the release hint that ``auto`` adds when its source build cannot
succeed, and the doctor's `suggestion`, name only a release that has a wheel for this interpreter, passes
the floor (FLYDSL_MIN_VERSION) and whose tag holds every FLYDSL_REQUIRE module of the tree's packages (read
from the tag's git objects), and the doctor and the run say the same.

The fixture repository has upstream's shapes: v0.2.2 and v0.2.3 hold kernels/moe_gemm_2stage.py, v0.3.0
holds kernels/moe/moe_gemm_2stage/ and v0.3.1 no moe_gemm_2stage at all (FlyDSL's real tags have the same);
the wheelhouse lists 0.2.2, 0.3.0 and 0.3.1.  Following "FLYDSL_PIN=v0.3.1 has a wheel" ended in exit 6.
A remote that is no local path is a real git server (git daemon over git://)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Iterator

import pytest

from ensure_flydsl.source.git import SUBMODULES_UNREACHABLE
from tests.helpers.build_fixtures import make_fake_mlir
from tests.helpers.flydsl_fixture import FixtureRepo, add_submodule, git, write
from tests.helpers.git_daemon import GitDaemon
from tests.helpers.release_fixture import listed_wheelhouse
from tests.helpers.workspace import Workspace

pytestmark = pytest.mark.index  # the real flydsl wheel, listed by pip

OK = "FLYDSL_PIN=v0.2.2 has a wheel for this interpreter and its tag holds kernels.moe_gemm_2stage: about 10 s, " \
     "nothing built"
UNREACHABLE_SUB = "https://unreachable.invalid/dmlc/dlpack.git"
# What the hint adds for the pin of unreachable_submodule_site (issue 41, item 9): dev, v0.2.3, llvm-b (the LLVM
# hash), the submodule and its URL: the last three change files outside the Python package and kernels/.
BEYOND = "; but it is not the pin: the pin is 5 commits beyond v0.2.2, 3 of them in compiled code"


def add_later_releases(repo: FixtureRepo) -> None:
    """v0.3.0 (annotated, the kernel a package under kernels/moe/) and v0.3.1 (no moe_gemm_2stage), on top."""
    repo.commit("v0.3.0", "0.3.0", layout="v0.3.0")
    git(repo.path, "tag", "-a", "-m", "v0.3.0", "v0.3.0")
    repo.commit("v0.3.1", "0.3.1", tag="v0.3.1", layout="v0.3.1")


@pytest.fixture
def listed(wheelhouse: str, tmp_path: "os.PathLike[str]") -> str:
    return listed_wheelhouse(wheelhouse, os.path.join(str(tmp_path), "listed"), ["0.3.0", "0.3.1"])


def offline(wheelhouse: str) -> Dict[str, str]:
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": "auto"}


def hint_of(ws: Workspace) -> str:
    return str(ws.marker()["hint"])


def test_the_hint_names_the_release_whose_tag_holds_the_required_module(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str) -> None:
    """The build fails under auto (exit 5): v0.3.1 and v0.3.0 have wheels and tags but not
    kernels.moe_gemm_2stage, so the hint names v0.2.2 (it named v0.3.1, the newest with a wheel)."""
    add_later_releases(own_repo)
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", **offline(listed))
    assert out.returncode == 5, out.stderr
    assert OK in hint_of(ws) and f"instead of building: {OK}" in out.stdout
    assert "FLYDSL_PIN=v0.3" not in out.stderr and "FLYDSL_PIN=v0.3" not in hint_of(ws)
    # Only flydsl required (the wheel's own package): the newest release with a wheel and a tag will do.
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", FLYDSL_REQUIRE="flydsl", **offline(listed))
    assert out.returncode == 5, out.stderr
    assert "FLYDSL_PIN=v0.3.1 has a wheel for this interpreter: about 10 s, nothing built" in hint_of(ws)


def test_a_release_offered_for_a_pin_beyond_it_says_what_it_lacks(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str) -> None:
    """Issue 41, item 9: the pin is v0.2.2 plus three commits, two of them C++ fixes; the hint offered v0.2.2
    as if it were the pin (which imports, then fails to compile the kernels those fixes are for)."""
    git(own_repo.path, "checkout", "-q", "-b", "fixes", "v0.2.2")
    shorts = []
    for rel, subject in (("lib/Bindings/Python/FlyExtension.cpp", "Fix the bindings (#729)"),
                         ("kernels/moe_gemm_2stage.py", "Tune a kernel"),
                         ("lib/Dialect/Fly/Transforms/LayoutLowering.cpp", "Fix the layout lowering (#728)")):
        write(os.path.join(own_repo.path, rel), f"// {subject}\n")
        git(own_repo.path, "add", "-A")
        git(own_repo.path, "commit", "-q", "-m", subject)
        shorts.append(git(own_repo.path, "rev-parse", "--short", "HEAD"))
    pin = git(own_repo.path, "rev-parse", "HEAD")
    git(own_repo.path, "checkout", "-q", "main")
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", FLYDSL_PIN=pin, **offline(listed))
    assert out.returncode == 5, out.stderr
    beyond = (f"{OK}; but it is not the pin: the pin is 3 commits beyond v0.2.2, 2 of them in compiled code "
              f"(outside the Python package and kernels/): {shorts[2]} Fix the layout lowering (#728); {shorts[0]} "
              "Fix the bindings (#729)")
    assert beyond in hint_of(ws), hint_of(ws)
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", FLYDSL_PIN="v0.2.2", **offline(listed))  # the release itself
    assert out.returncode == 5 and "not the pin" not in hint_of(ws), hint_of(ws)


def test_no_release_above_the_floor_holds_the_module_so_no_hint(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str) -> None:
    """FLYDSL_MIN_VERSION=0.2.3: v0.2.2 holds the module but is below the floor, the releases above it do not
    hold it: no release is named at all (v0.3.1 was)."""
    add_later_releases(own_repo)
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", FLYDSL_MIN_VERSION="0.2.3", **offline(listed))
    assert out.returncode == 5, out.stderr
    assert "FLYDSL_PIN=" not in hint_of(ws) and "instead of building" not in out.stderr


@pytest.fixture
def daemon(tmp_path: "os.PathLike[str]") -> Iterator[GitDaemon]:
    with GitDaemon(os.path.join(str(tmp_path), "own-upstream")) as server:
        yield server


def unreachable_submodule_site(tmp_path: "os.PathLike[str]", repo: FixtureRepo, listed: str,
                               url: str) -> Workspace:
    """The issue's case: the repository is reachable (``url``), the pin's submodule is not (no GitHub); a
    fake MLIR so that only the submodules block the source build; TMPDIR a folder of the test's."""
    sub = os.path.join(str(tmp_path), "dlpack.git")
    add_submodule(repo, sub, "with-local-sub")
    git(repo.path, "config", "-f", ".gitmodules", "submodule.thirdparty/dlpack.url", UNREACHABLE_SUB)
    git(repo.path, "commit", "-q", "-am", "dlpack from its upstream URL")
    pin = git(repo.path, "rev-parse", "HEAD")
    add_later_releases(repo)
    git(repo.path, "config", "uploadpack.allowFilter", "true")  # as GitHub: a fetch of trees without blobs
    ws = Workspace(os.path.join(str(tmp_path), "base"), repo)
    tmpdir = os.path.join(str(tmp_path), "tmpdir")
    os.makedirs(tmpdir)
    ws.env.update(offline(listed), FLYDSL_REPO=url, FLYDSL_PIN=pin, TMPDIR=tmpdir,
                  MLIR_PATH=make_fake_mlir(os.path.join(str(tmp_path), "mlir")))
    return ws


@pytest.mark.parametrize("served", ["file", "git-daemon"])
def test_the_doctor_suggests_what_the_run_says_when_the_submodules_cannot_be_fetched(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str, daemon: GitDaemon, served: str) -> None:
    """The doctor's `suggestion` is the release the run's failure names (it was null: the submodules check
    was the fetch stage's, which a release also goes through).  Over git://, nothing of the repository is
    on disk before the run: the tags' trees are fetched into a temporary repository, which is removed; the
    doctor creates nothing, and the root gets no tag it did not fetch for the pin."""
    url = own_repo.url if served == "file" else daemon.url("FlyDSL.git")
    ws = unreachable_submodule_site(tmp_path, own_repo, listed, url)
    doctor = ws.run("doctor", "--json")
    data = json.loads(doctor.stdout)
    assert doctor.returncode == data["exit_code"] != 0, data["verdict"]
    # The pin's commits beyond v0.2.2 are read from a repository on disk: the fixture's over file://, the root's
    # once the run fetched it over git://.
    said = OK + (BEYOND if served == "file" else "")
    if served == "file":  # its sources read before any fetch; over git:// FlyDSL's known needs block first
        blocking = [c for c in data["checks"] if c["blocking"]]
        assert [(c["name"], c["stage"]) for c in blocking] == [("submodules", "submodules")], blocking
        assert data["exit_code"] == 2 and data["verdict"].startswith(
            "the configured strategy (auto) cannot succeed here: submodules: ")
    assert data["suggestion"].startswith(said) and data["verdict"].endswith(f"; or, without a build, "
                                                                             f"{data['suggestion']}")
    assert not os.path.exists(ws.root) and os.listdir(ws.env["TMPDIR"]) == []
    out = ws.run()
    assert out.returncode == 2, out.stderr
    marker = ws.marker()
    assert marker["stage"] == "submodules"
    assert marker["hint"].startswith(f"{SUBMODULES_UNREACHABLE}; or, without a build, {OK}{BEYOND}")
    tags = subprocess.run(["git", "-C", ws.root, "tag"], stdout=subprocess.PIPE, text=True, check=True).stdout
    assert tags.split() == [], tags
    assert os.listdir(ws.env["TMPDIR"]) == []
    again = json.loads(ws.run("doctor", "--json").stdout)  # the root's repository read now
    assert again["exit_code"] == 2 and again["suggestion"] == marker["hint"].split("without a build, ")[1]


def test_the_doctor_describes_the_interpreter_once_for_its_checks_and_its_suggestion(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str) -> None:
    """The suggestion is asked of the interpreter the checks described (it started a second probe of it)."""
    ws = unreachable_submodule_site(tmp_path, own_repo, listed, own_repo.url)
    log, python = os.path.join(str(tmp_path), "probes"), os.path.join(str(tmp_path), "bin", "python3")
    # the description is the import probe of no module: `python -c SCRIPT ""`
    write(python, f'#!/bin/sh\n[ "$1" = -c ] && [ "$#" = 3 ] && [ -z "$3" ] && echo described >> "{log}"\n'
          f'exec "{sys.executable}" "$@"\n', mode=0o755)
    data = json.loads(ws.run("doctor", "--json", FLYDSL_PYTHON=python).stdout)
    assert data["suggestion"].startswith(OK), data
    with open(log) as f:
        assert f.read().split() == ["described"]


def test_a_remote_gone_before_the_tags_are_read_gives_no_claim_that_a_release_works(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str, daemon: GitDaemon) -> None:
    """The repository stops answering while the build runs: the release with a wheel is named, with the
    fact that its modules could not be checked; never as working."""
    ws = unreachable_submodule_site(tmp_path, own_repo, listed, daemon.url("FlyDSL.git"))
    ws.env["FLYDSL_PIN"] = own_repo.commits["dev"]  # no submodule: the build fails, then the hint is asked
    out = ws.run(FIXTURE_BUILD_HOOK=f"echo 0 > {daemon.gone}; exit 1")
    assert out.returncode == 5, out.stderr
    hint = hint_of(ws)
    assert "FLYDSL_PIN=v0.3.1 has a wheel for this interpreter, but whether its tag holds kernels.moe_gemm_2stage " \
           f"could not be checked (the tags of {daemon.url('FlyDSL.git')} could not be listed" in hint, hint
    assert "about 10 s" not in hint


def test_a_fetch_of_the_tags_that_fails_leaves_the_release_read_from_the_root(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, listed: str, daemon: GitDaemon) -> None:
    """The tags are listed, then the remote is gone: v0.2.2 is an ancestor of the pin, so its trees are in
    the root's repository and it is named as working; above the floor 0.2.3 only the unread v0.3.x are
    left, and the hint says they could not be checked, and why."""
    ws = unreachable_submodule_site(tmp_path, own_repo, listed, daemon.url("FlyDSL.git"))
    ws.env["FLYDSL_PIN"] = own_repo.commits["dev"]
    out = ws.run(FIXTURE_BUILD_HOOK=f"echo 1 > {daemon.gone}; exit 1")  # the hint's ls-remote, no more
    assert out.returncode == 5, out.stderr
    assert OK in hint_of(ws), hint_of(ws)
    os.remove(daemon.gone)
    with GitDaemon(os.path.join(str(tmp_path), "own-upstream")) as again:
        ws.env["FLYDSL_REPO"] = again.url("FlyDSL.git")
        out = ws.run(FIXTURE_BUILD_HOOK=f"echo 1 > {again.gone}; exit 1", FLYDSL_MIN_VERSION="0.2.3")
    assert out.returncode == 5, out.stderr
    hint = hint_of(ws)
    assert "FLYDSL_PIN=v0.3.1 has a wheel for this interpreter, but whether its tag holds kernels.moe_gemm_2stage " \
           f"could not be checked (git fetch of v0.3.1, v0.3.0 from {again.url('FlyDSL.git')} failed" in hint, hint


REAL_REPO = os.environ.get("ENSURE_FLYDSL_REAL_REPO", "")


@pytest.mark.skipif(not REAL_REPO or not os.path.isdir(REAL_REPO), reason="ENSURE_FLYDSL_REAL_REPO is not set")
def test_the_real_upstream_behind_a_mirror_suggests_v0_2_2(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, wheelhouse: str) -> None:
    """The issue's case with FlyDSL's own repository: the default pin fetched through a mirror, its GitHub
    submodules unreachable, wheels listed for PyPI's releases from 0.2.2 to 0.5.0.  v0.2.2 is the only
    release >= the floor whose tag has kernels/moe_gemm_2stage.py; both the doctor and the run named v0.3.1."""
    listed = listed_wheelhouse(wheelhouse, os.path.join(str(tmp_path), "listed"),
                               ["0.2.3", "0.2.4", "0.3.0", "0.3.1", "0.3.2", "0.3.4", "0.4.0", "0.5.0"])
    python = os.path.join(str(tmp_path), "venv", "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.path.dirname(os.path.dirname(python))],
                   check=True)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    for module in ("torch", "numpy"):  # what the pin's code imports; the hint is asked before any import
        os.makedirs(os.path.join(site, module))
        open(os.path.join(site, module, "__init__.py"), "w").close()
    ws = Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)
    for name in ("FLYDSL_REPO", "FLYDSL_PIN"):
        ws.env.pop(name)  # the defaults: GitHub's FlyDSL at a35627a2
    ws.env.update(offline(listed), FLYDSL_PYTHON=python,
                  FLYDSL_GIT_MIRRORS=f"https://github.com/ROCm/FlyDSL.git={REAL_REPO}")
    data = json.loads(ws.run("doctor", "--json", timeout=180).stdout)
    assert data["suggestion"].startswith(f"{OK}; but it is not the pin: the pin is "), data["verdict"]
    out = ws.run(timeout=600)
    assert out.returncode == 2 and ws.marker()["stage"] == "submodules", out.stderr
    assert hint_of(ws).endswith(f"; or, without a build, {data['suggestion']}"), hint_of(ws)
