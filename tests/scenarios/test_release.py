"""The release strategy with the real flydsl 0.2.2 wheel from the package index and a fixture repository
whose tag v0.2.2 carries the matching version and kernels, and the wheel's own python/flydsl sources
(extracted at test time): the release way installs only a wheel built from the pin's sources, so with the
plain fixture's sources these runs would build from source (that case is tests/scenarios/test_provenance.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Dict

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, git
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace, other_python

pytestmark = pytest.mark.index  # the real flydsl wheel, or build tools, from the package index


@pytest.fixture
def ws(tmp_path: "os.PathLike[str]", release_repo: FixtureRepo) -> Workspace:
    return Workspace(os.path.join(str(tmp_path), "base"), release_repo)


def offline(wheelhouse: str) -> dict:  # type: ignore[type-arg]
    """pip's own settings: the wheelhouse only (a private wheelhouse, as a user would set it up)."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": "auto"}


def test_auto_takes_the_release_wheel_for_a_release_tag(ws: Workspace, wheelhouse: str) -> None:
    out = ws.run("--json", FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "released" and result["version"] == "0.2.2"
    assert result["commit"] == ws.repo.commits["v0.2.2"]
    assert ws.count("build") == 0 and ws.count("llvm") == 0  # nothing was built
    packages = os.path.join(ws.root, "build-fly", "python_packages")
    assert os.path.isdir(os.path.join(packages, "flydsl-0.2.2.dist-info"))
    assert "release v0.2.2: downloading the flydsl==0.2.2 wheel" in out.stderr
    assert "is built from the pin: all 48 files are byte-identical in python/flydsl" in out.stderr
    assert "release v0.2.2: installing flydsl-0.2.2-" in out.stderr
    assert_one_tree(ws)  # the wheel's flydsl and the tag's kernels: one tree, the layout of a build
    assert ws.env_twin()["how"] == "released"
    again = ws.run("--json", FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    assert json.loads(again.stdout)["action"] == "warm"


def test_auto_with_a_commit_that_is_a_release_tag(ws: Workspace, wheelhouse: str) -> None:
    out = ws.run("--json", FLYDSL_PIN=ws.repo.commits["v0.2.2"], **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "released"


def test_auto_never_takes_a_release_for_a_commit_between_tags(ws: Workspace, wheelhouse: str) -> None:
    # The default pin is such a commit (v0.2.2-12-ga35627a2): its code is not any release's.
    out = ws.run("--json", FLYDSL_PIN=ws.repo.commits["dev"], **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built" and ws.count("build") == 1


def test_release_demanded_with_a_version_as_pin(ws: Workspace, wheelhouse: str) -> None:
    env = offline(wheelhouse)
    env["FLYDSL_STRATEGY"] = "release"
    out = ws.run("--json", FLYDSL_PIN="0.2.2", **env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "released" and result["commit"] == ws.repo.commits["v0.2.2"]


def test_release_demanded_for_a_commit_without_a_tag_is_exit_8(ws: Workspace, wheelhouse: str) -> None:
    env = offline(wheelhouse)
    env["FLYDSL_STRATEGY"] = "release"
    out = ws.run(FLYDSL_PIN=ws.repo.commits["dev"], **env)
    assert out.returncode == 8
    assert "is not the commit of a release tag vX.Y.Z" in out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release"
    assert not os.path.exists(ws.env_file) and ws.count("build") == 0


def test_release_demanded_without_a_wheel_for_the_interpreter_is_exit_8(ws: Workspace, wheelhouse: str) -> None:
    other = other_python(sys.implementation.cache_tag)
    assert other, "the test needs a pyenv interpreter of another minor version"
    env = offline(wheelhouse)  # holds the wheel for this interpreter only
    env["FLYDSL_STRATEGY"] = "release"
    out = ws.run(FLYDSL_PIN="v0.2.2", FLYDSL_PYTHON=other, **env)
    assert out.returncode == 8
    assert "no flydsl==0.2.2 wheel could be downloaded for" in out.stderr and other in out.stderr
    assert "No matching distribution" in out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release"


def test_auto_falls_back_to_source_when_there_is_no_wheel(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    empty = os.path.join(str(tmp_path), "empty-wheelhouse")
    os.makedirs(empty)
    out = ws.run("--json", FLYDSL_PIN="v0.2.2", **offline(empty))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    assert "building the pin from source instead" in out.stderr
    assert_one_tree(ws)


def test_versions_that_disagree_are_refused(ws: Workspace, wheelhouse: str, tmp_path: "os.PathLike[str]") -> None:
    # A tag v0.2.2 on a commit whose __version__ says 0.2.3: the wheel and the kernels would differ.
    path = os.path.join(str(tmp_path), "mislabelled", "FlyDSL.git")
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    repo = FixtureRepo(path)
    repo.commit("bad", "0.2.3", tag="v0.2.2")
    env = offline(wheelhouse)
    env["FLYDSL_STRATEGY"] = "release"
    out = ws.run(FLYDSL_REPO=repo.url, FLYDSL_PIN="v0.2.2", **env)
    assert out.returncode == 8
    assert "the release v0.2.2 does not agree with itself: the checkout's __version__ is 0.2.3" in out.stderr
    assert not os.path.exists(os.path.join(ws.root, "build-fly", "python_packages"))


def test_release_then_source_for_the_same_pin_replaces_the_tree(ws: Workspace, wheelhouse: str) -> None:
    assert ws.run(FLYDSL_PIN="v0.2.2", **offline(wheelhouse)).returncode == 0
    out = ws.run("--json", FLYDSL_PIN=ws.repo.commits["dev"], FLYDSL_EXACT_PIN="1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    assert not os.path.exists(os.path.join(ws.root, "build-fly", "python_packages", "flydsl-0.2.2.dist-info"))
    assert_one_tree(ws)


def test_release_from_the_package_index_itself(ws: Workspace) -> None:
    """No wheelhouse: pip's default index (its cache makes a second download cheap)."""
    out = ws.run("--json", FLYDSL_PIN="v0.2.2", FLYDSL_STRATEGY="auto")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "released"
    assert_one_tree(ws)


def _site_listing() -> Dict[str, str]:
    """Every file under the interpreter's site folders, with its size and mtime."""
    import site

    found: Dict[str, str] = {}
    for top in {*site.getsitepackages(), site.getusersitepackages()}:
        for folder, _dirs, files in os.walk(top):
            if "__pycache__" in folder:
                continue
            for name in files:
                path = os.path.join(folder, name)
                st = os.lstat(path)
                found[path] = f"{st.st_size}:{st.st_mtime_ns}"
    return found


def test_release_leaves_the_interpreter_untouched(ws: Workspace, wheelhouse: str) -> None:
    before = _site_listing()
    assert ws.run(FLYDSL_PIN="v0.2.2", **offline(wheelhouse)).returncode == 0
    assert _site_listing() == before  # the wheel went into the root, nothing into site-packages
    assert os.path.isdir(os.path.join(ws.root, "build-fly", "python_packages", "flydsl"))


def test_kill_9_at_release_installed_then_a_plain_rerun_succeeds(ws: Workspace, wheelhouse: str) -> None:
    from tests.helpers.scenario import killed_at

    out = killed_at(ws, "release-installed", FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    assert out.returncode == -signal.SIGKILL, out.stdout + out.stderr
    assert not os.path.exists(ws.env_file)
    again = ws.run("--json", FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["how"] == "released"


def test_the_api_downloads_the_wheel_with_the_environment_it_is_given(ws: Workspace, wheelhouse: str,
                                                                       tmp_path: "os.PathLike[str]") -> None:
    given = {**ws.env, **offline(wheelhouse), "FLYDSL_PIN": "v0.2.2", "FLYDSL_STRATEGY": "release"}
    empty = os.path.join(str(tmp_path), "no-wheels")
    os.makedirs(empty)
    code = "import json, sys, ensure_flydsl\nprint(ensure_flydsl.ensure(environ=json.loads(sys.argv[1])).how)"
    # The process's own pip settings find no wheel: the download must ask with the ones given to ensure().
    out = subprocess.run([sys.executable, "-c", code, json.dumps(given)], env=dict(given, PIP_FIND_LINKS=empty),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["released"]
