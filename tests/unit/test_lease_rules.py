"""The rules a build lease record is read and written by, which other hosts rely on:

- a failure is believed only as a build step's (llvm, build, verify) with that step's own exit code, and a
  holder records no other failure (it gives its generation up instead): what one host writes, every other
  believes, and nothing else ends a waiter with its code;
- FLYDSL_HOST_ID is taken exactly when a lease record carrying it reads back as that host's."""

from __future__ import annotations

import json
import os
import time
from typing import Callable, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Interrupted, Stage
from ensure_flydsl.settings import check_host_id
from ensure_flydsl.trees.backends import FolderStore
from ensure_flydsl.trees.lease import FAILURE_EXIT_CODES, UNKNOWN_HOST, HeldLease, LeaseRecord, Leases, generation_path
from ensure_flydsl.ways.cache.fleet import HOLDER_STAGES, believed, build_failure, end_turn, give_up
from tests.helpers.fleet import BAD_RECORDS, FAILED, FAILURE_RECORDS, bad_record, lease_record

KEY = "ab" * 32


def test_a_failure_is_believed_only_as_a_build_steps_with_its_exit_code() -> None:
    for stage in Stage:
        for code in range(256):
            believed = build_failure(str(stage), code) is not None
            assert believed == (stage in HOLDER_STAGES and stage.exit_code == code), (stage, code)
    for stage in HOLDER_STAGES:  # what a holder writes, the record lets through
        assert stage.exit_code is not None and int(stage.exit_code) in FAILURE_EXIT_CODES
    for stage_name, code in ((None, 4), ("llvm", True), ("llvm", 4.0), ("LLVM", 4), ("llvm", "4")):
        assert build_failure(stage_name, code) is None


@pytest.mark.parametrize("code", [0, 1, 9, 64, 70, 75, 130, 255, -1, 256])
def test_a_record_with_an_exit_code_no_build_step_has_is_an_unknown_holders(code: int) -> None:
    record = LeaseRecord(kind="tree", key=KEY, generation=1, host="h", run_id="r", pid=1, started=time.time(), what="x",
                         state="failed", ended=time.time(),
                         failure={"stage": "llvm", "exit_code": code, "reason": "boom"})
    read = LeaseRecord.from_bytes(record.to_bytes(), "tree", KEY, 1)
    assert read.invalid is not None and "exit_code" in read.invalid and read.state == "building"
    assert read.host == "an unknown host"


def _held(tmp: str) -> HeldLease:
    leases = Leases(FolderStore(os.path.join(tmp, "cache")), 60.0)
    held = leases.take(LeaseRecord(kind="tree", key=KEY, generation=1, host="h", run_id="r", pid=os.getpid(),
                                   started=time.time(), what="x"), lambda: (None, None, None))
    assert held is not None
    return held


def _left(held: HeldLease) -> Optional[dict]:
    path = os.path.join(held.leases.store.root, *generation_path("tree", KEY, 1).split("/"))
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        data = json.load(handle)
    assert isinstance(data, dict)
    return data


def test_a_holder_records_its_builds_failure(tmp_path: "os.PathLike[str]") -> None:
    held = _held(str(tmp_path))
    end_turn(held, EnsureError(ExitCode.LLVM_BUILD, "build_llvm.sh failed", stage=Stage.LLVM))
    left = _left(held)
    assert left is not None and left["state"] == "failed"
    assert left["failure"] == {"stage": "llvm", "exit_code": 4, "reason": "build_llvm.sh failed"}


ERRORS: List[Callable[[], BaseException]] = [
    lambda: EnsureError(ExitCode.INTERNAL, "a bug"),  # exit 70, no stage
    lambda: EnsureError(ExitCode.BAD_INPUT, "cannot write its folder", stage=Stage.ACCESS),
    lambda: EnsureError(ExitCode.FLYDSL_BUILD, "a build failure without its stage"),
    lambda: EnsureError(ExitCode.LOCK, "a step's code that is not its own", stage=Stage.LLVM),
    lambda: RuntimeError("a bug"),
    lambda: OSError(28, "No space left on device"),
    KeyboardInterrupt,
    lambda: Interrupted("SIGTERM"),
]


