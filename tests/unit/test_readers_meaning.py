"""Every record the tool reads back, fuzzed for what its values mean (issue 26, item 12), where
tests/unit/test_readers_fuzz.py and test_fuzz_cache.py fuzz their types: values of the right type that no run
of the tool writes (a negative or too large pid; an exit code 0, 1, 75 or 255 in a failure; a state, kind,
`how` or stage outside its enumeration; a percent past 100; a time that is negative, NaN, Infinity or past
the year 2286; a relative path, one with a NUL; a hash that is not 64 hex digits, or has a line break after
them) are refused by the reader (None, an unknown holder, a miss with a warning), or, where the record may
carry them, never steer what is decided from it: `status` and `wait` never answer 0 or 75 from a planted
record, a waiter of the build lease ends only with a build step's code, `cache list` shows any manifest it
takes.

Each reader also gets the values in range that the tool does write (the boundaries: percent 0 and 100, every
exit code a failed run records), which it must take: a reader that refused everything would pass the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensure_flydsl.cli.cache import describe
from ensure_flydsl.errors import FAILURE_CODES, ExitCode, Plan, Stage
from ensure_flydsl.geak.folder import LEGACY_MADE_BY as MADE_BY
from ensure_flydsl.geak.folder import LEGACY_MANIFEST as MANIFEST
from ensure_flydsl.geak.folder import MADE_BY as VERSION_MADE_BY
from ensure_flydsl.geak.folder import refusal
from ensure_flydsl.layout import history_file
from ensure_flydsl.pipeline.lock import LockHolder, describe_holder
from ensure_flydsl.result import How
from ensure_flydsl.runs.markers import EnvTwin, Failure
from ensure_flydsl.runs.progress import estimate_eta
from ensure_flydsl.runs.records import KINDS, RunRecord, RunState
from ensure_flydsl.runs.timings import read_history
from ensure_flydsl.settings import Request, Settings, load_settings
from ensure_flydsl.source.root import Stamp
from ensure_flydsl.support.fields import MAX_ETA_S, MAX_SECONDS, PID_MAX
from ensure_flydsl.trees.backends import FolderStore
from ensure_flydsl.trees.lease import FAILED, LeaseRecord, Leases
from ensure_flydsl.trees.manifest import cache_key, parse_manifest
from ensure_flydsl.trees.remote import Cache
from ensure_flydsl.ways.cache.fleet import believed, give_up
from tests.unit.test_fuzz_cache import KEY, check_record, valid_record
from tests.unit.test_readers_fuzz import VALID_RECORD, cli, empty_cwd, environment, valid_twin

MEANING = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- values of the right type that no run writes ---------------------------------------------------------------
NAN, INF = float("nan"), float("inf")
BAD_PIDS = st.sampled_from([0, -1, -4242, PID_MAX + 1, 2**31, 2**63, 10**30])
BAD_TIMES = st.sampled_from([-1.0, -1e-9, -1, MAX_SECONDS * 10, 1e300, NAN, INF, -INF])
BAD_PERCENTS = st.sampled_from([-0.1, -50, 100.01, 150, 1e9, NAN, INF])
CODES = st.integers(-300, 300) | st.sampled_from([0, 1, 75, 130, 9, 70, 255, 256, 2**31])
BAD_CODES = CODES.filter(lambda c: c not in FAILURE_CODES)
STATES = [state.value for state in RunState]
BAD_STATES = st.sampled_from(["done", "Running", "", "RUNNING", "succeeded ", "killed", "building"])
BAD_STAGES = st.sampled_from(["compile", "", "BUILD", "build\n", "lease ", "x" * 300])
BAD_PATHS = st.sampled_from(["relative/x", "python3", "", "./x", "../x", "/a\0b"])
BAD_HASHES = st.sampled_from(["", "a" * 39, "a" * 41, "A" * 40, "g" * 40, "a" * 40 + "\n", "a" * 63, "a" * 64 + "\n",
                              "HEAD", "v0.2.2"])
BAD_TEXTS = st.sampled_from(["", "a\nb", "\x1b[31mred", "x" * 201, "tab\there"])
BAD_HOWS = st.sampled_from(["stolen", "", "BUILT", "built\n", "warm"])
DELETE = object()


def mutated(valid: Mapping[str, Any], bad: Mapping[str, st.SearchStrategy[Any]],
            min_size: int = 1) -> st.SearchStrategy[Tuple[Dict[str, Any], List[str]]]:
    """``valid`` with 1 to 3 of the fields in ``bad`` given a value of ``bad``'s; (the record, the fields)."""
    names = sorted(bad)

    @st.composite
    def build(draw: st.DrawFn) -> Tuple[Dict[str, Any], List[str]]:
        chosen = draw(st.lists(st.sampled_from(names), min_size=min_size, max_size=3, unique=True))
        data = json.loads(json.dumps(valid))
        for name in chosen:
            data[name] = draw(bad[name])
        return json.loads(json.dumps(data)), chosen  # as a file holds it (NaN and Infinity included)

    return build()


