"""``ensure-flydsl help [COMMAND]``: the list of commands, a command's own help, every setting (``help
settings``)."""

from __future__ import annotations

from typing import List, Sequence

from ensure_flydsl.cli.commands import COMMANDS
from ensure_flydsl.cli.help_text import settings_page, unknown
from ensure_flydsl.cli.parser import build_parser, columns, public, refuse

WHERE = "ensure-flydsl help lists the commands"


def show_help(topic: Sequence[str]) -> int:
    """Print the help of ``topic`` (none: every command; ``settings``: every setting); 0, else exit 64."""
    if not topic:
        build_parser().print_help()
        return 0
    if list(topic) == ["settings"]:
        print(settings_page(columns() - 2), end="")
        return 0
    name = topic[0]
    if name == "settings":
        refuse(f"ensure-flydsl help: {' '.join(topic)!r} is no command ({WHERE}; `help settings` lists the settings)")
    if name not in public(COMMANDS):
        refuse(unknown("command", name, public(COMMANDS) + ["settings"], WHERE))
    path: List[str] = [name]
    actions = COMMANDS[name].actions
    for word in topic[1:]:
        if actions is None or len(path) > 1:
            refuse(f"ensure-flydsl help: {' '.join(topic)!r} is no command ({WHERE})")
        if word not in public(actions):
            refuse(unknown(f"{name} command", word, public(actions), f"ensure-flydsl help {name} lists them"))
        path.append(word)
    build_parser(*path).print_help()
    return 0
