"""The command line: one argparse parser (a subparser per command, every setting a flag of each, before or after
the command), the dispatch, and every outcome mapped to an exit code."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import select
import signal
import sys
import textwrap
import traceback
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from ensure_flydsl.cli import Call
from ensure_flydsl.errors import (
    BadInput,
    EnsureError,
    ExitCode,
    Interrupted,
    Refused,
    Stage,
    access_error,
    disk_full_error,
    interrupted_by,
)
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.runs.markers import write_failure_marker
from ensure_flydsl.settings import (
    FLAG,
    GROUPS,
    LIST,
    SETTING_BY_NAME,
    SETTINGS,
    STRATEGIES,
    SWITCH,
    Setting,
    fail_marker_path,
    flag_text,
    load_settings,
)
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.processes import unblock_stop_signals
from ensure_flydsl.support.report import Reporter, to_devnull
from ensure_flydsl.warm import interrupted_at_start, key_tokens

DESCRIPTION = ("Make `import flydsl, kernels.moe_gemm_2stage` work from one consistent tree: reuse a good-enough\n"
               "FlyDSL, else provision the pinned one into an isolated folder.")
ENSURE_JSON = "print one JSON result object on stdout (and JSON events on stderr)"
EVERY = tuple(s.name for s in SETTINGS)
FILES = ("root", "lock_file", "fail_marker")
RECORDS = tuple(s.name for s in SETTINGS if s.in_request) + FILES[1:]  # what status reads
TRUST = ("cache", "cache_trusted_keys")
STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}  # they unwind a run like Ctrl-C
BUILD_FAILURES = (ExitCode.FETCH, ExitCode.CHECKOUT, ExitCode.LLVM_BUILD, ExitCode.FLYDSL_BUILD, ExitCode.PROBE)


# -- the parser -----------------------------------------------------------------------------------------------
class _Formatter(argparse.RawDescriptionHelpFormatter):
    """A command's help lists its own options, the settings it reads by concern in its epilog (argcomplete offers no
    option whose help is suppressed); each line is wrapped on its own, an example's command line never."""

    def add_usage(self, usage: Optional[str], actions: Any, groups: Any, prefix: Optional[str] = None) -> None:
        super().add_usage(usage, [a for a in actions if a.dest not in SETTING_BY_NAME], groups, prefix)

    def add_argument(self, action: argparse.Action) -> None:
        if action.dest not in SETTING_BY_NAME:
            super().add_argument(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            if line.startswith("  " + command()):  # an example: its comment goes below it when both do not fit
                example, _, why = line.partition("  # ")
                lines += [line] if not why or len(line) <= width else [example, f"      # {why}"]
            else:
                lines += textwrap.wrap(line, width, subsequent_indent=" " * (12 if line[:1] == " " else 2),
                                       break_on_hyphens=False) or [""]
        return "\n".join(indent + line for line in lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # A usage error is bad input: exit 64 and one line (argparse's exit 2 means "clone failed" here).
        raise Refused(message, self.prog)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            group = self.prog.split()[1:]  # ["cache"] under cache, [] at the top
            what = f"{group[0]} command" if group else "command"
            where = f"{command('help ' + group[0])} lists them" if group else f"{command('help')} lists the commands"
            # The closest commands, a word of the same letters first, the second only when about as close.
            close = sorted(difflib.get_close_matches(value, action.choices, n=2),
                           key=lambda k: sorted(k) != sorted(value))
            ratio = [difflib.SequenceMatcher(None, value, k).ratio() for k in close]
            if len(close) == 2 and (sorted(close[0]) == sorted(value) or ratio[0] - ratio[1] > 0.05):
                close = close[:1]
            meant = f"; did you mean {' or '.join(repr(k) for k in close)}?" if close else ""
            raise Refused(f"unknown {what} '{value}'{meant} ({where})")
        super()._check_value(action, value)


def _load(name: str) -> Any:
    """``module:attribute`` under the package, imported when its command runs (a `status` imports no pipeline)."""
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(f"ensure_flydsl.{module}"), attribute)


class _Version(argparse.Action):
    """``-V``: the version, with the commit when the code is known to be a commit's (computed only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(_load("geak.folder:version_line")())
        parser.exit()


def _add_setting(parser: Any, setting: Setting, help: str) -> None:
    """A setting's flag (a switch's --no- too), with no default: a command's would replace the value given before it."""
    if setting.kind in (FLAG, SWITCH):
        parser.add_argument(setting.flag, dest=setting.name, default=argparse.SUPPRESS, help=help,
                            action="store_true" if setting.kind == FLAG else argparse.BooleanOptionalAction)
        return
    action = parser.add_argument(setting.flag, dest=setting.name, action="append" if setting.kind == LIST else "store",
                                 metavar=setting.metavar or setting.name.upper(), default=argparse.SUPPRESS, help=help)
    if setting.name == "strategy":
        action.completer = lambda **_: STRATEGIES  # what a TAB offers (argcomplete calls it with keywords)


