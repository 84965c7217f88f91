"""The command line: one module per command, and here the command table, read by the parser (each
command's arguments and help) and by the dispatch (each command's handler), as pip's ``commands_dict``
(also in its package's ``__init__``): a command is added here, once.

Importing the package imports nothing beyond argparse (which the parser needs anyway): a handler imports its
command's module when it runs, so the warm call loads the ``ensure`` command's code alone.
"""

from __future__ import annotations

from ensure_flydsl.support.frozen import Frozen

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    import argparse
    from typing import Callable, Dict, List, Optional

    from ensure_flydsl.settings import Settings
    from ensure_flydsl.support.report import Reporter

if TYPE_CHECKING:
    Handler = Callable[[argparse.Namespace, Settings, Reporter, Dict[str, str]], int]
    PlainHandler = Callable[[argparse.Namespace, Reporter, Dict[str, str]], int]


class Command(Frozen):
    """One command: its one-line help (None: internal, listed nowhere, no setting flags), what it adds to
    its parser, and its handler (None: ``main`` runs it before the settings are read).  A command about no
    root (``skill``) has a ``plain`` handler instead: no setting flags, no settings read."""

    help: Optional[str]
    add_args: Callable[["argparse.ArgumentParser"], None]
    run: Optional[Handler]
    plain: Optional[PlainHandler] = None


def _json_flag(help_text: Optional[str] = None) -> Callable[[argparse.ArgumentParser], None]:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help=help_text)

    return add


def _wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=_timeout_seconds, default=None, metavar="S",
                   help="give up waiting after S seconds (0: answer at once)")
    p.add_argument("--heartbeat", type=_seconds, default=30.0, metavar="S",
                   help="print a heartbeat line at least every S seconds (default 30)")
    p.add_argument("--json", action="store_true",
                   help="print the answer as one JSON result object on stdout (heartbeats as JSON events on stderr)")


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("sh", "json"), default="sh")
    p.add_argument("--json", action="store_true", help="one JSON result object: whether the env file answers "
                   "this request, its version, and the variables it exports")


def _cache_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache_action", choices=("list", "prune", "keygen", "sign"), metavar="{list,prune,keygen,sign}")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="keygen: the key's name; sign: the entries (key prefixes, as list shows them; default all)")
    p.add_argument("--max-size", metavar="SIZE", help="prune: remove the oldest entries until the cache "
                   "holds at most SIZE (bytes, or with K/M/G/T)")
    p.add_argument("--json", action="store_true", help="list: one JSON object per entry")
    p.add_argument("--out", metavar="DIR", help="keygen: the folder for NAME.secret (mode 600) and NAME.pub")
    p.add_argument("--key", metavar="PATH", help="sign: the secret key file to sign with")


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
        import argparse  # a parser is in use: argparse is imported already

        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds {'>= 0' if zero_ok else '> 0'}")
    return seconds


def _timeout_seconds(value: str) -> float:
    """0 too: check the state once and answer (75 if the run is still going)."""
    return _seconds(value, zero_ok=True)


def _ensure(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.ensure import ensure_command

    return ensure_command(settings, reporter, environ, as_json=args.json)


def _env(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.env import show_env

    return show_env(settings, args.format, environ, as_json=args.json)


def _verify(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.verify import verify

    return verify(settings, environ, as_json=args.json)


def _clean(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.clean import Listening, clean

    if not args.json:
        return clean(settings, reporter)
    import json

    from ensure_flydsl.result import result_object as shaped

    said: List[str] = []
    listening = Listening(reporter, said)
    code = clean(settings, listening)
    data = shaped(ok=code == 0, exit_code=code, reason="; ".join(said) or "nothing to clean",
                  log=settings.log_file)
    data.update(root=settings.root, removed=[m[len("removed "):] for m in said if m.startswith("removed ")],
                kept=[m for m in said if m.startswith("kept ")])
    print(json.dumps(data, sort_keys=True))
    return code


def _start(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.start import start

    return start(settings, environ, reporter)


def _wait(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.wait import wait

    return wait(settings, reporter, timeout=args.timeout, heartbeat=args.heartbeat, as_json=args.json)


def _status(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.status import status

    return status(settings, as_json=args.json)


def _doctor(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.doctor import doctor

    return doctor(settings, environ, as_json=args.json)


def _cache(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.cache import cache_command

    return cache_command(settings, args.cache_action, max_size=args.max_size, as_json=args.json, say=reporter.say,
                         names=args.names, out=args.out, key=args.key)




def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("store_action", choices=("list", "prune"), metavar="{list,prune}")
    p.add_argument("--max-size", metavar="SIZE", help="prune: remove the longest unused trees until the store "
                   "holds at most SIZE (bytes, or with K/M/G/T); a tree a root uses is never removed")
    p.add_argument("--json", action="store_true", help="list: one JSON object")


def _store(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.store import store_command

    return store_command(settings, environ, args.store_action, max_size=args.max_size, as_json=args.json,
                         say=reporter.say)


def _skill(args: argparse.Namespace, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.skill import skill

    return skill(args.dir, force=args.force, wheels=args.wheels, environ=environ, reporter=reporter,
                 as_json=args.json)


# In the order --help lists them.
COMMANDS: Dict[str, Command] = {
    "ensure": Command("make FlyDSL importable (the default command); blocking",
                      _json_flag("print one JSON result object on stdout (and JSON events on stderr)"), _ensure),
    "start": Command("launch the same work as `ensure` detached; print {run_id, pid, log, state} and return",
                     _no_args, _start),
    "wait": Command("follow the root's run until it ends: 0, its failure's exit code, or 75 at --timeout",
                    _wait_args, _wait),
    "status": Command("state, step, percent, elapsed, ETA, pid, version, root, python, how, log",
                      _json_flag("one JSON result object (docs/schema/)"), _status),
    "env": Command("print the env file (or its JSON twin)", _env_args, _env),
    "verify": Command("run the full import probe and print each module's file",
                      _json_flag("one JSON result object with each module's file"), _verify),
    "doctor": Command("predict, in seconds, whether the configured strategy can succeed here, and why not",
                      _json_flag("one JSON object with every check"), _doctor),
    "cache": Command("housekeeping of the binary cache (FLYDSL_CACHE): list, prune, keygen, sign", _cache_args,
                     _cache),
    "store": Command("the host store of trees roots link: list, prune --max-size", _store_args, _store),
    "clean": Command("remove what this tool created for the root (never anything else)",
                     _json_flag("one JSON result object naming what was removed and kept"), _clean),
    "skill": Command("write the GEAK drop-in folder: skill.md, ensure_flydsl.sh and this tool vendored for a bare "
                     "python3", _skill_args, None, plain=_skill),
    "_worker": Command(None, _worker_args, None),
    "_watchdog": Command(None, _watchdog_args, None),
}
