"""Issue 28, item 6: the timing records read back as outside data (field by field, for what each value means;
fuzzed), the folder kept bounded without touching what is not a record, the summary's medians and shares,
and the schema saying what the code writes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from typing import Any, Dict, List

from hypothesis import HealthCheck, given, settings

from ensure_flydsl.cli.main import main
from ensure_flydsl.errors import FAILURE_CODES, Plan, Stage
from ensure_flydsl.layout import host_cache_dir, timings_dir
from ensure_flydsl.runs.timings import (
    FETCHES,
    LINK_MODES,
    LOOKUPS,
    OTHER,
    WAYS,
    TimingRecord,
    keep,
    prune,
    read_records,
    summarize,
)
from tests.helpers.result_schema import REGISTRY, SCHEMAS
from tests.unit.test_readers_fuzz import inputs

VALID: Dict[str, Any] = {
    "version": 1, "run_id": "20261202-031500-ab12cd", "host": "gpu-7", "root": "/work/FlyDSL", "kind": "blocking",
    "started": 1764645300.0, "ended": 1764645312.5, "total_s": 12.5, "exit_code": 0, "way": "built",
    "stage": None, "route": "source", "pin": "v0.2.2", "tool": "ensure-flydsl 0.1.0",
    "stages": {"probe": 0.4, "lock": 0.0, "fetch": 2.0, "build": 8.0, "verify": 1.1}, "fetched": {"git": 8000},
    "bytes_fetched": 8000, "cache": {"tree": "miss"}, "link_mode": None, "lock_wait_s": 0.0, "lease_wait_s": None,
}


def record(**changes: Any) -> Dict[str, Any]:
    return {**VALID, **changes}


def test_a_record_reads_back_as_it_was_written() -> None:
    read = TimingRecord.from_json(VALID)
    assert read is not None and read.to_json() == VALID
    assert read.stages[Stage.BUILD] == 8.0 and read.route == Plan.SOURCE and read.total_s == 12.5
    # seconds finer than a millisecond read as the millisecond a run writes (0.0625 is written 0.062)
    fine = TimingRecord.from_json(record(started=0.0625, ended=1.0625, stages={"build": 0.0625}, lock_wait_s=0.0625))
    assert fine is not None and TimingRecord.from_json(fine.to_json()) == fine
    assert (fine.started, fine.ended, fine.stages[Stage.BUILD], fine.lock_wait_s) == (0.062, 1.062, 0.062, 0.062)


def test_values_of_the_right_type_that_no_run_writes_refuse_the_record() -> None:
    refused = [
        record(version=2), record(run_id="../x"), record(host="a\nb"), record(host=""), record(root="FlyDSL"),
        record(kind="sometimes"), record(ended=1.0), record(started=-1.0), record(started=float("nan")),
        record(exit_code=75), record(exit_code=1), record(exit_code=True), record(way="failed"),
        record(exit_code=5, way="built"), record(way="teleported"), record(route="ftp"),
        record(stages={"build": -1.0}), record(stages={"build": "8"}), record(stages=[]),
        record(fetched={"git": -1}), record(fetched={"git": 1.5}), record(fetched={"torrent": 1}),
        record(fetched={"git": 2 ** 60}), record(cache={"tree": "maybe"}), record(cache={"wheel": "hit"}),
        record(link_mode="symlink"), record(lock_wait_s=-0.1), record(lease_wait_s="1"), record(pin="a\x00"),
        record(stage=5), record(stages={"build": 12.0, "fetch": 1.0}),  # more than the run's 12.5 s
    ]
    for data in refused:
        assert TimingRecord.from_json(data) is None, data
    # the boundary values runs do write read; a stage of a newer version is left out, the record stands
    read = TimingRecord.from_json(record(exit_code=130, way="failed", stage="somewhere-new", route=None,
                                         stages={"probe": 0.0, "teleport": 1.0}, fetched={}, cache={},
                                         link_mode="hardlink", lease_wait_s=0.0, pin=None, tool=None))
    assert read is not None and read.stage is None and dict(read.stages) == {Stage.PROBE: 0.0}
    assert read.bytes_fetched is None and read.link_mode == "hardlink"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=inputs(VALID))
def test_any_input_reads_as_a_record_or_none(raw: Any) -> None:
    read = TimingRecord.from_json(json.loads(json.dumps(raw)))
    if read is not None:
        again = TimingRecord.from_json(json.loads(json.dumps(read.to_json())))
        assert again == read
        assert read.way in WAYS and (read.exit_code == 0 or read.exit_code in FAILURE_CODES)
        summarize([read])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=inputs(VALID))
def test_stats_answers_whatever_the_folder_holds(tmp_path_factory: Any, raw: Any) -> None:
    folder = str(tmp_path_factory.mktemp("records"))
    for name in ("20261202-031500-ab12cd.json", "garbage.json", "x"):
        with open(os.path.join(folder, name), "w") as handle:
            json.dump(raw, handle)
    for args in (["stats", "--records", folder], ["stats", "--json", "--records", folder]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(args) == 0
    data = json.loads(out.getvalue())
    assert len(data["runs"]) + data["skipped"]["count"] == 3


def test_the_folder_keeps_the_newest_runs_and_nothing_else_is_touched(tmp_path: Any) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    folder = timings_dir(str(host_cache_dir(environ)))
    now = time.time()
    for index in range(6):
        run_id = f"20261202-03150{index}-ab12cd"
        keep(environ, TimingRecord.from_json(record(run_id=run_id)))  # type: ignore[arg-type]
        os.utime(os.path.join(folder, run_id + ".json"), (now - 60 * (6 - index),) * 2)
    old = "20250101-000000-000000.json"
    with open(os.path.join(folder, old), "w") as handle:
        json.dump(record(run_id=old[:-5]), handle)
    os.utime(os.path.join(folder, old), (now - 40 * 86400,) * 2)
    for foreign in ("notes.txt", "garbage.json", "20261202-031500-ab12cd.json.bak"):
        open(os.path.join(folder, foreign), "w").close()
    os.mkdir(os.path.join(folder, "20250101-000000-00000f.json"))  # a folder at a record's name: not removed
    prune(folder, keep_runs=4)
    kept = [f"20261202-03150{index}-ab12cd.json" for index in (2, 3, 4, 5)]
    foreign = ["20250101-000000-00000f.json", "20261202-031500-ab12cd.json.bak", "garbage.json", "notes.txt"]
    assert sorted(os.listdir(folder)) == sorted(kept + foreign)
    records, skipped = read_records(folder)
    assert [r.run_id + ".json" for r in records] == kept
    assert sorted(os.path.basename(s.path) for s in skipped) == foreign
    with open(os.path.join(folder, "20261202-031502-ab12cd.json"), "w") as handle:
        handle.write("torn")  # a torn record is the tool's file: it is pruned like any other
    os.utime(os.path.join(folder, "20261202-031502-ab12cd.json"), (now - 240,) * 2)
    prune(folder, keep_runs=3)
    assert sorted(os.listdir(folder)) == sorted(kept[1:] + foreign)


def test_an_unlistable_folder_is_said_not_raised(tmp_path: Any) -> None:
    planted = os.path.join(str(tmp_path), "runs")
    open(planted, "w").close()  # a file where the folder should be
    records, skipped = read_records(planted)
    assert records == [] and len(skipped) == 1 and "cannot be listed" in skipped[0].why


def test_the_summary_medians_and_where_the_time_went() -> None:
    runs: List[TimingRecord] = []
    for index, (total, build) in enumerate(((10.0, 6.0), (20.0, 16.0), (30.0, 20.0))):
        data = record(run_id=f"r{index}", started=100.0, ended=100.0 + total, stages={"build": build, "fetch": 2.0},
                      fetched={"git": 100 * (index + 1)}, lock_wait_s=float(index))
        runs.append(TimingRecord.from_json(data))  # type: ignore[arg-type]
    runs.append(TimingRecord.from_json(record(run_id="f", exit_code=5, way="failed", stage="build", started=0.0,
                                              ended=0.0, stages={}, fetched={}, cache={"tree": "hit"},
                                              lock_wait_s=None)))  # type: ignore[arg-type]
    summary = summarize(runs)
    assert summary["runs"] == 4 and summary["failed"] == 1 and summary["ways"] == {"built": 3, "failed": 1}
    assert summary["total"] == {"runs": 4, "median_s": 15.0, "sum_s": 60.0}
    assert summary["stages"] == {"fetch": {"runs": 3, "median_s": 2.0, "sum_s": 6.0},
                                 "build": {"runs": 3, "median_s": 16.0, "sum_s": 42.0}}
    assert summary["where"] == [{"stage": "build", "sum_s": 42.0, "share": 0.7},
                                {"stage": "fetch", "sum_s": 6.0, "share": 0.1},
                                {"stage": OTHER, "sum_s": 12.0, "share": 0.2}]
    assert summary["lock_wait"] == {"runs": 3, "median_s": 1.0, "sum_s": 3.0}
    assert summary["bytes_fetched"] == {"runs": 3, "median": 200, "sum": 600, "by": {"git": 600}}
    assert summary["cache"] == {"tree": {"hit": 1, "miss": 3}}
    assert summarize([])["where"] == []


def test_the_schema_says_what_the_code_writes() -> None:
    import jsonschema

    schema = SCHEMAS["timing"]
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(VALID)
    props: Dict[str, Any] = schema["properties"]  # type: ignore[assignment]
    assert set(props) == set(schema["required"]) == set(VALID)  # type: ignore[arg-type]
    assert set(props["exit_code"]["enum"]) == {0} | set(FAILURE_CODES)
    assert tuple(props["way"]["enum"]) == WAYS
    assert tuple(props["link_mode"]["enum"][:-1]) == LINK_MODES  # hardlink: an earlier version's records read
    assert tuple(props["fetched"]["properties"]) == FETCHES and tuple(props["cache"]["properties"]) == LOOKUPS
    assert props["route"]["enum"][:-1] == [p.value for p in Plan]
