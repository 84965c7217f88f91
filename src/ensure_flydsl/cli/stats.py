"""``ensure-flydsl stats``: where this host's runs (or a fleet's, ``--records``) spent their time; writes nothing."""

from __future__ import annotations

import os
from typing import List, Mapping, Optional, Sequence

from ensure_flydsl.cli import Call
from ensure_flydsl.errors import BadInput
from ensure_flydsl.layout import host_cache_dir, timings_dir
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.runs.timings import HIT, MISS, Skipped, Summary, TimingRecord, read_records, summarize
from ensure_flydsl.settings import host_id, parse_root
from ensure_flydsl.support.report import fmt_seconds, printable
from ensure_flydsl.support.space import size_text

SCHEMA = "https://ensure-flydsl/schema/stats.schema.json"
SHOWN_RUNS = 20  # the table's newest runs (--json lists every one)
SHOWN_SKIPPED = 3


def _folder(records: Optional[str], environ: Mapping[str, str]) -> Optional[str]:
    if records is not None:
        if not records or not os.path.isdir(records):
            raise BadInput("--records", records, "a folder of timing records (a copy of hosts' "
                           "~/.cache/ensure-flydsl/runs/ folders)")
        return os.path.abspath(records)
    host = host_cache_dir(environ)
    return None if host is None else timings_dir(host)


def stats(call: Call) -> int:
    args, environ = call.args, call.environ
    # A --root before the command is taken for the setting: here it is the filter too.
    root = args.of_root if args.of_root is not None else getattr(args, "root", None)
    if root is not None and not root.strip():
        raise BadInput("--root", root, "the root whose runs to list (a folder path; leave it out for every root)")
    chosen = None if root is None else parse_root("--root", root)
    folder = _folder(args.records, environ)
    runs, skipped = read_records(folder) if folder is not None else ([], [])
    if chosen is not None:
        real = os.path.realpath(chosen)
        runs = [r for r in runs if r.root == chosen or os.path.realpath(r.root) == real]
    host, summary = host_id(environ), summarize(runs)
    if not call.as_json:
        print("\n".join(printable(line) for line in text_lines(host, folder, chosen, runs, skipped, summary)))
        return 0
    where = f" of {chosen}" if chosen else ""
    reason = (f"{runs_text(len(runs))}{where} in {folder}" if folder else
              "no folder for timing records: neither XDG_CACHE_HOME nor HOME names an absolute folder")
    data = result_object(ok=True, exit_code=0, reason=reason)
    data.update(schema=SCHEMA, host=host, records=folder, root=chosen, runs=[r.to_json() for r in runs],
                summary=summary.to_json(), skipped={"count": len(skipped),
                                                    "files": [{"path": s.path, "why": s.why} for s in skipped]})
    print(result_json(data))
    return 0


# -- the human form ---------------------------------------------------------------------------------------
def text_lines(host: str, folder: Optional[str], root: Optional[str], runs: List[TimingRecord],
               skipped: List[Skipped], summary: Summary) -> List[str]:
    of_root = f" (root {root})" if root else ""
    lines = [f"timing records in {folder or 'no folder (no user cache folder)'}{of_root}; this host is {host}"]
    if runs:
        shown = runs[-SHOWN_RUNS:]
        if len(runs) > len(shown):
            lines.append(f"the newest {len(shown)} of {len(runs)} runs (--json lists every one):")
        lines.extend(_table(shown))
        lines.append("")
    lines.extend(summary_lines(summary))
    if skipped:
        lines.append(f"skipped {len(skipped)} file(s) that are not timing records this version reads (left "
                     "alone; each run's records are named <run id>.json):")
        lines.extend(f"  {s.path}: {s.why}" for s in skipped[:SHOWN_SKIPPED])
        if len(skipped) > SHOWN_SKIPPED:
            lines.append(f"  ... and {len(skipped) - SHOWN_SKIPPED} more (--json lists them)")
    return lines


def runs_text(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def seconds_text(seconds: Optional[float]) -> str:
    """Tenths of a second below a minute (a warm host's runs take seconds)."""
    return "unknown" if seconds is None else f"{seconds:.1f}s" if seconds < 60 else fmt_seconds(seconds)


def _table(runs: Sequence[TimingRecord]) -> List[str]:
    rows = [("run", "host", "root", "way", "exit", "total", "stages")]
    for run in runs:
        steps = ", ".join(f"{stage} {seconds_text(seconds)}" for stage, seconds in run.stages.items())
        rows.append((run.run_id, run.host, run.root, run.way, str(run.exit_code), seconds_text(run.total_s), steps))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]


def summary_lines(summary: Summary) -> List[str]:
    if not summary.runs:
        return ["no runs recorded yet (every ensure run that is not answered warm writes one)"]
    lines = [f"{runs_text(summary.runs)}: " + ", ".join(f"{way} {n}" for way, n in summary.ways.items()),
             f"median total {seconds_text(summary.total.median)}"]
    if summary.stages:
        lines.append("median per stage: " + ", ".join(f"{stage} {seconds_text(f.median)}"
                                                      for stage, f in summary.stages.items()))
    if summary.where:
        lines.append("where the time went: " + ", ".join(f"{w.stage} {100 * w.share:.0f}%" for w in summary.where))
    for figures, what in ((summary.lock_wait, "lock waits"), (summary.lease_wait, "build lease waits")):
        if figures.count:
            lines.append(f"{what}: median {seconds_text(figures.median)}, {seconds_text(figures.total)} in all "
                         f"({runs_text(figures.count)})")
    if summary.fetched.count:
        by = ", ".join(f"{what} {size_text(size)}" for what, size in summary.fetched_by.items())
        lines.append(f"fetched: {size_text(summary.fetched.total)} in {runs_text(summary.fetched.count)} ({by})")
    for what, counts in summary.cache.items():
        lines.append(f"binary cache, {what}: {counts.get(HIT, 0)} hit(s), {counts.get(MISS, 0)} miss(es)")
    if summary.link_modes:
        lines.append("host store links: " + ", ".join(f"{m} {n}" for m, n in summary.link_modes.items()))
    return lines
