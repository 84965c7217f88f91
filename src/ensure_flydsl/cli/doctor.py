"""``ensure-flydsl doctor``: can the configured strategy succeed here, and if not, why not (docs/CLI.md).

Exit 0 when it can (or a reusable FlyDSL is there), else the code of the step a run would stop at first."""

from __future__ import annotations

import json
from typing import Mapping

from ensure_flydsl.doctor.diagnose import diagnose, render_check
from ensure_flydsl.pipeline.decide import check_reuse
from ensure_flydsl.settings import Settings

SCHEMA_VERSION = 1  # of `doctor --json`'s shape: a new key keeps it, a changed meaning does not


def doctor(settings: Settings, environ: Mapping[str, str], *, as_json: bool) -> int:
    diagnosis = diagnose(settings, environ, reuse=check_reuse)
    if as_json:
        data = diagnosis.to_json()
        data.update({"schema_version": SCHEMA_VERSION, "root": settings.root, "python": settings.python,
                     "repo": settings.repo, "pin": settings.pin})
        print(json.dumps(data, sort_keys=True))
        return diagnosis.exit_code
    print(f"ensure-flydsl doctor: strategy {settings.strategy}, root {settings.root}, python {settings.python}")
    if diagnosis.needs is not None:
        print(f"  the build needs {diagnosis.needs.summary()} (read from {diagnosis.needs.source})")
    width = max(len(c.name) for c in diagnosis.checks)
    for check in diagnosis.checks:
        for line in render_check(check, width):
            print(line)
    print(("ok: " if diagnosis.ok else "NOT OK: ") + diagnosis.verdict() + f"  [{diagnosis.seconds:.1f} s]")
    if not diagnosis.ok:
        print("  (UPPERCASE: blocks this strategy; provide: missing here, ensure-flydsl provides it privately)")
    return diagnosis.exit_code