def finite_in(value: object, low: float, high: float) -> bool:
    return isinstance(value, float) and low <= value <= high  # False for NaN


# -- run records and failures ----------------------------------------------------------------------------------
FAILURE_BAD = {"exit_code": BAD_CODES, "stage": st.integers() | st.booleans(), "reason": st.integers()}


def means_failure(failure: Failure) -> None:
    assert failure.exit_code in FAILURE_CODES  # never 0 (success) or 75 (still running), nor a code of no failure
    assert failure.stage is None or isinstance(failure.stage, Stage)


@MEANING
@given(case=mutated(VALID_RECORD["failure"], FAILURE_BAD))
def test_a_failure_with_a_code_no_failed_run_records_is_refused(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, _changed = case
    failure = Failure.from_json(data)
    assert failure is None, f"accepted {data}"


@MEANING
@given(code=st.sampled_from(sorted(FAILURE_CODES)), stage=st.none() | BAD_STAGES | st.sampled_from(list(Stage)))
def test_every_code_a_failed_run_records_is_read(code: int, stage: Optional[str]) -> None:
    failure = Failure.from_json({"exit_code": code, "stage": stage, "reason": "r"})
    assert failure is not None and failure.exit_code == code
    means_failure(failure)  # an unknown stage reads as none (a file of another version), the failure stands


RECORD_BAD: Dict[str, st.SearchStrategy[Any]] = {
    "pid": BAD_PIDS, "build_pgid": BAD_PIDS, "state": BAD_STATES, "kind": st.sampled_from(["", "daemon", "Detached"]),
    "percent": BAD_PERCENTS, "eta_s": st.sampled_from([-1.0, NAN, INF]), "started": BAD_TIMES, "finished": BAD_TIMES,
    "updated": BAD_TIMES, "failure": st.fixed_dictionaries({"stage": st.just("build"), "exit_code": BAD_CODES,
                                                            "reason": st.just("r")}),
    "run_id": st.sampled_from(["", "../x", "a/b", ".hidden", "x" * 200, "a\nb"]), "root": st.just("/a\0b"),
}
RECORD_GOOD: Dict[str, st.SearchStrategy[Any]] = {
    "pid": st.sampled_from([1, PID_MAX]), "state": st.sampled_from(STATES), "kind": st.sampled_from(KINDS),
    "percent": st.sampled_from([0.0, 100.0, 0, 100, None]), "eta_s": st.sampled_from([0, 0.0, 1e12, None]),
    "started": st.sampled_from([0.0, time.time(), MAX_SECONDS]), "finished": st.sampled_from([None, 0.0, 2.5]),
    "failure": st.sampled_from(sorted(FAILURE_CODES)).map(lambda c: {"stage": "build", "exit_code": c, "reason": ""}),
}


def means_run_record(record: RunRecord) -> None:
    assert record.state in STATES and record.kind in KINDS
    assert record.percent is None or finite_in(record.percent, 0.0, 100.0)
    assert record.eta_s is None or (isinstance(record.eta_s, float) and 0 <= record.eta_s <= MAX_ETA_S)
    for name in ("started", "finished", "updated"):
        value = getattr(record, name)
        assert value is None or finite_in(float(value), 0.0, MAX_SECONDS), name
    for name in ("pid", "build_pgid"):
        value = getattr(record, name)
        assert value is None or (type(value) is int and 0 < value <= PID_MAX), name
    if record.failure is not None:
        means_failure(record.failure)


@MEANING
@given(case=mutated(VALID_RECORD, RECORD_BAD))
def test_a_run_record_with_a_value_no_run_writes_is_refused(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    record = RunRecord.from_json(data)
    assert record is None, f"accepted {changed}: {[data[c] for c in changed]}"


@MEANING
@given(case=mutated(VALID_RECORD, RECORD_GOOD))
def test_a_run_record_with_the_values_runs_write_is_read(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    record = RunRecord.from_json(data)
    assert record is not None, f"refused {changed}: {[data[c] for c in changed]}"
    means_run_record(record)


# -- the env file's twin ---------------------------------------------------------------------------------------
ROOT = "/r/base/FlyDSL"
TWIN_BAD: Dict[str, st.SearchStrategy[Any]] = {
    "how": BAD_HOWS, "python": BAD_PATHS, "commit": BAD_HASHES, "FLYDSL_ROOT": BAD_PATHS.filter(bool),
    "tree": BAD_PATHS, "pythonpath_prepend": BAD_PATHS.map(lambda p: [ROOT, p]),
}


def means_twin(twin: EnvTwin) -> None:
    assert isinstance(twin.how, How)
    assert twin.python.startswith("/") and "\0" not in twin.python
    assert twin.FLYDSL_ROOT == "" or twin.FLYDSL_ROOT.startswith("/")
    assert twin.commit is None or (len(twin.commit) in (40, 64) and set(twin.commit) <= set("0123456789abcdef"))
    if twin.how != How.REUSED:  # the root's own tree, as the tool names it
        assert twin.tree.startswith("/") and all(p.startswith("/") for p in twin.pythonpath_prepend)
    assert twin.elapsed_s is None or finite_in(twin.elapsed_s, 0.0, MAX_SECONDS)


@MEANING
@given(case=mutated(valid_twin(ROOT, Settings(root=ROOT).request()), TWIN_BAD))
def test_a_twin_with_a_value_no_run_writes_is_refused(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    twin = EnvTwin.from_json(data)
    assert twin is None, f"accepted {changed}: {[data[c] for c in changed]}"


@MEANING
@given(case=mutated(valid_twin(ROOT, Settings(root=ROOT).request()), {
    "how": st.sampled_from([h.value for h in How]), "commit": st.sampled_from([None, "a" * 40, "b" * 64]),
    "elapsed_s": st.sampled_from([None, 0, 3.5, -1.0, NAN, "x"]), "FLYDSL_ROOT": st.sampled_from(["", ROOT])}))
def test_a_twin_with_the_values_runs_write_is_read(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    twin = EnvTwin.from_json(data)
    assert twin is not None, f"refused {changed}: {[data[c] for c in changed]}"
    means_twin(twin)  # a meaningless elapsed_s (a field of a later version) reads as not recorded


# -- the request (a twin's, a run record's, a failure marker's) ------------------------------------------------
REQUEST = Settings(root=ROOT).request().to_json()
REQUEST_BAD: Dict[str, st.SearchStrategy[Any]] = {
    "root": st.sampled_from(["relative/x", "", "/", "/a\0b", "/a:b", "/a/../b", "/a/", "/a\nb", "/x" * 3000]),
    "min_version": st.sampled_from(["", "soon", "0.2.2-", "1..2", "v", 2]),
    "pin": st.sampled_from(["", "-x", "a..b", "x.lock", "x/", "@{u}", "a b", "x" * 300, None]),
    "repo": st.sampled_from(["-x", "ext::sh -c x", "relative/repo", "ftp://h/r", "https://h/\n", ""]),
    "python": st.sampled_from(["", "bin/python3", "py\tthon", "/a\0b", None]),
    "require": st.sampled_from([[], "flydsl", ["flydsl,kernels"], [""], ["1x"], ["a b"], [1], None]),
    "strategy": st.sampled_from(["", "AUTO", "fastest", "reuse_only", None, 1]),
    "mlir_path": st.sampled_from(["", "relative", "/a\nb", 1, False]),
    "shim_dir": st.sampled_from(["", "relative", "/a/", 1, False]),
    "vllm_moe": st.sampled_from([1, 0, "1", "true", None]),
    "exact_pin": st.sampled_from([1, 0, "false", None]),
}


@MEANING
@given(case=mutated(REQUEST, REQUEST_BAD))
def test_a_request_with_a_value_no_run_writes_is_refused(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    assert Request.from_json(data) is None, f"accepted {changed}: {[data[c] for c in changed]}"
    assert EnvTwin.from_json(dict(valid_twin(ROOT, Settings(root=ROOT).request()), request=data)) is None
    assert RunRecord.from_json(dict(VALID_RECORD, request=data)) is None


@pytest.mark.parametrize("key", sorted(REQUEST) + ["unknown"])
def test_a_request_with_a_key_too_few_or_too_many_is_refused(key: str) -> None:
    data = {k: v for k, v in REQUEST.items() if k != key} if key in REQUEST else dict(REQUEST, unknown=1)
    assert Request.from_json(data) is None


@MEANING
@given(case=mutated(REQUEST, {
    "root": st.sampled_from(["/x", "/a b/Fly DSL", "/ünï/cödé"]),
    "min_version": st.sampled_from(["0", "0.2.2", "10.20.30.40", "1.0rc1", "0.2.3.dev4+g1", "1!2.0"]),
    "pin": st.sampled_from(["a" * 40, "b" * 64, "v0.2.3", "main", "release/v1", "A_b-1.2+x"]),
    "repo": st.sampled_from(["https://h/r.git", "http://h/r", "ssh://h/r", "git://h/r", "file:///r",
                             "git@host:org/repo.git", "/srv/FlyDSL.git"]),
    "python": st.sampled_from(["python3", "python3.11", "/usr/bin/python3", "/venv/bin/python"]),
    "require": st.sampled_from([["flydsl"], ["flydsl", "kernels.moe_gemm_2stage"], ["_a.b_c"], ["x", "x"]]),
    "strategy": st.sampled_from(["auto", "source", "release", "reuse-only"]),
    "mlir_path": st.sampled_from([None, "/opt/mlir"]), "shim_dir": st.sampled_from([None, "/shims"]),
    "vllm_moe": st.booleans(), "exact_pin": st.booleans()}))
def test_a_request_with_the_values_runs_write_is_read(case: Tuple[Dict[str, Any], List[str]]) -> None:
    """Each value as the settings give it (load_settings of the same value gives it back unchanged), read
    back equal to what is written."""
    data, changed = case
    request = Request.from_json(data)
    assert request is not None, f"refused {changed}: {[data[c] for c in changed]}"
    assert request.to_json() == data


def test_a_reused_tree_keeps_the_folders_the_probe_named() -> None:
    """A tree found on the interpreter's path is named as the probe found it: a relative PYTHONPATH entry of
    the caller's stays relative, and the twin stands."""
    data = dict(valid_twin(ROOT, Settings(root=ROOT).request()), how="reused", tree="site/flydsl-tree",
                pythonpath_prepend=["site/flydsl-tree"])
    twin = EnvTwin.from_json(data)
    assert twin is not None and twin.tree == "site/flydsl-tree"


# -- stamps and the lock's holder -------------------------------------------------------------------------------
@MEANING
@given(case=mutated({"key": {"commit": "a" * 40}, "time": 1.5, "how": "built", "commit": "a" * 40,
                     "version": "0.2.2"}, {"how": BAD_HOWS, "commit": BAD_HASHES}))
def test_a_stamp_with_a_how_or_commit_no_run_writes_is_refused(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    assert Stamp.from_json(data) is None, f"accepted {changed}: {[data[c] for c in changed]}"


@pytest.mark.parametrize("how", [h.value for h in How] + [None])
def test_a_stamp_of_every_how_is_read(how: Optional[str]) -> None:
    stamp = Stamp.from_json({"key": {"commit": "a" * 40}, "time": 1.5, "how": how, "commit": "b" * 40})
    assert stamp is not None and stamp.how == how
    assert stamp.how is None or How(stamp.how)  # what decide() turns it into


@MEANING
@given(case=mutated({"pid": 12, "host": "h", "started": "2026-12-01T00:00:00+00:00", "started_ts": 1.0,
                     "run_id": "r"}, {"pid": BAD_PIDS, "host": BAD_TEXTS, "started": BAD_TEXTS, "run_id": BAD_TEXTS,
                                      "started_ts": BAD_TIMES}))
def test_the_lock_holder_is_refused_or_said_in_one_line(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    holder = LockHolder.from_json(data)
    if "pid" in changed:
        assert holder is None, f"accepted pid {data['pid']}"
        return
    assert holder is not None
    text = describe_holder(holder)
    assert text.isprintable(), f"{changed}: {text!r}"  # the waiter's message is one line
    assert finite_in(holder.started_ts, 0.0, MAX_SECONDS)


# -- cache manifests -----------------------------------------------------------------------------------------------
FIELDS = {"repo": "example.org/FlyDSL", "commit": "0" * 40}
TREE_KEY = cache_key("tree", FIELDS)


def valid_manifest() -> Dict[str, object]:
    return {"format": 1, "kind": "tree", "key": TREE_KEY, "fields": FIELDS, "blob": "c" * 64, "size": 10,
            "created": 1.0, "host": "h", "tool": "t",
            "members": [{"path": "d/f", "type": "file", "mode": 0o644, "size": 1, "sha256": "e" * 64}]}


MANIFEST_BAD: Dict[str, st.SearchStrategy[Any]] = {
    "created": BAD_TIMES | st.booleans(), "size": st.sampled_from([-1, True, False, 1.5]), "blob": BAD_HASHES,
    "kind": st.sampled_from(["tree\n", "Tree", ""]), "key": st.just(TREE_KEY + "\n"),
    "members": st.sampled_from([[{"path": "f", "type": "file", "mode": True, "size": 1, "sha256": "e" * 64}],
                                [{"path": "f", "type": "file", "mode": 0o644, "size": -1, "sha256": "e" * 64}],
                                [{"path": "f", "type": "file", "mode": 0o644, "size": 1, "sha256": "e" * 64 + "\n"}],
                                [{"path": "f", "type": "fifo", "mode": 0o644, "size": 0}]]),
}


@MEANING
@given(case=mutated(valid_manifest(), MANIFEST_BAD))
def test_a_manifest_with_a_value_no_publish_writes_is_refused(case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    try:
        entry = parse_manifest(json.dumps(data).encode())
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    pytest.fail(f"accepted {changed}: {[data[c] for c in changed]} as {entry}")


@MEANING
@given(case=mutated(valid_manifest(), {"host": BAD_TEXTS | st.integers() | st.none(), "tool": BAD_TEXTS,
                                       "created": st.sampled_from([0, 0.0, time.time(), MAX_SECONDS])}))
def test_a_manifest_it_takes_is_shown_in_one_line(case: Tuple[Dict[str, Any], List[str]]) -> None:
    """What only informs (host, tool) reads as not known when it is no short printable text; `cache list`
    shows the creation date (NaN or 1e300 there once ended it with exit 70)."""
    data, _changed = case
    entry = parse_manifest(json.dumps(data).encode())
    assert entry.host == "" or entry.host.isprintable() and "\n" not in entry.host
    assert entry.tool == "" or entry.tool.isprintable()
    line = describe(entry)
    assert "\n" not in line and entry.key[:12] in line


# -- the build lease's records ----------------------------------------------------------------------------------
LEASE_BAD: Dict[str, st.SearchStrategy[Any]] = {
    "pid": st.sampled_from([-1, 2**31 + 1]), "percent": BAD_PERCENTS, "eta_s": st.sampled_from([-1.0, NAN, INF]),
    "ended": BAD_TIMES,
    "started": BAD_TIMES, "heartbeat": BAD_TIMES, "elapsed_s": BAD_TIMES,
    "ttl": st.sampled_from([-1.0, 1e-300, 0.5, 1e6, 1e300, NAN]),
    "state": BAD_STATES.filter(lambda s: s != "building"), "host": BAD_TEXTS, "run_id": BAD_TEXTS,
    "step": BAD_TEXTS, "failures_before": st.sampled_from([-1, 10**7, True]),
    "failure": st.fixed_dictionaries({"stage": st.sampled_from(["build", "llvm", "verify"]), "exit_code": BAD_CODES,
                                      "reason": st.just("r")}),
}


@MEANING
@given(case=mutated(valid_record(), LEASE_BAD))
def test_a_lease_record_with_a_value_no_holder_writes_is_an_unknown_holders(
        case: Tuple[Dict[str, Any], List[str]]) -> None:
    data, changed = case
    raw = json.dumps(data).encode()
    record = LeaseRecord.from_bytes(raw, "tree", KEY, 7)
    check_record(record, raw)
    assert record.invalid is not None, f"accepted {changed}: {[data[c] for c in changed]}"


def test_an_estimate_beyond_a_day_is_clamped_not_passed_on() -> None:
    """Issue 42, item 9: a planted lease record's ETA (2,749,999 h) or a run record's was passed on as it was."""
    raw = json.dumps(dict(valid_record(), eta_s=9.9e9)).encode()
    assert LeaseRecord.from_bytes(raw, "tree", KEY, 7).eta_s == MAX_ETA_S == 86400.0
    record = RunRecord.from_json(dict(VALID_RECORD, eta_s=1e12))
    assert record is not None and record.eta_s == MAX_ETA_S


@MEANING
@given(stage=st.none() | BAD_STAGES | st.sampled_from([s.value for s in Stage]), code=CODES)
def test_a_waiter_ends_only_with_the_code_of_the_build_step_a_record_names(stage: Optional[str], code: int) -> None:
    """A failure record of any stage and any code: a waiter believes it only when it is a build step's (llvm
    4, build 5, verify 6) with that step's code, and ends with that code; anything else is an unknown holder."""
    data = dict(valid_record(), state=FAILED, ended=time.time(), failures_before=1,
                failure={"stage": stage, "exit_code": code, "reason": "r"})
    seen = believed(LeaseRecord.from_bytes(json.dumps(data).encode(), "tree", KEY, 7))
    if seen.invalid is None:
        assert (stage, code) in (("llvm", 4), ("build", 5), ("verify", 6))
        assert int(give_up(seen, "x").code) == code
    else:
        assert int(give_up(seen, "x").code) == int(ExitCode.LOCK)


def test_a_name_with_a_line_break_after_a_generation_is_none(tmp_path: "os.PathLike[str]") -> None:
    """``$`` matches before a final line break: "0000000001.json\\n" was generation 1 (whose own name stays
    free); a store's names are checked to their end."""
    store = FolderStore(str(tmp_path))
    folder = os.path.join(str(tmp_path), "leases", "tree", KEY)
    os.makedirs(folder)
    with open(os.path.join(folder, "0000000001.json\n"), "w") as handle:
        handle.write("{}")
    assert Leases(store, 60.0).generations("tree", KEY) == []


def test_a_variant_named_with_a_line_break_is_not_read(tmp_path: "os.PathLike[str]") -> None:
    """A signer's name is a key name to its end: "k1\\n" would name a signer in a message with a line break."""
    store = FolderStore(str(tmp_path))
    folder = os.path.join(str(tmp_path), "entries", "tree", TREE_KEY + ".by")
    os.makedirs(folder)
    for name in ("k1\n", "k2"):
        with open(os.path.join(folder, name + ".json"), "w") as handle:
            json.dump(valid_manifest(), handle)
    found = Cache(store).variants("tree", TREE_KEY)
    assert [entry.variant for entry in found] == ["k2"]


# -- the ETA history -------------------------------------------------------------------------------------------------
@MEANING
@given(history=st.dictionaries(st.sampled_from(["source", "release", "cache", "unknown-route", ""]),
                               st.dictionaries(st.sampled_from(["build", "llvm", "fetch", "unknown-step", ""]),
                                               st.lists(BAD_TIMES | st.sampled_from([0, 1.5, "3", True, None]),
                                                        max_size=4), max_size=4),
                               max_size=3),
       version=st.sampled_from([1, 2, "1", None]))
def test_the_eta_history_gives_finite_etas_whatever_it_holds(history: Dict[str, Any], version: object) -> None:
    with tempfile.TemporaryDirectory() as host:
        with open(history_file(host), "w") as handle:
            json.dump({"version": version, "routes": history}, handle)
        for plan in Plan:
            expected = read_history(host).expected(plan)
            assert all(isinstance(v, float) and 0 <= v < INF for v in expected.values())
            for step in (Stage.FETCH, Stage.LLVM, Stage.BUILD):
                eta = estimate_eta(step, 1.0, None, expected, [], plan)
                assert eta is not None and 0 <= eta < INF


# -- the GEAK folder: its first shape's JSON manifest (tool/), its VERSION now -----------------------------------------
GEAK_KEYS = st.sampled_from(["skill.md", "../skill.md", "/etc/passwd", "tool/a.py", "skill.md\0", "", ".", "tool"])
GEAK_VALUES = st.sampled_from(["sha", "", "A" * 64, "e" * 63, "e" * 64 + "\n", "right"])


@MEANING
@given(files=st.dictionaries(GEAK_KEYS, GEAK_VALUES, max_size=5), made_by=st.sampled_from([MADE_BY, "someone", 1]))
def test_a_skill_folder_is_replaced_only_when_its_manifest_names_every_file_as_it_is(
        files: Dict[str, str], made_by: object) -> None:
    """Whatever the manifest says (paths outside the folder, hashes that are none), `skill --force` replaces
    the folder only when every file in it is one the manifest lists with its sha256."""
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "skill")
        os.makedirs(os.path.join(target, "tool"))
        contents = {"skill.md": b"# skill\n", "tool/a.py": b"x = 1\n"}
        for rel, data in contents.items():
            with open(os.path.join(target, rel), "wb") as handle:
                handle.write(data)
        real = {rel: hashlib.sha256(data).hexdigest() for rel, data in contents.items()}
        listed = {k: (real.get(k, "e" * 64) if v == "right" else v) for k, v in files.items()}
        with open(os.path.join(target, MANIFEST), "w") as handle:
            json.dump({"made_by": made_by, "files": listed}, handle)
        allowed = refusal(target, force=True) is None
        # A manifest with a value that is no sha256 (64 lower-case hex digits, to the end) is none of ours.
        ours = made_by == MADE_BY and all(len(v) == 64 and set(v) <= set("0123456789abcdef") for v in listed.values())
        assert allowed == (ours and all(listed.get(rel) == sha for rel, sha in real.items())), listed


VERSION_LINES = st.sampled_from([
    "sha256: {skill.md}  skill.md", "sha256: {ensure_flydsl.sh}  ensure_flydsl.sh",
    "sha256: {ensure_flydsl.pyz}  ensure_flydsl.pyz", "sha256: {ensure_flydsl.pyz}  ../ensure_flydsl.pyz",
    "sha256: " + "e" * 64 + "  skill.md", "sha256: " + "E" * 64 + "  ensure_flydsl.sh", "sha256: {skill.md}",
    "sha256:  skill.md", VERSION_MADE_BY, "made by someone", "commit: x", "ensure-flydsl 0.1.0"])


@MEANING
@given(lines=st.lists(VERSION_LINES, max_size=8), first=st.sampled_from(["ensure-flydsl 0.1.0", "something 1"]))
def test_a_skill_folder_is_replaced_only_when_its_version_hashes_every_file_as_it_is(
        lines: List[str], first: str) -> None:
    """Whatever VERSION says, `skill --force` replaces the folder only when VERSION is this command's and names
    each of its three files with the sha256 it has."""
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "skill")
        os.makedirs(target)
        contents = {"skill.md": b"# skill\n", "ensure_flydsl.sh": b"#!/bin/sh\n", "ensure_flydsl.pyz": b"PK"}
        for rel, data in contents.items():
            with open(os.path.join(target, rel), "wb") as handle:
                handle.write(data)
        real = {rel: hashlib.sha256(data).hexdigest() for rel, data in contents.items()}
        text = "\n".join([first, *lines]) + "\n"
        for rel, sha in real.items():
            text = text.replace("{" + rel + "}", sha)
        with open(os.path.join(target, "VERSION"), "w") as handle:
            handle.write(text)
        named = {}
        for words in (line.split() for line in text.splitlines() if line.startswith("sha256: ")):
            if len(words) == 3 and len(words[1]) == 64 and set(words[1]) <= set("0123456789abcdef"):
                named[words[2]] = words[1]
        ours = first.startswith("ensure-flydsl ") and VERSION_MADE_BY in text.splitlines() and named == real
        assert (refusal(target, force=True) is None) == ours, text


# -- what status and wait answer from planted records ------------------------------------------------------------------
STATES_ANY = st.sampled_from(list(STATES)) | BAD_STATES


@SLOW
@given(state=STATES_ANY, code=CODES, marker_code=CODES, percent=st.sampled_from([50.0, 150.0, NAN]),
       finished=st.sampled_from([2.0, 1e300, -5.0, NAN]))
def test_status_and_wait_never_answer_success_or_running_from_planted_records(
        state: str, code: int, marker_code: int, percent: float, finished: float) -> None:
    """No env file, no live run: whatever the run record and the failure marker hold, `wait --timeout 0`
    never exits 0 or 75, and a failure it passes on is one a failed run records."""
    with empty_cwd() as cwd:
        root = os.path.join(cwd, "base", "FlyDSL")
        environ = {"FLYDSL_ROOT": root, "FLYDSL_PYTHON": "/usr/bin/python3"}
        current = load_settings({}, environ)
        runs = os.path.join(cwd, "base", ".ensure_flydsl", "runs", "FlyDSL")
        os.makedirs(runs)
        record = dict(VALID_RECORD, request=current.request().to_json(), root=root, state=state, percent=percent,
                      finished=finished, failure={"stage": "build", "exit_code": code, "reason": "planted"})
        marker = {"stage": "build", "exit_code": marker_code, "reason": "planted",
                  "request": current.request().to_json(), "run_id": "x"}
        for path, value in ((os.path.join(runs, "20261201-004914-9a2ede.json"), record), (current.fail_marker, marker)):
            with open(path, "w") as handle:
                json.dump(value, handle)
        with environment(environ):
            answered = cli("wait", "--timeout", "0")
            assert answered not in (0, 75)
            assert answered == 1 or answered in FAILURE_CODES
            assert cli("status", "--json") == 0

