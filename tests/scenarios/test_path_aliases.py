"""Paths that alias each other or the root's files, and paths the kernel cannot take: exit 64, one line,
nothing touched.

The failure marker, the lock file (and its holder record), the env file, its JSON twin and the log must be
different files: a failure marker written over the env file reads as success to a file poller (and sourcing
it runs JSON as commands), one written into the root overwrites a tracked file.  A path that is not valid
UTF-8, or too long for the kernel, must be refused up front rather than crash after the fetch.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from typing import Dict, List, Mapping, Tuple, Union

import pytest

from ensure_flydsl.settings import load_settings
from tests.helpers.workspace import Workspace

Tree = Dict[str, Tuple[str, str]]


def snapshot(*folders: str) -> Tree:
    """Every entry under ``folders``: its kind and, for a file, a hash of its content (symlinks unfollowed)."""
    seen: Tree = {}
    for folder in folders:
        if not os.path.lexists(folder):
            continue
        for here, dirs, files in os.walk(folder):
            for name in dirs + files:
                path = os.path.join(here, name)
                if os.path.islink(path):
                    seen[path] = ("link", os.readlink(path))
                elif os.path.isdir(path):
                    seen[path] = ("dir", "")
                else:
                    with open(path, "rb") as handle:
                        seen[path] = ("file", hashlib.sha256(handle.read()).hexdigest())
    return seen


def one_line(out: "subprocess.CompletedProcess[str]") -> str:
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# (flags given to the run, given the workspace; the setting blamed first, the text naming the other)
def _alias_cases(ws: Workspace) -> Dict[str, Tuple[List[str], str, str]]:
    x = os.path.join(ws.base, "X")
    return {
        "marker is the env file": (["--fail-marker", ws.env_file], "--fail-marker=", "the env file of FLYDSL_ROOT="),
        "marker is the JSON twin": (["--fail-marker", ws.env_json], "--fail-marker=",
                                    "the env file's JSON twin of FLYDSL_ROOT="),
        "marker is the log": (["--fail-marker", ws.log], "--fail-marker=", "the log of FLYDSL_ROOT="),
        "marker is the lock": (["--lock-file", x, "--fail-marker", x], "--fail-marker=", f"--lock-file={x!r}"),
        "marker is the default lock": (["--fail-marker", ws.lock_file], "--fail-marker=", "FLYDSL_BUILD_LOCK="),
        "marker is the lock's holder": (["--lock-file", x, "--fail-marker", x + ".holder"], "--fail-marker=",
                                        f"the holder record of --lock-file={x!r}"),
        "lock is the env file": (["--lock-file", ws.env_file], "--lock-file=", "the env file of FLYDSL_ROOT="),
        "lock is the JSON twin": (["--lock-file", ws.env_json], "--lock-file=", "JSON twin of FLYDSL_ROOT="),
        "lock is the log": (["--lock-file", ws.log], "--lock-file=", "the log of FLYDSL_ROOT="),
        "lock is the default marker": (["--lock-file", ws.fail_marker], "FLYDSL_BUILD_FAILED=", "--lock-file="),
        "marker in the root": (["--fail-marker", os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")],
                               "--fail-marker=", f"lies inside FLYDSL_ROOT={ws.root!r}"),
        "marker is the root": (["--fail-marker", ws.root], "--fail-marker=", "lies inside FLYDSL_ROOT="),
        "lock in the root": (["--lock-file", os.path.join(ws.root, "my.lock")], "--lock-file=",
                             "lies inside FLYDSL_ROOT="),
    }


CASES = ["marker is the env file", "marker is the JSON twin", "marker is the log", "marker is the lock",
         "marker is the default lock", "marker is the lock's holder", "lock is the env file", "lock is the JSON twin",
         "lock is the log", "lock is the default marker", "marker in the root", "marker is the root",
         "lock in the root"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["ensure", "start"])
def test_aliased_paths_are_refused_before_anything_is_touched(ws: Workspace, case: str, command: str) -> None:
    cases = _alias_cases(ws)
    assert sorted(cases) == sorted(CASES)
    flags, blamed, other = cases[case]
    before = snapshot(ws.base)
    out = ws.run(command, *flags)
    assert out.returncode == 64, out.stdout + out.stderr
    line = one_line(out)
    assert line.startswith(f"ensure-flydsl: {blamed}") and other in line, line
    assert line.endswith("allowed: a path of its own") or line.endswith("allowed: a path outside the root")
    assert snapshot(ws.base) == before and not os.path.exists(ws.root)


def test_env_variables_are_named_too(ws: Workspace) -> None:
    out = ws.run(FLYDSL_BUILD_FAILED=os.path.join(ws.base, "L"), FLYDSL_BUILD_LOCK=os.path.join(ws.base, "L"))
    assert out.returncode == 64
    line = one_line(out)
    assert f"FLYDSL_BUILD_FAILED={os.path.join(ws.base, 'L')!r} is the same file as FLYDSL_BUILD_LOCK=" in line
    assert os.listdir(ws.base) == []


def test_a_symlink_to_another_file_is_that_file(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    link = os.path.join(ws.base, "marker-link")
    os.symlink(ws.env_file, link)
    before = snapshot(ws.base)
    out = ws.run("--fail-marker", link, FIXTURE_BUILD_FAIL="1")
    assert out.returncode == 64
    assert "the env file of FLYDSL_ROOT=" in one_line(out)
    assert snapshot(ws.base) == before
    # And a lock whose folder is a symlink into the root.
    os.symlink(ws.root, os.path.join(ws.base, "root-link"))
    out = ws.run("--lock-file", os.path.join(ws.base, "root-link", "flydsl_env.sh"))
    assert out.returncode == 64 and "--lock-file=" in one_line(out) and "the env file of" in one_line(out)


@pytest.mark.parametrize("command", ["ensure", "start", "status", "wait", "clean", "verify", "env", "doctor"])
def test_a_marker_on_a_tracked_file_is_refused_by_every_command(ws: Workspace, command: str) -> None:
    """`clean` would delete it, a failing run would overwrite it: no command takes such a setting."""
    assert ws.run().returncode == 0
    kernel = os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")
    before = snapshot(ws.base)
    out = ws.run(command, "--fail-marker", kernel, FIXTURE_BUILD_FAIL="1", FLYDSL_PIN=ws.repo.commits["v0.2.3"])
    assert out.returncode == 64, out.stdout + out.stderr
    assert "--fail-marker=" in one_line(out) and "lies inside FLYDSL_ROOT=" in one_line(out)
    assert snapshot(ws.base) == before
    assert ws.source_and_import().returncode == 0


def test_the_python_api_refuses_too(ws: Workspace) -> None:
    code = ("import ensure_flydsl, sys\n"
            "try:\n    ensure_flydsl.ensure(fail_marker=sys.argv[1], lock_file=sys.argv[1])\n"
            "except ensure_flydsl.BadInput as exc:\n    print(exc.code, exc)\n")
    x = os.path.join(ws.base, "X")
    out = subprocess.run([sys.executable, "-c", code, x], env=ws.env, stdout=subprocess.PIPE, text=True, check=True)
    assert out.stdout.startswith("64 fail_marker=") or out.stdout.startswith("64 --fail-marker="), out.stdout
    assert "is the same file as" in out.stdout and os.listdir(ws.base) == []


def test_distinct_paths_pass() -> None:
    settings = load_settings({"root": "/w/base/FlyDSL", "lock_file": "/w/locks/a", "fail_marker": "/w/base/m"}, {})
    assert settings.fail_marker == "/w/base/m"
    load_settings({"root": "/w/base/FlyDSL"}, {})  # the defaults never clash
    load_settings({"root": "/w/base/FlyDSL", "fail_marker": "/w/base/FlyDSL-other/m"}, {})  # a sibling, not inside


# ---------------------------------------------------------------------------------------------------------
# Paths the kernel cannot take, or that are not text: refused up front, as environment bytes and as flags.
# ---------------------------------------------------------------------------------------------------------

ENV_OF = {"root": "FLYDSL_ROOT", "lock_file": "FLYDSL_BUILD_LOCK", "fail_marker": "FLYDSL_BUILD_FAILED",
          "mlir_path": "MLIR_PATH", "cache": "FLYDSL_CACHE", "python": "FLYDSL_PYTHON", "rocm_path": "ROCM_PATH",
          "shim_dir": "FLYDSL_SHIM_DIR", "repo": "FLYDSL_REPO"}
FLAG_OF = {"root": "--root", "lock_file": "--lock-file", "fail_marker": "--fail-marker", "mlir_path": "--mlir-path",
           "cache": "--cache", "python": "--python", "rocm_path": "--rocm-path", "shim_dir": "--shim-dir",
           "repo": "--repo"}


def bad_value(kind: str, scratch: bytes) -> bytes:
    if kind == "not UTF-8":
        return scratch + b"/caf\xe9-\xff/FlyDSL"
    if kind == "a name over 255 bytes":
        return scratch + b"/" + b"n" * 256 + b"/FlyDSL"
    assert kind == "a path over 4096 bytes"
    return scratch + (b"/" + b"d" * 200) * 21 + b"/FlyDSL"


EXPECT = {"not UTF-8": "that is valid UTF-8", "a name over 255 bytes": "is at most 255 bytes",
          "a path over 4096 bytes": "a path of at most"}


def run_bytes(
    ws: Workspace, args: List[Union[str, bytes]], env: Mapping[bytes, bytes]
) -> "subprocess.CompletedProcess[str]":
    full = {os.fsencode(k): os.fsencode(v) for k, v in ws.env.items()}
    full.update(env)
    return subprocess.run([*ws.cmd(), *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120, text=True, errors="replace", check=False)


@pytest.mark.parametrize("kind", sorted(EXPECT))
@pytest.mark.parametrize("setting", sorted(ENV_OF))
@pytest.mark.parametrize("how", ["env", "flag"])
def test_bad_bytes_and_long_paths_are_refused_up_front(ws: Workspace, how: str, setting: str, kind: str) -> None:
    scratch = os.path.join(os.path.dirname(ws.base), "scratch")
    value = bad_value(kind, os.fsencode(scratch))
    if how == "env":
        out = run_bytes(ws, [], {ENV_OF[setting].encode(): value})
        label = ENV_OF[setting]
    else:
        out = run_bytes(ws, [FLAG_OF[setting], value], {})
        label = FLAG_OF[setting]
    assert out.returncode == 64, out.stdout + out.stderr
    line = one_line(out)
    assert line.startswith(f"ensure-flydsl: {label}=") and EXPECT[kind] in line, line
    if kind == "not UTF-8" and setting not in ("cache", "repo"):
        assert "a path that is valid UTF-8" in line
    assert not os.path.lexists(scratch) and not os.path.lexists(ws.root)
    # Nothing but the failure marker for file pollers (when the marker itself is fine) was written.
    assert set(os.listdir(ws.base)) <= {".flydsl_build.failed"}
    if os.listdir(ws.base):
        marker = ws.marker()
        assert marker["exit_code"] == 64 and label in str(marker["reason"])


def test_a_long_root_leaves_room_for_its_files(ws: Workspace) -> None:
    """A root just under the kernel's limit would fail at its first deeper file: refused with the limit."""
    root = os.path.join(ws.base, *["r" * 200] * 19)
    assert len(os.fsencode(root)) < 4095
    out = ws.run(FLYDSL_ROOT=root)
    assert out.returncode == 64 and "FLYDSL_ROOT=" in one_line(out) and "a path of at most" in one_line(out)
    assert os.listdir(ws.base) == []


def test_a_marker_name_leaves_room_for_its_temporary_file(ws: Workspace) -> None:
    marker = os.path.join(ws.base, "m" * 250)  # legal by itself, but its temporary twin would not be
    out = ws.run("--fail-marker", marker, FLYDSL_JOBS="0")
    assert out.returncode == 64 and "--fail-marker=" in one_line(out), out.stderr
    assert os.listdir(ws.base) == []


def test_long_but_legal_paths_pass() -> None:
    name = "n" * 200
    settings = load_settings({"root": f"/w/{name}/FlyDSL", "fail_marker": f"/w/{name}/{name}"}, {})
    assert settings.fail_marker.endswith(name)
    assert load_settings({"root": "/w/" + "/".join(["d" * 100] * 25)}, {}).root

