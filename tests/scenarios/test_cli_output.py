"""The command line's manners: settings accepted before the command, -q and -v, no terminal redraws off a
terminal or on a dumb one, and never the word None in what a person reads, in every state a root can be in."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from typing import List

from tests.helpers.scenario import start, wait_for
from tests.helpers.workspace import Workspace, said

NONE = re.compile(r"\bNone\b")


def human(ws: Workspace, *args: str, **env: str) -> "subprocess.CompletedProcess[str]":
    out = ws.run(*args, **env)
    for stream in (out.stdout, out.stderr):
        assert not NONE.search(stream), f"`{' '.join(args)}` printed None:\n{stream}"
    return out


def test_settings_before_the_command(ws: Workspace) -> None:
    env = {k: v for k, v in ws.env.items() if k != "FLYDSL_ROOT"}
    out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "--root", ws.root, "status", "--json"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert out.returncode == 0, out.stderr  # was exit 64: "unrecognized arguments: status"
    assert json.loads(out.stdout)["root"] == ws.root
    # a flag's value that is a command's name is still the value
    out = ws.run("--pin", "status", "doctor", "--json")
    assert json.loads(out.stdout)["strategy"] == "source"
    assert any("status" in c["detail"] for c in json.loads(out.stdout)["checks"] if c["name"] == "repository")
    assert ws.run("-q", "-v", "status").returncode == 64


def test_every_setting_may_come_before_the_command_whatever_its_kind(ws: Workspace) -> None:
    """`ensure-flydsl --exact-pin status` was exit 64 ("unrecognized arguments"): the parser's own list of the
    flags without a value missed it.  Now the settings table's kinds say which flags take a value."""
    from ensure_flydsl.settings import FLAG, LIST, SETTINGS, SWITCH

    values = {"root": ws.root, "python": sys.executable, "require": "flydsl", "git_mirrors": "https://a/=https://b/",
              "min_version": "0.2.2", "strategy": "source", "pin": ws.repo.commits["dev"], "repo": ws.repo.url}
    for setting in SETTINGS:
        if setting.kind in (FLAG, SWITCH):
            flags = [[setting.flag]] + ([["--no-" + setting.flag[2:]]] if setting.kind == SWITCH else [])
        elif setting.name in values:
            flags = [[setting.flag, values[setting.name]]] * (2 if setting.kind == LIST else 1)
        else:
            continue  # a value whose check needs a file (keys, paths): the kind is what is tested here
        for flag in flags:
            out = ws.run(*flag, "status", "--json")
            assert out.returncode == 0, (flag, out.stderr)
            assert json.loads(out.stdout)["root"] == ws.root


def test_quiet_shows_nothing_but_a_failure_and_verbose_shows_the_build(ws: Workspace) -> None:
    quiet = ws.run("-q")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", quiet.stdout + quiet.stderr
    assert os.path.exists(ws.env_file)
    with open(ws.log) as handle:
        assert "ready: flydsl 0.2.2" in handle.read()  # the log still has everything
    # --exact-pin: the other pin must be built (the version-only gate would reuse the first tree)
    verbose = ws.run("-v", "--verify", "--exact-pin", FLYDSL_PIN=ws.repo.commits["v0.2.3"])
    assert verbose.returncode == 0, verbose.stderr
    assert "    [3/3] Building CXX object python/mlir_flydsl/part3.cpp.o\n" in verbose.stdout  # the build's lines
    failed = ws.run("-q", "--exact-pin", FLYDSL_PIN="no-such-pin")
    assert failed.returncode == 3 and failed.stdout == "" and "no-such-pin" in failed.stderr


