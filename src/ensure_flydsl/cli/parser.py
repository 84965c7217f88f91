"""The command line's parsers, generated from two tables: the commands (``cli/commands.py: COMMANDS``, each
with its own arguments and, for ``cache``, its own commands) and the settings (``settings.py: SETTINGS``: each
row's kind says how its flag is given, and so whether the word after it is its value when the flags come
before the command).  One parser is built per call, for the command in use; its help text is made only when
it is shown (``cli/help_text.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Set, Tuple

from ensure_flydsl.cli.about import version_line
from ensure_flydsl.cli.commands import COMMANDS, Command, command_at
from ensure_flydsl.cli.help_text import command_epilog, top_epilog, unknown
from ensure_flydsl.errors import ExitCode
from ensure_flydsl.settings import FLAG, LIST, SETTINGS, SWITCH, VALUE

DESCRIPTION = ("Make `import flydsl, kernels.moe_gemm_2stage` work from one consistent tree: reuse a good-enough "
               "FlyDSL, else provision the pinned one into an isolated folder.")
HELP_WORDS = ("-h", "--help")
VERSION_WORDS = ("-V", "--version")


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for every setting, each as its kind says; their help is the command's list of the settings
    that apply to it (cli/help_text.py), so argparse lists none of them."""
    hidden = argparse.SUPPRESS
    for setting in SETTINGS:
        if setting.kind == SWITCH:
            parser.add_argument(setting.flag, dest=setting.name, action="store_const", const="1", help=hidden)
            parser.add_argument(negated(setting.flag), dest=setting.name, action="store_const", const="0",
                                help=hidden)
        elif setting.kind == FLAG:
            parser.add_argument(setting.flag, dest=setting.name, action="store_const", const="1", help=hidden)
        elif setting.kind == LIST:
            parser.add_argument(setting.flag, dest=setting.name, action="append", metavar=setting.metavar,
                                help=hidden)
        else:
            parser.add_argument(setting.flag, dest=setting.name, metavar=setting.name.upper(), help=hidden)


def negated(flag: str) -> str:
    """A SWITCH's second flag: ``--vllm-moe`` -> ``--no-vllm-moe``."""
    return "--no-" + flag[2:]


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized as it sizes itself but without importing shutil (and its compression
    modules) for every argument added: the warm call prints no help.  Text with its own lines (the lists of
    settings and examples) is kept as it is; the rest is wrapped."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: Optional[int] = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, columns() - 2 if width is None else width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else the terminal of stdout, else 80."""
    try:
        count = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        count = 0
    if count > 0:
        return count
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Parser(argparse.ArgumentParser):
    def __init__(self, *, epilog_from: Optional[Callable[[int], str]] = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(**kwargs)
        self._epilog_from = epilog_from

    def format_help(self) -> str:
        if self._epilog_from is not None:  # made when shown: a run never pays for its help text
            self.epilog = self._epilog_from(columns() - 2)
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        # A usage error is bad input: exit 64 and one line (argparse's own exit 2 means "clone failed" here).
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: {message}\n")


def refuse(line: str) -> NoReturn:
    """Bad input on the command line: one line on stderr, exit 64."""
    sys.stderr.write(line + "\n")
    raise SystemExit(int(ExitCode.BAD_INPUT))


def public(commands: Dict[str, Command]) -> List[str]:
    return [name for name, command in commands.items() if command.help is not None]


def build_parser(*path: str) -> argparse.ArgumentParser:
    """The parser of ``path``: none, the top level (its help lists the commands); ``("status",)`` that
    command's; ``("cache",)`` the cache commands' list; ``("cache", "list")`` one of them.

    A run uses one command, and building the others' flags (each argparse parser also looks up its
    translations) cost more than the warm call's own work.  Each parser has its command's full name, so its
    usage, help and errors say which command they are about.
    """
    if not path:
        parser = _Parser(prog="ensure-flydsl", description=DESCRIPTION, epilog_from=_top_epilog)
        parser.add_argument("-V", "--version", action="store_true", help="print the version (and the commit, "
                            "when known) and exit")
        _list_commands(parser, COMMANDS, "COMMAND", "commands")
        return parser
    command = command_at(path)
    prog = "ensure-flydsl " + " ".join(path)
    parser = _Parser(prog=prog, description=command.help,
                     epilog_from=lambda width: _command_epilog(path, width))
    if command.actions is not None:
        _list_commands(parser, command.actions, "ACTION", f"{path[-1]} commands")
        return parser
    parser.set_defaults(command=path[0])
    if len(path) > 1:
        parser.set_defaults(**{f"{path[0]}_action": path[1]})
    if command.help is not None and COMMANDS[path[0]].plain is None:
        add_setting_flags(parser)
    if command.help is not None and command.loud:
        loud = parser.add_mutually_exclusive_group()
        loud.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=0,
                          help="show nothing but a failure (the log still gets everything)")
        loud.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1,
                          help="show the build's own output as well")
    command.add_args(parser)
    return parser


