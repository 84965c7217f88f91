"""Issue 28, item 6: each run writes a timing record into the host's folder (each stage's seconds, the way,
the exit code, bytes fetched, the cache's hits and misses, the lock's and the lease's waits), and
`ensure-flydsl stats [--json] [--root R]` lists and summarises them; the warm call writes none; a file
there that is not a record is skipped and said; concurrent runs each keep theirs."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Dict, List

import jsonschema
import pytest

from ensure_flydsl.layout import timings_dir
from tests.helpers.fleet import SharedCache, fleet_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.result_schema import REGISTRY, SCHEMAS, validate
from tests.helpers.scenario import killed_at, run_record_of, start, wait_until
from tests.helpers.workspace import Workspace


def stats_json(ws: Workspace, *args: str) -> Dict[str, object]:
    out = ws.run("stats", "--json", *args)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return validate(json.loads(out.stdout), "stats")


def records_of(ws: Workspace) -> List[Dict[str, object]]:
    """The timing record files of the workspace's host, as written, each valid against its schema."""
    folder = timings_dir(ws.host_dir)
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.startswith("."):  # a record being written (atomic_write's temporary file), not yet a record
            continue
        with open(os.path.join(folder, name)) as handle:
            data = json.load(handle)
        jsonschema.Draft202012Validator(SCHEMAS["timing"], registry=REGISTRY).validate(data)
        found.append(data)
    return found


def runs(data: Dict[str, object]) -> List[Dict[str, object]]:
    found = data["runs"]
    assert isinstance(found, list)
    return found


