"""The one Stage type: the names the contract writes stay as they were, the plans, the doctor's order and the
ETA's work steps come from it, and a reader of a file from another version parses a name it does not know
as no stage (the record or marker still reads), never as a crash."""

from __future__ import annotations

import dataclasses
import json

from ensure_flydsl.doctor.diagnose import first_blocking
from ensure_flydsl.errors import ExitCode, Plan, Stage
from ensure_flydsl.runs.markers import Failure
from ensure_flydsl.runs.records import RunRecord
from ensure_flydsl.settings import Settings
from ensure_flydsl.trees.lease import LeaseRecord
from ensure_flydsl.ways.cache.fleet import believed, give_up
from ensure_flydsl.ways.checks import Check

# The strings of the failure marker, the run records, the JSON objects and the README (the contract).
NAMES = ["starting", "settings", "probe", "lock", "fetch", "submodules", "checkout", "requirements", "fixes", "llvm",
         "build", "release", "cache", "verify", "publish", "provision", "lease", "doctor", "activate", "access",
         "clean", "skill"]


def test_the_names_are_the_contract_s_strings() -> None:
    assert [stage.value for stage in Stage] == NAMES
    assert [str(stage) for stage in Stage] == NAMES
    assert [f"{stage}" for stage in Stage] == NAMES
    assert json.dumps([Stage.FETCH, {Stage.BUILD: 1}]) == '["fetch", {"build": 1}]'


def test_the_plans_the_doctor_s_order_and_the_work_steps() -> None:
    assert Plan.SOURCE.stages == ("probe", "lock", "fetch", "requirements", "fixes", "llvm", "build", "verify",
                                  "publish")
    assert Plan.RELEASE.stages == ("probe", "lock", "fetch", "requirements", "release", "verify", "publish")
    assert Plan.CACHE.stages == ("probe", "lock", "fetch", "requirements", "cache", "verify", "publish")
    ordered = sorted((s for s in Stage if s.order is not None), key=lambda s: s.order or 0)
    assert ordered == ["settings", "fetch", "checkout", "requirements", "submodules", "llvm", "build", "release",
                       "probe"]
    assert [s for s in Stage if s.work] == ["fetch", "llvm", "build", "release", "cache"]
    assert {s.value: int(s.exit_code or 0) for s in ordered} == {
        "settings": 64, "fetch": 2, "checkout": 3, "requirements": 6, "submodules": 2, "llvm": 4, "build": 5,
        "release": 8, "probe": 6}


def test_a_doctor_check_s_exit_code_and_order_come_from_its_stage() -> None:
    late = Check(name="hip", status="missing", detail="", remedy="", blocking=True, stage=Stage.BUILD)
    early = Check(name="git", status="missing", detail="", remedy="", blocking=True, stage=Stage.FETCH)
    none = Check(name="x", status="missing", detail="", remedy="", blocking=True,
                 stage=Stage.PUBLISH)  # no order: after every ordered stage
    assert first_blocking([none, late, early]) is early
    assert (late.exit_code, early.exit_code, none.exit_code) == (5, 2, 70)
    assert json.loads(json.dumps(dataclasses.asdict(early)))["stage"] == "fetch"


def test_parse_gives_the_stage_or_none() -> None:
    assert Stage.parse("llvm") is Stage.LLVM
    assert Stage.parse("frobnicate") is None
    assert Stage.parse("LLVM") is None
    assert Stage.parse(None) is None
    assert Stage.parse(4) is None


def test_a_failure_with_a_stage_this_version_does_not_know_reads_with_no_stage() -> None:
    known = Failure.from_json({"stage": "build", "exit_code": 5, "reason": "boom"})
    assert known is not None and known.stage is Stage.BUILD
    foreign = Failure.from_json({"stage": "frobnicate", "exit_code": 5, "reason": "boom", "hint": "h"})
    assert foreign == Failure(None, 5, "boom", "h")
    assert Failure.from_json({"stage": 3, "exit_code": 5, "reason": "boom"}) is None  # a wrong type: not one


def test_a_run_record_with_a_step_this_version_does_not_know_reads_with_no_step() -> None:
    data = {"run_id": "20261201-010203-abcdef", "root": "/r", "request": Settings(root="/r").request().to_json(),
            "step": "build"}
    record = RunRecord.from_json(data)
    assert record is not None and record.step is Stage.BUILD
    record = RunRecord.from_json(dict(data, step="frobnicate"))
    assert record is not None and record.step is None and record.run_id == "20261201-010203-abcdef"
    assert RunRecord.from_json(dict(data, step=["build"])) is None  # a wrong type refuses the record
    back = RunRecord.from_json(json.loads(json.dumps(RunRecord.from_json(data).to_json())))  # type: ignore[union-attr]
    assert back is not None and back.step is Stage.BUILD


def test_a_lease_failure_is_believed_only_with_a_build_steps_stage_and_its_exit_code() -> None:
    """A stage this version does not know, none, or a step with another step's exit code: the record is an
    unknown holder's lease (ways/cache/fleet.py: believed), never a waiter's stage and exit code."""
    def seen(stage: object) -> LeaseRecord:
        record = LeaseRecord(kind="tree", key="k", generation=2, host="host-7", run_id="20261201-010203-abcdef", pid=42,
                             started=0.0, what="the tree",
                             state="failed", failure={"stage": stage, "exit_code": 5, "reason": "boom"})
        return believed(record)

    build = seen("build")
    assert build.invalid is None and give_up(build, "the tree").stage is Stage.BUILD
    assert give_up(build, "the tree").code == ExitCode.FLYDSL_BUILD
    for stage in ("llvm", "frobnicate", None):
        unknown = seen(stage)
        assert unknown.invalid is not None and unknown.state == "building" and unknown.host == "an unknown host"
