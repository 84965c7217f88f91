"""Command line: parse, dispatch, and map every outcome to an exit code.  No logic of its own."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from ensure_flydsl.errors import EXIT_MEANINGS, BadInput, EnsureError, ExitCode, Interrupted, interrupted_by
from ensure_flydsl.settings import (
    SETTINGS,
    Settings,
    fail_marker_path,
    join_git_mirrors,
    join_require,
    load_settings,
)
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.version import __version__

COMMANDS = ("ensure", "start", "wait", "status", "env", "verify", "doctor", "cache", "clean", "_worker", "_watchdog")


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (each also from its environment variable; a flag wins)")
    for setting in SETTINGS:
        if setting.name == "vllm_moe":
            group.add_argument("--vllm-moe", dest="vllm_moe", action="store_const", const="1",
                               help=f"{setting.help} [{setting.env}]")
            group.add_argument("--no-vllm-moe", dest="vllm_moe", action="store_const", const="0",
                               help="do not export VLLM_USE_FLYDSL_MOE (A/B baselines)")
        elif setting.name in ("verify", "fix_rocm_in_place"):
            group.add_argument(setting.flag, dest=setting.name, action="store_const", const="1",
                               help=f"{setting.help} [{setting.env}]")
        elif setting.name == "require":
            group.add_argument("--require", dest="require", action="append", metavar="MODULES",
                               help=f"{setting.help}; repeatable [{setting.env}]")
        elif setting.name == "git_mirrors":
            group.add_argument(setting.flag, dest=setting.name, action="append", metavar="FROM=TO",
                               help=f"{setting.help}; repeatable, replaces the variable's list [{setting.env}]")
        else:
            group.add_argument(setting.flag, dest=setting.name, metavar=setting.name.upper(),
                               help=f"{setting.help} [{setting.env}]")


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized as it sizes itself but without importing shutil (and its compression
    modules) for every argument added: the warm call prints no help."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: Optional[int] = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else the terminal of stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Parser(argparse.ArgumentParser):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        # A usage error is bad input: exit 64 and one line (argparse's own exit 2 means "clone failed" here).
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: {message}\n")


# Each command's one-line help, in the order --help lists them; the internal commands have none.
_HELP = {
    "ensure": "make FlyDSL importable (the default command); blocking",
    "start": "launch the same work as `ensure` detached; print {run_id, pid, log, state} and return",
    "wait": "follow the root's run until it ends: 0, its failure's exit code, or 75 at --timeout",
    "status": "state, step, percent, elapsed, ETA, pid, version, root, python, how, log",
    "env": "print the env file (or its JSON twin)",
    "verify": "run the full import probe and print each module's file",
    "doctor": "predict, in seconds, whether the configured strategy can succeed here, and why not",
    "cache": "housekeeping of the binary cache (FLYDSL_CACHE)",
    "clean": "remove what this tool created for the root (never anything else)",
}


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of every command, for ``--help``; with ``only``, that command's parser alone.

    A run uses one command, and building the others' flags (each argparse parser also looks up its
    translations) cost more than the warm call's own work.  The one-command parser has the subcommand's
    own name, so its usage, help and errors read exactly as the full parser's.
    """
    if only is not None:
        parser = _Parser(prog=f"ensure-flydsl {only}", description=_HELP.get(only))
        parser.set_defaults(command=only)
        _add_command_args(parser, only)
        return parser
    parser = _Parser(
        prog="ensure-flydsl",
        description="Make `import flydsl, kernels.moe_gemm_2stage` work from one consistent tree: reuse a "
        "good-enough FlyDSL, else provision the pinned one into an isolated folder.",
        epilog="exit codes: " + "; ".join(f"{int(c)} {m}" for c, m in EXIT_MEANINGS.items()),
    )
    parser.add_argument("--version", action="version", version=f"ensure-flydsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if name in _HELP:
            _add_command_args(sub.add_parser(name, help=_HELP[name], description=_HELP[name]), name)
        else:
            _add_command_args(sub.add_parser(name), name)  # internal: listed nowhere
    return parser


def _add_command_args(p: argparse.ArgumentParser, name: str) -> None:
    if name in _HELP:
        _add_setting_flags(p)
    _COMMAND_ARGS[name](p)


def _json_flag(help_text: Optional[str] = None) -> Callable[[argparse.ArgumentParser], None]:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help=help_text)

    return add


