"""Command line: parse, dispatch, and map every outcome to an exit code.  No logic of its own."""

from __future__ import annotations

import argparse
import json
import os
import select
import signal as _signal
import sys
import traceback
from typing import Callable, Dict, List, Optional, Sequence

from ensure_flydsl.cli import handlers
from ensure_flydsl.cli.commands import COMMANDS
from ensure_flydsl.cli.parser import parse_args
from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Interrupted, Stage, disk_full_error, interrupted_by
from ensure_flydsl.result import result_object
from ensure_flydsl.runs.markers import write_failure_marker
from ensure_flydsl.runs.watchdog import watch
from ensure_flydsl.settings import (
    SETTINGS,
    Settings,
    fail_marker_path,
    join_git_mirrors,
    join_require,
    join_trusted_keys,
    load_settings,
)
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.support.stop_signals import unblock_stop_signals
from ensure_flydsl.warm import key_tokens

Handler = Callable[[argparse.Namespace, Settings, Reporter, Dict[str, str]], int]
PlainHandler = Callable[[argparse.Namespace, Reporter, Dict[str, str]], int]

# The signals that unwind a run like Ctrl-C (_handle_stop_signals), by their names.
_STOP_SIGNALS: Dict[int, str] = {_signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}


def _flags(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    flags: Dict[str, Optional[str]] = {s.name: getattr(args, s.name, None) for s in SETTINGS}
    flags["require"] = join_require(getattr(args, "require", None))
    flags["git_mirrors"] = join_git_mirrors(getattr(args, "git_mirrors", None))
    flags["cache_trusted_keys"] = join_trusted_keys(getattr(args, "cache_trusted_keys", None))
    return flags


def settings_from_args(args: argparse.Namespace, environ: Dict[str, str]) -> Settings:
    return load_settings(_flags(args), environ)


def _report_bad_input(exc: BadInput, flags: Dict[str, Optional[str]], environ: Dict[str, str]) -> None:
    """A poller of the bash executor's recipe only sees markers: leave one, if its folder already exists."""
    path = fail_marker_path(flags, environ)
    if path and os.path.isdir(os.path.dirname(path)):
        try:
            write_failure_marker(path, stage=Stage.SETTINGS, exit_code=int(exc.code), reason=exc.reason,
                                 hint=exc.hint, log=None, log_tail=[], run_id="", request=None)
        except OSError:
            pass  # a read-only or full folder: the one line on stderr still says what is wrong


def format_error(exc: EnsureError, log_tail: List[str], log_path: Optional[str]) -> str:
    if exc.code == ExitCode.BAD_INPUT:
        return f"ensure-flydsl: {exc.reason}"  # one line, naming the setting and what is allowed
    stage = f", stage {exc.stage}" if exc.stage else ""
    lines = [f"ensure-flydsl: failed (exit {int(exc.code)}: {exc.meaning}{stage}): {exc.reason}"]
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
    raise Interrupted(_STOP_SIGNALS[signum])


def _handle_stop_signals() -> Dict[int, object]:
    """SIGTERM and SIGHUP (the terminal closed) unwind the run like Ctrl-C, so that its failure marker says
    what happened (not "died: kill -9") and the build's group is stopped.  An ignored SIGHUP stays ignored:
    that is how `nohup ensure-flydsl &` asks to outlive the terminal."""
    previous: Dict[int, object] = {}
    for signum in _STOP_SIGNALS:
        if signum == _signal.SIGHUP and _signal.getsignal(signum) == _signal.SIG_IGN:
            continue
        previous[signum] = _signal.signal(signum, _raise_interrupted)
    return previous


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (`ensure-flydsl status | head -1`)."""

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered (flushed at exit) goes nowhere quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Under umask 000 (common in containers) the checkout, its .git/hooks and the build would be
    # world-writable: anyone could plant a hook that the next run's git executes.  Never world-writable.
    os.umask(os.umask(0o022) | 0o002)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    environ = dict(os.environ)
    # The front door's key when the settings come from the argv and the variables alone (warm.py).
    args.warm_key = key_tokens(argv) if args.command == "ensure" and not getattr(args, "verbosity", 0) else None
    if args.command == "_watchdog":
        unblock_stop_signals()  # started by a worker that may still have them blocked (cli/start.py)
        return watch(args.watch_root, args.watch_run_id)
    json_mode = bool(getattr(args, "json", False))
    reporter = _reporter_for(args, json_mode)
    previous = _handle_stop_signals()
    code: Optional[int] = None
    try:
        try:
            if args.command == "_worker":
                from ensure_flydsl.cli.worker import worker

                return worker(args.run_id, args.alive_fd, args.settings_json, environ, reporter)
            plain = _handler_name(args.command, plain=True)
            if plain is not None:
                handler: PlainHandler = getattr(handlers, plain)
                return handler(args, reporter, environ)
            settings = settings_from_args(args, environ)
        except BadInput as exc:
            if args.command in ("ensure", "start"):
                _report_bad_input(exc, _flags(args), environ)
            raise
        code = _run_command(args, settings, reporter, environ)
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return code
    except BrokenPipeError:
        if not _stdout_gone():
            return _internal_error(reporter)
        # The reader stopped reading (`| head -1`): what it did not read is nobody's failure.
        silence_stdout()
        return 0 if code is None else code
    except EnsureError as exc:
        return _report_failure(exc, reporter, json_mode)
    except (KeyboardInterrupt, Interrupted) as exc:
        return _report_interrupted(exc, reporter, json_mode)
    except Exception:
        return _internal_error(reporter, json_mode)
    finally:
        for signum, was in previous.items():
            _signal.signal(signum, was)  # type: ignore[arg-type]
        reporter.close()


def parse(argv: Sequence[str]) -> "argparse.Namespace":
    return parse_args(argv)


def _handler_name(command: str, *, plain: bool) -> Optional[str]:
    """The name in cli/handlers.py of the command's handler (``plain``: of its handler without settings), as the
    command table gives it; the default command's without building the table (the warm call's:
    tests/unit/test_cli_help.py holds the two equal)."""
    if command == "ensure":
        return None if plain else "_ensure"

    entry = COMMANDS[command]
    return entry.plain if plain else entry.run


def _reporter_for(args: argparse.Namespace, json_mode: bool) -> Reporter:
    verbosity = int(getattr(args, "verbosity", 0) or 0)
    if json_mode:
        # stdout carries the one result object; stderr only JSON events (messages, steps, the failure).
        return Reporter.for_stream(sys.stderr, json_events=True, verbosity=verbosity)
    if args.command == "start":
        return Reporter.for_stream(sys.stderr, verbosity=verbosity)  # start's stdout is its JSON object alone
    return Reporter.for_stream(sys.stdout, verbosity=verbosity)


def _run_command(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    name = _handler_name(args.command, plain=False)
    assert name is not None  # the internal commands returned before
    handler: Handler = getattr(handlers, name)
    try:
        return handler(args, settings, reporter, environ)
    except OSError as exc:  # another user's files, a read-only mount, a full file system: one line
        from ensure_flydsl.cli.access import access_error

        if isinstance(exc, BrokenPipeError):
            raise
        refused = access_error(exc, args.command) or disk_full_error(exc, _stage_of(args.command))
        if refused is None:
            raise
        raise refused from None


def _stage_of(command: str) -> Optional[Stage]:
    """The stage a command's own failure is said in (an ensure run says the stage it was in itself)."""

    return {"start": Stage.STARTING, "clean": Stage.CLEAN}.get(command)