def _epilog(examples: Sequence[str], reads: Optional[Sequence[str]]) -> str:
    """The settings a command reads, by concern, and its examples (its arguments, then "  # " and what it does)."""
    lines = []
    if reads is not None:
        lines.append("settings (a flag before or after the command, or its variable; "
                     f"`{command('help settings')}` says what each does):" if reads else "settings: none apply to it")
        for group in GROUPS:
            flags = [s.flag + ("/--no-" + s.flag[2:] if s.kind == SWITCH else "") for s in SETTINGS
                     if s.group == group and s.name in reads]
            lines += [f"  {group:<10}{' '.join(flags)}"] if flags else []
        lines.append("")
    return "\n".join([*lines, "examples:", *("  " + command(example) for example in examples)])


def build_parser() -> argparse.ArgumentParser:
    hidden = argparse.SUPPRESS  # no defaults: a command's default would replace the value given before it
    version, verbosity = argparse.ArgumentParser(add_help=False), argparse.ArgumentParser(add_help=False)
    version.add_argument("-V", "--version", action=_Version, nargs=0,
                         help="print the version (and the commit, when known) and exit")
    group = verbosity.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=hidden,
                       help="show nothing but a failure (the log still gets everything)")
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=hidden,
                       help="show the build's own output as well")

    def add_settings(parser: argparse.ArgumentParser, reads: Sequence[str]) -> None:
        """Every setting's flag: those ``reads`` names listed and offered by a TAB, the others only accepted."""
        for s in SETTINGS:
            _add_setting(parser, s, s.help if s.name in reads else hidden)

    pointer = ("settings: each is a flag, before or after the command, or its environment variable (a flag wins); "
               f"`{command('help settings')}` lists them, `{command('help COMMAND')}` shows a command's own")
    codes = "exit codes: " + "; ".join(f"{int(code)} {code.meaning}" for code in ExitCode)
    examples = _epilog(("--root ~/.cache/flydsl/FlyDSL  # blocking; then source ~/.cache/flydsl/FlyDSL/flydsl_env.sh",
                        "start --root ~/.cache/flydsl/FlyDSL  # detached: returns at once; then `wait --timeout 540`",
                        "doctor  # in seconds: can it succeed here, and if not, why"), None)
    top = _Parser(prog="ensure-flydsl", description=DESCRIPTION, formatter_class=_Formatter,
                  parents=[version, verbosity], epilog="\n\n".join([pointer, examples, codes]))
    add_settings(top, EVERY)
    top.add_argument("--json", action="store_true", default=hidden, help=ENSURE_JSON)  # `--json status` too
    commands = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def add(path: str, help: str, examples: Sequence[str], reads: Optional[Sequence[str]] = EVERY, loud: bool = True,
            under: Any = commands, json: Optional[str] = None, run: Optional[str] = None) -> argparse.ArgumentParser:
        """A command's parser; ``run`` ("module:function") handles it: run(call, settings), or run(call) if no reads."""
        parser: argparse.ArgumentParser = under.add_parser(
            path.split()[-1], help=help, description=help, formatter_class=_Formatter, parents=[verbosity] * loud,
            epilog=_epilog(examples, reads))
        if reads is not None:
            add_settings(parser, reads)
        if json is not None:
            parser.add_argument("--json", action="store_true", default=hidden, help=json)
        parser.set_defaults(text_only=None if json else parser.prog)  # a --json before it is refused (main)
        if run is not None:
            parser.set_defaults(run=run, reads_settings=reads is not None)
        return parser

    topic = _add_commands(add)
    topic.completer = lambda **_: [*commands.choices, "settings"]  # type: ignore[attr-defined]
    return top


