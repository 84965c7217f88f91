"""The command line from its tables (issue 27, items 2 and 6): every setting's flag is placed before or after
the command as its kind says, every example the help shows is a command line the parser takes for that very
command, and the groups the help lists the settings in name real settings."""

from __future__ import annotations

import shlex
from typing import List, Tuple

import pytest

from ensure_flydsl.cli.commands import _REQUEST, COMMANDS, command_at
from ensure_flydsl.cli.help_text import TOP_EXAMPLES, grouped
from ensure_flydsl.cli.parser import parse_args
from ensure_flydsl.settings import FLAG, LIST, SETTING_GROUPS, SETTINGS, SWITCH, VALUE, Settings


def paths() -> List[Tuple[str, ...]]:
    found: List[Tuple[str, ...]] = []
    for name, command in COMMANDS.items():
        if command.help is None:
            continue
        found.append((name,))
        found += [(name, action) for action in command.actions or {}]
    return found


def words(example: str) -> List[str]:
    """The arguments of an example's command line (what follows `ensure-flydsl`, before a redirection)."""
    argv = shlex.split(example.split(" > ")[0])
    assert argv[0] == "ensure-flydsl", example
    return argv[1:]


EXAMPLES = [(path, line) for path in paths() for line, _ in command_at(path).examples]


@pytest.mark.parametrize("path, line", EXAMPLES, ids=[line for _, line in EXAMPLES])
def test_every_example_is_a_command_line_of_its_command(path: Tuple[str, ...], line: str) -> None:
    args = parse_args(words(line))
    if args.command == "help" and path[0] != "help":  # `help cache prune`, an example of cache's
        assert args.topic[:len(path)] == list(path) and len(args.topic) > len(path)
        return
    assert args.command == path[0]
    if path == ("help",):
        assert args.topic[0] in list(COMMANDS) + ["settings"]
    if len(path) > 1:
        assert getattr(args, f"{path[0]}_action") == path[1]


def test_the_top_examples_parse() -> None:
    for line, _ in TOP_EXAMPLES:
        assert parse_args(words(line)).command in COMMANDS


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_each_setting_may_come_before_or_after_the_command_as_its_kind_says(setting: object) -> None:
    from ensure_flydsl.settings import Setting

    assert isinstance(setting, Setting)
    given = [setting.flag, "/some/value"] if setting.kind in (VALUE, LIST) else [setting.flag]
    expected = {VALUE: "/some/value", LIST: ["/some/value"], FLAG: "1", SWITCH: "1"}[setting.kind]
    for argv in (given + ["status", "--json"], ["status"] + given + ["--json"], given + ["cache", "list"],
                 ["cache"] + given + ["list"]):
        args = parse_args(argv)
        assert getattr(args, setting.name) == expected, argv
        assert args.command == argv[argv.index("status") if "status" in argv else argv.index("cache")]
    if setting.kind == SWITCH:
        assert getattr(parse_args(["--no-" + setting.flag[2:], "status"]), setting.name) == "0"


def test_the_help_groups_name_real_settings_once_and_the_request_is_the_settings_own() -> None:
    names = [name for _, _, members in SETTING_GROUPS for name in members]
    assert len(names) == len(set(names)) and set(names) <= {s.name for s in SETTINGS}
    shown = [s.name for _, _, members in grouped(None) for s in members]
    assert sorted(shown) == sorted(s.name for s in SETTINGS)  # one not in a group is under "other"
    # what status/env/wait list: what an env file must answer
    assert set(_REQUEST) == set(Settings().request().to_json())


def test_every_handler_the_table_names_is_one_and_the_warm_dispatch_is_the_tables() -> None:
    """main dispatches the default command without building the table (cli/main.py: _handler_name): what the table
    says; and every handler it names is in cli/handlers.py."""
    from ensure_flydsl.cli import handlers
    from ensure_flydsl.cli.main import _handler_name

    ensure = COMMANDS["ensure"]
    assert (_handler_name("ensure", plain=False), _handler_name("ensure", plain=True)) == (ensure.run, ensure.plain)
    commands = [*COMMANDS.values(), *(a for c in COMMANDS.values() for a in (c.actions or {}).values())]
    for command in commands:
        for name in (command.run, command.plain):
            assert name is None or callable(getattr(handlers, name)), name