def _wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=_timeout_seconds, default=None, metavar="S",
                   help="give up waiting after S seconds (0: answer at once)")
    p.add_argument("--heartbeat", type=_seconds, default=30.0, metavar="S",
                   help="print a heartbeat line at least every S seconds (default 30)")


def _env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("sh", "json"), default="sh")


def _cache_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache_action", choices=("list", "prune"), metavar="{list,prune}")
    p.add_argument("--max-size", metavar="SIZE", help="prune: remove the oldest entries until the cache "
                   "holds at most SIZE (bytes, or with K/M/G/T)")
    p.add_argument("--json", action="store_true", help="list: one JSON object per entry")


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


_COMMAND_ARGS: Dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "ensure": _json_flag("print one JSON result object on stdout (and JSON events on stderr)"),
    "start": _no_args, "wait": _wait_args, "status": _json_flag("one JSON object (schema in the README)"),
    "env": _env_args, "verify": _json_flag(), "doctor": _json_flag("one JSON object with every check"),
    "cache": _cache_args, "clean": _no_args, "_worker": _worker_args, "_watchdog": _watchdog_args,
}


def _seconds(value: str, *, zero_ok: bool = False) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not ((seconds >= 0 if zero_ok else seconds > 0) and seconds < 10**9):  # NaN fails both
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds {'>= 0' if zero_ok else '> 0'}")
    return seconds


def _timeout_seconds(value: str) -> float:
    """0 too: check the state once and answer (75 if the run is still going)."""
    return _seconds(value, zero_ok=True)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "ensure")
    if argv[0] in COMMANDS:
        args, extra = build_parser(argv[0]).parse_known_args(argv[1:])
        if extra:  # as the full parser says it: its top level collects what no subcommand took
            _Parser(prog="ensure-flydsl").error(f"unrecognized arguments: {' '.join(extra)}")
        return args
    return build_parser().parse_args(argv)  # --help, --version