def _add_commands(add: Callable[..., argparse.ArgumentParser]) -> argparse.Action:
    """Every command, with its examples; returns the help command's topic, whose TAB offers the commands."""
    add("ensure", "make FlyDSL importable (the default command); blocking",
        ("--root ~/.cache/flydsl/FlyDSL  # reuse, else provision; then source ~/.cache/flydsl/FlyDSL/flydsl_env.sh",
         "--json --strategy release  # one JSON result object", "-q --python /usr/bin/python3.11  # say nothing but "
         "a failure"), json=ENSURE_JSON, run="cli.start:ensure_command")
    add("start", "launch the same work as `ensure` detached; print {run_id, pid, log, state} and return",
        ("start --root ~/.cache/flydsl/FlyDSL  # returns at once", "start --cache s3://bucket/flydsl  # then `wait "
         "--timeout 540`"), json="its messages as JSON events on stderr (the answer is one JSON object on stdout "
        "either way)", run="cli.start:start")
    waiting = add("wait", "follow the root's run until it ends: 0, its failure's exit code, or 75 at --timeout",
                  ("wait --timeout 540  # inside an agent's 600 s shell call; 75: call it again",
                   "wait --timeout 0 --json  # answer at once"), RECORDS, json="print the answer as one JSON result "
                  "object on stdout (heartbeats as JSON events on stderr)", run="cli.status:wait")
    waiting.add_argument("--timeout", type=_seconds(zero_ok=True), metavar="S",
                         help="give up waiting after S seconds (0: answer at once)")
    waiting.add_argument("--heartbeat", type=_seconds(zero_ok=False), default=30.0, metavar="S",
                         help="print a heartbeat line at least every S seconds (default 30)")
    asking = add("status", "state, step, percent, elapsed, ETA, pid, version, root, python, how, log",
                 ("status", "--root ~/.cache/flydsl/FlyDSL status --json"), RECORDS,
                 json="one JSON result object (docs/schema/)", run="cli.status:status")
    for parser in (waiting, asking):
        parser.add_argument("--run-id", metavar="ID", help="the run `start` printed, whatever its settings (default: "
                            "the request's; with no request setting given, the root's current run)")
    add("env", "print the env file (or its JSON twin)", ("env  # the env file, to source", "env --format json  # "
        "its JSON twin", "env --json --min-version 0.2.3  # does it answer this request?"), RECORDS,
        json="one JSON result object: whether the env file answers this request, its version, and the variables it "
        "exports", run="cli.status:show_env").add_argument("--format", choices=("sh", "json"), default="sh")
    add("verify", "run the full import probe and print each module's file", ("verify  # exit 0 only for one good "
        "tree", "verify --json --python /usr/bin/python3.11"), RECORDS + ("probe_timeout",),
        json="one JSON result object with each module's file", run="cli.status:verify")
    add("doctor", "predict, in seconds, whether the configured strategy can succeed here, and why not",
        ("doctor  # one line per check, then the verdict", "doctor --strategy source --json"),
        json="one JSON object with every check (docs/schema/doctor.schema.json)", run="cli.start:doctor")
    cache = add("cache", "housekeeping of the binary cache (FLYDSL_CACHE): list, prune, keygen, sign",
                ("cache list --cache /srv/flydsl-cache", "help cache prune  # a cache command's own help"), TRUST,
                loud=False, run="cli.cache:housekeeping")
    actions = cache.add_subparsers(dest="cache_action", metavar="ACTION", title="cache commands")
    add("cache list", "every entry of the binary cache: kind, key, size, age, what it was built from, who signed it",
        ("cache list --cache /srv/flydsl-cache  # newest first", "cache list --json --cache-trusted-key ci-1.pub  # "
         "one JSON object; which signatures a trusted key verifies"), TRUST, under=actions,
        json="one JSON object {schema_version, location, entries: [...], warnings} (docs/schema/)")
    add("cache prune", "remove the oldest entries until the binary cache holds at most --max-size",
        ("cache prune --max-size 50G --cache /srv/flydsl-cache", "--cache s3://bucket/flydsl cache prune --max-size "
         "500M"), ("cache",), under=actions).add_argument(
        "--max-size", metavar="SIZE", help="remove the oldest entries until the cache holds at most SIZE (bytes, or "
        "with K/M/G/T: 500M, 2G)")
    keygen = add("cache keygen", "write a signing key pair: DIR/NAME.secret (mode 600) and DIR/NAME.pub",
                 ("cache keygen --out ~/.config/flydsl ci-1  # then FLYDSL_CACHE_SIGNING_KEY=~/.config/flydsl/"
                  "ci-1.secret on the CI host", "cache keygen --out /etc/flydsl/keys ci-2  # a new key to rotate to: "
                  "sign with it, then trust it"), (), under=actions)
    keygen.add_argument("names", nargs="*", metavar="NAME", help="the key's name (letters, digits, . _ -)")
    keygen.add_argument("--out", metavar="DIR", help="the folder for NAME.secret (mode 600) and NAME.pub")
    sign = add("cache sign", "add a key's signature to entries of the binary cache (manifests are not touched)",
               ("cache sign --key ~/.config/flydsl/ci-1.secret  # every entry", "cache sign --key ci-2.secret 3f2a9c "
                "77b0e1 --cache-trusted-key ci-1.pub  # a rotation: two entries, if ci-1 signed them"), TRUST,
               under=actions)
    sign.add_argument("names", nargs="*", metavar="KEY",
                      help="the entries to sign: prefixes of their keys, as `cache list` shows them (default: all)")
    sign.add_argument("--key", metavar="PATH", help="the secret key file to sign with (from `cache keygen`)")
    store = add("store", "the host store of trees the roots copy (FLYDSL_STORE): list, prune",
                ("store list  # each tree, its size, where it came from and when it was last copied",
                 "help store prune  # a store command's own help"), ("store",), loud=False,
                run="cli.cache:housekeeping")
    actions = store.add_subparsers(dest="store_action", metavar="ACTION", title="store commands")
    add("store list", "every tree of the host store: its key, size, files, where it came from and its last use",
        ("store list", "store list --json --store /scratch/flydsl-store  # one JSON object"), ("store",),
        under=actions, json="one JSON result object with every tree (docs/schema/)")
    add("store prune", "remove the longest unused trees until the host store holds at most --max-size",
        ("store prune --max-size 20G  # trees a root uses are kept", "--store /scratch/flydsl-store store prune "
         "--max-size 5G"), ("store",), under=actions, json="one JSON result object naming each tree removed"
        ).add_argument("--max-size", metavar="SIZE", help="remove the longest unused trees until the store holds at "
                       "most SIZE (bytes, or with K/M/G/T); what the tool did not make is left as it is")
    add("clean", "remove what this tool created for the root (never anything else)",
        ("clean", "clean --json --root ~/.cache/flydsl/FlyDSL"), FILES,
        json="one JSON result object naming what was removed and kept", run="cli.clean:clean")
    timing = add("stats", "where this host's runs spent their time: each run's stages, waits and bytes, and a "
                 "summary", ("stats  # the last runs and where their time went", "stats --json --root "
                             "~/.cache/flydsl/FlyDSL  # one root's runs", "stats --records ./fleet-records  # a "
                             "fleet's records, collected"), None,
                 json="one JSON object: every run under `runs`, and the `summary` (docs/schema/stats.schema.json)",
                 run="cli.stats:stats")
    timing.add_argument("--root", dest="of_root", metavar="ROOT",
                        help="only the runs of this root (default: every root of the host)")
    timing.add_argument("--records", metavar="DIR", help="read the timing records in DIR (a fleet's, collected into "
                        "one folder) instead of this host's")
    skill = add("skill", "write the GEAK drop-in folder: skill.md, ensure_flydsl.sh and this tool vendored for a "
                "bare python3", ("skill $GEAK_ROOT/perf_knowledge/expert_skills/skills/ensure_flydsl",
                                 "skill ./ensure_flydsl --force --wheels ./wheels  # no network"), None,
                json="one JSON result object", run="cli.skill:skill")
    skill.add_argument("dir", metavar="DIR", help="the folder to write (GEAK: perf_knowledge/expert_skills/skills/"
                       "ensure_flydsl); refused if it exists and this command did not make it")
    skill.add_argument("--force", action="store_true",
                       help="replace a folder this command made (and only such a folder)")
    skill.add_argument("--wheels", metavar="DIR",
                       help="take the vendored libraries' pinned wheels from DIR (no network)")
    topic = add("help", "this list; a command's help (help COMMAND); every setting (help settings)",
                ("help wait", "help settings"), None, loud=False, run="cli.main:_help").add_argument(
        "topic", nargs="*", metavar="COMMAND", help="a command (`cache list`: a cache command), or `settings` for "
        "every setting")
    add("completion", "print a completion script for bash, zsh or fish",
        ("completion bash > ~/.local/share/bash-completion/completions/ensure-flydsl",
         "completion zsh  # eval it in ~/.zshrc, after compinit",
         "completion fish > ~/.config/fish/completions/ensure-flydsl.fish"), None, loud=False,
        run="cli.main:_completion").add_argument("shell", choices=("bash", "zsh", "fish"),
                                                 help="the shell the script is for")
    return topic


