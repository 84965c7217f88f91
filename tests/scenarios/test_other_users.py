"""Other users and read-only places (issue 19, item 3): a root made under umask 077 and read by another
user, ``clean`` by a user who does not own the root, ``clean`` on a read-only mount.  Each command says in
one line which path blocks it and what it needs (exit 64), never a traceback (exit 70), and nothing is
removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Iterator, List

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.other_user import open_workspace, other_python, read_only_bind, run_as_other, said_to_other
from tests.helpers.workspace import Workspace, said

COMMANDS = [["status"], ["status", "--json"], ["env"], ["doctor"], ["clean"], ["start"], ["ensure"],
            ["ensure", "--verify"], ["wait", "--timeout", "1"], ["verify"]]


@pytest.fixture
def shared_ws(fixture_repo: FixtureRepo) -> Iterator[Workspace]:
    yield from open_workspace(fixture_repo)


def listing(folder: str) -> List[str]:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, ds, fs in os.walk(folder) for n in ds + fs)


def made_under_umask_077(ws: Workspace) -> None:
    out = subprocess.run(["bash", "-c", 'umask 077; exec "$@"', "bash", *ws.cmd()], env=ws.env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert out.returncode == 0, out.stderr
    assert os.stat(ws.root).st_mode & 0o077 == 0


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_another_user_gets_one_line_for_a_root_made_under_umask_077(shared_ws: Workspace, args: List[str]) -> None:
    python = other_python()
    made_under_umask_077(shared_ws)
    before = listing(shared_ws.base)
    out = run_as_other(shared_ws, python, *args)
    lines = out.stderr.strip().splitlines()
    if args == ["verify"]:  # verify only probes: it reads nothing of the tool's, and the tree is not there for it
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr  # no env file answers
        assert f"the env file {shared_ws.env_file} cannot be read by this user (Permission denied)" in out.stdout
        return
    assert out.returncode == 64, out.stdout + out.stderr
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    if "--json" in args:  # stderr carries JSON events only: the one line is the failure's event
        event = json.loads(lines[0])
        assert event["event"] == "failed" and event["exit_code"] == 64 and event["stage"] == "access", event
        lines = ["ensure-flydsl: " + event["reason"]]
    blocked = {f"the folder {shared_ws.root} ", f"the folder {os.path.join(shared_ws.base, '.ensure_flydsl')} "}
    assert any(lines[0].startswith("ensure-flydsl: " + b) for b in blocked), lines[0]
    assert (f"cannot be read by nobody (uid 65534): it belongs to root (uid 0), mode 0700; "
            f"`{said_to_other(shared_ws, python, args[0])}` needs read access to it: run it as root (uid 0), or use a "
            "FLYDSL_ROOT of your own") in lines[0]
    assert listing(shared_ws.base) == before


def test_clean_by_a_user_who_does_not_own_the_root(shared_ws: Workspace) -> None:
    python = other_python()
    assert shared_ws.run().returncode == 0
    before = listing(shared_ws.base)
    out = run_as_other(shared_ws, python, "clean")
    assert out.returncode == 64, out.stdout + out.stderr
    assert out.stderr.strip() == (
        f"ensure-flydsl: the file {shared_ws.lock_file} cannot be written by nobody (uid 65534): it belongs to root "
        f"(uid 0), mode 0644; `{said_to_other(shared_ws, python, 'clean')}` needs write access to it: run it as root "
        "(uid 0), or use a FLYDSL_ROOT of your own")
    assert listing(shared_ws.base) == before


def test_clean_on_a_read_only_mount(ws: Workspace) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"a read-only bind mount needs root; this runs as uid {os.geteuid()}")
    assert ws.run().returncode == 0
    mounted = os.path.join(os.path.dirname(ws.base), "read-only")
    why = read_only_bind(ws.base, mounted)
    if why is not None:
        pytest.skip(why)
    try:
        before = listing(ws.base)
        root = os.path.join(mounted, "FlyDSL")
        out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "clean"], env=dict(ws.env, FLYDSL_ROOT=root),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
        assert out.returncode == 64, out.stdout + out.stderr
        assert out.stderr.strip() == (
            f"ensure-flydsl: {os.path.join(mounted, '.flydsl_build.lock')} is on a read-only file system, and "
            f"`{said('clean', ws.env)}` needs to write there: remount it read-write, or use a FLYDSL_ROOT on a "
            "writable file system")
        assert listing(ws.base) == before
    finally:
        subprocess.run(["umount", mounted], check=True)


HOLD_A_RUN = """
import json, os, sys, time
from ensure_flydsl.runs.records import RunRecord, RunStore
store, [name] = RunStore(sys.argv[1]), [n for n in os.listdir(RunStore(sys.argv[1]).folder) if n.endswith(".json")]
with open(os.path.join(store.folder, name)) as handle:
    record = RunRecord.from_json(json.load(handle))
record.run_id, record.state, record.finished, record.result = sys.argv[2], "running", None, None
fd = store.hold_alive(record.run_id)
store.write(record)
print("held", flush=True)
time.sleep(120)
"""


def test_another_user_sees_a_run_started_under_umask_077_as_running(shared_ws: Workspace) -> None:
    """A run whose user's umask is 077, in a runs folder an earlier run made readable: another user's `status`
    reads its record, but could not open its alive file (0600), and said it had died (exit 9) while it ran."""
    python = other_python()
    assert shared_ws.run().returncode == 0
    os.remove(shared_ws.env_file)  # the run is going again: `clean` took the env file, say
    run_id = "20261207-161500-abcdef"
    holder = subprocess.Popen(["bash", "-c", 'umask 077; exec "$@"', "bash", sys.executable, "-c", HOLD_A_RUN,
                               shared_ws.root, run_id], env=shared_ws.env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        out = run_as_other(shared_ws, python, "status", "--json", "--run-id", run_id)
        assert json.loads(out.stdout)["state"] == "running", out.stdout + out.stderr
    finally:
        holder.kill()
        holder.wait()
