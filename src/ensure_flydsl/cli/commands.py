"""The command table, read by the parser (each command's arguments and help), the help, the completion scripts
and the dispatch (each command's handler, by its name in cli/handlers.py), as pip's ``commands_dict`` names each
command's module and class: a command is added here, once.

The table imports no command's module (a handler imports its command's module when it runs), and the warm call
does not build it: ``main`` dispatches the default command (``ensure``) to its handler directly.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Callable, Dict, Optional, Sequence, Tuple

from ensure_flydsl.settings_table import Request


@dataclass(frozen=True)
class Command:
    """One command: its one-line help (None: internal, listed nowhere, no setting flags), what it adds to
    its parser, and its handler's name in cli/handlers.py (None: ``main`` runs it before the settings are read).
    A command about no root (``skill``) has a ``plain`` handler instead: no setting flags, no settings read.

    ``examples`` are (command line, what it does), shown by its help; ``settings`` the names of the
    settings its help lists (None: every one; every command with setting flags accepts them all, so that
    one command line can carry the settings to any command); ``actions`` its own commands (``cache list``),
    each a Command of its own, the dispatch going through this one's handler; ``loud`` whether it takes
    -q/-v (a command that says nothing but its answer does not)."""

    help: Optional[str]
    add_args: Callable[["argparse.ArgumentParser"], None]
    run: Optional[str]
    plain: Optional[str] = None
    examples: Tuple[Tuple[str, str], ...] = ()
    settings: Optional[Tuple[str, ...]] = None
    actions: Optional[Dict[str, "Command"]] = None
    loud: bool = True


def _json_flag(help_text: Optional[str] = None) -> Callable[[argparse.ArgumentParser], None]:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help=help_text)

    return add


WAIT_HEARTBEAT_S = 30.0  # wait's --heartbeat default (cli/main.py: fast_args gives it too)


def _wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=timeout_seconds, default=None, metavar="S",
                   help="give up waiting after S seconds (0: answer at once)")
    p.add_argument("--heartbeat", type=_seconds, default=WAIT_HEARTBEAT_S, metavar="S",
                   help="print a heartbeat line at least every S seconds (default 30)")
    p.add_argument("--json", action="store_true",
                   help="print the answer as one JSON result object on stdout (heartbeats as JSON events on stderr)")


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("sh", "json"), default="sh")
    p.add_argument("--json", action="store_true", help="one JSON result object: whether the env file answers "
                   "this request, its version, and the variables it exports")


def _cache_list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="one JSON object {schema_version, location, entries: [...], warnings} (docs/schema/)")


def _cache_prune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-size", metavar="SIZE", help="remove the oldest entries until the cache holds at most "
                   "SIZE (bytes, or with K/M/G/T: 500M, 2G)")


def _cache_keygen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="the key's name (letters, digits, . _ -)")
    p.add_argument("--out", metavar="DIR", help="the folder for NAME.secret (mode 600) and NAME.pub")


def _cache_sign_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="KEY",
                   help="the entries to sign: prefixes of their keys, as `cache list` shows them (default: all)")
    p.add_argument("--key", metavar="PATH", help="the secret key file to sign with (from `cache keygen`)")


def _help_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="*", metavar="COMMAND",
                   help="a command (`cache list`: a cache command), or `settings` for every setting")


def _completion_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell the script is for")


def _skill_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="the folder to write (GEAK: perf_knowledge/expert_skills/skills/"
                   "ensure_flydsl); refused if it exists and this command did not make it")
    p.add_argument("--force", action="store_true", help="replace a folder this command made (and only such a folder)")
    p.add_argument("--wheels", metavar="DIR", help="take the vendored libraries' pinned wheels from DIR (no network)")
    p.add_argument("--json", action="store_true", help="one JSON result object")


def _no_args(p: argparse.ArgumentParser) -> None:
    """start, clean: the settings alone."""


def _worker_args(p: argparse.ArgumentParser) -> None:
    """Internal: the detached worker that `start` launches."""
    p.add_argument("--run-id", required=True)
    p.add_argument("--alive-fd", type=int, required=True)
    p.add_argument("--settings-json", required=True)


def _watchdog_args(p: argparse.ArgumentParser) -> None:
    """Internal: notices a run's death."""
    p.add_argument("watch_root")
    p.add_argument("watch_run_id")


def _seconds(value: str, *, zero_ok: bool = False) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not ((seconds >= 0 if zero_ok else seconds > 0) and seconds < 10**9):  # NaN fails both

        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds {'>= 0' if zero_ok else '> 0'}")
    return seconds


