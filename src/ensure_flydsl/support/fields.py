"""Field checks for records read from outside, so a wrong value is refused at the edge.  Each returns the value
when it has the type (the second group: and the meaning) the record needs, else None."""

from __future__ import annotations

import math
import re
from typing import Collection, Dict, List, Optional


def number(value: object) -> Optional[float]:
    """A finite int or float, not a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


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


# FLYDSL_HOST_ID is held to this too, so that what one host writes, every other host reads.
SHORT_TEXT_MAX = 200


def short_text(value: object, limit: int = SHORT_TEXT_MAX) -> Optional[str]:
    """A non-empty text of at most ``limit`` printable characters, else None."""
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        return None
    return value


# -- what a value means, not only its type ----------------------------------------------------------------
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT on 64-bit
MAX_SECONDS = 10.0**10  # the year 2286


def pid(value: object) -> Optional[int]:
    found = integer(value)
    return found if found is not None and 0 < found <= PID_MAX else None


def seconds(value: object) -> Optional[float]:
    found = number(value)
    return found if found is not None and 0.0 <= found <= MAX_SECONDS else None


def percent(value: object) -> Optional[float]:
    found = number(value)
    return found if found is not None and 0.0 <= found <= 100.0 else None


def one_of(value: object, allowed: Collection[str]) -> Optional[str]:
    return value if isinstance(value, str) and value in allowed else None


def absolute_path(value: object) -> Optional[str]:
    found = path(value)
    return found if found is not None and found.startswith("/") else None


def absolute_paths(value: object) -> Optional[List[str]]:
    found = paths(value)
    return found if found is not None and all(p.startswith("/") for p in found) else None


def object_name(value: object) -> Optional[str]:
    """A git object name: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits."""
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value) else None
