"""ensure_flydsl/warm.py on hand-made files: what a name lands on, read without running it (pyenv's shim rules).

The same rules against this machine's real pyenv, run for real: tests/scenarios/test_warm_shims.py.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, Optional

import pytest

from ensure_flydsl.warm import landing, local_version_file, read_version_file, safe_version
from tests.helpers.pyenv_root import PYENV_SHIM

# The shim `pyenv rehash` writes, for a root whose pyenv is ROOT/libexec/pyenv.
SHIM = PYENV_SHIM.replace('"{pyenv}"', '"{root}/libexec/pyenv"')
OLD_SHIM = """#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${{0##*/}}"

export PYENV_ROOT="{root}"
exec "{root}/libexec/pyenv" exec "$program" "$@"
"""


def write(path: str, text: str, mode: int = 0o644) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)
    return path


class Root:
    """A pyenv root: the shim, versions A, B and A/envs/e whose python3 is a link to the test interpreter."""

    def __init__(self, folder: str, shim: str = SHIM) -> None:
        self.root = folder
        self.shim = write(os.path.join(folder, "shims", "python3"), shim.format(root=folder), 0o755)
        write(os.path.join(folder, "libexec", "pyenv"), "#!/bin/sh\n", 0o755)
        for version in ("A", "B", "A/envs/e"):
            binary = self.binary(version)
            os.makedirs(os.path.dirname(binary))
            os.symlink(os.path.realpath(sys.executable), binary)
        os.makedirs(os.path.join(folder, "versions", "C", "bin"))  # installed, without python3

    def binary(self, version: str) -> str:
        return os.path.join(self.root, "versions", version, "bin", "python3")

    def lands(self, environ: Optional[Dict[str, str]] = None) -> Optional[str]:
        found = landing(self.shim, environ or {})
        return None if found is None else found.executable


@pytest.fixture
def root(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> Root:
    made = Root(os.path.join(str(tmp_path), "pyenv"))
    work = os.path.join(str(tmp_path), "work", "sub")
    os.makedirs(work)
    monkeypatch.chdir(work)
    return made


def test_a_binary_is_its_own_landing() -> None:
    found = landing(sys.executable, {})
    assert found is not None and found.executable == found.found == os.path.abspath(sys.executable)
    assert found.dispatch is None
    assert landing("python-that-is-not-there", {"PATH": "/nonexistent"}) is None


def test_a_script_that_is_not_pyenvs_shim_is_not_settled(tmp_path: "os.PathLike[str]") -> None:
    folder = str(tmp_path)
    other = write(os.path.join(folder, "wrapper"), f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', 0o755)
    assert landing(other, {}) is None
    edited = SHIM.format(root=folder).replace("set -e\n", "set -e\nexport PYENV_VERSION=B\n")
    assert landing(write(os.path.join(folder, "shims", "python3"), edited, 0o755), {"PYENV_VERSION": "A"}) is None
    fifo = os.path.join(folder, "fifo")
    os.mkfifo(fifo)
    assert landing(fifo, {}) is None  # never blocks on a FIFO


def test_pyenv_version_picks_the_version(root: Root) -> None:
    assert root.lands({"PYENV_VERSION": "A"}) == root.binary("A")
    assert root.lands({"PYENV_VERSION": "B:A"}) == root.binary("B")
    assert root.lands({"PYENV_VERSION": "python-B"}) == root.binary("B")  # pyenv drops the python- prefix
    assert root.lands({"PYENV_VERSION": "A/envs/e"}) == root.binary("A/envs/e")  # pyenv-virtualenv's name


@pytest.mark.parametrize("selected", ["system", "3", "Z", "Z:A", "C", "C:A", ":A", "A*", "../pyenv/versions/A",
                                      "A/../B", " A"])
def test_a_choice_pyenv_settles_elsewhere_is_not_settled(root: Root, selected: str) -> None:
    """system, a prefix for `pyenv latest`, not installed (pyenv then tries the next one, then the system's),
    installed without python3, an empty field, a glob, a path out of versions/, a space."""
    assert root.lands({"PYENV_VERSION": selected}) is None


def test_the_version_files_are_looked_up_as_pyenv_does(root: Root, tmp_path: "os.PathLike[str]") -> None:
    top = str(tmp_path)
    assert root.lands() is None  # no selection at all: system
    write(os.path.join(root.root, "version"), "B\n")
    assert root.lands() == root.binary("B")  # pyenv global
    write(os.path.join(top, "work", ".python-version"), "# pinned\r\n\r\n  A  extra words\r\nB\r\n")
    assert root.lands() == root.binary("A")  # found above the working folder
    assert root.lands({"PYENV_VERSION": "B"}) == root.binary("B")  # the variable wins
    elsewhere = os.path.join(top, "elsewhere")
    write(os.path.join(elsewhere, ".python-version"), "B")
    assert root.lands({"PYENV_DIR": elsewhere}) == root.binary("B")
    assert root.lands({"PYENV_DIR": "../../elsewhere"}) == root.binary("B")  # relative to the working folder
    assert root.lands({"PYENV_DIR": "../../elsewhere", "CDPATH": "/x"}) is None  # `cd` would search CDPATH
    assert root.lands({"PYENV_DIR": os.path.join(top, "missing")}) is None  # pyenv stops there
    write(os.path.join(elsewhere, ".python-version"), "")
    assert root.lands({"PYENV_DIR": elsewhere}) is None  # an empty file still wins: system


def test_the_working_folder_is_the_shells_own(root: Root, tmp_path: "os.PathLike[str]",
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """bash takes PWD when it names the working folder: the lookup walks up the path the caller used."""
    top = str(tmp_path)
    real = os.path.join(top, "real", "deep")
    os.makedirs(real)
    link = os.path.join(top, "linked", "here")
    os.makedirs(os.path.dirname(link))
    os.symlink(real, link)
    write(os.path.join(top, "linked", ".python-version"), "B\n")
    write(os.path.join(root.root, "version"), "A\n")
    monkeypatch.chdir(link)
    assert root.lands({"PWD": link}) == root.binary("B")
    assert root.lands({"PWD": "/somewhere/else"}) == root.binary("A")  # a stale PWD: the physical folder


def test_the_hooks_are_part_of_the_dispatch(root: Root) -> None:
    before = landing(root.shim, {"PYENV_VERSION": "A"})
    assert before is not None
    write(os.path.join(root.root, "plugins", "p", "etc", "pyenv.d", "which", "redirect.bash"), "true\n")
    after = landing(root.shim, {"PYENV_VERSION": "A"})
    assert after is not None and after.executable == before.executable and after.dispatch != before.dispatch


def test_the_shim_of_older_pyenv_is_read_too(tmp_path: "os.PathLike[str]") -> None:
    old = Root(os.path.join(str(tmp_path), "old"), OLD_SHIM)
    assert old.lands({"PYENV_VERSION": "B"}) == old.binary("B")


def test_read_version_file(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "v")
    assert read_version_file(path) == ""
    assert read_version_file(write(path, "3.12.1\n3.11.7\n")) == "3.12.1:3.11.7"
    assert read_version_file(write(path, "\t3.12.1 # why\n#3.11.7\n")) == "3.12.1"
    assert read_version_file(write(path, "x" * 1025)) is None  # pyenv reads lines 1024 characters at a time
    assert read_version_file(write(path, "3.12.1\0")) is None
    assert read_version_file(write(path, "../elsewhere\n")) is None
    os.unlink(path)
    os.mkdir(path)
    assert read_version_file(path) is None


def test_local_version_file_walks_up_to_the_root(tmp_path: "os.PathLike[str]") -> None:
    top = str(tmp_path)
    deep = os.path.join(top, "a", "b", "c")
    os.makedirs(deep)
    first = local_version_file(deep)
    assert first is None or not first.startswith(top)
    os.makedirs(os.path.join(top, "a", "b", ".python-version"))  # a folder is not a version file
    found = write(os.path.join(top, "a", ".python-version"), "A\n")
    assert local_version_file(deep) == found


def test_safe_version() -> None:
    assert safe_version("3.12.1") and safe_version("pypy3.10-7.3.13") and safe_version("3.12.1/envs/x")
    assert not any(safe_version(v) for v in ("", ".", "..", "a/../b", "a//b", "3.*", "a b", "a:b", "[3]"))
