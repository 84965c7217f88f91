"""``ensure-flydsl doctor``: placeholder until issue 6 lands (see doctor.py)."""

from __future__ import annotations

from typing import Mapping

from ..settings import Settings


def doctor(settings: Settings, environ: Mapping[str, str], *, as_json: bool) -> int:
    raise NotImplementedError("doctor is being written")
