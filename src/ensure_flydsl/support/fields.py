"""Records read from outside, refused at the edge: checks that return a value when it has the type (and the
meaning) a record needs, else None, and one reader of a dataclass whose fields name their checks."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from typing import Any, Callable, Collection, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)
N = TypeVar("N", int, float)
Check = Callable[[object], Any]


def checked(check: Check, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
            nullable: Optional[bool] = None, lenient: bool = False, convert: Optional[Callable[[Any], Any]] = None,
            wanted: str = "what this tool writes") -> Any:
    """A dataclass field that ``from_json`` reads through ``check``, then ``convert``; ``lenient`` reads a wrong
    value as the default instead of refusing the record; ``wanted`` says what a good value is."""
    metadata = {"check": check, "nullable": default is None if nullable is None else nullable, "lenient": lenient,
                "convert": convert, "wanted": wanted}
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


class Refused(ValueError):
    """A record's field whose check refused its value: "<field> <value> is not <what a good value is>"."""


def json_object(raw: bytes) -> Dict[str, object]:
    """The JSON object ``raw`` holds; ValueError saying why not (torn, foreign, nested too deep, not an object)."""
    try:
        data = json.loads(raw.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise ValueError("not JSON (torn or foreign)") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def read(cls: Type[T], data: object, **given: Any) -> T:
    """The dataclass ``cls`` from a JSON object (a missing key: the field's default, or null), the fields ``given``
    as they are; Refused for the first field whose check refuses its value."""
    if not isinstance(data, dict):
        raise Refused("not a JSON object")
    values: Dict[str, Any] = dict(given)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if f.name in given or "check" not in f.metadata or (f.name not in data and has_default):
            continue
        value = data.get(f.name)
        found = f.metadata["check"](value)
        if found is None and not (value is None and f.metadata["nullable"]):
            if f.metadata["lenient"] and has_default:
                continue
            raise Refused(f"{f.name} {shown(value)} is not {f.metadata['wanted']}")
        convert = f.metadata["convert"]
        values[f.name] = convert(found) if convert is not None and found is not None else found
    return cls(**values)


def from_json(cls: Type[T], data: object) -> Optional[T]:
    """The dataclass ``cls`` from a JSON object, or None when a field's check refuses its value."""
    try:
        return read(cls, data)
    except Refused:
        return None


class Record:
    """A base for a dataclass whose fields name their checks: ``Cls.from_json(data)`` reads what ``to_json`` wrote."""

    @classmethod
    def from_json(cls: Type[T], data: object) -> Optional[T]:
        return from_json(cls, data)

    def to_json(self) -> Dict[str, object]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]


def shown(value: object) -> str:
    """``value`` as a refusal shows it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def member(kind: Type[E]) -> Callable[[object], Optional[E]]:
    """The check for a member of the enum ``kind``, by its value."""
    return lambda value: kind._value2member_map_.get(value) if isinstance(value, str) else None  # type: ignore


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


def within(check: Callable[[object], Optional[N]], low: N, high: N) -> Callable[[object], Optional[N]]:
    """The check ``check`` of a value from ``low`` to ``high``."""
    def bounded(value: object) -> Optional[N]:
        found = check(value)
        return found if found is not None and low <= found <= high else None
    return bounded


MAX_BYTES = 1 << 50  # a file, a tree or a fetch of more than a pebibyte is no one's
byte_count = within(integer, 0, MAX_BYTES)  # (a planted 10**400 is none, not a number to print in full)


def boolean(value: object) -> Optional[bool]:
    return value if isinstance(value, bool) else None


def text(value: object) -> Optional[str]:
    return value if isinstance(value, str) else None


def mapping(value: object) -> Optional[Dict[str, object]]:
    return value if isinstance(value, dict) else None


def path(value: object) -> Optional[str]:
    """A string the operating system can take as a path (no NUL)."""
    return value if isinstance(value, str) and "\0" not in value else None


def paths(value: object) -> Optional[List[str]]:
    return list(value) if isinstance(value, list) and all(path(v) is not None for v in value) else None


def text_map(value: object) -> Optional[Dict[str, str]]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return None
    return {str(k): v for k, v in value.items()}


# FLYDSL_HOST_ID is held to this too, so that what one host writes, every other host reads.
SHORT_TEXT_MAX = 200


def short_text(value: object, limit: int = SHORT_TEXT_MAX) -> Optional[str]:
    """A non-empty text of at most ``limit`` printable characters."""
    return value if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable() else None


PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT on 64-bit
MAX_SECONDS = 10.0**10  # the year 2286
pid = within(integer, 1, PID_MAX)
seconds = within(number, 0.0, MAX_SECONDS)
percent = within(number, 0.0, 100.0)


MAX_ETA_S = 24 * 3600.0  # no estimate of ours says more (a planted record or history said 448 h, or years)


def eta(value: object) -> Optional[float]:
    """An estimate of seconds left, at most MAX_ETA_S: what is estimated is clamped, never refused."""
    found = number(value)
    return None if found is None or found < 0 else min(found, MAX_ETA_S)


def one_of(value: object, allowed: Collection[str]) -> Optional[str]:
    return value if isinstance(value, str) and value in allowed else None


def absolute_path(value: object) -> Optional[str]:
    found = path(value)
    return found if found is not None and found.startswith("/") else None


def object_name(value: object) -> Optional[str]:
    """A git object name: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits."""
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value) else None