def timeout_seconds(value: str) -> float:
    """0 too: check the state once and answer (75 if the run is still going)."""
    return _seconds(value, zero_ok=True)


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON object: every run under `runs`, and the `summary` "
                   "(docs/schema/stats.schema.json)")
    p.add_argument("--root", metavar="ROOT", help="only the runs of this root (default: every root of the host)")
    p.add_argument("--records", metavar="DIR", help="read the timing records in DIR (a fleet's, collected into one "
                   "folder) instead of this host's")


def _store_list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON result object with every tree (docs/schema/)")


def _store_prune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-size", metavar="SIZE", help="remove the longest unused trees until the store holds at "
                   "most SIZE (bytes, or with K/M/G/T); a tree a root uses is never removed")


# The settings the help of a command that reads the root's records lists: the request an env file must
# answer (settings_table.Request, as Settings.request makes it) and the files beside the root.
_REQUEST = tuple(f.name for f in fields(Request))
_RECORDS = _REQUEST + ("lock_file", "fail_marker")

CACHE_ACTIONS: Dict[str, Command] = {
    "list": Command("every entry of the binary cache: kind, key, size, age, what it was built from, who signed it",
                    _cache_list_args, "_cache", settings=("cache", "cache_trusted_keys"),
                    examples=(("ensure-flydsl cache list --cache /srv/flydsl-cache", "newest first"),
                              ("ensure-flydsl cache list --json --cache-trusted-key ci-1.pub",
                               "one JSON object; which signatures a trusted key verifies"))),
    "prune": Command("remove the oldest entries until the binary cache holds at most --max-size",
                     _cache_prune_args, "_cache", settings=("cache",),
                     examples=(("ensure-flydsl cache prune --max-size 50G --cache /srv/flydsl-cache", ""),
                               ("ensure-flydsl --cache s3://bucket/flydsl cache prune --max-size 500M", ""))),
    "keygen": Command("write a signing key pair: DIR/NAME.secret (mode 600) and DIR/NAME.pub",
                      _cache_keygen_args, "_cache", settings=(),
                      examples=(("ensure-flydsl cache keygen --out ~/.config/flydsl ci-1",
                                 "then FLYDSL_CACHE_SIGNING_KEY=~/.config/flydsl/ci-1.secret on the CI host"),
                                ("ensure-flydsl cache keygen --out /etc/flydsl/keys ci-2",
                                 "a new key to rotate to: sign with it, then trust it"))),
    "sign": Command("add a key's signature to entries of the binary cache (manifests are not touched)",
                    _cache_sign_args, "_cache", settings=("cache", "cache_trusted_keys"),
                    examples=(("ensure-flydsl cache sign --key ~/.config/flydsl/ci-1.secret", "every entry"),
                              ("ensure-flydsl cache sign --key ci-2.secret 3f2a9c 77b0e1 --cache-trusted-key ci-1.pub",
                               "a rotation: two entries, if ci-1 signed them"))),
}

STORE_ACTIONS: Dict[str, Command] = {
    "list": Command("every tree of the host store: its key, size, files, last use and the roots that link it",
                    _store_list_args, "_store", settings=("store",),
                    examples=(("ensure-flydsl store list", ""),
                              ("ensure-flydsl store list --json --store /scratch/flydsl-store", "one JSON object"))),
    "prune": Command("remove the longest unused trees until the host store holds at most --max-size",
                     _store_prune_args, "_store", settings=("store",),
                     examples=(("ensure-flydsl store prune --max-size 20G", "trees a root uses are kept"),
                               ("ensure-flydsl --store /scratch/flydsl-store store prune --max-size 5G", ""))),
}

