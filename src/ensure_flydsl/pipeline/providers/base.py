"""The one interface of the ways to provision a tree: release wheel, binary cache, source build.

The pipeline asks each provider that applies, in order, for a verified tree of the pin in the root; the
first that gives one wins.  A provider returns None to let the next one try (no wheel under ``auto``, a
cache miss) and raises EnsureError when the run must stop (a demanded release that cannot be had, a
failed build).
"""

from __future__ import annotations

from typing import Optional

from ensure_flydsl.pipeline.context import Decision, Run


class Provider:
    """One way to put a verified tree of ``commit`` into the root."""

    name = "provider"

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        raise NotImplementedError

    def after_publish(self, run: Run, commit: str) -> None:
        """Work that may wait until the env file is written (pollers do not wait for it)."""

    def abandon(self, run: Run, error: BaseException) -> None:
        """The run ends with ``error`` after :meth:`provide` began: give up what the provider holds."""
