"""``ensure-flydsl cache list|prune``: placeholder until the binary cache lands (see cache.py)."""

from __future__ import annotations

from typing import Callable, Optional

from ..settings import Settings


def cache_command(settings: Settings, action: str, *, max_size: Optional[str], as_json: bool,
                  say: Callable[[str], None]) -> int:
    raise NotImplementedError("the binary cache is being written")
