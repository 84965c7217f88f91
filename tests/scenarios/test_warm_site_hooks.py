"""What ``site`` runs at every start-up is part of the warm call's fingerprint (issue 19, item 2): a ``.pth``
file or a ``sitecustomize``/``usercustomize`` module edited in place (as ``setup.py develop`` and ``conda
develop`` rewrite ``easy-install.pth``), with its size and mtime and its folder's mtime unchanged, makes the
next call probe instead of answering from the fingerprint."""

from __future__ import annotations

import os
import subprocess

from tests.helpers.flydsl_fixture import make_installed_tree
from tests.helpers.scenario import ensure_json
from tests.helpers.workspace import Workspace
from tests.scenarios.test_warm import warm


def site_of(python: str) -> str:
    return subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def edit_in_place(path: str, text: str) -> None:
    """Rewrite ``path`` with ``text`` (same length), then give it and its folder their mtimes back: nothing a
    stat shows has changed."""
    before, folder = os.stat(path), os.stat(os.path.dirname(path))
    with open(path, encoding="utf-8") as handle:
        assert len(handle.read()) == len(text)
    with open(path, "r+", encoding="utf-8") as handle:
        handle.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.utime(os.path.dirname(path), ns=(folder.st_atime_ns, folder.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_pth_file_edited_in_place_means_a_probe(ws: Workspace, venv_python: str,
                                                  tmp_path: "os.PathLike[str]") -> None:
    # Another flydsl, as `setup.py develop` of a second checkout would put on the path.
    other = make_installed_tree(os.path.join(str(tmp_path), "other-checkout"), "0.2.5")
    empty = os.path.join(str(tmp_path), "empty-checkout")  # as long as the other's path
    os.makedirs(empty)
    pth = os.path.join(site_of(venv_python), "easy-install.pth")
    with open(pth, "w", encoding="utf-8") as handle:
        handle.write(empty + "\n")
    assert ensure_json(ws, FLYDSL_PYTHON=venv_python)["action"] == "provisioned"
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))
    edit_in_place(pth, other + "\n")
    again = ensure_json(ws, FLYDSL_PYTHON=venv_python)
    assert not warm(again) and "probe" in again["durations"], again  # type: ignore[operator]
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))  # recorded anew


def test_a_sitecustomize_edited_in_place_means_a_probe(ws: Workspace, venv_python: str) -> None:
    hook = os.path.join(site_of(venv_python), "sitecustomize.py")
    with open(hook, "w", encoding="utf-8") as handle:
        handle.write("X = 1\n")
    ensure_json(ws, FLYDSL_PYTHON=venv_python)
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))
    edit_in_place(hook, "X = 2\n")
    assert not warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))


def test_a_sitecustomize_outside_the_site_folders_is_watched(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """Found on the caller's PYTHONPATH: the probe names the folder it came from."""
    folder = os.path.join(str(tmp_path), "hooks")
    os.makedirs(folder)
    hook = os.path.join(folder, "sitecustomize.py")
    with open(hook, "w", encoding="utf-8") as handle:
        handle.write("X = 1\n")
    ensure_json(ws, PYTHONPATH=folder)
    assert warm(ensure_json(ws, PYTHONPATH=folder))
    edit_in_place(hook, "X = 2\n")
    assert not warm(ensure_json(ws, PYTHONPATH=folder))