def _seconds(*, zero_ok: bool) -> Callable[[str], float]:
    def seconds(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not ((number >= 0 if zero_ok else number > 0) and number < 10**9):  # nan fails both
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds {'>= 0' if zero_ok else '> 0'}")
        return number

    return seconds


def with_command(parser: argparse.ArgumentParser, argv: List[str]) -> List[str]:
    """``argv`` with ``ensure`` where the command goes when none is given: argparse has no default subcommand."""
    at = 0
    while at < len(argv) and argv[at].startswith("-") and argv[at] != "--":
        action = parser._option_string_actions.get(argv[at].split("=", 1)[0])
        takes_value = action is not None and action.nargs is None and "=" not in argv[at]
        if action is None or (takes_value and at + 1 == len(argv)):
            break  # an unknown flag, or a last one without its value: the ensure command's error names it
        at += 2 if takes_value else 1
    if at < len(argv) and not argv[at].startswith("-"):
        return argv
    return [*argv[:at], "ensure", *argv[at:]]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)  # prints what a TAB offers and exits
    args = parser.parse_args(with_command(parser, list(argv)))
    if getattr(args, "json", False) and getattr(args, "text_only", None):  # a --json before it: every answer is JSON
        raise Refused("--json is not allowed: this command answers in text", args.text_only)
    return args


