"""A remote that accepts connections and never answers (or answers HTTP headers, then stalls) no longer holds
a run for minutes: every network step ends after the network silence limit (60 s; shortened here through the
internal ENSURE_FLYDSL_NETWORK_SILENCE_S) with the remote named, saying a line every half of the limit
while it waits.  Real servers on 127.0.0.1, the real CLI, real git and pip."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, add_submodule, git
from tests.helpers.stall_server import stall_server
from tests.helpers.workspace import Workspace

LIMIT = 2  # seconds of silence in these tests (the default is 60)
FAST = {"ENSURE_FLYDSL_NETWORK_SILENCE_S": str(LIMIT)}


def timed(ws: Workspace, *args: str, **env: str) -> "tuple[subprocess.CompletedProcess[str], float]":
    started = time.monotonic()
    out = ws.run(*args, timeout=100, **dict(FAST, **env))
    return out, time.monotonic() - started


@pytest.mark.parametrize("mode,scheme", [("silent", "http"), ("headers", "http"), ("silent", "git")])
def test_a_silent_repository_ends_the_fetch_with_exit_2_naming_it(ws: Workspace, mode: str, scheme: str) -> None:
    with stall_server(mode) as server:
        url = f"{scheme}://127.0.0.1:{server.port}/FlyDSL.git"
        out, seconds = timed(ws, FLYDSL_REPO=url, FLYDSL_PIN="v0.2.2")
        assert server.accepted >= 1  # git did reach it
    assert out.returncode == 2, out.stderr
    assert f"git ls-remote stopped: nothing received from {url} for {LIMIT} s" in out.stderr
    assert f"git ls-remote: still waiting for {url} (" in out.stdout + out.stderr  # the line said while it waits
    marker = ws.marker()
    assert marker["stage"] == "fetch" and marker["exit_code"] == 2
    assert url in str(marker["reason"]) and "FLYDSL_REPO" in str(marker["hint"])
    # The bound: the limit, not git's or curl's own minutes (301 s before); the slack is for a loaded machine.
    assert LIMIT <= seconds < LIMIT + 30, seconds


def test_a_silent_submodule_ends_with_exit_2_naming_its_url(ws: Workspace, own_repo: FixtureRepo,
                                                             tmp_path: "os.PathLike[str]") -> None:
    with stall_server("headers") as server:
        url = f"http://127.0.0.1:{server.port}/dlpack.git"
        add_submodule(own_repo, os.path.join(str(tmp_path), "dlpack.git"), "with-sub")
        git(own_repo.path, "config", "-f", ".gitmodules", "submodule.thirdparty/dlpack.url", url)
        git(own_repo.path, "commit", "-q", "-am", "the submodule from a remote that stalls")
        sha = git(own_repo.path, "rev-parse", "HEAD")
        out, seconds = timed(ws, FLYDSL_REPO=own_repo.url, FLYDSL_PIN=sha)
        assert server.accepted >= 1
    assert out.returncode == 2, out.stderr
    assert f"git submodule update stopped: nothing received from {url} for {LIMIT} s" in out.stderr
    assert f"git submodule update: still waiting for {url} (" in out.stdout + out.stderr
    assert ws.marker()["stage"] == "submodules"
    assert seconds < LIMIT + 60, seconds


def test_the_build_scripts_git_gives_up_a_stalled_http_transfer(ws: Workspace) -> None:
    """build_llvm.sh's own git (here: the fixture's hook runs git ls-remote against the stalling server)
    gets git's http low-speed limits through GIT_CONFIG_COUNT, so it fails instead of waiting for ever."""
    with stall_server("headers") as server:
        url = f"http://127.0.0.1:{server.port}/llvm-project.git"
        hook = f'git config --get http.lowSpeedTime; git ls-remote {url} || exit 1'
        out, _ = timed(ws, FIXTURE_LLVM_HOOK=hook)
        assert server.accepted >= 1
    assert out.returncode == 4, out.stderr
    with open(ws.log) as handle:
        log = handle.read()
    assert f"\n{LIMIT}\nfatal: unable to access '{url}/': Operation too slow. Less than 1 bytes/sec transferred " \
        f"the last {LIMIT} seconds" in log, log[-2000:]
    # nothing was written to a git config file
    assert "lowSpeed" not in git(ws.root, "config", "--list", "--show-origin", "--file", ".git/config")


def test_a_silent_package_index_ends_the_wheel_download_naming_it(ws: Workspace) -> None:
    # pip's own start (seconds on a loaded machine) is silence too: a longer limit, so that it connects.
    limit = 4 * LIMIT
    with stall_server("silent") as server:
        index = f"http://127.0.0.1:{server.port}/simple"
        out, seconds = timed(ws, FLYDSL_STRATEGY="release", FLYDSL_PIN="v0.2.2", PIP_INDEX_URL=index,
                             PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL="", PIP_NO_INDEX="", PIP_CONFIG_FILE=os.devnull,
                             ENSURE_FLYDSL_NETWORK_SILENCE_S=str(limit))
        assert server.accepted >= 1
    assert out.returncode == 8, out.stderr
    assert f"download stopped: nothing received from {index} for {limit} s" in out.stderr
    assert f"wheel's download: still waiting for {index} (" in out.stdout + out.stderr
    marker = ws.marker()
    assert marker["stage"] == "release" and index in str(marker["reason"])
    assert seconds < limit + 30, seconds


@pytest.mark.parametrize("command", ["start", "doctor", "ensure"])
def test_a_hanging_interpreter_is_refused_within_the_probe_timeout(ws: Workspace, tmp_path: "os.PathLike[str]",
                                                                    command: str) -> None:
    """Checking FLYDSL_PYTHON takes FLYDSL_PROBE_TIMEOUT (at most 60 s), not a fixed 60 s (62 s for `start`,
    80 s for `doctor` before)."""
    hangs = os.path.join(str(tmp_path), "python-that-hangs")
    with open(hangs, "w") as handle:
        handle.write("#!/bin/sh\nexec sleep 1000\n")
    os.chmod(hangs, 0o755)
    started = time.monotonic()
    out = ws.run(command, timeout=100, FLYDSL_PYTHON=hangs, FLYDSL_PROBE_TIMEOUT="2")
    seconds = time.monotonic() - started
    assert out.returncode == 64, out.stdout + out.stderr
    assert f"the import probe of {hangs} was killed after 2 s (FLYDSL_PROBE_TIMEOUT)" in out.stdout + out.stderr
    assert seconds < 2 + 20, seconds  # the doctor's other checks run beside it, each with its short timeout


def test_a_silent_cache_endpoint_is_given_up_after_the_limit_and_the_run_builds(ws: Workspace) -> None:
    """An S3 cache whose endpoint accepts connections and never answers: before, botocore's 60 s reads under
    its own and s3fs's retries held the run for about six minutes without a line; now one operation waits
    the limit at most (two reads of half of it), says so while it waits, and the run builds without it."""
    with stall_server("silent") as server:
        endpoint = f"http://127.0.0.1:{server.port}"
        out, seconds = timed(ws, FLYDSL_CACHE="s3://bucket/prefix", AWS_ENDPOINT_URL_S3=endpoint,
                             AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                             AWS_DEFAULT_REGION="us-east-1")
        reached = server.accepted
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert 1 <= reached <= 2, reached  # one operation, two attempts; the cache is not tried again
    assert ": still waiting for s3://bucket/prefix (" in said  # the line said while it waits
    assert said.count("s3://bucket/prefix cannot be used in this run") == 1, said
    assert "ReadTimeoutError" in said
    assert seconds < LIMIT + 30, seconds
