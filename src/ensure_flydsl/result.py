"""What ``ensure`` returns, and the one shape of every JSON answer of the tool."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Mapping, Optional

# docs/schema/result.schema.json; GEAK's gate schema (ok, built, env_file, version, reason) is a subset of it.
SCHEMA_VERSION = 1
RESULT_KEYS = ("schema_version", "ok", "exit_code", "stage", "built", "how", "env_file", "version", "reason",
               "hint", "log", "run_id", "elapsed_s")
GATE_STRINGS = ("env_file", "version", "reason")  # GEAK's validator takes a string or no key, never null


def result_object(**fields: object) -> Dict[str, object]:
    """Every key of the shape (None when not known, ``ok`` and ``built`` false), then ``fields``."""
    return {**dict.fromkeys(RESULT_KEYS), "schema_version": SCHEMA_VERSION, "ok": False, "built": False, **fields}


def result_json(data: Mapping[str, object]) -> str:
    """A result object as a command prints it: GEAK's string keys left out rather than null."""
    return json.dumps({k: v for k, v in data.items() if not (v is None and k in GATE_STRINGS)}, sort_keys=True)


# How the host store copies a tree into a root, in the order it tries them (a result's ``link_mode``).
LINK_MODES = ("reflink", "copy")


class How(str, enum.Enum):
    """How the tree in use came to be (the env file's twin and ``status`` show it)."""

    REUSED = "reused"  # found on the interpreter's path, or in a root another tool made
    BUILT = "built"  # a source build of the pin
    RELEASED = "released"  # the pin's release wheel beside its kernels/
    CACHED = "cached"  # a tree another host built, from the binary cache

    __str__ = str.__str__  # its value, as 3.11's StrEnum


class Action(str, enum.Enum):
    """What one call did."""

    WARM = "warm"  # answered from the fingerprint: nothing changed, no probe
    VERIFIED = "verified"  # the full probe confirmed the root's own tree
    REUSED = "reused"  # a tree found elsewhere on the path
    PROVISIONED = "provisioned"  # the root's tree was made (or finished) by this call

    __str__ = str.__str__


@dataclass(frozen=True)
class TreeIdentity:
    """The tree in use, as a call's result and the env file's twin both say it (their JSON has these keys flat)."""

    how: How
    tree: str
    version: str
    python: str
    python_version: str
    abi: str
    commit: Optional[str]
    files: Dict[str, str]


@dataclass(frozen=True)
class Result(TreeIdentity):
    """What ``ensure`` returns: the tree in use (:class:`TreeIdentity`) and how this call obtained it."""

    action: Action
    root: str
    env: Dict[str, str]
    env_file: str
    prepend: List[str]  # the folders the env file puts first on PYTHONPATH
    durations: Dict[str, float]
    run_id: str
    reason: str = ""  # why the tree in use passes the gate
    log: Optional[str] = None  # the run's log, when it opened one
    elapsed_s: Optional[float] = None  # the whole call
    link_mode: Optional[str] = None  # reflink, hardlink or copy: how the host store gave the root its tree
    conflicts: List[Dict[str, Optional[str]]] = field(default_factory=list)  # other FlyDSL users it breaks
    mlir: Optional[str] = None  # a source build's MLIR: built, cached, prebuilt URL or given PATH

    @property
    def built(self) -> bool:
        return self.action == Action.PROVISIONED

    def to_json(self) -> Dict[str, object]:
        data = result_object(ok=True, exit_code=0, built=self.built)
        data.update(asdict(self), how=str(self.how), action=str(self.action),
                    durations={k: round(v, 3) for k, v in self.durations.items()},
                    elapsed_s=None if self.elapsed_s is None else round(self.elapsed_s, 3))
        return data