@pytest.mark.parametrize("make", ERRORS)
def test_a_holder_gives_up_its_generation_on_any_other_failure(tmp_path: "os.PathLike[str]",
                                                               make: Callable[[], BaseException]) -> None:
    """No record a waiter would believe says it, and it is no reason for the fleet to stop: the generation
    goes, and a waiter takes over at once (it used to be recorded: "exit 70" ended the fleet's waiters)."""
    held = _held(str(tmp_path))
    end_turn(held, make())
    assert _left(held) is None
    assert held.leases.generations("tree", KEY) == []


HOST_IDS = st.one_of(st.text(max_size=250), st.text(min_size=195, max_size=205),
                     st.sampled_from(["h" * 200, "h" * 201, "a\nb", "tab\there", "é" * 200, "\u00a0x", "x\udcff"]))


@settings(max_examples=300, deadline=None)
@given(value=HOST_IDS)
def test_a_host_id_is_taken_exactly_when_a_lease_record_carries_it(value: str) -> None:
    try:
        check_host_id({"FLYDSL_HOST_ID": value})
        taken = True
    except BadInput as exc:
        assert exc.setting == "FLYDSL_HOST_ID" and "\n" not in exc.reason
        taken = False
    if value == "":
        assert taken  # an empty variable is the default: the host name
        return
    record = LeaseRecord(kind="tree", key=KEY, generation=1, host=value, run_id="r", pid=1, started=time.time(),
                         what="x")
    read = LeaseRecord.from_bytes(record.to_bytes(), "tree", KEY, 1)
    assert taken == (read.invalid is None)
    if taken:
        assert read.host == value


def test_the_fleet_scenarios_records_are_valid_but_for_their_one_bad_value() -> None:
    """The control of the test below: the record it changes, of either state, reads as its holder's."""
    for record in (lease_record(KEY), lease_record(KEY, **dict(FAILED, ended=time.time(), failures_before=1))):
        read = LeaseRecord.from_bytes(json.dumps(record).encode(), "tree", KEY, 1)
        assert read.invalid is None and read.host == "h9", read.invalid


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_lease_record_with_a_value_no_holder_writes_reads_as_an_unknown_holder(case: str) -> None:
    """Each record tests/scenarios/test_cache_trust.py plants (two of them there, with the run around it)."""
    read = LeaseRecord.from_bytes(json.dumps(bad_record(KEY, case)).encode(), "tree", KEY, 1)
    field = case.split(" ")[0]
    assert read.invalid is not None and read.host == UNKNOWN_HOST and read.run_id == "?"
    assert read.invalid.startswith(field + " "), read.invalid  # refused for the value the case changed


@pytest.mark.parametrize("stage,code,expect", FAILURE_RECORDS)
def test_a_failure_record_ends_a_waiter_only_with_a_build_steps_code(stage: str, code: int,
                                                                      expect: Optional[int]) -> None:
    """Each failure record tests/scenarios/test_lease_planted.py plants (two of them there, with a waiter): the
    record a host reads, as the waiter takes it, and the code the waiter would end with."""
    data = dict(lease_record(KEY), state=FAILED["state"], ended=time.time(), failures_before=1,
                failure={"stage": stage, "exit_code": code, "reason": "boom"})
    seen = believed(LeaseRecord.from_bytes(json.dumps(data).encode(), "tree", KEY, 1))
    if expect is None:
        assert seen.invalid is not None and seen.host == UNKNOWN_HOST and seen.state != FAILED["state"]
    else:
        assert seen.invalid is None and seen.host == "h9" and int(give_up(seen, "x").code) == expect