def _help(call: Call) -> int:
    """``help [COMMAND]``: the command's own ``--help``; ``help settings``: every setting."""
    topic: List[str] = call.args.topic
    if topic == ["settings"]:
        page = argparse.ArgumentParser(prog="ensure-flydsl", usage=argparse.SUPPRESS, add_help=False, description=(
            "Every setting is a flag (before or after the command) and an environment variable; a flag wins over its "
            "variable, and an empty variable means the default. A bad value is refused (exit 64, one line naming "
            "the setting and what is allowed) before anything is touched."))
        for group, title in GROUPS.items():
            section = page.add_argument_group(f"{title} ({group})")
            for s in SETTINGS:
                if s.group == group:
                    default = "" if "default" in s.help or s.default in (None, "", ()) else " (default {})".format(
                        ("on" if s.default else "off") if isinstance(s.default, bool) else flag_text(s.name, s.default))
                    _add_setting(section, s, f"{s.help}{default} [{s.env}]")
        print(page.format_help(), end="")
        return 0
    if topic[:1] == ["settings"] or len(topic) > (2 if topic[:1] in (["cache"], ["store"]) else 1):
        also = "; `help settings` lists the settings" if topic[:1] == ["settings"] else ""
        raise Refused(f"{' '.join(topic)!r} is no command ({command('help')} lists the commands{also})",
                      "ensure-flydsl help")
    build_parser().parse_args([*topic, "--help"])
    return 0


