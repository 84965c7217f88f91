"""The command line from its parser (issue 27, items 2 and 6): every setting's flag is placed before or after the
command as its kind says, every example the help shows is a command line the parser takes for that very command,
and the help's groups and the request are the settings table's own."""

from __future__ import annotations

import argparse
import shlex
from typing import Dict, List, Tuple

import pytest

from ensure_flydsl.cli.main import build_parser, parse
from ensure_flydsl.settings import FLAG, GROUPS, LIST, SETTINGS, SWITCH, VALUE, Request, Setting, Settings


def subcommands(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    found = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0] if found else {}


def paths() -> List[Tuple[Tuple[str, ...], argparse.ArgumentParser]]:
    found: List[Tuple[Tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    for name, parser in subcommands(found[0][1]).items():
        found.append(((name,), parser))
        found += [((name, action), sub) for action, sub in subcommands(parser).items()]
    return found


def words(example: str) -> List[str]:
    """The arguments of an example's command line (what follows `ensure-flydsl`, before a redirection)."""
    argv = shlex.split(example.split(" > ")[0])
    assert argv[0] == "ensure-flydsl", example
    return argv[1:]


EXAMPLES = [(path, line.strip().split("  # ")[0]) for path, parser in paths()
            for line in (parser.epilog or "").splitlines() if line.startswith("  ensure-flydsl ")]


def test_every_command_shows_examples() -> None:
    assert {path for path, _ in EXAMPLES} == {path for path, _ in paths()}


@pytest.mark.parametrize("path, line", EXAMPLES, ids=[line for _, line in EXAMPLES])
def test_every_example_is_a_command_line_of_its_command(path: Tuple[str, ...], line: str) -> None:
    args = parse(words(line))
    if not path:
        assert args.command in subcommands(build_parser())
        return
    if args.command == "help" and path[0] != "help":  # `help cache prune`, an example of cache's
        assert args.topic[:len(path)] == list(path) and len(args.topic) > len(path)
        return
    assert args.command == path[0]
    if path == ("help",):
        assert args.topic[0] in [*subcommands(build_parser()), "settings"]
    if len(path) > 1:
        assert getattr(args, f"{path[0]}_action") == path[1]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_each_setting_may_come_before_or_after_the_command_as_its_kind_says(setting: Setting) -> None:
    given = [setting.flag, "/some/value"] if setting.kind in (VALUE, LIST) else [setting.flag]
    expected = {VALUE: "/some/value", LIST: ["/some/value"], FLAG: True, SWITCH: True}[setting.kind]
    for argv in (given + ["status", "--json"], ["status"] + given + ["--json"], given + ["cache", "list"],
                 ["cache"] + given + ["list"], given):
        args = parse(argv)
        assert getattr(args, setting.name) == expected, argv
        assert args.command == ("status" if "status" in argv else "cache" if "cache" in argv else "ensure")
    if setting.kind == SWITCH:
        assert getattr(parse(["--no-" + setting.flag[2:], "status"]), setting.name) is False


def test_the_help_groups_are_the_tables_and_the_request_is_the_settings_own() -> None:
    assert {s.group for s in SETTINGS} == set(GROUPS)
    assert len({s.flag for s in SETTINGS}) == len(SETTINGS) and len({s.env for s in SETTINGS}) == len(SETTINGS)
    request = [s.name for s in SETTINGS if s.in_request]
    assert set(request) == set(Settings().request().to_json()) == set(Request().to_json())
    assert Request.from_json(Settings().request().to_json()) == Settings().request()
