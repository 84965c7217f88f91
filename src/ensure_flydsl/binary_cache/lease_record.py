"""One generation of a build lease as it is stored: written by any host of the fleet, so read field by field.

A record that is not exactly what this tool writes (a wrong type, a bool for a number, NaN or Infinity,
which Python's json accepts, a number out of range, a text too long or with control characters, a state
that is neither "building" nor "failed", a failure without its stage, exit code and reason, or with an exit
code no build step has) reads as the lease of an unknown holder: it is waited for like any other and taken
over once its bytes have not changed for a TTL of the reader's own.  Nothing of it reaches a message or a
computation unchecked.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Dict, Mapping, Optional

from ensure_flydsl.support.fields import SHORT_TEXT_MAX, short_text

BUILDING, FAILED = "building", "failed"
# FLYDSL_LEASE_TTL's own bound (setting_values.parse_lease_ttl): a record's ttl outside (0, 10**6) s was
# not written by this tool.  ``ttl: Infinity`` (or 1e300) would make every waiter wait forever for a holder
# that died: such a record is an unknown holder's, judged by the reader's own TTL.
MAX_TTL_S = 10.0**6
MAX_RECORD_BYTES = 64 << 10  # this tool writes a few hundred bytes
MAX_REASON = 2000  # the holder writes at most this much of its failure's reason
_MAX_SECONDS = 10.0**10  # wall clock times and durations: finite, and not beyond the year 2286
UNKNOWN_HOST = "an unknown host"
# The exit codes a failure record may carry: a build step's (README: 2 clone/fetch ... 8 artifact).  A waiter
# ends with the recorded code, so 0 ("usable and env file written", with none written), 75 ("still running",
# which sends a README-following agent back to `wait` for ever), 130 or 9 (an interrupt, a dead worker) or
# 1 from a record would be a lie to its caller.  Which step names which code is the provider's to check
# (ways/cache/fleet.py: build_failure): this package knows no stages.
FAILURE_EXIT_CODES = range(2, 9)


@dataclass
class LeaseRecord:
    """One generation of a key's lease: who builds what, and how far (or how it failed)."""

    kind: str
    key: str
    generation: int
    host: str
    run_id: str
    pid: int
    started: float  # the holder's wall clock when it took the lease, for people
    what: str  # "the FlyDSL tree for a35627a2", for messages
    failures_before: int = 0  # recorded failures of this key before this generation, in this round
    ttl: float = 0.0  # the holder's FLYDSL_LEASE_TTL: it beats every ttl/4 and is dead after ttl without one
    state: str = BUILDING
    beat: int = 0
    heartbeat: float = 0.0  # the holder's wall clock at its last beat, for people
    elapsed_s: float = 0.0  # the holder's monotonic seconds since it took the lease, at its last beat
    step: Optional[str] = None
    percent: Optional[float] = None
    eta_s: Optional[float] = None
    failure: Optional[Dict[str, object]] = None  # stage, exit_code, reason
    ended: Optional[float] = None
    raw: bytes = field(default=b"", repr=False, compare=False)  # as read: liveness compares it
    invalid: Optional[str] = field(default=None, repr=False, compare=False)  # why it was refused

    def to_bytes(self) -> bytes:
        data = {k: v for k, v in asdict(self).items() if k not in ("raw", "invalid")}
        return (json.dumps(data, sort_keys=True) + "\n").encode()

    @classmethod
    def unknown(cls, kind: str, key: str, generation: int, why: str) -> "LeaseRecord":
        return cls(kind, key, generation, UNKNOWN_HOST, "?", 0, 0.0, f"the {kind} {key[:12]}", invalid=why)

    @classmethod
    def from_bytes(cls, data: bytes, kind: str, key: str, generation: int) -> "LeaseRecord":
        """The record; an unreadable or invalid one (foreign, torn on a store without atomic writes, or
        written by a broken host) reads as a lease of an unknown holder, which dies like any other when its
        bytes stop changing."""
        try:
            record = cls._parse(data, kind, key, generation)
        except ValueError as exc:
            record = cls.unknown(kind, key, generation, str(exc))
        record.raw = data
        return record

    @classmethod
    def _parse(cls, data: bytes, kind: str, key: str, generation: int) -> "LeaseRecord":
        if len(data) > MAX_RECORD_BYTES:
            raise ValueError(f"{len(data)} bytes, more than a lease record holds")
        try:
            obj = json.loads(data.decode())
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ValueError("not JSON (torn or foreign)") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        if obj.get("kind") != kind or obj.get("key") != key:
            raise ValueError("it names another kind or key")
        state = obj.get("state", BUILDING)
        if state not in (BUILDING, FAILED):
            raise ValueError(f"state {_shown(state)}")
        record = cls(
            kind, key, generation,
            host=_text(obj, "host"), run_id=_text(obj, "run_id"), pid=_int(obj, "pid", 2**31),
            started=_seconds(obj, "started"), what=_text(obj, "what"),
            failures_before=_int(obj, "failures_before", 10**6, 0), ttl=_ttl(obj), state=str(state),
            beat=_int(obj, "beat", 2**62, 0), heartbeat=_seconds(obj, "heartbeat", 0.0),
            elapsed_s=_seconds(obj, "elapsed_s", 0.0), step=_text_or_none(obj, "step"),
            percent=_number_or_none(obj, "percent", 100.0), eta_s=_number_or_none(obj, "eta_s", _MAX_SECONDS),
            failure=_failure(obj.get("failure")), ended=_number_or_none(obj, "ended", _MAX_SECONDS),
        )
        if record.state == FAILED and (record.failure is None or record.ended is None):
            raise ValueError("a failure record without its failure or its end")
        return record

    def who(self) -> str:
        return f"{self.host} (run {self.run_id})"