def _completion(call: Call) -> int:
    try:
        from argcomplete.shell_integration import shellcode
    except ImportError:  # the GEAK folder's zipapp carries only what its commands need
        raise Refused("argcomplete is not installed here: use an ensure-flydsl installed with pip",
                      "ensure-flydsl completion") from None
    print(shellcode(["ensure-flydsl"], shell=call.args.shell), end="")
    return 0


# -- the dispatch -----------------------------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    # Under umask 000 (common in containers) the checkout, its .git/hooks and the build would be world-writable:
    # anyone could plant a hook that the next run's git executes.
    os.umask(os.umask(0o022) | 0o002)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):  # closed at the start (`cmd >&-`): /dev/null, else
        if getattr(sys, name) is None:  # the first file opened takes its number, and children write into that file
            setattr(sys, name, open(os.devnull, "r" if fd == 0 else "w"))  # as this number: the lower ones are open
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["_watchdog"]:
        unblock_stop_signals()  # started by a worker that may still have them blocked (cli/start.py)
        return int(_load("runs.liveness:watch")(argv[1], argv[2]))
    try:
        args = parse(argv) if argv[:1] != ["_worker"] else argparse.Namespace(  # start's worker (cli/start.py)
            command="_worker", reads_settings=False, run="cli.start:worker", given=dict(zip(argv[1::2], argv[2::2])))
        args.run = _load(args.run)  # the command's function
    except Refused as exc:  # under --json, one JSON object too: the reason, exit 64
        reporter = Reporter.for_stream(sys.stderr, json_events="--json" in argv)
        refused = _error(reporter, "--json" in argv, exc)
        reporter.close()
        return refused
    verbosity = int(getattr(args, "verbosity", 0))
    # The front door's key when the settings come from the argv and the variables alone (warm.py).
    warm_key = key_tokens(argv) if args.command == "ensure" and not verbosity else None
    as_json = bool(getattr(args, "json", False))
    reporter = Reporter.for_stream(sys.stderr if as_json or args.command == "start" else sys.stdout,
                                   json_events=as_json, verbosity=verbosity)
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in STOP_SIGNALS
                # An ignored SIGHUP stays ignored: that is how `nohup ensure-flydsl &` outlives the terminal.
                if not (signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN)}
    code: Optional[int] = None
    try:
        if signal.getsignal(signal.SIGINT) is interrupted_at_start:  # the front door's (__main__.py) until here:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # now a Ctrl-C unwinds the command, exit 130
        code = _run(Call(args=args, environ=dict(os.environ), reporter=reporter, as_json=as_json, warm_key=warm_key))
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return code
    except BrokenPipeError:
        if not _stdout_gone():
            return _internal_error(reporter)
        to_devnull(sys.stdout)  # the reader stopped reading (`| head -1`): what it did not read is nobody's failure
        return 0 if code is None else code
    except EnsureError as exc:
        return _error(reporter, as_json, exc)
    except (KeyboardInterrupt, Interrupted) as exc:
        what = interrupted_by(exc)
        _failed(reporter, as_json, result_object(exit_code=int(ExitCode.INTERRUPTED), reason=what,
                                                 hint="run it again: it resumes", log=reporter.log_path),
                f"ensure-flydsl: {what}; the next run resumes where this one stopped")
        return int(ExitCode.INTERRUPTED)
    except Exception:
        return _internal_error(reporter, as_json)
    finally:
        for signum, was in previous.items():
            signal.signal(signum, was)
        reporter.close()


