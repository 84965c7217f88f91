"""The command line's help and mistakes (issue 27, item 6): each command's help is its own (its options, the
settings that apply to it, examples), `help [COMMAND]`, `-V`, and one line for a mistyped command with the one it
may have meant."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

import ensure_flydsl
from ensure_flydsl.cli.main import build_parser
from ensure_flydsl.settings import SETTING_BY_NAME, SETTINGS
from ensure_flydsl.version import __version__
from tests.helpers.workspace import said


def subcommands(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


COMMANDS = subcommands(build_parser())
PUBLIC = list(COMMANDS)
CACHE = [(group, action) for group in ("cache", "store") for action in subcommands(COMMANDS[group])]
PATHS = [(c,) for c in PUBLIC] + CACHE
# The settings each command's help lists (and a TAB offers); every other command's are all of them.
FILES = ("root", "lock_file", "fail_marker")
RECORDS = tuple(s.name for s in SETTINGS if s.in_request) + FILES[1:]
READS = {"wait": RECORDS, "status": RECORDS, "env": RECORDS, "verify": RECORDS + ("probe_timeout",), "clean": FILES,
         "cache": ("cache", "cache_trusted_keys"), "cache list": ("cache", "cache_trusted_keys"),
         "cache prune": ("cache",), "cache keygen": (), "cache sign": ("cache", "cache_trusted_keys"),
         "store": ("store",), "store list": ("store",), "store prune": ("store",)}
OWN_FLAGS = {"ensure": ["--json"], "start": ["--json"], "wait": ["--timeout", "--heartbeat", "--run-id ID", "--json"],
             "status": ["--run-id ID", "--json"],
             "env": ["--format", "--json"], "verify": ["--json"], "doctor": ["--json"],
             "cache": ["list", "prune", "keygen", "sign"], "clean": ["--json"],
             "skill": ["--force", "--wheels", "DIR"], "help": ["COMMAND"], "completion": ["{bash,zsh,fish}"],
             "cache list": ["--json"], "cache prune": ["--max-size SIZE"], "cache keygen": ["--out DIR", "NAME"],
             "cache sign": ["--key PATH", "KEY"], "store": ["list", "prune"], "store list": ["--json"],
             "store prune": ["--max-size SIZE", "--json"], "stats": ["--json", "--root ROOT", "--records DIR"]}
ROOTLESS = {"skill", "help", "completion", "stats"}  # about no root: no setting flags (stats' --root is a filter)
# A setting's flag, and what only a full list of every setting shows: its variable.
SETTING_FLAG = re.compile(r"--(root|lock-file|fail-marker|python|require|min-version|exact-pin|verify|probe-timeout"
                          r"|pin|repo|strategy|git-mirror|jobs|lock-timeout|rocm-path|mlir-path|mlir-url|fix-rocm-in-place"
                          r"|shim-dir|vllm-moe|cache|lease-ttl|cache-signing-key|cache-trusted-key|store)(?![\w-])")


@pytest.fixture
def env(tmp_path: "os.PathLike[str]") -> Dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_")}
    clean["FLYDSL_ROOT"] = os.path.join(str(tmp_path), "base", "FlyDSL")
    clean["COLUMNS"] = "100"
    return clean


def tool(env: Dict[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, "-m", "ensure_flydsl", *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60, check=False)


def test_help_lists_every_command(env: Dict[str, str]) -> None:
    out = tool(env, "--help")
    assert out.returncode == 0, out.stderr
    listed: List[str] = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("    ")
                         and line.split()[0] in COMMANDS]
    assert listed == PUBLIC
    assert "exit codes: 0 usable" in out.stdout and "help settings" in out.stdout
    assert tool(env, "help").stdout == out.stdout


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_each_command_has_its_own_short_help_with_its_settings_and_examples(env: Dict[str, str],
                                                                             path: Tuple[str, ...]) -> None:
    """Issue 27, item 6: each command's help was 80-92 lines, every one of the 25 settings in full and no
    example, and `cache list --help` printed the generic cache help."""
    name = " ".join(path)
    out = tool(env, *path, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: ensure-flydsl {name} [-h]")
    lines = out.stdout.splitlines()
    assert len(lines) <= 40, out.stdout
    for flag in OWN_FLAGS.get(name, []):  # a command added later: its examples and size are still checked
        assert flag in out.stdout, flag
    examples = lines[lines.index("examples:") + 1:]
    commands = [line.strip() for line in examples if line.startswith(f"  {said(environ=env)} ")]
    assert 2 <= len(commands) <= 3, examples
    assert all(name in c for c in commands) or path == ("ensure",), commands
    shown = {m.group(0) for m in SETTING_FLAG.finditer(out.stdout)} - {f.split()[0] for f in OWN_FLAGS.get(name, [])}
    if path[0] in ROOTLESS:
        assert not shown and "settings (" not in out.stdout
    else:
        wanted = {SETTING_BY_NAME[n].flag for n in READS.get(name, SETTING_BY_NAME)}
        assert shown == wanted, name  # the settings that apply to it, and only those
        words = " ".join(out.stdout.split())  # the command may wrap across lines
        assert ("help settings" if wanted else "settings: none apply") in words  # where each is described
    assert "[FLYDSL_" not in out.stdout  # no setting in full (each was "help text [FLYDSL_...]")
    assert tool(env, "help", *path).stdout == out.stdout  # `help COMMAND` is the command's own help
    assert not os.path.exists(os.path.dirname(env["FLYDSL_ROOT"]))


def test_each_cache_command_has_its_own_help(env: Dict[str, str]) -> None:
    helps = {(group, action): tool(env, group, action, "--help").stdout for group, action in CACHE}
    assert len(set(helps.values())) == len(CACHE)
    for (group, action), text in helps.items():
        assert text.startswith(f"usage: ensure-flydsl {group} {action} "), text
    assert tool(env, "--cache", "/srv/c", "cache", "prune", "-h").stdout == helps[("cache", "prune")]  # settings before
    for name in ("cache", "store"):
        group = tool(env, name, "--help").stdout
        assert group.startswith(f"usage: ensure-flydsl {name} [-h] ACTION") and group not in helps.values()


def test_help_settings_lists_every_setting_with_its_variable(env: Dict[str, str]) -> None:
    out = tool(env, "help", "settings")
    assert out.returncode == 0, out.stderr
    for setting in SETTING_BY_NAME.values():
        assert f"{setting.flag}" in out.stdout and f"[{setting.env}]" in out.stdout, setting.name
    assert "--no-vllm-moe" in out.stdout and "a35627a2fef0a5a70c63536c4174674223866737" in out.stdout


def test_version(env: Dict[str, str]) -> None:
    """-V and --version, before or after settings: the version, and the commit when the code is a checkout's."""
    outs = [tool(env, *args) for args in (["-V"], ["--version"], ["--root", "/x", "-V"])]
    assert all(o.returncode == 0 and o.stdout == outs[0].stdout for o in outs), outs
    line = outs[0].stdout.strip()
    found = re.match(r"^ensure-flydsl (\S+)(?: \(commit ([0-9a-f]{40})( with local changes)?\))?$", line)
    assert found and found.group(1) == __version__, line
    package = os.path.dirname(os.path.abspath(ensure_flydsl.__file__))
    head = subprocess.run(["git", "-C", package, "rev-parse", "HEAD"], stdout=subprocess.PIPE, text=True, check=False)
    tracked = subprocess.run(["git", "-C", package, "ls-files", "--", "."], stdout=subprocess.PIPE, text=True,
                             check=False)
    if head.returncode == 0 and tracked.stdout.strip():  # run from a checkout of the tool: its commit
        assert found.group(2) == head.stdout.strip(), line


