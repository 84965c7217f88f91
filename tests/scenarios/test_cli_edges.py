"""Edges of the command line: a reader that goes away, hang-up and termination signals, `wait --timeout 0`,
and a checkout that names no LLVM commit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from typing import Dict, List

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.scenario import Barrier, wait_for
from tests.helpers.workspace import Workspace, said


def run_into_closed_pipe(ws: Workspace, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run a command whose stdout is a pipe nobody reads any more (`... | head -1` once head has exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    full = dict(ws.env)
    full.update(env)
    try:
        return subprocess.run(ws.cmd(*args), env=full, stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["env"], ["wait"]])
def test_a_closed_stdout_ends_a_command_quietly(ws: Workspace, args: List[str]) -> None:
    assert ws.run().returncode == 0
    out = run_into_closed_pipe(ws, *args)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr and "Exception" not in out.stderr


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["clean"], ["stats"], ["env"]])
def test_a_stdout_closed_from_the_start_is_no_internal_error(ws: Workspace, args: List[str]) -> None:
    """`cmd >&-`: Python starts with no sys.stdout; the command still does its work and says its own code."""
    out = subprocess.run(["bash", "-c", 'exec "$@" >&-', "bash", *ws.cmd(*args)], env=ws.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert out.returncode == (1 if args == ["env"] else 0), out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr


@pytest.mark.parametrize("args, code", [(["env"], 1), (["env", "--json"], 1), (["wait"], 1), (["nosuch"], 64)])
def test_a_failure_said_into_a_stderr_nobody_reads_keeps_its_exit_code(ws: Workspace, args: List[str],
                                                                      code: int) -> None:
    """`cmd 2>&1 | head -c0`: the one line on stderr goes nowhere; the exit code still says the failure, not 70."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run(ws.cmd(*args), env=ws.env, stdout=subprocess.PIPE, stderr=write_end, text=True,
                             timeout=60, check=False)
    finally:
        os.close(write_end)
    assert out.returncode == code, out.stdout


def test_status_piped_to_head_exits_0(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    script = '"$@" status | head -c0; exit "${PIPESTATUS[0]}"'
    out = subprocess.run(["bash", "-c", script, "bash", *ws.cmd()], env=ws.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_an_ensure_whose_reader_went_away_still_provisions(ws: Workspace) -> None:
    out = run_into_closed_pipe(ws)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr
    assert os.path.isfile(ws.env_file) and not os.path.exists(ws.fail_marker)


EXPECTED_REASON = {signal.SIGHUP: "interrupted by SIGHUP (the terminal closed)",
                   signal.SIGTERM: "interrupted by SIGTERM"}


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_hangup_and_terminate_interrupt_a_blocking_ensure(ws: Workspace, sig: signal.Signals) -> None:
    proc = ws.popen(FIXTURE_BUILD_SLEEP="5")
    wait_for(os.path.join(ws.counter, "build.started"))
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"ensure-flydsl: {EXPECTED_REASON[sig]}; the next run resumes" in err
    marker = ws.marker()
    assert marker["exit_code"] == 130 and marker["stage"] == "build"
    assert marker["reason"] == EXPECTED_REASON[sig], marker
    assert "kill -9" not in json.dumps(marker)
    assert ws.run().returncode == 0  # and the next run resumes


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGHUP])
def test_a_second_signal_while_the_first_is_said_ends_as_the_first(ws: Workspace, second: signal.Signals) -> None:
    """The failure's line blocks on a full stderr (a slow reader); another SIGTERM or SIGHUP then is no traceback
    and no exit 1: the run ends with the first signal's 130 and its one line."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:  # fill the pipe: the tool's next write to stderr waits for a reader
            os.write(write_end, b"\n" * 4096)
    os.set_blocking(write_end, True)
    try:
        proc = subprocess.Popen(ws.cmd(), env=dict(ws.env, FIXTURE_BUILD_SLEEP="5"), stdout=subprocess.DEVNULL,
                                stderr=write_end)
    finally:
        os.close(write_end)
    wait_for(os.path.join(ws.counter, "build.started"))
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(2)  # the build is stopped and the line is being written
    os.kill(proc.pid, second)
    with os.fdopen(read_end, "rb") as reader:
        err = reader.read().decode(errors="replace").strip()
    assert proc.wait(timeout=60) == 130, err[-3000:]
    assert "Traceback" not in err and err.endswith(f"ensure-flydsl: {EXPECTED_REASON[signal.SIGTERM]}; the next run "
                                                   "resumes where this one stopped"), err[-3000:]

def test_hangup_interrupts_a_detached_worker(ws: Workspace) -> None:
    started = ws.run("start", FIXTURE_BUILD_SLEEP="5")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    wait_for(os.path.join(ws.counter, "build.started"))
    os.kill(pid, signal.SIGHUP)
    waited = ws.run("wait", "--timeout", "60")
    assert waited.returncode == 130, waited.stdout + waited.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 130 and marker["reason"] == EXPECTED_REASON[signal.SIGHUP], marker


def test_an_ignored_hangup_stays_ignored(ws: Workspace) -> None:
    """`nohup ensure-flydsl &`: the hang-up of the closing terminal must not stop the run."""
    full: Dict[str, str] = dict(ws.env, FIXTURE_BUILD_SLEEP="1")
    proc = subprocess.Popen(ws.cmd(), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for(os.path.join(ws.counter, "build.started"))
    os.kill(proc.pid, signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert os.path.isfile(ws.env_file)


def test_wait_timeout_0_answers_at_once(ws: Workspace) -> None:
    nothing = ws.run("wait", "--timeout", "0")
    # Nothing started: the answer "nothing for this request" (1), neither bad input, "still running" nor a crash.
    assert nothing.returncode == 1, nothing.stdout + nothing.stderr
    assert f"ensure-flydsl: nothing to wait for: nothing was started for this request on {ws.root};" in nothing.stdout
    barrier = Barrier(ws.counter, "build")  # the build holds here until the test lets it go
    started = ws.run("start", FIXTURE_BUILD_HOOK=barrier.hook)
    assert started.returncode == 0, started.stderr
    barrier.wait_reached()
    running = ws.run("wait", "--timeout", "0")
    assert running.returncode == 75, running.stdout + running.stderr
    assert "running: step build" in running.stdout, running.stdout
    assert f"still running after 0s; run `{said('wait --timeout 540', ws.env)}` again (exit 75)" in running.stdout
    barrier.release()
    done = ws.run("wait", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ws.count("build") == 1


@pytest.mark.parametrize("flags", [["--timeout", "-1"], ["--timeout", "soon"], ["--heartbeat", "0"]])
def test_wait_still_refuses_bad_seconds(ws: Workspace, flags: List[str]) -> None:
    out = ws.run("wait", *flags)
    assert out.returncode == 64 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert flags[0] in out.stderr


def test_a_checkout_without_an_llvm_commit_says_so(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    commit = own_repo.commit("no-llvm-hash", "0.2.4", llvm_hash="")
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    out = ws.run(FLYDSL_PIN=commit)
    assert out.returncode == 0, out.stderr
    with open(ws.log) as handle:
        log = handle.read()
    lines = [line for line in (out.stdout + log).splitlines() if "LLVM/MLIR" in line and "building" in line]
    assert lines, out.stdout
    assert all("None" not in line for line in lines), lines
    assert all("commit unknown" in line for line in lines), lines
