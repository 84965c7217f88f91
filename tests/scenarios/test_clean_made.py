"""``clean`` removes what the build steps made in ``build-fly/`` and ``llvm-project/`` and keeps, and names,
everything else there (issue 19, item 10): each step records what it made when it ends, and from its start
what was somebody else's (so a killed step's files are still known to be the tool's)."""

from __future__ import annotations

import os
from typing import Dict

from tests.helpers.flydsl_fixture import write
from tests.helpers.workspace import Workspace


def plant(folder: str, files: Dict[str, str]) -> None:
    for rel, text in files.items():
        write(os.path.join(folder, rel), text)


def assert_kept(folder: str, files: Dict[str, str]) -> None:
    for rel, text in files.items():
        with open(os.path.join(folder, rel), encoding="utf-8") as handle:
            assert handle.read() == text, rel


def test_clean_keeps_and_names_files_people_put_in_build_fly_and_llvm_project(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    build, llvm = os.path.join(ws.root, "build-fly"), os.path.join(ws.base, "llvm-project")
    mine = {"notes.txt": "tuning notes\n", "my_dumps/k1.mlir": "ir\n", "my_dumps/k2.mlir": "ir\n"}
    plant(build, mine)
    theirs = {"my_patch.diff": "a patch\n"}
    plant(llvm, theirs)
    edited = os.path.join(llvm, "mlir_install", "llvm-commit.txt")  # the build's file, changed by somebody
    with open(edited, "a", encoding="utf-8") as handle:
        handle.write("# pinned by hand\n")
    out = ws.run("clean")
    assert out.returncode == 0, out.stdout + out.stderr
    assert_kept(build, mine)
    assert_kept(llvm, theirs)
    assert open(edited, encoding="utf-8").read().endswith("# pinned by hand\n")
    # What the builds made is gone.
    assert not os.path.lexists(os.path.join(build, "python_packages"))
    assert sorted(os.listdir(build)) == ["my_dumps", "notes.txt"]
    assert not os.path.lexists(os.path.join(llvm, "mlir_install", "python-tag.txt"))
    assert sorted(os.listdir(llvm)) == ["mlir_install", "my_patch.diff"]
    assert os.listdir(os.path.join(llvm, "mlir_install")) == ["llvm-commit.txt"]
    assert (f"kept 2 files or folders in {build} that ensure-flydsl did not create: my_dumps, notes.txt; "
            "removed what its builds made there") in out.stdout
    assert (f"kept 2 files or folders in {llvm} that ensure-flydsl did not create: mlir_install/llvm-commit.txt, "
            "my_patch.diff; removed what its builds made there") in out.stdout
    assert "build-fly/my_dumps, build-fly/notes.txt" in out.stdout  # the root is kept for them
    assert os.path.isdir(ws.root) and not os.path.exists(ws.env_file)
    again = ws.run()  # the root is still the tool's; the build works beside the kept files
    assert again.returncode == 0, again.stdout + again.stderr
    assert_kept(llvm, theirs)


def test_what_a_killed_build_made_is_the_tools_and_what_was_there_before_is_not(ws: Workspace) -> None:
    ws.env["FLYDSL_STORE"] = "off"  # the package is made again by a build, not linked from the host store
    assert ws.run().returncode == 0
    build = os.path.join(ws.root, "build-fly")
    mine = {"notes.txt": "tuning notes\n"}
    plant(build, mine)
    # The build made again (its package gone), and the run killed -9 inside build.sh, after it made a file.
    for current, _, files in os.walk(os.path.join(build, "python_packages"), topdown=False):
        for name in files:
            os.unlink(os.path.join(current, name))
        os.rmdir(current)
    killed = ws.run(FIXTURE_BUILD_HOOK='touch "$PKG/../half-made.o"; kill -9 $PPID; sleep 5')
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert os.path.exists(os.path.join(build, "half-made.o"))
    out = ws.run("clean")
    assert out.returncode == 0, out.stdout + out.stderr
    assert_kept(build, mine)
    assert os.listdir(build) == ["notes.txt"]
    assert f"kept 1 files or folders in {build} that ensure-flydsl did not create: notes.txt" in out.stdout


def test_a_clean_root_with_nothing_planted_is_removed_whole(ws: Workspace) -> None:
    """The control: nothing of anybody's, nothing kept."""
    assert ws.run().returncode == 0
    out = ws.run("clean")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not os.path.exists(ws.root) and not os.path.exists(os.path.join(ws.base, "llvm-project"))
    assert "did not create" not in out.stdout


def test_a_rebuild_for_another_pin_keeps_files_people_put_in_build_fly(ws: Workspace) -> None:
    """A build-fly made for another pin was removed whole before a rebuild (issue 19's data loss, the other
    path): now only what the build recorded is removed, and somebody's files go aside with the folder."""
    assert ws.run().returncode == 0
    build = os.path.join(ws.root, "build-fly")
    mine = {"notes.txt": "tuning notes\n", "my_dumps/k1.mlir": "ir\n"}
    plant(build, mine)
    out = ws.run(FLYDSL_PIN=ws.repo.commits["v0.2.3"], FLYDSL_EXACT_PIN="1")
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    aside = [n for n in os.listdir(ws.root) if n.startswith("build-fly.moved-by-ensure-flydsl-")]
    assert len(aside) == 1, os.listdir(ws.root)
    assert_kept(os.path.join(ws.root, aside[0]), mine)
    assert sorted(os.listdir(os.path.join(ws.root, aside[0]))) == ["my_dumps", "notes.txt"]  # the old build is gone
    assert (f"removed what ensure-flydsl made in {build} (it was made for another commit, interpreter, MLIR or "
            f"release); the rest, which it did not make (my_dumps, notes.txt), is kept in "
            f"{os.path.join(ws.root, aside[0])}") in said
    assert ws.env_twin()["version"] == "0.2.3"


KILL_AFTER_OWNER = '''import os, signal
_unlink = os.unlink
def _unlink_then_die(path, *args, **kwargs):
    _unlink(path, *args, **kwargs)
    if os.fsdecode(path).rsplit("/", 1)[-1] == "owner.json":  # the record that the tool made the root
        os.kill(os.getpid(), signal.SIGKILL)
os.unlink = _unlink_then_die
'''


def test_a_clean_killed_midway_leaves_no_half_root(ws: Workspace, tmp_path: str) -> None:
    """A clean stopped (SIGKILL, a container stop) once the root's owner record was gone left a half-removed root
    that was nobody's: `ensure` refused it (64), `clean` kept it."""
    assert ws.run().returncode == 0
    hook = os.path.join(str(tmp_path), "hook")
    write(os.path.join(hook, "sitecustomize.py"), KILL_AFTER_OWNER)
    killed = ws.run("clean", PYTHONPATH=hook)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    again = ws.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert ws.run("clean").returncode == 0
    assert not os.path.lexists(ws.root) and sorted(os.listdir(ws.base)) == [".flydsl_build.lock"]
