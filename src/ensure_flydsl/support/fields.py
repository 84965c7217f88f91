"""Field by field, the values of a record read from outside (a JSON file the tool wrote once, or somebody
else did): each function returns the value when it has the type the record needs, else None, so a wrong
type is refused at the edge instead of travelling inward to become a traceback.  Standard library only
(the warm path reads the env file's twin through these)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import Dict, List, Optional



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
