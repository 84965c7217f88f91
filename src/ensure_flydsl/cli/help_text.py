"""The words of the help, made from the tables: each command's settings (by concern, ``settings.py:
SETTING_GROUPS``) and examples (``cli/commands.py: COMMANDS``), every setting for ``help settings``, and the
line for a mistyped command.  Made only when shown: nothing here runs on a call that prints no help."""

from __future__ import annotations

import difflib
import textwrap
from typing import List, Optional, Sequence, Tuple

from ensure_flydsl.cli.commands import COMMANDS, command_at
from ensure_flydsl.errors import EXIT_MEANINGS
from ensure_flydsl.settings import FLAG, LIST, SETTING_GROUPS, SETTINGS, SWITCH, Setting, Settings

TOP_EXAMPLES: Tuple[Tuple[str, str], ...] = (
    ("ensure-flydsl --root ~/.cache/flydsl/FlyDSL", "blocking; then source ~/.cache/flydsl/FlyDSL/flydsl_env.sh"),
    ("ensure-flydsl start --root ~/.cache/flydsl/FlyDSL", "detached: returns at once; then `wait --timeout 540`"),
    ("ensure-flydsl doctor", "in seconds: can it succeed here, and if not, why"),
)
SETTINGS_POINTER = "ensure-flydsl help settings"


def unknown(what: str, word: str, known: Sequence[str], where: str) -> str:
    """The one line for a word that names no command: the closest one, if one is close."""

    # A word with the letters of a command, in another order, is that command (`stauts`: status, not stats);
    # else the closest, and a second one as close as it.
    close = sorted(difflib.get_close_matches(word, known, n=2), key=lambda k: sorted(k) != sorted(word))
    ratio = [difflib.SequenceMatcher(None, word, k).ratio() for k in close]
    if len(close) == 2 and (sorted(close[0]) == sorted(word) or ratio[0] - ratio[1] > 0.05):
        close = close[:1]
    meant = f"; did you mean {' or '.join(repr(k) for k in close)}?" if close else ""
    return f"ensure-flydsl: unknown {what} '{word}'{meant} ({where})"


def flag_form(setting: Setting, *, metavar: bool = False) -> str:
    """How a setting is given on the command line: ``--vllm-moe/--no-vllm-moe``, ``--root ROOT``."""
    if setting.kind == SWITCH:
        return f"{setting.flag}/--no-{setting.flag[2:]}"
    if setting.kind == FLAG or not metavar:
        return setting.flag
    return f"{setting.flag} {setting.metavar if setting.kind == LIST else setting.name.upper()}"


def grouped(names: Optional[Sequence[str]]) -> List[Tuple[str, str, List[Setting]]]:
    """(short name, title, settings) of each concern, with only the settings in ``names`` (None: all); a
    setting in no group is in "other"."""
    chosen = {s.name: s for s in SETTINGS if names is None or s.name in names}
    placed = {name for _, _, members in SETTING_GROUPS for name in members}
    unplaced = tuple(name for name in chosen if name not in placed)
    groups: List[Tuple[str, str, List[Setting]]] = []
    for short, title, members in SETTING_GROUPS + (("other", "other settings", unplaced),):
        found = [chosen[name] for name in members if name in chosen]
        if found:
            groups.append((short, title, found))
    return groups


def settings_block(names: Optional[Sequence[str]], width: int) -> str:
    """The settings a command's help lists, one line (or two) per concern."""
    groups = grouped(names)
    if not groups:
        return "settings: none apply to it"
    lines = textwrap.wrap(f"settings (each a flag, before or after the command, or its variable; "
                          f"`{SETTINGS_POINTER}` says what each does):", width, subsequent_indent="  ",
                          break_on_hyphens=False)
    indent = max(len(short) for short, _, _ in groups) + 4
    for short, _, members in groups:
        text = " ".join(flag_form(s) for s in members)
        lines += textwrap.wrap(text, max(width, indent + 20), initial_indent=f"  {short:<{indent - 2}}",
                               subsequent_indent=" " * indent, break_on_hyphens=False)
    return "\n".join(lines)


def examples_block(examples: Sequence[Tuple[str, str]], width: int) -> str:
    lines = ["examples:"]
    for line, why in examples:
        if not why:
            lines.append(f"  {line}")
        elif len(line) + len(why) + 6 <= width:
            lines.append(f"  {line}  # {why}")
        else:
            lines += [f"  {line}", f"      # {why}"]
    return "\n".join(lines)


def command_epilog(path: Sequence[str], width: int) -> str:
    command = command_at(path)
    parts = []
    if COMMANDS[path[0]].plain is None and command.help is not None:
        parts.append(settings_block(command.settings, width))
    if command.examples:
        parts.append(examples_block(command.examples, width))
    return "\n\n".join(parts) + "\n" if parts else ""


def top_epilog(width: int) -> str:
    codes = "exit codes: " + "; ".join(f"{int(code)} {meaning}" for code, meaning in EXIT_MEANINGS.items())
    pointer = (f"settings: each is a flag, before or after the command, or its environment variable (a flag "
               f"wins); `{SETTINGS_POINTER}` lists them, `ensure-flydsl help COMMAND` shows a command's own")
    return "\n".join([*textwrap.wrap(pointer, width, subsequent_indent="  "), "",
                      examples_block(TOP_EXAMPLES, width), "",
                      *textwrap.wrap(codes, width, subsequent_indent="  ", break_on_hyphens=False)]) + "\n"


def _default(setting: Setting) -> str:
    """`` (default X)`` from the Settings record, unless the help says it already or there is none."""
    value = getattr(Settings(), setting.name, None)
    if "default" in setting.help or value in (None, "", ()):
        return ""
    if isinstance(value, bool):
        return f" (default {'on' if value else 'off'})"
    return f" (default {','.join(value) if isinstance(value, tuple) else value})"


def settings_page(width: int) -> str:
    """``help settings``: every setting, by concern: its flag, its variable, what it does."""
    lines = textwrap.wrap(
        "Every setting is a flag (before or after the command) and an environment variable; a flag wins over "
        "its variable, and an empty variable means the default. A bad value is refused (exit 64, one line "
        "naming the setting and what is allowed) before anything is touched.", width)
    for short, title, members in grouped(None):
        lines += ["", f"{title} ({short}):"]
        for setting in members:
            repeat = " (repeatable)" if setting.kind == LIST else ""
            lines.append(f"  {flag_form(setting, metavar=True)}{repeat}  [{setting.env}]")
            lines += textwrap.wrap(setting.help + _default(setting), width, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6, break_on_hyphens=False)
    return "\n".join(lines) + "\n"
