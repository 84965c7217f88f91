"""Provenance of a release wheel: the real flydsl 0.2.2 wheel is installed for a pin only when its package is
the pin's python/flydsl byte for byte, checked on the downloaded file before anything is installed.

The plain fixture repository is the case of a fork: its tag v0.2.2 names a version the package index has,
but its python/flydsl is our own.  tests/helpers/release_fixture.py makes repositories whose v0.2.2 carries
the real wheel's sources (extracted at test time) and wheels that install but do not work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Dict, List

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, git
from tests.helpers.release_fixture import (
    MISSING_MODULE,
    damaged_wheelhouse,
    make_release_repo,
    put_sources,
    retagged_wheelhouse,
    wheel_in,
    wheel_sources,
)
from tests.helpers.scenario import assert_one_tree, killed_at
from tests.helpers.workspace import Workspace, other_python

pytestmark = pytest.mark.index  # the real flydsl wheel from the package index

NOT_THE_PIN = "the index's flydsl 0.2.2 is not built from {repo} v0.2.2: {why}"


def offline(wheelhouse: str, strategy: str = "auto") -> Dict[str, str]:
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": strategy, "FLYDSL_PIN": "v0.2.2"}


def packages(ws: Workspace) -> str:
    return os.path.join(ws.root, "build-fly", "python_packages")


def assert_no_wheel_installed(ws: Workspace) -> None:
    """Nothing of the wheel in the tree: no dist-info, no flydsl with the wheel's _mlir extension, and no
    download or staging left in build-fly."""
    found = os.listdir(packages(ws)) if os.path.isdir(packages(ws)) else []
    assert not [name for name in found if name.startswith("flydsl-0.2.2")], found
    mlir = os.path.join(packages(ws), "flydsl", "_mlir", "_mlir_libs")
    assert not (os.path.isdir(mlir) and [n for n in os.listdir(mlir) if n.endswith(".so")])
    build = os.path.join(ws.root, "build-fly")
    leftovers = [n for n in os.listdir(build) if n.startswith(".")] if os.path.isdir(build) else []
    assert leftovers == [], leftovers


def messages(stderr: str) -> List[str]:
    """The texts of the message events of a --json run."""
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [e["text"] for e in events if e.get("event") == "message"]


def fork_repo(path: str, wheelhouse: str, change: Dict[str, bytes]) -> FixtureRepo:
    """A repository whose v0.2.2 holds the wheel's sources with ``change`` applied (new or changed files)."""
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    repo = FixtureRepo(path)
    repo.commit("base", "0.2.2")
    put_sources(path, {**wheel_sources(wheel_in(wheelhouse)), **change})
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "a fork's v0.2.2")
    git(path, "tag", "v0.2.2")
    return repo


# -- a tag that names a published version, with other sources --------------------------------------------


