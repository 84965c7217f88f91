"""One doctor check's answer: ok, missing, wrong or skipped, the detail, the remedy, whether it blocks the
configured strategy, and the run's step (and so the exit code) that would fail."""

from __future__ import annotations

import dataclasses
from typing import Dict

from ensure_flydsl.errors import ExitCode

OK, MISSING, WRONG, SKIPPED = "ok", "missing", "wrong", "skipped"
STAGE_EXIT: Dict[str, ExitCode] = {
    "settings": ExitCode.BAD_INPUT, "fetch": ExitCode.FETCH, "checkout": ExitCode.CHECKOUT, "llvm": ExitCode.LLVM_BUILD,
    "build": ExitCode.FLYDSL_BUILD, "probe": ExitCode.PROBE, "release": ExitCode.ARTIFACT,
    "requirements": ExitCode.PROBE,
}
STAGE_ORDER = ("settings", "fetch", "checkout", "requirements", "llvm", "build", "release", "probe")


@dataclasses.dataclass(frozen=True)
class Check:
    """One thing the configured strategy needs, and what this machine has of it."""

    name: str
    status: str  # "ok" | "missing" | "wrong" | "skipped"
    detail: str
    remedy: str
    blocking: bool  # the configured strategy cannot succeed while this stands
    stage: str  # the run's step that would fail: "settings", "fetch", "checkout", "llvm", "build", ...
    provided: bool = False  # missing here, but ensure-flydsl provides it (private toolchain, hip overlay)

    @property
    def exit_code(self) -> int:
        return int(STAGE_EXIT.get(self.stage, ExitCode.INTERNAL))

    def to_json(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


def passed(name: str, detail: str, stage: str) -> Check:
    return Check(name, OK, detail, "", False, stage)


def skipped(name: str, detail: str, stage: str) -> Check:
    return Check(name, SKIPPED, detail, "", False, stage)
