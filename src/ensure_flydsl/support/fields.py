"""Field by field, the values of a record read from outside (a JSON file the tool wrote once, or somebody
else did): each function returns the value when it has the type the record needs, else None, so a wrong
type is refused at the edge instead of travelling inward to become a traceback.  The second group checks
what a value means too (a process id in the kernel's range, a percent, a time, an absolute path, a git
object name, one of an enumeration's values): a value of the right type that no run of the tool writes
would otherwise steer a decision.  Standard library only (the warm path reads the env file's twin through
these)."""

from __future__ import annotations

from typing import Collection, Dict, List, Optional


def number(value: object) -> Optional[float]:
    """A finite number (an int or a float, not a bool; an int too large for a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if result - result == 0.0 else None  # NaN and the infinities are not numbers here


def integer(value: object) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text(value: object) -> Optional[str]:
    return value if isinstance(value, str) else None


def path(value: object) -> Optional[str]:
    """A string the operating system can take as a path (no NUL)."""
    return value if isinstance(value, str) and "\0" not in value else None


def paths(value: object) -> Optional[List[str]]:
    if not isinstance(value, list) or not all(isinstance(v, str) and "\0" not in v for v in value):
        return None
    return list(value)


def text_map(value: object) -> Optional[Dict[str, str]]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return None
    return {str(k): v for k, v in value.items()}


# A short text a record shows in messages (a lease record's host, run id, step): FLYDSL_HOST_ID is held to the
# same rule when it is set, so that what one host writes, every other host reads.
SHORT_TEXT_MAX = 200


def short_text(value: object, limit: int = SHORT_TEXT_MAX) -> Optional[str]:
    """A non-empty text of at most ``limit`` printable characters (no control character, line break or lone
    surrogate), else None."""
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        return None
    return value


# -- what a value means, not only its type ----------------------------------------------------------------
# Linux's PID_MAX_LIMIT (4194304 on 64-bit): a larger number is no process id.
PID_MAX = 1 << 22
# Wall clock times and durations a record carries: not beyond the year 2286 (as the build lease's records).
MAX_SECONDS = 10.0**10


def pid(value: object) -> Optional[int]:
    """A process id: an integer in 1 .. PID_MAX."""
    found = integer(value)
    return found if found is not None and 0 < found <= PID_MAX else None


def seconds(value: object) -> Optional[float]:
    """A time or a duration in seconds: a finite number in 0 .. MAX_SECONDS."""
    found = number(value)
    return found if found is not None and 0.0 <= found <= MAX_SECONDS else None


def percent(value: object) -> Optional[float]:
    found = number(value)
    return found if found is not None and 0.0 <= found <= 100.0 else None


def one_of(value: object, allowed: Collection[str]) -> Optional[str]:
    """A text that is one of ``allowed`` (an enumeration's values)."""
    return value if isinstance(value, str) and value in allowed else None


def absolute_path(value: object) -> Optional[str]:
    """A path (no NUL) that is absolute: what the tool writes for a root, a tree or an interpreter."""
    found = path(value)
    return found if found is not None and found.startswith("/") else None


def absolute_paths(value: object) -> Optional[List[str]]:
    found = paths(value)
    return found if found is not None and all(p.startswith("/") for p in found) else None


_HEX = frozenset("0123456789abcdef")


def object_name(value: object) -> Optional[str]:
    """A git object name: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits."""
    if not isinstance(value, str) or len(value) not in (40, 64) or not set(value) <= _HEX:
        return None
    return value
