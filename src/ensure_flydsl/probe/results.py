"""What a probe saw: the interpreter, each module's file or error, and flydsl's version."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Tuple


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
        return cls(
            executable=str(data["executable"]),
            version=str(data["version"]),
            implementation=str(data["implementation"]),
            cache_tag=str(data["cache_tag"]),
            soabi=str(data.get("soabi") or ""),
            platform=str(data["platform"]),
            prefix=str(data["prefix"]),
            base_prefix=str(data["base_prefix"]),
            site_dirs=tuple(str(d) for d in _as_list(data.get("site_dirs"))),
            stdlib=str(data.get("stdlib") or ""),
            include=str(data.get("include") or ""),
            hook_dirs=tuple(str(d) for d in _as_list(data.get("hook_dirs"))),
        )


def _as_list(value: object) -> List[object]:
    return list(value) if isinstance(value, (list, tuple)) else []


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

    def module(self, name: str) -> ModuleResult:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> Dict[str, object]:
        return {
            "python": asdict(self.interpreter),
            "modules": {m.name: {"file": m.file, "error": m.error} for m in self.modules},
            "version": self.version,
            "version_error": self.version_error,
            "pythonpath": self.pythonpath,
            "seconds": round(self.seconds, 3),
        }
