"""``ensure-flydsl skill DIR``: write the GEAK drop-in folder (``geak/folder.py``) and say what it holds."""

from __future__ import annotations

import json
from typing import Dict, Optional

from ensure_flydsl.geak.folder import write_skill_folder
from ensure_flydsl.result import result_object
from ensure_flydsl.support.report import Reporter


def skill(target: str, *, force: bool, wheels: Optional[str], environ: Dict[str, str], reporter: Reporter,
          as_json: bool) -> int:
    made = write_skill_folder(target, force=force, wheels=wheels, environ=environ, say=reporter.say)
    what = "replaced" if made.replaced else "wrote"
    reason = (f"{what} {made.path}: skill.md, ensure_flydsl.sh, tool/ (ensure-flydsl {made.version} with "
              f"{', '.join(made.vendored)}), VERSION (commit {made.commit})")
    if as_json:
        data = result_object(ok=True, exit_code=0, reason=reason)
        data.update(dir=made.path, version=made.version, commit=made.commit, vendored=made.vendored,
                    replaced=made.replaced)
        print(json.dumps(data, sort_keys=True))
    else:
        reporter.say(reason)
        reporter.say(f"GEAK runs it as `bash {made.path}/ensure_flydsl.sh` (docs/GEAK.md); nothing is installed")
    return 0
