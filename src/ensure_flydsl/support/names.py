"""A pin and a module name checked without re: the warm call parses the pin (its settings) and the module names
(the twin's request), and imports no re (under python3 -E -S, as the GEAK folder runs the tool, its import costs
as much as the interpreter's start).  Each check is its pattern's match exactly (tests/unit/test_names.py)."""

from __future__ import annotations

PIN = r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}\Z"
MODULE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z"
_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_REST = _NAME_FIRST | frozenset("0123456789")
_PIN_REST = _NAME_REST | frozenset("./+-")


def pin_text(value: str) -> bool:
    """``re.match(PIN, value)``: a letter, digit or _, then up to 254 of those or . / + -."""
    return 0 < len(value) <= 255 and value[0] in _NAME_REST and all(c in _PIN_REST for c in value[1:])


def module_name(value: str) -> bool:
    """``re.match(MODULE, value)``: dotted ASCII identifiers."""
    return all(part and part[0] in _NAME_FIRST and all(c in _NAME_REST for c in part[1:])
               for part in value.split("."))