@pytest.mark.parametrize("args, says", [
    (["enusre"], "ensure-flydsl: unknown command 'enusre'; did you mean 'ensure'? "
                 "(HELP lists the commands)"),
    (["--root", "/x", "stauts", "--json"], "ensure-flydsl: unknown command 'stauts'; did you mean 'status'? "
                                           "(HELP lists the commands)"),
    (["stat"], "ensure-flydsl: unknown command 'stat'; did you mean 'stats' or 'start'? "
               "(HELP lists the commands)"),  # two as close: both
    (["frobnicate"], "ensure-flydsl: unknown command 'frobnicate' (HELP lists the commands)"),
    (["help", "doctr"], "ensure-flydsl: unknown command 'doctr'; did you mean 'doctor'? "
                        "(HELP lists the commands)"),
    (["help", "cache", "lsit"], "ensure-flydsl: unknown cache command 'lsit'; did you mean 'list'? "
                                "(HELP cache lists them)"),
    (["help", "settings", "x"], "ensure-flydsl help: 'settings x' is no command (HELP lists the "
                                "commands; `help settings` lists the settings)"),
    (["help", "status", "list"], "ensure-flydsl help: 'status list' is no command (HELP lists the "
                                 "commands)"),
    (["cache", "lst"], "ensure-flydsl: unknown cache command 'lst'; did you mean 'list'? "
                       "(HELP cache lists them)"),
    (["cache", "--cache", "/x"], "ensure-flydsl cache: which one? list, prune, keygen or sign "
                                 "(HELP cache says what each does)"),
])
def test_a_mistyped_command_is_bad_input_with_one_line(env: Dict[str, str], args: List[str], says: str) -> None:
    """`ensure-flydsl enusre` said "unrecognized arguments: enusre", as if the command were an argument."""
    out = tool(env, *args)
    line = json.loads(out.stdout)["reason"] + "\n" if "--json" in args else out.stderr  # one JSON object then
    assert (out.returncode, line) == (64, says.replace("HELP", said("help", env)) + "\n")
    assert out.stdout == "" or "--json" in args
    assert not os.path.exists(os.path.dirname(env["FLYDSL_ROOT"]))