def _run(call: Call) -> int:
    args = call.args
    if not args.reads_settings:
        return int(args.run(call))
    given = {s.name: getattr(args, s.name) for s in SETTINGS if hasattr(args, s.name)}
    try:
        settings = load_settings(given, call.environ)
    except BadInput as exc:  # a poller of the bash executor's recipe only sees markers: leave one, where it can
        path = fail_marker_path(given, call.environ) if args.command in ("ensure", "start") else None
        if path and os.path.isdir(os.path.dirname(path)):
            with contextlib.suppress(OSError):  # a read-only or full folder: the one line on stderr says it all
                write_failure_marker(path, stage=Stage.SETTINGS, exit_code=int(exc.code), reason=exc.reason,
                                     hint=exc.hint, log=None, log_tail=[], run_id="", request=None)
        raise
    try:
        return int(args.run(call, settings))
    except OSError as exc:  # another user's files, a read-only mount, a full file system: one line
        refused = None if isinstance(exc, BrokenPipeError) else access_error(exc, args.command) or disk_full_error(
            exc, {"start": Stage.STARTING, "clean": Stage.CLEAN}.get(args.command))
        if refused is None:
            raise
        raise refused from None


# -- outcomes -----------------------------------------------------------------------------------------------------
def _error(reporter: Reporter, as_json: bool, exc: EnsureError) -> int:
    """Say the failure, and return its exit code."""
    tail = reporter.tail(20) if exc.code in BUILD_FAILURES else []  # a build step's log says why
    data = result_object(exit_code=int(exc.code), stage=exc.stage or None, reason=exc.reason, hint=exc.hint or None,
                         log=reporter.log_path, run_id=exc.run_id, elapsed_s=exc.elapsed_s)
    if not isinstance(exc, Refused):  # a refusal looked at nothing installed
        data["installed"] = exc.installed
    if isinstance(exc, Refused) or exc.code == ExitCode.BAD_INPUT:  # one line, naming the command or the setting
        text = exc.reason if isinstance(exc, Refused) else f"ensure-flydsl: {exc.reason}"
    else:
        stage = f", stage {exc.stage}" if exc.stage else ""
        lines = [f"ensure-flydsl: failed (exit {int(exc.code)}: {exc.meaning}{stage}): {exc.reason}"]
        lines += ["  " + line for line in exc.detail.splitlines()]
        if tail:
            lines += [f"  last lines of the log ({reporter.log_path}):", *("    " + line for line in tail)]
        elif reporter.log_path:
            lines.append(f"  log: {reporter.log_path}")
        if exc.hint:
            lines.append(f"  next: {exc.hint}")
        text = "\n".join(lines)
    _failed(reporter, as_json, data, text, tail)
    return int(exc.code)


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(STOP_SIGNALS[signal.Signals(signum)])


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (`ensure-flydsl status | head -1`)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _internal_error(reporter: Reporter, as_json: bool = False) -> int:
    text = traceback.format_exc()
    reporter.build_line(text)
    _failed(reporter, as_json, result_object(
        exit_code=int(ExitCode.INTERNAL), reason="internal error, a bug: " + text.strip().splitlines()[-1],
        hint="please report it with the traceback (in the event's detail)", log=reporter.log_path),
        f"ensure-flydsl: internal error (exit 70), a bug; please report it with this:\n{text}", detail=text)
    return int(ExitCode.INTERNAL)


def _failed(reporter: Reporter, as_json: bool, data: Dict[str, object], text: str, tail: Sequence[str] = (),
            detail: str = "") -> None:
    """``text`` on stderr; under --json the result object on stdout and one JSON event on stderr instead."""
    for signum in [s for s in STOP_SIGNALS if signal.getsignal(s) is _raise_interrupted]:  # main() puts them back
        signal.signal(signum, signal.SIG_IGN)  # another while this is said (a slow stderr): this is the outcome
    if not as_json:
        with contextlib.suppress(OSError):  # stderr on a full disk (a detached worker's is the log): the code says it
            print(text, file=sys.stderr)
        return
    event = {"event": "failed", **{k: data[k] for k in ("exit_code", "stage", "reason", "hint", "log")},
             "log_tail": list(tail), **({"detail": detail} if detail else {})}
    reporter.event(event)
    try:
        print(result_json(data), flush=True)
    except BrokenPipeError:
        to_devnull(sys.stdout)  # the exit code and stderr still tell the failure
