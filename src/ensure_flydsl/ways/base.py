"""The one interface of the ways to a tree: each provides a verified tree in a run (None lets the next way try,
EnsureError stops the run) and predicts for the doctor what it needs."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Callable, ClassVar, List, Mapping, Optional, Protocol

from ensure_flydsl.errors import Plan
from ensure_flydsl.probe.interpreter import EarlyProbe
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.trees.local import HostStore
from ensure_flydsl.trees.remote import Cache
from ensure_flydsl.ways import Way
from ensure_flydsl.ways.checks import Check, RunContext, Submit
from ensure_flydsl.ways.context import Decision, Run

# The doctor's checks before a build, handed in by the pipeline (the doctor sits above the ways): raises the
# blocking finding for these settings, environment, checkout and interpreter.
DoctorCheck = Callable[[Settings, Mapping[str, str], str, Interpreter], None]


class WheelDownload(Protocol):
    """The release wheel's download, started beside the fetch (``ways/release/download.py``)."""

    version: str

    def wheel(self, sink: Callable[[str], None]) -> str: ...

    def abort(self) -> None: ...


@dataclass
class Early:
    """The early probe and the release wheel's download: started before the way that takes them; each answers
    once (asked again, the probe answers None: a fresh probe runs)."""

    probe: Optional[EarlyProbe] = None
    download: Optional[WheelDownload] = None

    def stop_probe(self) -> None:
        if self.probe is not None:
            self.probe.close()

    def stop_download(self) -> None:
        if self.download is not None:
            self.download.abort()


@dataclass
class Shared:
    """What a run opens or starts once for all its ways."""

    commit: str  # the pin's
    release: Optional[str]  # the version of the release tag at that commit
    early: Early
    cache: Optional[Cache]
    store: Optional[HostStore]
    doctor: DoctorCheck


class Provider(Protocol):
    """One way to put a verified tree of the pin into the root."""

    way: ClassVar[Way]
    route: ClassVar[Optional[Plan]]  # the steps it takes (the ETA's); None: a link from the store has none

    @classmethod
    def for_run(cls, run: Run, shared: Shared) -> Optional[Provider]:
        """The way's provider for this run, or None when it does not apply (no cache set, no release)."""

    @staticmethod
    def predict(ctx: RunContext, checkout: Optional[str], submit: Submit) -> List[concurrent.futures.Future[Check]]:
        """The doctor's checks of what this way needs, submitted to its pool."""
        return []

    def provide(self, run: Run, commit: str) -> Optional[Decision]: ...

    def after_publish(self, run: Run, commit: str) -> None:
        """Work that may wait until the env file is written (pollers do not wait for it)."""
        return None

    def abandon(self, run: Run, error: BaseException) -> None:
        """The run ends with ``error`` after :meth:`provide` began: give up what the way holds."""
        return None