def test_auto_builds_from_source_when_the_wheel_is_not_built_from_the_pin(ws: Workspace, wheelhouse: str) -> None:
    out = ws.run("--json", **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "built" and result["commit"] == ws.repo.commits["v0.2.2"]
    assert ws.count("build") == 1
    line = NOT_THE_PIN.format(repo=ws.repo.url, why="1 of 1 files differ, e.g. flydsl/__init__.py")
    said = [text for text in messages(out.stderr) if "is not built from" in text]
    assert said == [line + "; building the pin from source instead"]
    assert_no_wheel_installed(ws)
    assert_one_tree(ws)
    plain = ws.run(FLYDSL_ROOT=os.path.join(ws.base, "again", "FlyDSL"), FLYDSL_STORE="off",  # not linked: built
                   **offline(wheelhouse))
    assert plain.returncode == 0, plain.stderr
    lines = [x for x in plain.stdout.splitlines() if "is not built from" in x]  # a plain run's messages
    assert len(lines) == 1 and lines[0].endswith(": " + line + "; building the pin from source instead"), lines


def test_nothing_of_the_wheel_is_installed_when_the_source_build_starts(ws: Workspace, wheelhouse: str) -> None:
    out = killed_at(ws, "fixes-applied", **offline(wheelhouse))  # the source build's first step, before LLVM
    assert out.returncode == -signal.SIGKILL, out.stdout + out.stderr
    assert "is not built from" in out.stdout
    assert_no_wheel_installed(ws)
    assert not os.path.exists(ws.env_file)


def test_release_demanded_refuses_a_wheel_not_built_from_the_pin(ws: Workspace, wheelhouse: str) -> None:
    out = ws.run(**offline(wheelhouse, "release"))
    assert out.returncode == 8
    reason = NOT_THE_PIN.format(repo=ws.repo.url, why="1 of 1 files differ, e.g. flydsl/__init__.py")
    assert reason in out.stderr and "FLYDSL_STRATEGY=source" in out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release" and marker["reason"] == reason
    assert "FLYDSL_STRATEGY=source" in str(marker["hint"])
    assert_no_wheel_installed(ws)
    assert ws.count("build") == 0 and not os.path.exists(ws.env_file)


def test_changed_and_missing_files_are_named(ws: Workspace, wheelhouse: str, tmp_path: "os.PathLike[str]") -> None:
    sources = wheel_sources(wheel_in(wheelhouse))
    changed = {"autotune.py": sources["autotune.py"] + b"# a fork's change\n", "forks_own.py": b"X = 1\n"}
    repo = fork_repo(os.path.join(str(tmp_path), "fork", "FlyDSL.git"), wheelhouse, changed)
    total = len(sources) + 1
    out = ws.run(FLYDSL_REPO=repo.url, **offline(wheelhouse, "release"))
    assert out.returncode == 8, out.stderr
    why = (f"1 of {total} files differ, e.g. flydsl/autotune.py; "
           f"1 of {total} files are not in the wheel, e.g. flydsl/forks_own.py")
    assert ws.marker()["reason"] == NOT_THE_PIN.format(repo=repo.url, why=why)
    assert_no_wheel_installed(ws)


def test_the_wheels_own_sources_pass(ws: Workspace, wheelhouse: str, release_repo: FixtureRepo) -> None:
    out = ws.run("--json", FLYDSL_REPO=release_repo.url, **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "released" and ws.count("build") == 0
    count = len(wheel_sources(wheel_in(wheelhouse)))
    assert any(f"is built from the pin: all {count} files are byte-identical" in t for t in messages(out.stderr))


# -- a wheel that installs but does not work -----------------------------------------------------------------


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, wheelhouse: str) -> str:
    """A wheelhouse holding the real wheel with its _mlir extension cut short, its RECORD matching: made once
    for the module (the cases only read it; a copy of the real wheel takes seconds to write)."""
    return damaged_wheelhouse(wheelhouse, str(tmp_path_factory.mktemp("damaged")))


def test_auto_builds_from_source_when_the_wheels_extension_does_not_load(
        ws: Workspace, damaged: str, release_repo: FixtureRepo) -> None:
    out = ws.run("--json", FLYDSL_REPO=release_repo.url, **offline(damaged))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built" and ws.count("build") == 1
    said = [t for t in messages(out.stderr) if "wheel does not work" in t]
    assert len(said) == 1, messages(out.stderr)
    assert said[0].startswith(f"the flydsl 0.2.2 wheel does not work with {sys.executable}: "
                              "kernels.moe_gemm_2stage does not import: ImportError: ")
    assert "_mlir_libs/_mlir." in said[0] and said[0].endswith("building the pin from source instead")
    assert_no_wheel_installed(ws)
    assert_one_tree(ws)


def test_release_demanded_with_a_wheel_that_does_not_load_is_exit_6(
        ws: Workspace, damaged: str, release_repo: FixtureRepo) -> None:
    out = ws.run(FLYDSL_REPO=release_repo.url, **offline(damaged, "release"))
    assert out.returncode == 6, out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 6 and marker["stage"] == "verify"
    assert "released, but the import probe fails: kernels.moe_gemm_2stage does not import" in str(marker["reason"])
    assert ws.count("build") == 0 and not os.path.exists(ws.env_file)


def test_auto_builds_from_source_when_the_wheel_is_for_another_abi(
        ws: Workspace, wheelhouse: str, release_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> None:
    other = other_python(sys.implementation.cache_tag)
    assert other, "the test needs a pyenv interpreter of another minor version"
    tag = subprocess.run([other, "-c", "import sys; print(sys.implementation.cache_tag)"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    relabelled = retagged_wheelhouse(wheelhouse, os.path.join(str(tmp_path), "relabelled"), tag)
    out = ws.run("--json", FLYDSL_REPO=release_repo.url, FLYDSL_PYTHON=other, **offline(relabelled))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "built" and result["python"] == other and ws.count("build") == 1
    said = [t for t in messages(out.stderr) if "wheel does not work" in t]
    assert len(said) == 1 and "flydsl._mlir._mlir_libs._mlir" in said[0], messages(out.stderr)
    assert_no_wheel_installed(ws)
    assert_one_tree(ws, other)


def test_a_module_the_interpreter_lacks_is_not_blamed_on_the_wheel(
        ws: Workspace, wheelhouse: str, tmp_path: "os.PathLike[str]") -> None:
    # Imported by name at run time, as a plugin loader would: found only by the final probe.
    repo = make_release_repo(os.path.join(str(tmp_path), "needs", "FlyDSL.git"), wheelhouse,
                             kernel_extra=f"__import__({MISSING_MODULE!r})\n")
    out = ws.run(FLYDSL_REPO=repo.url, **offline(wheelhouse))
    assert out.returncode == 6, out.stderr
    assert f"No module named '{MISSING_MODULE}'" in out.stderr
    assert "building the pin from source" not in out.stderr and ws.count("build") == 0
    marker = ws.marker()
    assert marker["exit_code"] == 6 and marker["stage"] == "verify" and MISSING_MODULE in str(marker["reason"])


# -- the real repository -------------------------------------------------------------------------------------

REAL_REPO = os.environ.get("ENSURE_FLYDSL_REAL_REPO", "")


@pytest.mark.skipif(not REAL_REPO, reason="ENSURE_FLYDSL_REAL_REPO (a FlyDSL repository) is not set")
def test_the_real_tag_and_the_real_wheel_pass(ws: Workspace, wheelhouse: str) -> None:
    out = ws.run("--json", FLYDSL_REPO=REAL_REPO, FLYDSL_REQUIRE="flydsl", timeout=600,
                 **offline(wheelhouse, "release"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "released"
    assert any("is built from the pin: all 48 files are byte-identical in python/flydsl" in t
               for t in messages(out.stderr)), messages(out.stderr)


# -- the install itself: every file against the wheel's RECORD ------------------------------------------------


def test_a_wheel_whose_files_do_not_match_its_record_is_not_installed(
        ws: Workspace, wheelhouse: str, release_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> None:
    damaged = damaged_wheelhouse(wheelhouse, os.path.join(str(tmp_path), "damaged"), record=False)
    out = ws.run(FLYDSL_REPO=release_repo.url, **offline(damaged, "release"))
    assert out.returncode == 8, out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release"
    assert "could not be installed: 1 files do not match the wheel's RECORD, e.g. flydsl/_mlir/_mlir_libs/_mlir." \
        in str(marker["reason"])
    assert_no_wheel_installed(ws)
    assert not os.path.exists(ws.env_file)
    auto = ws.run("--json", FLYDSL_REPO=release_repo.url, **offline(damaged))  # auto: the pin from source
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["how"] == "built"
    assert any("do not match the wheel's RECORD" in t and "building the pin from source instead" in t
               for t in messages(auto.stderr))
