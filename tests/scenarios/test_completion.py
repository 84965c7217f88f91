"""`ensure-flydsl completion bash|zsh|fish` (issue 27, item 6: there was none): argcomplete's script for each
shell, which asks the command line itself what to offer.  Completing through it, in the real shell, gives the
commands, a cache command after settings, a command's own options and settings, and the values a flag takes;
a TAB press at a warm root gets the completion, never the front door's warm answer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List

import pytest

from tests.helpers.scenario import ensure_json
from tests.helpers.workspace import Workspace

# (the words typed, the word being completed) -> what must be offered, and what must not
CASES = [
    (["st"], {"start", "status"}, {"ensure"}),
    (["--root", "/x", "ca"], {"cache"}, {"clean"}),
    (["cache", ""], {"list", "prune", "keygen", "sign"}, {"ensure"}),
    (["--cache", "/x", "cache", "pr"], {"prune"}, {"list"}),
    (["cache", "list", "--"], {"--json", "--cache", "--cache-trusted-key"}, {"--max-size", "--jobs", "--root"}),
    (["status", "--"], {"--json", "--root", "--python"}, {"--jobs", "--timeout"}),
    (["wait", "--t"], {"--timeout"}, set()),
    (["env", "--format", ""], {"sh", "json"}, set()),
    (["--strategy", "re"], {"release", "reuse-only"}, {"auto"}),
    (["completion", ""], {"bash", "zsh", "fish"}, set()),
    (["help", "se"], {"settings"}, set()),
]


def script(shell: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "completion", shell], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def need(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        pytest.skip(f"{program} is not installed here")
    return found


@pytest.fixture
def on_path(tmp_path: "os.PathLike[str]") -> Dict[str, str]:
    """The environment of a shell whose PATH has `ensure-flydsl` (this tool, as the scripts call it)."""
    folder = os.path.join(str(tmp_path), "bin")
    os.makedirs(folder)
    command = os.path.join(folder, "ensure-flydsl")
    with open(command, "w") as handle:
        handle.write(f'#!/bin/sh\nexec "{sys.executable}" -m ensure_flydsl "$@"\n')
    os.chmod(command, 0o755)
    return {**os.environ, "PATH": folder + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path)}


def run(cmd: List[str], env: Dict[str, str], cwd: str = "/") -> "subprocess.CompletedProcess[str]":
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                          env=env, cwd=cwd)


def check(offered: Dict[str, set], typed: List[str], wanted: set, unwanted: set) -> None:
    got = offered[" ".join(typed)]
    assert wanted <= got and not unwanted & got, (typed, got)


def test_bash(tmp_path: "os.PathLike[str]", on_path: Dict[str, str]) -> None:
    path = os.path.join(str(tmp_path), "ensure-flydsl.bash")
    with open(path, "w") as handle:
        handle.write(script("bash"))
    assert run(["bash", "-n", path], on_path).returncode == 0
    calls = "".join(f"t {' '.join(repr(w) for w in typed)}\n" for typed, _, _ in CASES)
    out = run(["bash", "-c", 'source "$1"; complete -p ensure-flydsl\n'
               't() { COMP_WORDS=(ensure-flydsl "$@"); COMP_CWORD=$#; COMP_LINE="${COMP_WORDS[*]}"; '
               'COMP_POINT=${#COMP_LINE}; _python_argcomplete ensure-flydsl; echo "${COMPREPLY[*]}"; }\n' + calls,
               "bash", path], on_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "complete -o bashdefault -o default -o nospace -F _python_argcomplete ensure-flydsl"
    offered = {" ".join(typed): set(line.split()) for (typed, _, _), line in zip(CASES, lines[1:])}
    for typed, wanted, unwanted in CASES:
        check(offered, typed, wanted, unwanted)


def test_zsh(tmp_path: "os.PathLike[str]", on_path: Dict[str, str]) -> None:
    """Through the completion function itself, with zsh's _describe and compdef standing in as printers (a
    widget needs a terminal): what it would offer, each as WORD:WHAT."""
    zsh = need("zsh")
    path = os.path.join(str(tmp_path), "_ensure-flydsl")
    with open(path, "w") as handle:
        handle.write(script("zsh"))
    assert run([zsh, "-n", path], on_path).returncode == 0
    cases = [*CASES, (["--root", ""], {"a-file-here"}, set())]  # a path setting's value: files
    os.makedirs(os.path.join(str(tmp_path), "cwd"))
    open(os.path.join(str(tmp_path), "cwd", "a-file-here"), "w").close()
    calls = "".join(f"t {' '.join(repr(w) for w in typed)}\n" for typed, _, _ in cases)
    out = run([zsh, "-f", "-c", 'compdef() { print -r -- "compdef $*"; }\n'
               '_describe() { print -r -- "${(j: :)${(@)${(@P)2}%%:*}}"; }\n'
               'source "$1"\n'
               't() { words=(ensure-flydsl "$@"); BUFFER="${(j: :)words}"; CURSOR=${#BUFFER}; '
               '_python_argcomplete || print; }\n' + calls, "zsh", path], on_path,
              cwd=os.path.join(str(tmp_path), "cwd"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "compdef _python_argcomplete ensure-flydsl"
    offered = {" ".join(typed): set(line.split()) for (typed, _, _), line in zip(cases, lines[1:])}
    for typed, wanted, unwanted in cases:
        check(offered, typed, wanted, unwanted)


def test_fish(on_path: Dict[str, str], tmp_path: "os.PathLike[str]") -> None:
    fish = need("fish")
    path = os.path.join(str(tmp_path), "ensure-flydsl.fish")
    with open(path, "w") as handle:
        handle.write(script("fish"))
    assert run([fish, "-n", path], on_path).returncode == 0
    offered = {}
    for typed, _, _ in CASES:
        line = "ensure-flydsl " + " ".join(typed)
        out = run([fish, "--no-config", "-c", f"source {path}; complete -C '{line}'"], on_path)
        assert out.returncode == 0, out.stderr
        offered[" ".join(typed)] = {row.split("\t")[0] for row in out.stdout.splitlines()}
    for typed, wanted, unwanted in CASES:
        check(offered, typed, wanted, unwanted)


def test_a_tab_press_at_a_warm_root_is_completed_not_answered(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """argcomplete runs the command with _ARGCOMPLETE set: the front door would have printed its warm answer."""
    ensure_json(ws, cwd="/")
    warm = subprocess.run(ws.cmd(), env=ws.env, stdout=subprocess.PIPE, text=True, cwd="/", check=False)
    assert "nothing changed since the last success" in warm.stdout  # the front door's answer to these inputs
    offered = os.path.join(str(tmp_path), "offered")
    line = "ensure-flydsl st"
    tab = subprocess.run(ws.cmd(), env=dict(ws.env, _ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)),
                                            _ARGCOMPLETE_STDOUT_FILENAME=offered),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/", check=False)
    assert tab.returncode == 0 and tab.stdout == "", tab.stdout + tab.stderr
    with open(offered) as handle:
        assert set(handle.read().split("\013")) == {"start", "status", "store", "stats"}
