"""``ensure-flydsl stats``: where this host's runs (or a fleet's, ``--records``) spent their time; writes nothing."""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence

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


class _Found:

    def __init__(self, environ: Mapping[str, str], *, folder: Optional[str], root: Optional[str],
                 runs: List[TimingRecord], skipped: List[Skipped]) -> None:
        self.host, self.folder, self.root, self.runs, self.skipped = host_id(environ), folder, root, runs, skipped
        self.summary = summarize(runs)

    def to_json(self) -> Dict[str, object]:
        where = f" of {self.root}" if self.root else ""
        reason = (f"{runs_text(len(self.runs))}{where} in {self.folder}" if self.folder else
                  "no folder for timing records: neither XDG_CACHE_HOME nor HOME names an absolute folder")
        data = result_object(ok=True, exit_code=0, reason=reason)
        data.update(schema=SCHEMA, host=self.host, records=self.folder, root=self.root,
                    runs=[r.to_json() for r in self.runs], summary=self.summary.to_json(),
                    skipped={"count": len(self.skipped),
                             "files": [{"path": s.path, "why": s.why} for s in self.skipped]})
        return data


def stats(root: Optional[str], records: Optional[str], environ: Mapping[str, str], *, as_json: bool) -> int:
    if root is not None and not root.strip():
        raise BadInput("--root", root, "the root whose runs to list (a folder path; leave it out for every root)")
    chosen = None if root is None else parse_root("--root", root)
    folder = _folder(records, environ)
    runs, skipped = read_records(folder) if folder is not None else ([], [])
    if chosen is not None:
        real = os.path.realpath(chosen)
        runs = [r for r in runs if r.root == chosen or os.path.realpath(r.root) == real]
    found = _Found(environ, folder=folder, root=chosen, runs=list(runs), skipped=skipped)
    print(result_json(found.to_json()) if as_json else "\n".join(printable(line) for line in text_lines(found)))
    return 0


# -- the human form ---------------------------------------------------------------------------------------
def text_lines(found: _Found) -> List[str]:
    of_root = f" (root {found.root})" if found.root else ""
    lines = [f"timing records in {found.folder or 'no folder (no user cache folder)'}{of_root}; this host is "
             f"{found.host}"]
    if found.runs:
        shown = found.runs[-SHOWN_RUNS:]
        if len(found.runs) > len(shown):
            lines.append(f"the newest {len(shown)} of {len(found.runs)} runs (--json lists every one):")
        lines.extend(_table(shown))
        lines.append("")
    lines.extend(summary_lines(found.summary))
    if found.skipped:
        lines.append(f"skipped {len(found.skipped)} file(s) that are not timing records this version reads (left "
                     "alone; each run's records are named <run id>.json):")
        lines.extend(f"  {s.path}: {s.why}" for s in found.skipped[:SHOWN_SKIPPED])
        if len(found.skipped) > SHOWN_SKIPPED:
            lines.append(f"  ... and {len(found.skipped) - SHOWN_SKIPPED} more (--json lists them)")
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
