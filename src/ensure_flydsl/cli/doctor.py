"""``ensure-flydsl doctor [--json]``: can the configured strategy succeed here, and if not, why not.

Prints one line per check (status, name, detail; a remedy line under each that is not ok) and a verdict,
or with ``--json`` one object ``{schema_version, strategy, ok, exit_code, verdict, needs, checks, seconds,
suggestion, root, python, repo, pin}`` (docs/schema/doctor.schema.json; ``suggestion``: under ``auto``, a
release to install when the source build is blocked, else null).

Exit 0 only if the configured strategy can succeed here (or a reusable FlyDSL is already there); else the
exit code of the step a run would stop at first (the first blocking check's stage): 64 a setting, 2 fetch,
3 checkout, 4 LLVM/MLIR build, 5 FlyDSL build, 6 nothing reusable under reuse-only, 8 release wheel.
"""

from __future__ import annotations

import json
from typing import Mapping

from ensure_flydsl.doctor.diagnose import diagnose, render_check
from ensure_flydsl.pipeline.decide import check_reuse
from ensure_flydsl.settings import Settings

# The version of the shape of `doctor --json` (docs/schema/doctor.schema.json): a new key does not change it,
# a changed meaning does.
SCHEMA_VERSION = 1


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