@pytest.mark.parametrize("args, says", [
    (["ensure", "--timeout", "5"], "ensure-flydsl: unrecognized arguments: --timeout 5"),
    (["--json", "--format", "sh"], "ensure-flydsl: unrecognized arguments: --format sh"),
    (["status", "--json", "extra"], "ensure-flydsl: unrecognized arguments: extra"),
    (["wait", "--timeout", "soon"], "ensure-flydsl wait: argument --timeout: 'soon' is not a number of seconds"),
    (["cache", "list", "extra"], "ensure-flydsl: unrecognized arguments: extra"),
    (["cache", "prune", "--json"], "ensure-flydsl: unrecognized arguments: --json"),  # list's own, not prune's
    (["completion", "tcsh"], "ensure-flydsl completion: argument shell: invalid choice: 'tcsh'"),
    (["env", "--format", "xml"], "ensure-flydsl env: argument --format: invalid choice: 'xml'"),
])
def test_bad_arguments_are_bad_input_with_one_line(env: Dict[str, str], args: List[str], says: str) -> None:
    out = tool(env, *args)
    line = json.loads(out.stdout)["reason"] if "--json" in args else out.stderr  # one JSON object then
    assert out.returncode == 64, out.stderr
    assert says in line and line.startswith(says.split(":")[0]), line
    assert not os.path.exists(os.path.dirname(env["FLYDSL_ROOT"]))  # refused before anything was touched


@pytest.mark.parametrize("args, extra, says", [
    (["ensure", "--json", "--nosuch"], {}, "ensure-flydsl: unrecognized arguments: --nosuch"),
    (["wait", "--json", "--timeout", "-5"], {}, "ensure-flydsl wait: argument --timeout: '-5' is not"),
    (["stauts", "--json"], {}, "ensure-flydsl: unknown command 'stauts'"),
    (["start", "--json", "--jobs", "zero"], {}, "--jobs='zero' is not allowed"),
    (["store", "list", "--json"], {"FLYDSL_STORE": "off"}, "ensure-flydsl: no host store: FLYDSL_STORE is off"),
    (["store", "prune", "--json"], {}, "ensure-flydsl: store prune needs --max-size SIZE"),
    (["cache", "list", "--json"], {}, "FLYDSL_CACHE"),
    # A --json before a command that answers in text printed that text, or nothing at all, with exit 0.
    (["--json", "cache", "prune", "--max-size", "1", "--cache", "BASE/cache"], {}, "cache prune: --json is not"),
    (["--json", "cache", "keygen", "--out", "BASE/keys", "k1"], {}, "cache keygen: --json is not"),
    (["--json", "cache", "sign", "--key", "BASE/k1.secret", "--cache", "BASE/cache"], {}, "cache sign: --json is "),
    (["--json", "help"], {}, "ensure-flydsl help: --json is not allowed"),
    (["--json", "completion", "bash"], {}, "ensure-flydsl completion: --json is not allowed"),
])
def test_every_failure_under_json_is_one_json_object(env: Dict[str, str], args: List[str], extra: Dict[str, str],
                                                     says: str, tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 10: 7 of 23 failure cases printed no JSON under --json (argparse's errors, `start --json`,
    `store list --json` with the store off, `cache list --json` with no cache)."""
    base = os.path.dirname(env["FLYDSL_ROOT"])
    out = tool({**env, "XDG_CACHE_HOME": str(tmp_path), **extra}, *(a.replace("BASE", base) for a in args))
    assert out.returncode == 64, out.stdout + out.stderr
    assert not os.path.exists(base)
    [line] = out.stdout.splitlines()
    data = json.loads(line)
    assert data["ok"] is False and data["exit_code"] == 64 and says in data["reason"], data
    events = [json.loads(e) for e in out.stderr.splitlines()]
    assert [e["event"] for e in events] == ["failed"] and events[0]["reason"] == data["reason"]


@pytest.mark.parametrize("args, says", [
    (["status", "--root", "FlyDSL"], "--root='FlyDSL' is not allowed: "),
    (["status", "--python", "./python3"], "--python='./python3' is not allowed: "),
    (["status", "--git-mirror", "https://github.com/=mirrors/"], "--git-mirror='mirrors/' is not allowed: "),
])
def test_a_relative_path_from_a_removed_working_folder_is_bad_input(env: Dict[str, str], args: List[str], says: str,
                                                                    tmp_path: "os.PathLike[str]") -> None:
    """A relative path has no meaning once the working folder is gone: it was an internal error (exit 70)."""
    gone = os.path.join(str(tmp_path), "gone")
    os.mkdir(gone)
    out = subprocess.run(["bash", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "bash", gone, sys.executable,
                          "-m", "ensure_flydsl", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=60, check=False)
    assert out.returncode == 64 and out.stderr.startswith("ensure-flydsl: " + says), out.stderr
    assert len(out.stderr.splitlines()) == 1 and "working folder" in out.stderr, out.stderr


def test_keygen_into_a_regular_file_names_that_file(env: Dict[str, str], tmp_path: "os.PathLike[str]") -> None:
    """`--out` naming a file said "cannot create FILE/NAME.secret: File exists", as if a key were there."""
    taken = os.path.join(str(tmp_path), "taken")
    open(taken, "w").close()
    out = tool(env, "cache", "keygen", "--out", taken, "k1")
    assert (out.returncode, out.stderr) == (64, f"ensure-flydsl: cache keygen: cannot create {taken}: File exists\n")
