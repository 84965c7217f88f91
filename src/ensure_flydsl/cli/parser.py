"""The command line's parsers: one per command, built only for the command in use (the full one for
``--help``), with a flag for every setting."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn, Optional, Sequence

from ensure_flydsl.cli import COMMANDS
from ensure_flydsl.errors import EXIT_MEANINGS, ExitCode
from ensure_flydsl.settings import FLAG, LIST, SETTINGS, SWITCH, VALUE
from ensure_flydsl.version import __version__


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (each also from its environment variable; a flag wins)")
    for setting in SETTINGS:
        if setting.kind == SWITCH:
            group.add_argument(setting.flag, dest=setting.name, action="store_const", const="1",
                               help=f"{setting.help} [{setting.env}]")
            group.add_argument("--no-" + setting.flag[2:], dest=setting.name, action="store_const", const="0",
                               help="do not export VLLM_USE_FLYDSL_MOE (A/B baselines)")
        elif setting.kind == FLAG:
            group.add_argument(setting.flag, dest=setting.name, action="store_const", const="1",
                               help=f"{setting.help} [{setting.env}]")
        elif setting.kind == LIST:
            again = "repeatable" if setting.name == "require" else "repeatable, replaces the variable's list"
            group.add_argument(setting.flag, dest=setting.name, action="append", metavar=setting.metavar,
                               help=f"{setting.help}; {again} [{setting.env}]")
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


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of every command, for ``--help``; with ``only``, that command's parser alone.

    A run uses one command, and building the others' flags (each argparse parser also looks up its
    translations) cost more than the warm call's own work.  The one-command parser has the subcommand's
    own name, so its usage, help and errors read exactly as the full parser's.
    """
    if only is not None:
        parser = _Parser(prog=f"ensure-flydsl {only}", description=COMMANDS[only].help)
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
    for name, command in COMMANDS.items():
        if command.help is not None:
            _add_command_args(sub.add_parser(name, help=command.help, description=command.help), name)
        else:
            _add_command_args(sub.add_parser(name), name)  # internal: listed nowhere
    return parser


def _add_command_args(p: argparse.ArgumentParser, name: str) -> None:
    if COMMANDS[name].help is not None:
        if COMMANDS[name].plain is None:
            _add_setting_flags(p)
        loud = p.add_mutually_exclusive_group()
        loud.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=0,
                          help="show nothing but a failure (the log still gets everything)")
        loud.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1,
                          help="show the build's own output as well")
    COMMANDS[name].add_args(p)


def _flags_with_values() -> "set[str]":
    """The setting flags that take a value (``--root X``, ``--require M``; not ``--verify`` or ``--exact-pin``)."""
    return {s.flag for s in SETTINGS if s.kind in (VALUE, LIST)}


def command_first(argv: Sequence[str]) -> "list[str]":
    """``argv`` with its command first: settings and -q/-v may come before it (``ensure-flydsl --root X
    status`` is ``ensure-flydsl status --root X``); without a command it is ``ensure``."""
    argv = list(argv)
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version")):
        return argv
    valued = _flags_with_values()
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            break
        if not word.startswith("-"):
            if word in COMMANDS:
                return [word] + argv[:index] + argv[index + 1:]
            break  # not a command: the ensure command's parser says what is wrong with it
        if word == "--version":
            return [word]
        index += 2 if word in valued else 1
    return ["ensure"] + argv


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    argv = command_first(argv)
    if argv[0] in COMMANDS:
        parser = build_parser(argv[0])
        # `cache keygen --out DIR NAME`: names may follow options (argparse takes positionals in one go).
        parse = parser.parse_known_intermixed_args if argv[0] == "cache" else parser.parse_known_args
        args, extra = parse(argv[1:])
        if extra:  # as the full parser says it: its top level collects what no subcommand took
            _Parser(prog="ensure-flydsl").error(f"unrecognized arguments: {' '.join(extra)}")
        return args
    return build_parser().parse_args(argv)  # --help, --version