# In the order --help lists them.
COMMANDS: Dict[str, Command] = {
    "ensure": Command("make FlyDSL importable (the default command); blocking",
                      _json_flag("print one JSON result object on stdout (and JSON events on stderr)"), "_ensure",
                      examples=(("ensure-flydsl --root ~/.cache/flydsl/FlyDSL", "reuse, else provision; then "
                                 "source ~/.cache/flydsl/FlyDSL/flydsl_env.sh"),
                                ("ensure-flydsl --json --strategy release", "one JSON result object"),
                                ("ensure-flydsl -q --python /usr/bin/python3.11", "say nothing but a failure"))),
    "start": Command("launch the same work as `ensure` detached; print {run_id, pid, log, state} and return",
                     _no_args, "_start",
                     examples=(("ensure-flydsl start --root ~/.cache/flydsl/FlyDSL", "returns at once"),
                               ("ensure-flydsl start --cache s3://bucket/flydsl", "then `ensure-flydsl wait`"))),
    "wait": Command("follow the root's run until it ends: 0, its failure's exit code, or 75 at --timeout",
                    _wait_args, "_wait", settings=_RECORDS,
                    examples=(("ensure-flydsl wait --timeout 540", "inside an agent's 600 s shell call; 75: "
                               "call it again"),
                              ("ensure-flydsl wait --timeout 0 --json", "answer at once"))),
    "status": Command("state, step, percent, elapsed, ETA, pid, version, root, python, how, log",
                      _json_flag("one JSON result object (docs/schema/)"), "_status", settings=_RECORDS,
                      examples=(("ensure-flydsl status", ""),
                                ("ensure-flydsl --root ~/.cache/flydsl/FlyDSL status --json", ""))),
    "env": Command("print the env file (or its JSON twin)", _env_args, "_env", settings=_RECORDS,
                   examples=(("ensure-flydsl env", "the env file, to source"),
                             ("ensure-flydsl env --format json", "its JSON twin"),
                             ("ensure-flydsl env --json --min-version 0.2.3", "does it answer this request?"))),
    "verify": Command("run the full import probe and print each module's file",
                      _json_flag("one JSON result object with each module's file"), "_verify",
                      settings=_RECORDS + ("probe_timeout",),
                      examples=(("ensure-flydsl verify", "exit 0 only for one good tree"),
                                ("ensure-flydsl verify --json --python /usr/bin/python3.11", ""))),
    "doctor": Command("predict, in seconds, whether the configured strategy can succeed here, and why not",
                      _json_flag("one JSON object with every check (docs/schema/doctor.schema.json)"), "_doctor",
                      examples=(("ensure-flydsl doctor", "one line per check, then the verdict"),
                                ("ensure-flydsl doctor --strategy source --json", ""))),
    "cache": Command("housekeeping of the binary cache (FLYDSL_CACHE): list, prune, keygen, sign", _no_args,
                     "_cache", actions=CACHE_ACTIONS, settings=("cache", "cache_trusted_keys"),
                     examples=(("ensure-flydsl cache list --cache /srv/flydsl-cache", ""),
                               ("ensure-flydsl help cache prune", "a cache command's own help"))),
    "store": Command("the host store of trees the roots link (FLYDSL_STORE): list, prune", _no_args, "_store",
                     actions=STORE_ACTIONS, settings=("store",),
                     examples=(("ensure-flydsl store list", "each tree, its size and the roots that use it"),
                               ("ensure-flydsl help store prune", "a store command's own help"))),
    "clean": Command("remove what this tool created for the root (never anything else)",
                     _json_flag("one JSON result object naming what was removed and kept"), "_clean",
                     settings=("root", "lock_file", "fail_marker"),
                     examples=(("ensure-flydsl clean", ""),
                               ("ensure-flydsl clean --json --root ~/.cache/flydsl/FlyDSL", ""))),
    "stats": Command("where this host's runs spent their time: each run's stages, waits and bytes, and a summary",
                     _stats_args, None, plain="_stats",
                     examples=(("ensure-flydsl stats", "the last runs and where their time went"),
                               ("ensure-flydsl stats --json --root ~/.cache/flydsl/FlyDSL", "one root's runs"),
                               ("ensure-flydsl stats --records ./fleet-records", "a fleet's records, collected"))),
    "skill": Command("write the GEAK drop-in folder: skill.md, ensure_flydsl.sh and this tool vendored for a bare "
                     "python3", _skill_args, None, plain="_skill",
                     examples=(("ensure-flydsl skill $GEAK_ROOT/perf_knowledge/expert_skills/skills/ensure_flydsl",
                                ""),
                               ("ensure-flydsl skill ./ensure_flydsl --force --wheels ./wheels", "no network"))),
    "help": Command("this list; a command's help (help COMMAND); every setting (help settings)", _help_args,
                    None, plain="_help", loud=False,
                    examples=(("ensure-flydsl help wait", ""), ("ensure-flydsl help settings", ""))),
    "completion": Command("print a completion script for bash, zsh or fish", _completion_args, None,
                          plain="_completion", loud=False,
                          examples=(("ensure-flydsl completion bash > ~/.local/share/bash-completion/completions/"
                                     "ensure-flydsl", ""),
                                    ("ensure-flydsl completion zsh", "eval it in ~/.zshrc, after compinit"),
                                    ("ensure-flydsl completion fish > ~/.config/fish/completions/ensure-flydsl.fish",
                                     ""))),
    "_worker": Command(None, _worker_args, None),
    "_watchdog": Command(None, _watchdog_args, None),
}


def command_at(path: "Sequence[str]") -> Command:
    """The command of ``path``: ``("status",)``, or ``("cache", "list")`` for one of a command's own commands."""
    command = COMMANDS[path[0]]
    for word in path[1:]:
        assert command.actions is not None
        command = command.actions[word]
    return command
