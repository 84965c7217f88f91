"""A full disk: during the build (a root on a small tmpfs; a file-size limit) and during the cache download.

Each ends with a clear failure (the stage's exit code, "No space left on device" or "File too large" in the
message) and nothing half-published: no env file, no temporary file of an atomic write, no half-fetched
cache folder; once there is room, a plain rerun succeeds.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
from typing import Iterator, List

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, git, make_repo
from tests.helpers.reliability import record, tmpfs
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace

KNOB = """if [ -n "${FIXTURE_BIG_FILE_KB:-}" ]; then
  # Test knob: the build writes a large file into its output (a full disk hits it here).
  head -c "${FIXTURE_BIG_FILE_KB}K" /dev/zero > "$PKG/flydsl/big.bin"
fi
for i in 1 2 3; do"""


@pytest.fixture(scope="module")
def knob_repo(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    """The fixture repository plus a commit whose build.sh writes FIXTURE_BIG_FILE_KB of output."""
    repo = make_repo(str(tmp_path_factory.mktemp("disk-upstream") / "FlyDSL.git"))
    script = os.path.join(repo.path, "scripts", "build.sh")
    with open(script) as handle:
        text = handle.read()
    assert text.count("for i in 1 2 3; do") == 1
    with open(script, "w") as handle:
        handle.write(text.replace("for i in 1 2 3; do", KNOB))
    git(repo.path, "commit", "-q", "-am", "big: build.sh can write a big file")
    repo.commits["big"] = git(repo.path, "rev-parse", "HEAD")
    return repo


@pytest.fixture
def small_disk(tmp_path: "os.PathLike[str]") -> Iterator[str]:
    # Just over what the doctor asks for (0.5 GiB free), so that the build starts and then fills it.
    with tmpfs(os.path.join(str(tmp_path), "disk"), "530m") as path:
        yield path


def tmp_files(top: str) -> List[str]:
    """Temporary files of atomic writes and half-fetched cache folders left anywhere under ``top``."""
    found = []
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            if name.endswith(".tmp") or ".fetch-" in name or name.startswith(".upload."):
                found.append(os.path.join(folder, name))
    return found


def assert_nothing_half_published(ws: Workspace) -> None:
    assert not os.path.exists(ws.env_file) and not os.path.exists(ws.env_json)
    assert tmp_files(ws.base) == []
    if os.path.exists(ws.fail_marker):  # if the disk had room for it, it is whole
        with open(ws.fail_marker) as handle:
            assert json.load(handle)["exit_code"] != 0


def test_a_full_disk_during_the_build(knob_repo: FixtureRepo, small_disk: str) -> None:
    ws = Workspace(os.path.join(small_disk, "base"), knob_repo)
    ws.env["FLYDSL_PIN"] = knob_repo.commits["big"]
    out = ws.run(FIXTURE_BIG_FILE_KB=str(600 << 10))  # 600 MiB into 530
    assert out.returncode == 5, out.stdout + out.stderr
    assert "failed (exit 5: FlyDSL build failed, stage build)" in out.stderr
    assert "No space left on device" in out.stderr, out.stderr
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr
    assert_nothing_half_published(ws)
    assert ws.marker()["exit_code"] == 5  # written in the room the run kept for it (runs/records.py: reserve)
    # Room again (the file system grows; the partial output of the failed build is still there).
    subprocess.run(["mount", "-o", "remount,size=2g", small_disk], check=True)
    again = ws.run("--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["commit"] == knob_repo.commits["big"]
    assert_one_tree(ws)
    record("disk", where="the build (root on a 530 MiB tmpfs, build writes 600 MiB)", exit_code=out.returncode,
           message="No space left on device", half_published=0, rerun="succeeded")


def _file_size_limit(limit: int) -> None:
    # The tool's own writes past the limit fail with EFBIG; its children get SIGXFSZ back (subprocess
    # restores it), so the build's writer dies of "File size limit exceeded", as under a real ulimit -f.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_file_size_limit_during_the_build(ws: Workspace, knob_repo: FixtureRepo) -> None:
    ws.env.update(FLYDSL_REPO=knob_repo.url, FLYDSL_PIN=knob_repo.commits["big"])
    env = dict(ws.env, FIXTURE_BIG_FILE_KB=str(64 << 10))
    out = subprocess.run(ws.cmd(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=120, preexec_fn=lambda: _file_size_limit(32 << 20))
    assert out.returncode == 5, out.stdout + out.stderr
    assert "stage build" in out.stderr and "File size limit exceeded" in out.stderr, out.stderr
    assert_nothing_half_published(ws)
    assert ws.marker()["exit_code"] == 5
    assert ws.run().returncode == 0
    assert_one_tree(ws)
    record("disk", where="the build (RLIMIT_FSIZE 32 MiB, build writes 64 MiB)", exit_code=out.returncode,
           message="File size limit exceeded", half_published=0, rerun="succeeded")


def test_a_full_disk_during_the_cache_download(knob_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> None:
    """Another host published a tree of 80 MiB (a small blob: zeros compress); here the root is on a 48 MiB
    file system: the download fails, nothing half-fetched stays, and the run stops with the doctor's clear
    word on the disk (it cannot build there either); with room, the same entry is fetched."""
    cache = os.path.join(str(tmp_path), "cache")
    first = Workspace(os.path.join(str(tmp_path), "host1", "base"), knob_repo)
    first.env.update(FLYDSL_PIN=knob_repo.commits["big"], FLYDSL_CACHE=cache)
    assert first.run(FIXTURE_BIG_FILE_KB=str(80 << 10)).returncode == 0
    with tmpfs(os.path.join(str(tmp_path), "disk"), "48m") as disk:
        ws = Workspace(os.path.join(disk, "base"), knob_repo)
        ws.env.update(FLYDSL_PIN=knob_repo.commits["big"], FLYDSL_CACHE=cache)
        out = ws.run()
        assert out.returncode == 5, out.stdout + out.stderr
        assert f"no space left on the file system holding {ws.root}" in out.stdout, out.stdout
        assert f"mounted at {disk})" in out.stdout and "nothing was left behind" in out.stdout, out.stdout
        assert "stage doctor" in out.stderr and "disk" in out.stderr
        assert "Traceback" not in out.stderr
        assert_nothing_half_published(ws)
        assert not os.path.exists(os.path.join(ws.root, "build-fly", "python_packages"))
        assert ws.marker()["exit_code"] == 5
        subprocess.run(["mount", "-o", "remount,size=2g", disk], check=True)
        again = ws.run("--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["how"] == "cached" and ws.count("build") == 0
        assert_one_tree(ws)
    record("disk", where="the cache download (80 MiB tree onto a 48 MiB tmpfs)", exit_code=out.returncode,
           message="no space left on the file system (cache), then the doctor: disk", half_published=0,
           rerun="succeeded")


def test_a_full_disk_while_copying_from_the_host_store(knob_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 6: the copy of a 20 MiB stored tree into a root on a 16 MiB file system named the store's
    file system (73 GiB free) with exit 8; it is the root's, exit 5, as elsewhere, and nothing half-copied stays."""
    store = os.path.join(str(tmp_path), "store")
    first = Workspace(os.path.join(str(tmp_path), "host", "base"), knob_repo)
    first.env.update(FLYDSL_PIN=knob_repo.commits["big"], FLYDSL_STORE=store)
    assert first.run(FIXTURE_BIG_FILE_KB=str(20 << 10)).returncode == 0
    with tmpfs(os.path.join(str(tmp_path), "disk"), "16m") as disk:
        ws = Workspace(os.path.join(disk, "base"), knob_repo)
        ws.env.update(FLYDSL_PIN=knob_repo.commits["big"], FLYDSL_STORE=store)
        out = ws.run("--json")
        data = json.loads(out.stdout)
        assert out.returncode == data["exit_code"] == 5, out.stderr
        assert f"no space left on the file system holding {ws.root}" in data["reason"], data["reason"]
        assert f"mounted at {disk})" in data["reason"] and store not in data["reason"], data["reason"]
        assert_nothing_half_published(ws)
        assert not os.path.exists(os.path.join(ws.root, "build-fly", ".python_packages.linking"))
        subprocess.run(["mount", "-o", "remount,size=2g", disk], check=True)
        again = ws.run("--json")
        assert again.returncode == 0 and json.loads(again.stdout)["link_mode"] == "copy", again.stderr
    record("disk", where="the copy from the host store (20 MiB tree onto a 16 MiB tmpfs)", exit_code=out.returncode,
           message="no space left on the file system holding the root", half_published=0, rerun="succeeded")