def test_a_build_records_its_stages_and_way_and_the_warm_call_none(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    [record] = records_of(ws)
    assert record["way"] == "built" and record["route"] == "source" and record["exit_code"] == 0
    assert record["root"] == ws.root and record["stage"] is None and record["kind"] == "blocking"
    stages = record["stages"]
    assert isinstance(stages, dict)
    assert {"probe", "lock", "fetch", "requirements", "llvm", "build", "verify", "publish"} <= set(stages)
    assert all(isinstance(s, float) and s >= 0 for s in stages.values())
    assert sum(stages.values()) <= record["total_s"]  # type: ignore[operator]
    assert record["lock_wait_s"] == stages["lock"] and record["lease_wait_s"] is None  # no cache: no lease
    fetched = record["fetched"]
    assert isinstance(fetched, dict) and fetched["git"] > 0 and record["bytes_fetched"] == fetched["git"]
    assert record["cache"] == {}
    assert record["link_mode"] is None  # the built tree is the root's own (the host store keeps a copy)
    # the warm call writes none: it stays at its floor
    assert ws.run().returncode == 0 and len(records_of(ws)) == 1
    # --verify is a run: the root's own tree confirmed by the full probe
    assert ws.run("--verify").returncode == 0
    data = stats_json(ws)
    listed = runs(data)
    assert [r["way"] for r in listed] == ["built", "verified"] and listed[0] == record
    summary = data["summary"]
    assert isinstance(summary, dict)
    assert summary["runs"] == 2 and summary["failed"] == 0 and summary["ways"] == {"verified": 1, "built": 1}
    assert summary["stages"]["probe"]["runs"] == 2 and summary["stages"]["build"]["runs"] == 1  # type: ignore[index]
    where = summary["where"]
    assert isinstance(where, list) and where[-1]["stage"] == "other"
    assert abs(sum(w["share"] for w in where) - 1.0) < 0.01
    assert summary["bytes_fetched"]["by"] == {"git": fetched["git"]}  # type: ignore[index]
    text = ws.run("stats")
    assert text.returncode == 0 and text.stderr == ""
    assert "2 runs: verified 1, built 1" in text.stdout and "where the time went: " in text.stdout
    assert str(record["run_id"]) in text.stdout and "median per stage: probe" in text.stdout


def test_a_failed_run_records_its_exit_code_and_stage(ws: Workspace) -> None:
    out = ws.run(FIXTURE_BUILD_FAIL="1")
    assert out.returncode == 5
    [record] = records_of(ws)
    assert record["exit_code"] == 5 and record["way"] == "failed" and record["stage"] == "build"
    assert record["route"] == "source" and "build" in record["stages"]  # type: ignore[operator]
    data = stats_json(ws)
    assert data["summary"]["failed"] == 1 and data["summary"]["ways"] == {"failed": 1}  # type: ignore[index]
    assert "1 run: failed 1" in ws.run("stats").stdout


def test_root_filters_and_a_planted_file_is_skipped_and_said(tmp_path: "os.PathLike[str]",
                                                             fixture_repo: FixtureRepo) -> None:
    one = Workspace(os.path.join(str(tmp_path), "one"), fixture_repo)
    two = Workspace(os.path.join(str(tmp_path), "two"), fixture_repo)
    assert one.host_dir == two.host_dir  # one host, two roots
    assert one.run().returncode == 0 and two.run("--verify").returncode == 0
    assert [r["root"] for r in runs(stats_json(one))] == [one.root, two.root]
    assert [r["root"] for r in runs(stats_json(one, "--root", two.root))] == [two.root]
    assert runs(stats_json(one, "--root", os.path.join(str(tmp_path), "one", ".", "FlyDSL")))[0]["root"] == one.root
    folder = timings_dir(one.host_dir)
    with open(os.path.join(folder, "garbage.json"), "w") as handle:
        handle.write("{not json")
    with open(os.path.join(folder, "20260101-000000-abcdef.json"), "w") as handle:
        json.dump({"version": 1, "run_id": "20260101-000000-abcdef", "exit_code": 0, "way": "failed"}, handle)
    with open(os.path.join(folder, "20260101-000000-abcdee.json"), "w") as handle:
        json.dump({"version": 2}, handle)
    os.mkfifo(os.path.join(folder, "20260101-000000-abcded.json"))  # read without blocking
    data = stats_json(one)
    assert len(runs(data)) == 2
    skipped = data["skipped"]
    assert isinstance(skipped, dict) and skipped["count"] == 4
    whys = {os.path.basename(f["path"]): f["why"] for f in skipped["files"]}
    assert whys["garbage.json"] == "not JSON (torn or foreign)"
    assert whys["20260101-000000-abcdef.json"] == "not a timing record"
    assert whys["20260101-000000-abcdee.json"] == "a newer version's record (version 2)"
    text = one.run("stats")
    assert text.returncode == 0 and text.stderr == "" and "Traceback" not in text.stdout
    assert "skipped 4 file(s) that are not timing records this version reads (left alone" in text.stdout
    assert f"{os.path.join(folder, '20260101-000000-abcded.json')}: not a regular file" in text.stdout
    # another run prunes records only: the planted files stay
    assert one.run("--verify").returncode == 0
    assert {"garbage.json", "20260101-000000-abcded.json"} <= set(os.listdir(folder))


def test_bad_root_and_records_are_one_line_exit_64(ws: Workspace) -> None:
    out = ws.run("stats", "--root", "")
    assert out.returncode == 64 and out.stderr.count("\n") == 1 and "--root" in out.stderr
    out = ws.run("stats", "--records", os.path.join(ws.base, "nowhere"))
    assert out.returncode == 64 and out.stderr.count("\n") == 1 and "--records" in out.stderr
    # issue 42, item 11: the FLYDSL_HOST_ID every other command refuses (stats named this host by it)
    for bad in ("a\nb", "host\x1b[31m", "h" * 201):
        out = ws.run("stats", FLYDSL_HOST_ID=bad)
        assert out.returncode == 64 and out.stderr.count("\n") == 1 and "FLYDSL_HOST_ID" in out.stderr, out.stderr


def test_two_concurrent_runs_both_keep_their_records(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    one = Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)
    two = Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)
    two.root = os.path.join(two.base, "Second")
    two.env["FLYDSL_ROOT"] = two.root
    procs = [ws.popen(FIXTURE_BUILD_SLEEP="0.3") for ws in (one, two)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    listed = runs(stats_json(one))
    assert sorted(str(r["root"]) for r in listed) == sorted([one.root, two.root])
    assert {r["way"] for r in listed} == {"built"}
    # one lock for both roots of the folder: the one that came second waited for the other's build
    waits = sorted(float(str(r["lock_wait_s"])) for r in listed)
    assert waits[-1] > 0.5, waits


def test_a_fleet_records_cache_hits_bytes_and_lease_waits(tmp_path: "os.PathLike[str]",
                                                          fixture_repo: FixtureRepo) -> None:
    shared = SharedCache("folder", str(tmp_path))
    a = fleet_host(str(tmp_path), fixture_repo, "a", shared)
    b = fleet_host(str(tmp_path), fixture_repo, "b", shared)
    go = os.path.join(str(tmp_path), "go")
    first = a.popen(FIXTURE_BUILD_HOOK=f'while [ ! -e "{go}" ]; do sleep 0.05; done')  # a builds until told
    shared.wait_lease("tree", host="a")
    second = b.popen()

    def waiting() -> bool:
        followed = run_record_of(b, second.pid).get("waiting")
        return isinstance(followed, dict) and followed.get("host") == "a"

    wait_until("b waits for a's build lease", waiting, timeout=120)
    time.sleep(1.0)  # b waits a second more
    open(go, "w").close()
    for proc in (first, second):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    by_host = {r["host"]: r for r in runs(stats_json(a))}
    built, cached = by_host["a"], by_host["b"]
    assert built["way"] == "built" and built["cache"] == {"tree": "miss", "mlir": "miss"}
    assert built["lease_wait_s"] == 0.0  # took its turns at once
    assert cached["way"] == "cached" and cached["cache"]["tree"] == "hit"  # type: ignore[index]
    assert cached["fetched"]["cache"] > 0  # type: ignore[index]
    assert float(str(cached["lease_wait_s"])) >= 1.0  # it waited for a's build
    data = stats_json(b, "--root", b.root)
    assert data["summary"]["cache"]["tree"] == {"hit": 1}  # type: ignore[index]
    assert data["summary"]["hosts"] == {"b": 1}  # type: ignore[index]
    text = b.run("stats", "--root", b.root).stdout
    assert "build lease waits: median" in text and "binary cache, tree: 1 hit(s), 0 miss(es)" in text


def test_a_run_killed_with_kill_9_is_recorded_by_its_watchdog(ws: Workspace) -> None:
    out = killed_at(ws, "build-done")
    assert out.returncode == -signal.SIGKILL
    wait_until("the watchdog's timing record", lambda: len(records_of(ws)) == 1, timeout=60)
    [record] = records_of(ws)
    assert record["exit_code"] == 9 and record["way"] == "failed" and record["stage"] == "build"
    assert record["root"] == ws.root and {"probe", "lock", "fetch", "llvm", "build"} <= set(record["stages"])
    assert record["fetched"] == {} and record["bytes_fetched"] is None  # what only the run knew
    assert runs(stats_json(ws))[0]["run_id"] == ws.marker()["run_id"]


@pytest.mark.index  # the real flydsl 0.2.2 wheel, from the session's wheelhouse
def test_a_release_run_records_the_wheel_s_bytes(tmp_path: "os.PathLike[str]", release_repo: FixtureRepo,
                                                 wheelhouse: str) -> None:
    ws = Workspace(os.path.join(str(tmp_path), "base"), release_repo)
    out = ws.run(FLYDSL_PIN="v0.2.2", FLYDSL_STRATEGY="auto", PIP_NO_INDEX="1", PIP_FIND_LINKS=wheelhouse)
    assert out.returncode == 0, out.stderr
    [record] = records_of(ws)
    wheel = [name for name in os.listdir(wheelhouse) if name.startswith("flydsl-0.2.2-")]
    assert record["way"] == "released" and record["route"] == "release" and "release" in record["stages"]
    assert record["fetched"]["wheel"] == os.path.getsize(os.path.join(wheelhouse, wheel[0]))  # type: ignore[index]
    assert record["fetched"]["git"] > 0  # type: ignore[index]
    assert record["bytes_fetched"] == sum(record["fetched"].values())  # type: ignore[union-attr]


def test_a_detached_run_records_itself_once_wait_returns(ws: Workspace) -> None:
    started = start(ws)
    assert ws.run("wait", "--timeout", "120").returncode == 0
    [record] = records_of(ws)  # written before the run's final record: there once `wait` has answered
    assert record["run_id"] == started["run_id"] and record["kind"] == "detached" and record["way"] == "built"


def test_records_dated_in_the_future_never_push_out_a_real_run(ws: Workspace) -> None:
    """Issue 42, item 7: 500 records dated in the future (a clock that was ahead, or planted) pushed every new
    run's record out as soon as it was written, and the real ones too; `stats` then said "no runs recorded yet".
    A time in the future counts as now, and older than any real record."""
    assert ws.run().returncode == 0
    folder = timings_dir(ws.host_dir)
    [first] = records_of(ws)
    ahead = time.time() + 10 * 365 * 86400
    for i in range(500):
        run_id = f"20361206-000000-{i:06x}"
        planted = dict(first, run_id=run_id, started=ahead + i, ended=ahead + i + 1, root="/planted")
        path = os.path.join(folder, f"{run_id}.json")
        with open(path, "w") as handle:
            json.dump(planted, handle)
        os.utime(path, (ahead + i, ahead + i))
    assert ws.run("--verify").returncode == 0  # a run that records itself, and prunes
    kept = {r["run_id"] for r in records_of(ws)}
    assert len(kept) == 500 and first["run_id"] in kept
    shown = runs(stats_json(ws))
    assert [r["root"] for r in shown[-2:]] == [ws.root, ws.root]
    assert shown[-2]["run_id"] == first["run_id"]


def test_a_planted_record_s_root_is_shown_escaped_not_obeyed(ws: Workspace) -> None:
    """Issue 42, item 9: `stats` printed a record's root as read, terminal escape sequences and newlines included."""
    assert ws.run().returncode == 0
    [first] = records_of(ws)
    planted = dict(first, run_id="20261206-000000-0e5c0d", root="/x\x1b[2J\x1b]0;owned\x07\nroot")
    with open(os.path.join(timings_dir(ws.host_dir), "20261206-000000-0e5c0d.json"), "w") as handle:
        json.dump(planted, handle)
    out = ws.run("stats")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert "/x\\x1b[2J\\x1b]0;owned\\x07\\nroot" in out.stdout
    assert planted["root"] in [r["root"] for r in runs(stats_json(ws))]  # JSON carries it as it is, escaped


def test_a_clock_jumped_forward_never_removes_the_real_records(ws: Workspace) -> None:
    """A run's record dated a year before now is what the next run sees once the clock jumped a year forward:
    records older than 30 days were removed, so every real record went at the first run after the jump."""
    assert ws.run().returncode == 0
    [first] = records_of(ws)
    path = os.path.join(timings_dir(ws.host_dir), f"{first['run_id']}.json")
    year_ago = time.time() - 365 * 86400
    os.utime(path, (year_ago, year_ago))
    assert ws.run("--verify").returncode == 0  # a run that records itself, and prunes
    assert [r["run_id"] for r in runs(stats_json(ws))][:1] == [first["run_id"]]
    assert len(records_of(ws)) == 2