def _report_failure(exc: EnsureError, reporter: Reporter, json_mode: bool) -> int:
    # The failures of a build step, whose log's last lines say why.
    build_failures = (ExitCode.FETCH, ExitCode.CHECKOUT, ExitCode.LLVM_BUILD, ExitCode.FLYDSL_BUILD, ExitCode.PROBE)
    tail = reporter.tail(20) if exc.code in build_failures else []
    if json_mode:
        _json_failure(reporter, failure_object(exc, reporter.log_path), tail)
    else:
        try:
            print(format_error(exc, tail, reporter.log_path), file=sys.stderr)
        except OSError:
            pass  # stderr on a full disk (a detached worker's is the log): the code says it
    return int(exc.code)


def _report_interrupted(exc: BaseException, reporter: Reporter, json_mode: bool) -> int:
    what = exc.description if isinstance(exc, Interrupted) else interrupted_by("SIGINT")
    if json_mode:
        _json_failure(reporter, result_object(exit_code=int(ExitCode.INTERRUPTED), reason=what,
                                              hint="run it again: it resumes", log=reporter.log_path), [])
    else:
        print(f"ensure-flydsl: {what}; the next run resumes where this one stopped", file=sys.stderr)
    return int(ExitCode.INTERRUPTED)


def _internal_error(reporter: Reporter, json_mode: bool = False) -> int:
    text = traceback.format_exc()
    reporter.build_line(text)
    if json_mode:
        _json_failure(reporter, result_object(
            exit_code=int(ExitCode.INTERNAL), reason="internal error, a bug: " + text.strip().splitlines()[-1],
            hint="please report it with the traceback (in the event's detail)", log=reporter.log_path), [], text)
    else:
        print(f"ensure-flydsl: internal error (exit 70), a bug; please report it with this:\n{text}",
              file=sys.stderr)
    return int(ExitCode.INTERNAL)


def failure_object(exc: EnsureError, log_path: Optional[str]) -> Dict[str, object]:
    """The result object of a failure (the shape of a success's, ``ok`` false): what the run set on the
    error (its id, time, and what the root still holds) included."""
    data = result_object(exit_code=int(exc.code), stage=exc.stage or None, reason=exc.reason,
                         hint=exc.hint or None, log=log_path, run_id=exc.run_id, elapsed_s=exc.elapsed_s)
    data["installed"] = exc.installed
    return data


def _json_failure(reporter: Reporter, data: Dict[str, object], tail: List[str], detail: str = "") -> None:
    """Under --json: the result object on stdout, and on stderr one JSON event (no text block)."""

    event: Dict[str, object] = {"event": "failed", "exit_code": data["exit_code"], "stage": data["stage"],
                                "reason": data["reason"], "hint": data["hint"], "log": data["log"],
                                "log_tail": tail}
    if detail:
        event["detail"] = detail
    reporter.event(event)
    try:
        print(json.dumps(data, sort_keys=True), flush=True)
    except BrokenPipeError:
        silence_stdout()  # the exit code and stderr still tell the failure

