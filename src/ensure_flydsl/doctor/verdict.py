"""One doctor check's answer: ok, missing, wrong or skipped, the detail, the remedy, whether it blocks the
configured strategy, and the run's step (and so the exit code) that would fail."""

from __future__ import annotations

import dataclasses
from typing import Dict

from ensure_flydsl.errors import ExitCode, Stage

OK, MISSING, WRONG, SKIPPED = "ok", "missing", "wrong", "skipped"


@dataclasses.dataclass(frozen=True)
class Check:
    """One thing the configured strategy needs, and what this machine has of it."""

    name: str
    status: str  # "ok" | "missing" | "wrong" | "skipped"
    detail: str
    remedy: str
    blocking: bool  # the configured strategy cannot succeed while this stands
    stage: Stage  # the run's step that would fail: settings, fetch, checkout, requirements, llvm, build, ...
    provided: bool = False  # missing here, but ensure-flydsl provides it (private toolchain, hip overlay)

    @property
    def exit_code(self) -> int:
        return int(self.stage.exit_code or ExitCode.INTERNAL)

    def to_json(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


def passed(name: str, detail: str, stage: Stage) -> Check:
    return Check(name=name, status=OK, detail=detail, remedy="", blocking=False, stage=stage)


def skipped(name: str, detail: str, stage: Stage) -> Check:
    return Check(name=name, status=SKIPPED, detail=detail, remedy="", blocking=False, stage=stage)