_MISSING = object()


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(value: object) -> Optional[float]:
    """The number, or None: bool is an int to Python, never a number here; NaN and Infinity (json reads
    them) are no times."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int of 400 digits
        return None
    return number if math.isfinite(number) else None


def _text(obj: Mapping[str, object], name: str) -> str:
    """Host, run id, step, what: shown in messages (support/fields.py: short_text; FLYDSL_HOST_ID is held to it)."""
    value = short_text(obj.get(name))
    if value is None:
        raise ValueError(f"{name} {_shown(obj.get(name))} is not a text of 1 to {SHORT_TEXT_MAX} printable characters")
    return value


def _text_or_none(obj: Mapping[str, object], name: str) -> Optional[str]:
    return None if obj.get(name) is None else _text(obj, name)


def _int(obj: Mapping[str, object], name: str, limit: int, default: object = _MISSING) -> int:
    value = obj.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ValueError(f"{name} {_shown(value)} is not a whole number from 0 to {limit}")
    return value


def _seconds(obj: Mapping[str, object], name: str, default: object = _MISSING) -> float:
    value = obj.get(name, default)
    number = _finite(value)
    if number is None or not 0 <= number <= _MAX_SECONDS:
        raise ValueError(f"{name} {_shown(value)} is not a time in seconds")
    return number


def _number_or_none(obj: Mapping[str, object], name: str, limit: float) -> Optional[float]:
    value = obj.get(name)
    if value is None:
        return None
    number = _finite(value)
    if number is None or not 0 <= number <= limit:
        raise ValueError(f"{name} {_shown(value)} is not a number from 0 to {limit:g}")
    return number


def _ttl(obj: Mapping[str, object]) -> float:
    value = obj.get("ttl", 0.0)
    number = _finite(value)
    if number is None or not 0 <= number < MAX_TTL_S:
        raise ValueError(f"ttl {_shown(value)} is not what FLYDSL_LEASE_TTL allows (0 < ttl < {MAX_TTL_S:g} s)")
    return number


def _failure(value: object) -> Optional[Dict[str, object]]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("failure is not an object")
    stage = _text_or_none(value, "stage")
    code = value.get("exit_code")
    if not isinstance(code, int) or isinstance(code, bool) or code not in FAILURE_EXIT_CODES:
        raise ValueError(f"failure exit_code {_shown(code)} is not a build step's (2 to 8)")
    reason = value.get("reason")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValueError("failure reason is not a text")
    # Messages are one line each: the reason's line breaks and control characters become spaces.
    return {"stage": stage, "exit_code": code,
            "reason": "".join(c if c.isprintable() else " " for c in reason)}
