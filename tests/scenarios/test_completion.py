"""`ensure-flydsl completion bash|zsh|fish` (issue 27, item 6: there was none): each script is one the shell
accepts, and completing through it, in the real shell, gives the commands, a cache command after settings,
a command's own options and the values a flag takes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List

import pytest

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


def run(cmd: List[str], **env: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
                          env={**os.environ, **env})


def check(offered: Dict[str, set], typed: List[str], wanted: set, unwanted: set) -> None:
    got = offered[" ".join(typed)]
    assert wanted <= got and not unwanted & got, (typed, got)


def test_bash(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "ensure-flydsl.bash")
    with open(path, "w") as handle:
        handle.write(script("bash"))
    assert run(["bash", "-n", path]).returncode == 0
    calls = "".join(f"t {' '.join(repr(w) for w in typed)}\n" for typed, _, _ in CASES)
    out = run(["bash", "-c", 'source "$1"; complete -p ensure-flydsl\n'
               't() { COMP_WORDS=(ensure-flydsl "$@"); COMP_CWORD=$#; _ensure_flydsl; echo "${COMPREPLY[*]}"; }\n'
               + calls, "bash", path])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "complete -o default -F _ensure_flydsl ensure-flydsl"
    offered = {" ".join(typed): set(line.split()) for (typed, _, _), line in zip(CASES, lines[1:])}
    for typed, wanted, unwanted in CASES:
        check(offered, typed, wanted, unwanted)


def test_zsh(tmp_path: "os.PathLike[str]") -> None:
    """Through the completion function itself, with zsh's compadd and _files standing in as printers (a
    widget needs a terminal): what it would add, before zsh filters by the typed prefix."""
    zsh = need("zsh")
    path = os.path.join(str(tmp_path), "_ensure-flydsl")
    with open(path, "w") as handle:
        handle.write(script("zsh"))
    assert run([zsh, "-n", path]).returncode == 0
    calls = "".join(f"t {' '.join(repr(w) for w in typed)}\n" for typed, _, _ in CASES)
    out = run([zsh, "-f", "-c", 'compdef() { print -r -- "compdef $*"; }\n'
               'compadd() { [[ "$1" == -- ]] && shift; print -r -- "${(j: :)@}"; }\n'
               '_files() { print -r -- "<files>"; }\n'
               'source "$1"\n'
               't() { words=(ensure-flydsl "$@"); CURRENT=${#words}; _ensure_flydsl || print; }\n' + calls,
               "zsh", path])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "compdef _ensure_flydsl ensure-flydsl"
    offered = {}
    for (typed, _, _), line in zip(CASES, lines[1:]):
        prefix = typed[-1]
        offered[" ".join(typed)] = {word for word in line.split() if word.startswith(prefix)}
    for typed, wanted, unwanted in CASES:
        check(offered, typed, wanted, unwanted)
    files = run([zsh, "-f", "-c", '_files() { print -r -- "<files>"; }; compdef() { :; }; source "$1"; '
                 'words=(ensure-flydsl --root ""); CURRENT=3; _ensure_flydsl', "zsh", path])
    assert files.stdout.strip() == "<files>", files.stderr  # a path setting's value: files


def test_fish(tmp_path: "os.PathLike[str]") -> None:
    fish = need("fish")
    path = os.path.join(str(tmp_path), "ensure-flydsl.fish")
    with open(path, "w") as handle:
        handle.write(script("fish"))
    assert run([fish, "-n", path]).returncode == 0
    offered = {}
    for typed, _, _ in CASES:
        line = "ensure-flydsl " + " ".join(typed)
        out = run([fish, "--no-config", "-c", f"source {path}; complete -C '{line}'"], HOME=str(tmp_path))
        assert out.returncode == 0, out.stderr
        offered[" ".join(typed)] = {row.split("\t")[0] for row in out.stdout.splitlines()}
    for typed, wanted, unwanted in CASES:
        check(offered, typed, wanted, unwanted)