def live_output(ws: Workspace, term: str) -> bytes:
    """What `ensure-flydsl` writes on a terminal (a real pty) with TERM=``term``, building into a root of
    its own (so that it builds, with progress)."""
    root = os.path.join(ws.base, term, "FlyDSL")
    env = dict(ws.env, TERM=term, FIXTURE_BUILD_SLEEP="0.05", FLYDSL_ROOT=root)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(ws.cmd(), env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks: List[bytes] = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait() == 0
    os.close(leader)
    return b"".join(chunks)


def test_no_redraws_off_a_terminal_or_on_a_dumb_one(ws: Workspace) -> None:
    ws.env["FLYDSL_STORE"] = "off"  # each root builds, printing its progress (the host store would link it)
    assert b"\r\x1b[K  build " in live_output(ws, "xterm")  # a terminal: the live progress line
    dumb = live_output(ws, "dumb")
    assert b"\x1b" not in dumb and b"ensure-flydsl: build 100%" in dumb  # progress as plain lines
    piped = ws.run(FIXTURE_BUILD_SLEEP="0.05")
    assert "\x1b" not in piped.stdout + piped.stderr and "\r" not in piped.stdout + piped.stderr
    assert "ensure-flydsl: build 100%" in piped.stdout


def test_no_none_in_human_output_in_any_state(ws: Workspace) -> None:
    # absent
    for args in (("status",), ("wait", "--timeout", "0"), ("verify",), ("env",), ("clean",), ("doctor",)):
        human(ws, *args)
    # running, held at a barrier in build.sh
    barrier = os.path.join(ws.base, "go")
    hook = f'while [ ! -e "{barrier}" ]; do sleep 0.05; done'
    start(ws, FIXTURE_BUILD_HOOK=hook)
    wait_for(os.path.join(ws.root, "kernels"))
    human(ws, "status", FIXTURE_BUILD_HOOK=hook)
    human(ws, "wait", "--timeout", "0", FIXTURE_BUILD_HOOK=hook)
    open(barrier, "w").close()
    assert human(ws, "wait", "--timeout", "60").returncode == 0
    # succeeded
    for args in (("status",), ("verify",), ("wait", "--timeout", "0"), ("",)):
        human(ws, *[a for a in args if a])
    # failed
    assert human(ws, FLYDSL_PIN="no-such-pin", FLYDSL_EXACT_PIN="1").returncode == 3  # else the tree answers
    for args in (("status",), ("wait", "--timeout", "0")):
        human(ws, *args, FLYDSL_PIN="no-such-pin", FLYDSL_EXACT_PIN="1")


def test_every_command_it_names_is_the_command_as_invoked(ws: Workspace) -> None:
    """Issue 41, item 2, installed: by name, by path, as a module; the detached worker (run as a module)
    names its starter's command."""
    script = shutil.which("ensure-flydsl", path=os.path.dirname(sys.executable))
    assert script is not None, "pip installs the command beside the interpreter"
    bare = "/usr/bin:/bin"

    def start_hint(command: List[str], path: str) -> str:
        out = subprocess.run([*command, "status", "--json"], env=dict(ws.env, PATH=path), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, check=False)
        assert out.returncode == 0, out.stderr
        return str(json.loads(out.stdout)["hint"])

    assert start_hint(["ensure-flydsl"], os.pathsep.join([os.path.dirname(script), bare])).startswith(
        "run `ensure-flydsl start` (then `ensure-flydsl wait --timeout 540`), or `ensure-flydsl`")
    assert start_hint([script], bare).startswith(f"run `{script} start`")
    assert start_hint([sys.executable, "-m", "ensure_flydsl"], bare).startswith(
        f"run `{sys.executable} -m ensure_flydsl start`")
    on_path = os.pathsep.join([os.path.dirname(sys.executable), bare])
    assert start_hint([sys.executable, "-m", "ensure_flydsl"], on_path).startswith(
        f"run `{said('start', {'PATH': on_path})}`")
    os.makedirs(ws.base, exist_ok=True)
    with open(ws.lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run holds the build lock
        env = dict(ws.env, PATH=os.pathsep.join([os.path.dirname(script), ws.env["PATH"]]), FLYDSL_LOCK_TIMEOUT="1")
        assert subprocess.run(["ensure-flydsl", "start"], env=env, stdout=subprocess.DEVNULL, check=False,
                              timeout=60).returncode == 0
        waited = subprocess.run(["ensure-flydsl", "wait", "--timeout", "120"], env=env, stdout=subprocess.PIPE,
                                text=True, check=False, timeout=180)
    assert waited.returncode == 7 and "`ensure-flydsl wait` follows it" in waited.stdout, waited.stdout
    assert "`ensure-flydsl wait` follows it" in str(ws.marker()["hint"])


def test_a_working_folder_that_shadows_the_tree_is_said(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 12: a kernels/ folder where the caller works is what `python -c` imports (Python puts the
    working folder first): the run said "verified" and nothing else.  The run, the warm call and the doctor say
    so, and the documented import check (docs/agents.md's third call) runs from / and sees the tree."""
    here = os.path.join(str(tmp_path), "work")
    os.makedirs(os.path.join(here, "kernels"))
    shadow = os.path.join(here, "kernels")
    for call in (ws.run(cwd=here), ws.run(cwd=here)):  # the run, then the warm call
        assert call.returncode == 0, call.stderr
        assert f"warning: {shadow} is imported instead of the tree" in call.stdout, call.stdout
    assert "warning:" not in ws.run().stdout  # from the test's own folder: nothing shadows
    doctor = json.loads(ws.run("doctor", "--json", cwd=here).stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "working-folder")
    assert check["status"] == "wrong" and not check["blocking"] and shadow in check["detail"]
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                           "agents.md")) as handle:
        third = re.findall(r"```bash\n(.*?)```", handle.read(), re.S)[2]
    used = subprocess.run(["bash", "-c", third], cwd=here, env=ws.env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)
    assert used.returncode == 0 and used.stdout.split()[1] == os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")
