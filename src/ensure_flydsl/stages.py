"""Exit codes, plans and the stages of a run: the enums of errors.py's docstring, built where they are used.

A module of their own because building them is most of what importing errors.py cost (``Stage``'s 23 members,
``ExitCode``, ``Plan``: 6 M instructions, 6 % of a warm call), and the warm call raises no error: errors.py
gives these names as before (``from ensure_flydsl.errors import Stage``), importing this module at the first
use of one (PEP 562), so that the warm path, which uses none, never builds them
(tests/scenarios/test_warm_imports.py).
"""

from __future__ import annotations

import enum

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import FrozenSet, Optional, Tuple


class ExitCode(enum.IntEnum):
    OK = 0
    FETCH = 2
    CHECKOUT = 3
    LLVM_BUILD = 4
    FLYDSL_BUILD = 5
    PROBE = 6
    LOCK = 7
    ARTIFACT = 8
    WORKER_DIED = 9
    BAD_INPUT = 64
    INTERNAL = 70
    STILL_RUNNING = 75
    INTERRUPTED = 130


EXIT_MEANINGS = {
    ExitCode.OK: "usable and env file written",
    ExitCode.FETCH: "clone/fetch failed",
    ExitCode.CHECKOUT: "checkout of the pin failed",
    ExitCode.LLVM_BUILD: "LLVM/MLIR build failed",
    ExitCode.FLYDSL_BUILD: "FlyDSL build failed",
    ExitCode.PROBE: "built but the import probe still fails, or the interpreter lacks a module the pin imports",
    ExitCode.LOCK: "lock not acquired",
    ExitCode.ARTIFACT: "release or cache artifact could not be installed",
    ExitCode.WORKER_DIED: "a detached worker died without finishing",
    ExitCode.BAD_INPUT: "bad input",
    ExitCode.INTERNAL: "internal error",
    ExitCode.STILL_RUNNING: "still running",
    ExitCode.INTERRUPTED: "interrupted",
}

# The exit codes a failed run records (its run record, the failure marker): every code of the contract but
# 0 (success) and 75 (still running).  A record saying 0 or 75 would be a lie to `status` and `wait`'s caller
# (75 sends a README-following agent back to `wait` for ever), and a code outside the table is no failure of
# this tool's: its readers refuse both (runs/markers.py: Failure.from_json).
FAILURE_CODES: FrozenSet[int] = frozenset(int(code) for code in ExitCode
                                          if code not in (ExitCode.OK, ExitCode.STILL_RUNNING))


class Plan(enum.Enum):
    """How a run provisions: each goes through its own stages (the ETA adds up the typical length of those
    still ahead)."""

    SOURCE = "source"
    RELEASE = "release"
    CACHE = "cache"

    @property
    def stages(self) -> Tuple["Stage", ...]:
        return tuple(stage for stage in Stage if self in stage.plans)


_ALL = frozenset(Plan)
_NONE: FrozenSet[Plan] = frozenset()


class Stage(str, enum.Enum):
    """One stage; the members are in the order a run goes through them (the plans follow it)."""

    exit_code: Optional[ExitCode]  # a failure in it exits with this (None: its failures have several codes)
    order: Optional[int]  # the doctor's: a run stops at the blocking check of the earliest stage
    work: bool  # its time counts for ETAs only when it had something to do (not a no-op)
    plans: FrozenSet[Plan]

    def __new__(cls, name: str, exit_code: Optional[ExitCode], order: Optional[int], work: bool,
                plans: FrozenSet[Plan]) -> "Stage":
        stage = str.__new__(cls, name)
        stage._value_ = name
        stage.exit_code, stage.order, stage.work, stage.plans = exit_code, order, work, plans
        return stage

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def parse(cls, name: object) -> Optional["Stage"]:
        """The stage a file names, or None for a name this version does not know (or no name at all)."""
        return cls._value2member_map_.get(name) if isinstance(name, str) else None  # type: ignore[return-value]

    STARTING = ("starting", None, None, False, _NONE)  # announced by `start`, before its worker runs
    SETTINGS = ("settings", ExitCode.BAD_INPUT, 0, False, _NONE)
    PROBE = ("probe", ExitCode.PROBE, 8, False, _ALL)
    LOCK = ("lock", ExitCode.LOCK, None, False, _ALL)
    FETCH = ("fetch", ExitCode.FETCH, 1, True, _ALL)
    # The doctor orders submodules after the requirements: a source build fetches them after the checkout.
    SUBMODULES = ("submodules", ExitCode.FETCH, 4, False, _NONE)
    CHECKOUT = ("checkout", ExitCode.CHECKOUT, 2, False, _NONE)
    REQUIREMENTS = ("requirements", ExitCode.PROBE, 3, False, _ALL)
    FIXES = ("fixes", None, None, False, frozenset({Plan.SOURCE}))
    LLVM = ("llvm", ExitCode.LLVM_BUILD, 5, True, frozenset({Plan.SOURCE}))
    BUILD = ("build", ExitCode.FLYDSL_BUILD, 6, True, frozenset({Plan.SOURCE}))
    RELEASE = ("release", ExitCode.ARTIFACT, 7, True, frozenset({Plan.RELEASE}))
    CACHE = ("cache", ExitCode.ARTIFACT, None, True, frozenset({Plan.CACHE}))
    VERIFY = ("verify", ExitCode.PROBE, None, False, _ALL)
    PUBLISH = ("publish", None, None, False, _ALL)
    # Not steps of a run's plan: where else a failure can come from.
    PROVISION = ("provision", ExitCode.INTERNAL, None, False, _NONE)  # no provider gave a tree (a bug)
    LEASE = ("lease", None, None, False, _NONE)  # waiting for another host's build
    DOCTOR = ("doctor", None, None, False, _NONE)  # checked before building: the failing check's stage's code
    ACTIVATE = ("activate", ExitCode.PROBE, None, False, _NONE)  # the API's activate()
    ACCESS = ("access", ExitCode.BAD_INPUT, None, False, _NONE)  # the system refused a folder
    CLEAN = ("clean", ExitCode.LOCK, None, False, _NONE)  # clean while a run is going
    SKILL = ("skill", ExitCode.ARTIFACT, None, False, _NONE)  # `skill DIR`: the vendored wheels not obtained


# A full file system (ENOSPC, EDQUOT) is never a bug.  It stops a stage that fetches, checks out, builds or
# installs with that stage's code, as a build or a download that fills the disk always did; anywhere else (the
# tool's own records, markers, the lock's holder, the env file) with 5, the doctor's code for a disk without
# room to build.
_STAGES_THAT_FILL = frozenset({Stage.FETCH, Stage.SUBMODULES, Stage.CHECKOUT, Stage.LLVM, Stage.BUILD, Stage.RELEASE,
                               Stage.CACHE})


def disk_full_code(stage: Optional[Stage]) -> ExitCode:
    """The exit code of a full file system met in ``stage``."""
    if stage is not None and stage in _STAGES_THAT_FILL and stage.exit_code is not None:
        return stage.exit_code
    return ExitCode.FLYDSL_BUILD