def _flags(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    flags: Dict[str, Optional[str]] = {s.name: getattr(args, s.name, None) for s in SETTINGS}
    flags["require"] = join_require(getattr(args, "require", None))
    flags["git_mirrors"] = join_git_mirrors(getattr(args, "git_mirrors", None))
    return flags


def settings_from_args(args: argparse.Namespace, environ: Dict[str, str]) -> Settings:
    return load_settings(_flags(args), environ)


def _report_bad_input(exc: BadInput, flags: Dict[str, Optional[str]], environ: Dict[str, str]) -> None:
    """A poller of the bash executor's recipe only sees markers: leave one, if its folder already exists."""
    path = fail_marker_path(flags, environ)
    if path and os.path.isdir(os.path.dirname(path)):
        from ensure_flydsl.runs.markers import write_failure_marker

        try:
            write_failure_marker(path, stage="settings", exit_code=int(exc.code), reason=exc.reason,
                                 hint=exc.hint, log=None, log_tail=[], run_id="", request={})
        except OSError:
            pass  # a read-only or full folder: the one line on stderr still says what is wrong


def format_error(exc: EnsureError, log_tail: List[str], log_path: Optional[str]) -> str:
    if exc.code == ExitCode.BAD_INPUT:
        return f"ensure-flydsl: {exc.reason}"  # one line, naming the setting and what is allowed
    stage = f", stage {exc.stage}" if exc.stage else ""
    lines = [f"ensure-flydsl: failed (exit {int(exc.code)}: {EXIT_MEANINGS[exc.code]}{stage}): {exc.reason}"]
    if exc.detail:
        lines.extend("  " + line for line in exc.detail.splitlines())
    if log_tail:
        lines.append(f"  last lines of the log ({log_path}):")
        lines.extend("    " + line for line in log_tail)
    elif log_path:
        lines.append(f"  log: {log_path}")
    if exc.hint:
        lines.append(f"  next: {exc.hint}")
    return "\n".join(lines)


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _handle_stop_signals() -> Dict[int, object]:
    """SIGTERM and SIGHUP (the terminal closed) unwind the run like Ctrl-C, so that its failure marker says
    what happened (not "died: kill -9") and the build's group is stopped.  An ignored SIGHUP stays ignored:
    that is how `nohup ensure-flydsl &` asks to outlive the terminal."""
    previous: Dict[int, object] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, _raise_interrupted)
    return previous


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (`ensure-flydsl status | head -1`)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered (flushed at exit) goes nowhere quietly."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Under umask 000 (common in containers) the checkout, its .git/hooks and the build would be
    # world-writable: anyone could plant a hook that the next run's git executes.  Never world-writable.
    os.umask(os.umask(0o022) | 0o002)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ)
    if args.command == "_watchdog":
        from ensure_flydsl.runs.liveness import watch

        return watch(args.watch_root, args.watch_run_id)
    json_mode = bool(getattr(args, "json", False))
    if json_mode:
        reporter = Reporter.for_stream(sys.stderr, json_events=args.command == "ensure")
    else:
        reporter = Reporter.for_stream(sys.stdout)
    previous = _handle_stop_signals()
    code: Optional[int] = None
    try:
        try:
            if args.command == "_worker":
                from ensure_flydsl.cli.worker import worker

                return worker(args.run_id, args.alive_fd, args.settings_json, environ, reporter)
            settings = settings_from_args(args, environ)
        except BadInput as exc:
            if args.command in ("ensure", "start"):
                _report_bad_input(exc, _flags(args), environ)
            raise
        code = _HANDLERS[args.command](args, settings, reporter, environ)
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return code
    except BrokenPipeError:
        if not _stdout_gone():
            return _internal_error(reporter)
        # The reader stopped reading (`| head -1`): what it did not read is nobody's failure.
        silence_stdout()
        return 0 if code is None else code
    except EnsureError as exc:
        if json_mode:
            import json

            try:
                print(json.dumps({"ok": False, "exit_code": int(exc.code), "stage": exc.stage,
                                  "reason": exc.reason, "hint": exc.hint, "log": reporter.log_path}), flush=True)
            except BrokenPipeError:
                silence_stdout()  # the exit code and stderr still tell the failure
        tail = reporter.tail(20) if exc.code in _BUILD_FAILURES else []
        print(format_error(exc, tail, reporter.log_path), file=sys.stderr)
        return int(exc.code)
    except (KeyboardInterrupt, Interrupted) as exc:
        what = exc.description if isinstance(exc, Interrupted) else interrupted_by("SIGINT")
        print(f"ensure-flydsl: {what}; the next run resumes where this one stopped", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception:
        return _internal_error(reporter)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        reporter.close()


def _internal_error(reporter: Reporter) -> int:
    import traceback

    text = traceback.format_exc()
    reporter.build_line(text)
    print(f"ensure-flydsl: internal error (exit 70), a bug; please report it with this:\n{text}", file=sys.stderr)
    return int(ExitCode.INTERNAL)


_BUILD_FAILURES = (ExitCode.FETCH, ExitCode.CHECKOUT, ExitCode.LLVM_BUILD, ExitCode.FLYDSL_BUILD, ExitCode.PROBE)


def _ensure(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.ensure import ensure_command

    return ensure_command(settings, reporter, environ, as_json=args.json)


def _env(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.env import show_env

    return show_env(settings, args.format)


def _verify(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.verify import verify

    return verify(settings, environ, as_json=args.json)


def _clean(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.clean import clean

    return clean(settings, reporter)


def _start(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.start import start

    return start(settings, environ, reporter)


def _wait(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.wait import wait

    return wait(settings, reporter, timeout=args.timeout, heartbeat=args.heartbeat)


def _status(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.status import status

    return status(settings, as_json=args.json)


def _doctor(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.doctor import doctor

    return doctor(settings, environ, as_json=args.json)


def _cache(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    from ensure_flydsl.cli.cache import cache_command

    return cache_command(settings, args.cache_action, max_size=args.max_size, as_json=args.json, say=reporter.say)


_HANDLERS: Dict[str, Callable[[argparse.Namespace, Settings, Reporter, Dict[str, str]], int]] = {
    "doctor": _doctor,
    "cache": _cache,
    "ensure": _ensure,
    "start": _start,
    "wait": _wait,
    "status": _status,
    "env": _env,
    "verify": _verify,
    "clean": _clean,
}
