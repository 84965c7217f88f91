"""What a probe saw: the interpreter, each module's file or error, and flydsl's version."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Mapping, Optional, Tuple

_OPTIONAL = ("soabi", "stdlib", "include")  # may be empty or missing; the other texts are always there
_LISTS = ("site_dirs", "hook_dirs")


@dataclass(frozen=True)
class Interpreter:
    executable: str
    version: str
    implementation: str
    cache_tag: str
    soabi: str
    platform: str
    prefix: str
    base_prefix: str
    site_dirs: Tuple[str, ...]
    stdlib: str
    include: str
    hook_dirs: Tuple[str, ...] = ()  # the folders ``sitecustomize``/``usercustomize`` came from at start-up

    @property
    def abi(self) -> str:
        """What a compiled FlyDSL depends on: implementation, version and ABI tag, platform."""
        return f"{self.cache_tag}/{self.soabi or 'none'}/{self.platform}"

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> "Interpreter":
        """KeyError when a text the probe always writes is missing."""
        values: Dict[str, Any] = {}
        for name in (f.name for f in fields(cls)):
            value = data.get(name)
            if name in _LISTS:
                values[name] = tuple(str(d) for d in value) if isinstance(value, (list, tuple)) else ()
            else:
                values[name] = str(value or "") if name in _OPTIONAL else str(data[name])
        return cls(**values)


@dataclass(frozen=True)
class ModuleResult:
    name: str
    file: Optional[str]
    error: Optional[str]


@dataclass(frozen=True)
class Probe:
    interpreter: Interpreter
    modules: Tuple[ModuleResult, ...]
    version: Optional[str]
    version_error: Optional[str]
    pythonpath: str  # the PYTHONPATH the probe ran with
    seconds: float

    def to_json(self) -> Dict[str, object]:
        return {
            "python": asdict(self.interpreter),
            "modules": {m.name: {"file": m.file, "error": m.error} for m in self.modules},
            "version": self.version,
            "version_error": self.version_error,
            "pythonpath": self.pythonpath,
            "seconds": round(self.seconds, 3),
        }
