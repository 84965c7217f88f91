"""``ensure-flydsl stats``: where this host's runs (or a fleet's, ``--records``) spent their time; writes nothing."""

from __future__ import annotations

import os

from ensure_flydsl.cli import Call
from ensure_flydsl.errors import BadInput
from ensure_flydsl.layout import host_cache_dir, timings_dir
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.runs.timings import read_records, runs_text, summarize, summary_lines, table
from ensure_flydsl.settings import host_id, parse_root
from ensure_flydsl.support.report import printable

SCHEMA = "https://ensure-flydsl/schema/stats.schema.json"
SHOWN_RUNS = 20  # the table's newest runs (--json lists every one)
SHOWN_SKIPPED = 3


def stats(call: Call) -> int:
    args, environ = call.args, call.environ
    # A --root before the command is taken for the setting: here it is the filter too.
    root = args.of_root if args.of_root is not None else getattr(args, "root", None)
    if root is not None and not root.strip():
        raise BadInput("--root", root, "the root whose runs to list (a folder path; leave it out for every root)")
    chosen = None if root is None else parse_root("--root", root)
    if args.records is not None and (not args.records or not os.path.isdir(args.records)):
        raise BadInput("--records", args.records, "a folder of timing records (a copy of hosts' "
                       "~/.cache/ensure-flydsl/runs/ folders)")
    host_dir = host_cache_dir(environ)
    folder = os.path.abspath(args.records) if args.records is not None else (
        None if host_dir is None else timings_dir(host_dir))
    runs, skipped = read_records(folder) if folder is not None else ([], [])
    if chosen is not None:
        real = os.path.realpath(chosen)
        runs = [r for r in runs if r.root == chosen or os.path.realpath(r.root) == real]
    host, summary = host_id(environ), summarize(runs)
    if call.as_json:
        where = f" of {chosen}" if chosen else ""
        reason = (f"{runs_text(len(runs))}{where} in {folder}" if folder else
                  "no folder for timing records: neither XDG_CACHE_HOME nor HOME names an absolute folder")
        print(result_json(result_object(
            ok=True, exit_code=0, reason=reason, schema=SCHEMA, host=host, records=folder, root=chosen,
            runs=[r.to_json() for r in runs], summary=summary,
            skipped={"count": len(skipped), "files": [{"path": s.path, "why": s.why} for s in skipped]})))
        return 0
    of_root = f" (root {chosen})" if chosen else ""
    lines = [f"timing records in {folder or 'no folder (no user cache folder)'}{of_root}; this host is {host}"]
    if runs:
        shown = runs[-SHOWN_RUNS:]
        if len(runs) > len(shown):
            lines.append(f"the newest {len(shown)} of {len(runs)} runs (--json lists every one):")
        lines += [*table(shown), ""]
    lines.extend(summary_lines(summary))
    if skipped:
        lines.append(f"skipped {len(skipped)} file(s) that are not timing records this version reads (left "
                     "alone; each run's records are named <run id>.json):")
        lines.extend(f"  {s.path}: {s.why}" for s in skipped[:SHOWN_SKIPPED])
        if len(skipped) > SHOWN_SKIPPED:
            lines.append(f"  ... and {len(skipped) - SHOWN_SKIPPED} more (--json lists them)")
    print("\n".join(printable(line) for line in lines))
    return 0