def _top_epilog(width: int) -> str:
    return top_epilog(width)


def _command_epilog(path: Sequence[str], width: int) -> str:
    return command_epilog(path, width)


def _list_commands(parser: argparse.ArgumentParser, commands: Dict[str, Command], metavar: str, title: str) -> None:
    """The commands for the help's list only: a command line is parsed by its own command's parser."""
    sub = parser.add_subparsers(metavar=metavar, title=title)
    for name in public(commands):
        sub.add_parser(name, help=commands[name].help)


def valued_flags(own: Sequence[Command] = ()) -> Set[str]:
    """The flags whose next word is their value: the settings of kind VALUE and LIST (``--root X``,
    ``--require M``; not ``--verify`` or ``--exact-pin``), and the options of ``own`` that take one."""
    valued = {s.flag for s in SETTINGS if s.kind in (VALUE, LIST)}
    for command in own:
        probe = argparse.ArgumentParser(add_help=False)
        command.add_args(probe)
        valued.update(flag for action in probe._actions if action.nargs != 0 for flag in action.option_strings)
    return valued


def first_word(argv: Sequence[str], valued: Set[str], known: Optional[Set[str]] = None) -> Optional[int]:
    """Where the first word that is no flag nor a flag's value is in ``argv`` (None: none before ``--``, or
    before a flag not in ``known``, whose value, if it takes one, cannot be told from a command)."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return None
        if not word.startswith("-"):
            return index
        if known is not None and word.split("=", 1)[0] not in known:
            return None
        index += 2 if word in valued else 1
    return None


def _before_command() -> Set[str]:
    """The flags that may come before the command: the settings' (generated from the table, as the
    parser's are), -q/-v, and the ensure command's own (no command is ``ensure``)."""
    flags = {s.flag for s in SETTINGS} | {negated(s.flag) for s in SETTINGS if s.kind == SWITCH}
    probe = argparse.ArgumentParser(add_help=False)
    COMMANDS["ensure"].add_args(probe)
    flags.update(flag for action in probe._actions for flag in action.option_strings)
    return flags | {"-q", "--quiet", "-v", "--verbose"} | set(HELP_WORDS + VERSION_WORDS)


def command_first(argv: Sequence[str]) -> List[str]:
    """``argv`` with its command first: settings and -q/-v may come before it (``ensure-flydsl --root X
    status`` is ``ensure-flydsl status --root X``); without a command it is ``ensure``.  A word where the
    command goes that is none is refused, with the command it may have meant."""
    argv = list(argv)
    if argv and (argv[0] in COMMANDS or argv[0] in HELP_WORDS + VERSION_WORDS):
        return argv
    at = first_word(argv, valued_flags(), _before_command())
    before = argv if at is None else argv[:at]
    for word in before:
        if word in VERSION_WORDS:
            return [word]
    if at is None:
        return ["ensure"] + argv
    if argv[at] not in COMMANDS:
        refuse(unknown("command", argv[at], public(COMMANDS), "ensure-flydsl help lists the commands"))
    return [argv[at]] + argv[:at] + argv[at + 1:]


def action_first(name: str, argv: Sequence[str]) -> Tuple[Optional[str], List[str]]:
    """For a command of commands (``cache``): its own command and the rest of ``argv`` (None: none given)."""
    command = COMMANDS[name]
    assert command.actions is not None
    argv = list(argv)
    at = 0 if argv and argv[0] in command.actions else first_word(argv, valued_flags(list(command.actions.values())))
    if at is None:
        return None, argv
    if argv[at] not in public(command.actions):
        refuse(unknown(f"{name} command", argv[at], public(command.actions), f"ensure-flydsl help {name} lists them"))
    return argv[at], argv[:at] + argv[at + 1:]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    argv = command_first(argv)
    if argv[0] in VERSION_WORDS:
        print(version_line())
        raise SystemExit(0)
    if argv[0] in HELP_WORDS:
        build_parser().print_help()
        raise SystemExit(0)
    path, rest = [argv[0]], argv[1:]
    if COMMANDS[argv[0]].actions is not None:
        action, rest = action_first(argv[0], rest)
        if action is None:
            if any(word in HELP_WORDS for word in rest):
                build_parser(*path).print_help()
                raise SystemExit(0)
            choices = public(COMMANDS[argv[0]].actions or {})
            refuse(f"ensure-flydsl {argv[0]}: which one? {', '.join(choices[:-1])} or {choices[-1]} "
                   f"(ensure-flydsl help {argv[0]} says what each does)")
        path.append(action)
    parser = build_parser(*path)
    # `cache keygen --out DIR NAME`: names may follow options (argparse takes positionals in one go).
    parse = parser.parse_known_intermixed_args if len(path) > 1 else parser.parse_known_args
    args, extra = parse(rest)
    if extra:  # said as the top level says it: what no command took
        _Parser(prog="ensure-flydsl").error(f"unrecognized arguments: {' '.join(extra)}")
    return args
