"""The one interface of the ways to provision a tree: release wheel, binary cache, source build.

The pipeline asks each provider that applies, in order, for a verified tree of the pin in the root; the
first that gives one wins.  A provider returns None to let the next one try (no wheel under ``auto``, a
cache miss) and raises EnsureError when the run must stop (a demanded release that cannot be had, a
failed build).

What provisioning starts ahead of a provider's turn (the release wheel's download beside git's fetch, the
final probe's interpreter while a wheel or a cache entry is put in place) is :class:`Early`'s: provision()
owns it and stops what is left of it when it ends, the provider whose turn it is takes it.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from ensure_flydsl.errors import Plan
from ensure_flydsl.probe.interpreter import EarlyProbe
from ensure_flydsl.ways import Way
from ensure_flydsl.ways.context import Decision, Run


class WheelDownload(Protocol):
    """The release wheel's download started beside the fetch (``ways/release/download.py: WheelDownload``)."""

    version: str

    def wheel(self, sink: Callable[[str], None]) -> str: ...

    def abort(self) -> None: ...


class Early:
    """The early probe and the release wheel's download, started before the provider that uses them."""

    def __init__(self) -> None:
        self._probe: Optional[EarlyProbe] = None
        self._download: Optional[WheelDownload] = None

    def started_probe(self, probe: EarlyProbe) -> None:
        self.stop_probe()
        self._probe = probe

    def started_download(self, download: WheelDownload) -> None:
        self.stop_download()
        self._download = download

    def take_probe(self) -> Optional[EarlyProbe]:
        """The early probe, now the taker's (it answers one probe, then closes)."""
        probe, self._probe = self._probe, None
        return probe

    def take_download(self) -> Optional[WheelDownload]:
        download, self._download = self._download, None
        return download

    def stop_probe(self) -> None:
        """A provider that needs no quick probe (a source build, an hour long) frees its memory."""
        probe = self.take_probe()
        if probe is not None:
            probe.close()

    def stop_download(self) -> None:
        download = self.take_download()
        if download is not None:
            download.abort()


class Provider:
    """One way to put a verified tree of ``commit`` into the root."""

    way = Way.SOURCE  # which way of ``ways.STRATEGY`` it is
    route = Plan.SOURCE  # the steps it goes through (its ETA's); it calls ``run.plan`` when it takes them

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        raise NotImplementedError

    def after_publish(self, run: Run, commit: str) -> None:
        """Work that may wait until the env file is written (pollers do not wait for it)."""

    def abandon(self, run: Run, error: BaseException) -> None:
        """The run ends with ``error`` after :meth:`provide` began: give up what the provider holds."""
