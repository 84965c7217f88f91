"""``skill``: write the GEAK drop-in folder (geak/folder.py) and say what it holds."""

from __future__ import annotations

from ensure_flydsl.cli import Call
from ensure_flydsl.geak.folder import ZIPAPP, write_skill_folder
from ensure_flydsl.result import result_json, result_object


def skill(call: Call) -> int:
    args, reporter = call.args, call.reporter
    made = write_skill_folder(args.dir, force=args.force, wheels=args.wheels, environ=call.environ, say=reporter.say)
    reason = (f"{'replaced' if made.replaced else 'wrote'} {made.path}: skill.md, ensure_flydsl.sh, {ZIPAPP} "
              f"(ensure-flydsl {made.version} with {', '.join(made.vendored)}), VERSION (commit {made.commit})")
    if call.as_json:
        print(result_json(result_object(ok=True, exit_code=0, reason=reason, dir=made.path, version=made.version,
                                        commit=made.commit, vendored=made.vendored, replaced=made.replaced)))
    else:
        reporter.say(reason)
        reporter.say(f"GEAK runs it as `bash {made.path}/ensure_flydsl.sh` (docs/GEAK.md); nothing is installed")
    return 0
