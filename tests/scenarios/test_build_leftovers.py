"""What a build leaves behind does not hold the run: a process that keeps the output pipe open (in the build's
own process group, or setsid'ed out of it) is stopped or no longer read once the build script exits; and a
huge line without a newline costs a bounded amount of memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from typing import Iterator

import pytest

from tests.helpers.scenario import alive
from tests.helpers.workspace import Workspace

# Runs the tool and prints the peak RSS (KiB) of the largest process it waited for: the tool itself (the
# build's own processes, head and tr, are tiny).
PEAK_RSS = textwrap.dedent("""
    import resource, subprocess, sys
    done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")


@contextlib.contextmanager
def killed_afterwards(pidfile: str) -> Iterator[None]:
    """Whatever the hook started and wrote into ``pidfile`` is gone after the test, whatever happened."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            pid = int(open(pidfile).read())
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "hook",
    ["(setsid sleep 40 & echo $! > {pidfile})", "sleep 40 & echo $! > {pidfile}",
     "sleep 40 > /dev/null 2>&1 & echo $! > {pidfile}"],
    ids=["setsid", "same-group", "same-group-quiet"],
)
def test_a_process_the_build_leaves_behind_does_not_hold_the_run(
    ws: Workspace, tmp_path: "os.PathLike[str]", hook: str
) -> None:
    pidfile = os.path.join(str(tmp_path), "leftover.pid")
    with killed_afterwards(pidfile):
        try:
            done = ws.run(FIXTURE_BUILD_HOOK=hook.format(pidfile=pidfile), timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("ensure was still running 30 s after the build script ended (it waits for its leftover)")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Build complete!" in open(ws.log).read()  # the output up to the script's end was all read
        pid = int(open(pidfile).read())
        if "setsid" not in hook:
            assert not alive(pid), "the build's own process group outlived the build"
    assert ws.source_and_import().returncode == 0


def peak_rss_kib(ws: Workspace, hook: str) -> int:
    env = dict(ws.env, FIXTURE_BUILD_HOOK=hook)
    out = subprocess.run([sys.executable, "-c", PEAK_RSS, *ws.cmd()], env=env, stdout=subprocess.PIPE, text=True,
                         timeout=320, check=True).stdout.split()
    assert out[0] == "0", f"ensure failed with exit {out[0]}; see {ws.log}"
    return int(out[1])


def test_a_huge_line_without_a_newline_is_cut_and_costs_little_memory(
    ws: Workspace, tmp_path: "os.PathLike[str]"
) -> None:
    baseline = peak_rss_kib(ws, "echo a normal line")
    other = Workspace(os.path.join(str(tmp_path), "huge"), ws.repo)
    other.env["FLYDSL_STORE"] = "off"  # this host's store would link the first root's tree: no build to measure
    huge = peak_rss_kib(other, "head -c 50000000 /dev/zero | tr '\\0' x; echo; echo after the huge line")
    # The line is 50 MB: kept whole (as bytes, then as text, then in the log's write) it costs 100 MB and more.
    assert huge - baseline < 30 * 1024, (baseline, huge)
    log = open(other.log).read()
    assert "after the huge line" in log
    cut = [line for line in log.splitlines() if line.startswith("xxxx")]
    assert len(cut) == 1 and len(cut[0]) < 70 * 1024 and "bytes cut)" in cut[0], [c[-80:] for c in cut]
