"""Every reader of data the tool did not just write itself, fuzzed (issue 19): any input gives the documented
refusal (the reader returns None, or the record reads as "not the tool's"), never an exception that would
reach the CLI as exit 70.

Each reader gets arbitrary JSON and, to get past the first checks, its valid record with a few fields
replaced by arbitrary JSON or left out; what it returns must have the documented types.  The files are
then put where the commands read them, and the commands that read them (in this process, through the
CLI's own entry point) must answer with a documented exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import tempfile
import zipfile
from typing import Any, Dict, Iterator, List, Mapping, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensure_flydsl.cli.main import main
from ensure_flydsl.errors import EnsureError, ExitCode, Plan
from ensure_flydsl.pipeline.lock import LockHolder
from ensure_flydsl.pipeline.warm import same, try_warm
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.result import How
from ensure_flydsl.runs.markers import EnvFile, EnvTwin, Failure
from ensure_flydsl.runs.records import RunRecord
from ensure_flydsl.runs.timings import History
from ensure_flydsl.settings import Request, Settings, load_settings
from ensure_flydsl.source.root import MadeRecord, Owner, Stamp
from ensure_flydsl.warm import site_stats
from ensure_flydsl.ways.release.wheels import install_wheel_file, shape_problems
from ensure_flydsl.ways.source.environment import LlvmRecord, OverlayKey
from ensure_flydsl.ways.source.tools import EXECUTABLES, PROVIDABLE, ProvidedTool

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW_FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# No "/" and no "." in the text: a fuzzed path is then a name relative to the (empty) working folder,
# never "/" or ".", which a fingerprint would walk in full.
NAME = st.text(alphabet=st.characters(blacklist_characters="/.", blacklist_categories=("Cs",)), max_size=8)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.just(10 ** 400), st.just(-1), st.just(0),
                    st.floats(), NAME)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAME, inner, max_size=4),
                    max_leaves=10)
DELETE = object()


def mutations(valid: Mapping[str, Any]) -> st.SearchStrategy[Dict[str, Any]]:
    """``valid`` with up to three of its fields (or a new one) replaced by arbitrary JSON, or left out."""
    keys = st.sampled_from(sorted(valid) + ["unknown"])
    changes = st.lists(st.tuples(keys, st.one_of(st.just(DELETE), JSON)), max_size=3)

    def apply(pairs: List[Any]) -> Dict[str, Any]:
        data = dict(valid)
        for key, value in pairs:
            if value is DELETE:
                data.pop(key, None)
            else:
                data[key] = value
        return data

    return changes.map(apply)


def inputs(valid: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    return st.one_of(JSON, mutations(valid))


@contextlib.contextmanager
def empty_cwd() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="fuzz-cwd-")
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cli(*args: str) -> int:
    """The CLI's exit code for ``args`` in this process (its output swallowed)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(list(args))


def is_str(value: object) -> bool:
    return isinstance(value, str) and "\0" not in value


# -- the env file's twin ---------------------------------------------------------------------------------------

def valid_twin(root: str, request: Request) -> Dict[str, Any]:
    return {
        "request": request.to_json(), "how": "built", "tree": root, "version": "0.2.2", "python": "/usr/bin/python3",
        "python_version": "3.11.7", "abi": "cpython-311/x/linux", "commit": "a" * 40,
        "files": {"flydsl": root + "/build-fly/python_packages/flydsl/__init__.py"}, "watch": ["w"],
        "site_dirs": ["s"], "fingerprint": {"version": 3}, "FLYDSL_ROOT": root, "pythonpath_prepend": [root],
        "FLYDSL_SHIM_DIR": None, "VLLM_USE_FLYDSL_MOE": "1", "written_at": "", "tool_version": "0",
    }


def check_twin(twin: Optional[EnvTwin]) -> None:
    if twin is None:
        return
    assert isinstance(twin.request, Request) and twin.how in {h.value for h in How}
    for name in ("tree", "version", "python", "python_version", "abi", "FLYDSL_ROOT", "written_at", "tool_version"):
        assert isinstance(getattr(twin, name), str), name
    assert all(is_str(v) for v in twin.watch + twin.site_dirs + twin.pythonpath_prepend)
    assert all(isinstance(v, str) for v in twin.files.values()) and isinstance(twin.fingerprint, dict)
    for name in ("commit", "FLYDSL_SHIM_DIR", "VLLM_USE_FLYDSL_MOE"):
        assert getattr(twin, name) is None or is_str(getattr(twin, name)), name


@FUZZ
@given(data=st.data())
def test_env_twin_reads_any_input_as_a_twin_or_none(data: st.DataObject) -> None:
    with empty_cwd() as cwd:
        root = os.path.join(cwd, "base", "FlyDSL")
        environ = {"FLYDSL_ROOT": root, "FLYDSL_PYTHON": "/usr/bin/python3", "PATH": os.environ["PATH"]}
        current = load_settings({}, environ)
        raw = data.draw(inputs(valid_twin(root, current.request())))
        twin = EnvTwin.from_json(json.loads(json.dumps(raw)))
        check_twin(twin)
        # The warm path reads it back from the file, with an env file that matches it when it can.
        os.makedirs(root)
        with open(current.env_json, "w") as handle:
            json.dump(raw, handle)
        if twin is not None:
            with open(current.env_file, "w") as handle:
                handle.write(EnvFile(root, tuple(twin.pythonpath_prepend), None, True).text())
        result = try_warm(current, environ)
        assert result is None or result.how in set(How)


# -- run records and failure markers ------------------------------------------------------------------------------

VALID_RECORD: Dict[str, Any] = {
    "run_id": "20261201-004914-9a2ede", "root": "/r/FlyDSL", "request": Settings(root="/r/FlyDSL").request().to_json(),
    "kind": "detached",
    "pid": 4242, "pid_start": "1", "host": "h", "state": "running", "step": "build", "percent": 40.0,
    "eta_s": 12.0, "started": 1.0, "finished": None, "updated": 2.0, "steps": [{"step": "probe"}], "log": "/r/l",
    "fail_marker": "/r/m", "result": None, "failure": {"stage": "build", "exit_code": 5, "reason": "r"},
    "build_pgid": None, "build_leader_start": None, "locked": True, "waiting": None,
}
NUMBERS = ("percent", "eta_s", "started", "finished", "updated")


def finite(value: object) -> bool:
    return isinstance(value, float) and value - value == 0.0


def check_failure(failure: Optional[Failure]) -> None:
    if failure is None:
        return
    assert type(failure.exit_code) is int and 0 < failure.exit_code < 256
    assert failure.stage is None or isinstance(failure.stage, str)
    assert isinstance(failure.reason, str)


@FUZZ
@given(raw=inputs(VALID_RECORD))
def test_run_record_reads_any_input_as_a_record_or_none(raw: Any) -> None:
    record = RunRecord.from_json(json.loads(json.dumps(raw)))
    if record is None:
        return
    assert isinstance(record.run_id, str) and "/" not in record.run_id and isinstance(record.request, Request)
    for name in NUMBERS:
        value = getattr(record, name)
        assert (value is None and name != "started") or finite(value) or value == 0.0, name
    for name in ("root", "kind", "host", "state", "log", "fail_marker"):
        assert isinstance(getattr(record, name), str), name
    for name in ("pid", "build_pgid"):
        value = getattr(record, name)
        assert value is None or (type(value) is int and value > 0), name
    assert isinstance(record.locked, bool) and isinstance(record.steps, list)
    assert record.result is None or isinstance(record.result, dict)
    check_failure(record.failure)
    record.remaining_eta()


@FUZZ
@given(raw=inputs(VALID_RECORD["request"]))
def test_request_reads_any_input_as_a_request_or_none(raw: Any) -> None:
    """The request (of a twin, a run record, a failure marker): a record whose every value is one the
    settings make of it (read back, it is written again exactly), or None."""
    written = json.loads(json.dumps(raw))
    request = Request.from_json(written)
    if request is None:
        return
    assert request.to_json() == written and Request.from_json(request.to_json()) == request
    assert all(isinstance(m, str) for m in request.require) and isinstance(request.vllm_moe, bool)


@FUZZ
@given(raw=inputs(VALID_RECORD["failure"]))
def test_failure_reads_any_input_as_a_failure_or_none(raw: Any) -> None:
    check_failure(Failure.from_json(json.loads(json.dumps(raw))))


@FUZZ
@given(raw=inputs({"version": 1, "routes": {"source": {"build": [1.0, 2.0], "llvm": [3]}, "release": {}}}))
def test_history_reads_any_input_as_a_history_or_none(raw: Any) -> None:
    """The host's ETA history: every route's expected seconds are finite and >= 0, or the file is none."""
    history = History.from_json(json.loads(json.dumps(raw)))
    for plan in Plan:
        expected = (history or History()).expected(plan)
        assert set(plan.stages) <= set(expected)
        assert all(finite(v) and v >= 0 for v in expected.values())


@SLOW_FUZZ
@given(record=inputs(VALID_RECORD), marker=inputs({**VALID_RECORD["failure"], "request": {}, "run_id": "x"}))
def test_status_and_wait_answer_whatever_the_records_hold(record: Any, marker: Any) -> None:
    """The records and the failure marker, as files where the commands read them."""
    with empty_cwd() as cwd:
        root = os.path.join(cwd, "base", "FlyDSL")
        environ = {"FLYDSL_ROOT": root, "FLYDSL_PYTHON": "/usr/bin/python3"}
        current = load_settings({}, environ)
        if isinstance(record, dict) and record.get("request") == VALID_RECORD["request"]:
            record = {**record, "request": current.request().to_json(), "root": root}
        if isinstance(marker, dict) and marker.get("request") == {}:
            marker = {**marker, "request": current.request().to_json()}
        runs = os.path.join(cwd, "base", ".ensure_flydsl", "runs", "FlyDSL")
        os.makedirs(runs)
        for path, value in ((os.path.join(runs, "20261201-004914-9a2ede.json"), record),
                            (os.path.join(runs, "..json"), record), (current.fail_marker, marker)):
            with open(path, "w") as handle:
                json.dump(value, handle)
        with open(os.path.join(runs, "current"), "w") as handle:
            handle.write("20261201-004914-9a2ede\n")
        with environment(environ):
            assert cli("status") == 0
            assert cli("status", "--json") == 0
            assert cli("wait", "--timeout", "0") in (0, 1, 75) + tuple(range(2, 10))


# -- stamps, the owner record, the LLVM record, the lock's holder record ------------------------------------------

@FUZZ
@given(raw=inputs({"key": {"commit": "a"}, "time": 1.5, "how": "built", "commit": "a", "version": "0.2.2"}))
def test_stamp_reads_any_input_as_a_stamp_or_none(raw: Any) -> None:
    stamp = Stamp.from_json(json.loads(json.dumps(raw)))
    if stamp is not None:
        assert isinstance(stamp.key, dict) and (finite(stamp.time) or stamp.time == 0.0)
        assert all(v is None or isinstance(v, str) for v in (stamp.how, stamp.commit, stamp.version))


@FUZZ
@given(raw=inputs({"created_root": True, "adopted": False, "time": 2.0, "tool": "ensure-flydsl"}))
def test_owner_reads_any_input_as_an_owner_or_none(raw: Any) -> None:
    owner = Owner.from_json(json.loads(json.dumps(raw)))
    if owner is not None:
        assert isinstance(owner.created_root, bool) and isinstance(owner.adopted, bool)
        assert finite(owner.time) or owner.time == 0.0


@FUZZ
@given(raw=inputs({"created": True, "started": {"llvm": "a"}, "done": {"llvm": "a"}}))
def test_llvm_record_reads_any_input_as_a_record_or_none(raw: Any) -> None:
    record = LlvmRecord.from_json(json.loads(json.dumps(raw)))
    if record is not None:
        assert isinstance(record.created, bool)
        assert all(k is None or isinstance(k, dict) for k in (record.started, record.done))


PROVIDED = "/t/provided"
VALID_TOOL = {"version": "3.31.6", "spec": "cmake>=3.20,<4", "folder": PROVIDED + "/cmake",
              "programs": {"cmake": PROVIDED + "/cmake/cmake/data/bin/cmake"}}


@FUZZ
@given(raw=inputs(VALID_TOOL), name=st.sampled_from(PROVIDABLE + ("gcc",)))
def test_a_provided_tool_reads_any_input_as_an_entry_or_none(raw: Any, name: str) -> None:
    """An entry of provided/tools.json: a version or "unknown", the tool's spec, its own folder, its own
    programs inside it, or None."""
    entry = ProvidedTool.from_json(name, json.loads(json.dumps(raw)), PROVIDED)
    if entry is not None:
        assert entry.folder == f"{PROVIDED}/{name}" and entry.spec.startswith(name)
        assert set(entry.programs) <= set(EXECUTABLES.get(name, ()))
        assert all(os.path.normpath(p).startswith(entry.folder + "/") for p in entry.programs.values())


def test_the_valid_tool_entry_and_overlay_key_are_read() -> None:
    """The inputs above are records the tool writes: a reader that refused everything would pass the fuzz."""
    assert ProvidedTool.from_json("cmake", VALID_TOOL, PROVIDED) is not None
    assert ProvidedTool.from_json("nanobind", dict(VALID_TOOL, spec="nanobind>=2.9,<3", folder=PROVIDED + "/nanobind",
                                                   programs={}), PROVIDED) is not None
    assert OverlayKey.from_json(VALID_OVERLAY_KEY) is not None
    assert OverlayKey.from_json(dict(VALID_OVERLAY_KEY, actual=None, package=[], missing=[])) is not None


VALID_OVERLAY_KEY = {"rocm_path": "/opt/rocm", "entries": ["include", "lib"], "lib": "a" * 64, "cmake": "b" * 64,
                     "package": [["hip-config.cmake", 120, 1700000000]], "missing": ["libamdhip64.so.7"],
                     "actual": "/opt/rocm/lib/libamdhip64.so.7.2.1"}


@FUZZ
@given(raw=inputs(VALID_OVERLAY_KEY))
def test_an_overlay_key_reads_any_input_as_a_key_or_none(raw: Any) -> None:
    key = OverlayKey.from_json(json.loads(json.dumps(raw)))
    if key is not None:
        assert key.rocm_path.startswith("/") and (key.actual is None or key.actual.startswith("/"))
        assert all(n and "/" not in n for n in key.entries + key.missing)
        assert all(type(size) is int and size >= 0 and type(mtime) is int for _, size, mtime in key.package)
        assert OverlayKey.from_json(json.loads(json.dumps(dataclasses.asdict(key)))) == key


@FUZZ
@given(raw=inputs({"pid": 12, "host": "h", "started": "2026-12-01T00:00:00+00:00", "started_ts": 1.0,
                   "run_id": "r"}))
def test_lock_holder_reads_any_input_as_a_holder_or_none(raw: Any) -> None:
    holder = LockHolder.from_json(json.loads(json.dumps(raw)))
    if holder is not None:
        assert type(holder.pid) is int and holder.pid > 0
        assert isinstance(holder.host, str) and isinstance(holder.started, str) and isinstance(holder.run_id, str)
        assert finite(holder.started_ts) or holder.started_ts == 0.0


@SLOW_FUZZ
@given(stamp=inputs({"key": {"commit": "a"}, "time": 1.5}), owner=inputs({"created_root": True, "adopted": False}),
       llvm=inputs({"created": True, "started": None, "done": None}), holder=inputs({"pid": 12, "started_ts": 1.0}))
def test_the_commands_that_read_them_answer(stamp: Any, owner: Any, llvm: Any, holder: Any) -> None:
    """status and clean over a root whose records hold anything (clean only removes what it can prove)."""
    with empty_cwd() as cwd:
        base = os.path.join(cwd, "base")
        root = os.path.join(base, "FlyDSL")
        os.makedirs(os.path.join(root, ".ensure_flydsl", "stamps"))
        planted = os.path.join(root, "notes.txt")
        files = {os.path.join(root, ".ensure_flydsl", "stamps", "tree.json"): stamp,
                 os.path.join(root, ".ensure_flydsl", "stamps", "build.started.json"): stamp,
                 os.path.join(root, ".ensure_flydsl", "owner.json"): owner,
                 os.path.join(base, ".llvm-project.ensure-flydsl.json"): llvm,
                 os.path.join(base, ".flydsl_build.lock.holder"): holder}
        for path, value in files.items():
            with open(path, "w") as handle:
                json.dump(value, handle)
        with open(planted, "w") as handle:
            handle.write("mine\n")
        with environment({"FLYDSL_ROOT": root, "FLYDSL_PYTHON": "/usr/bin/python3"}):
            assert cli("status", "--json") == 0
            assert cli("clean") == 0
        assert open(planted).read() == "mine\n"


# -- what the build steps made (clean's record) ----------------------------------------------------------------------

@FUZZ
@given(raw=inputs({"version": 1, "open": False, "theirs": ["a"], "entries": {"a": [1, 2], "b": None}}))
def test_made_record_reads_any_input_as_a_record(raw: Any) -> None:
    record = MadeRecord.from_json(json.loads(json.dumps(raw)))
    assert isinstance(record.open, bool) and all(isinstance(t, str) for t in record.theirs)
    for rel, entry in record.entries.items():
        assert isinstance(rel, str) and ".." not in rel.split("/") and not rel.startswith("/")
        assert entry is None or all(type(v) is int for v in entry)


# -- a wheel's file list and its RECORD ------------------------------------------------------------------------------

ZIP_NAME = st.lists(st.sampled_from(list("ab_./\\") + ["__init__", "flydsl", ".so", ".pth", "..", "__pycache__",
                                                        "sitecustomize", "-0.2.2.dist-info"]),
                    max_size=8).map("".join)


@FUZZ
@given(names=st.lists(st.one_of(st.text(), ZIP_NAME), max_size=8),
       tracked=st.lists(st.one_of(st.text(), ZIP_NAME), max_size=4))
def test_the_shape_check_takes_any_file_list(names: List[str], tracked: List[str]) -> None:
    problems = shape_problems(names, tracked)
    assert all(isinstance(p, str) for p in problems) and len(problems) <= len(names)
    for name in names:
        top = name.split("/")[0]
        if top not in ("flydsl", "flydsl.libs") and not (top.startswith("flydsl-") and top.endswith(".dist-info")):
            assert any(p.startswith(name + " (") for p in problems), name
        if name.endswith(".pth") or "/../" in "/" + name + "/" or "__pycache__" in name.split("/"):
            assert any(p.startswith(name + " (") for p in problems), name


INTERP = Interpreter(executable="/usr/bin/python3", version="3.11.7", implementation="cpython", cache_tag="cpython-311",
                     soabi="cpython-311-x86_64-linux-gnu",
                     platform="linux-x86_64", prefix="/usr", base_prefix="/usr", site_dirs=(),
                     stdlib="/usr/lib/python3.11", include="/usr/include/python3.11")
RECORD_LINE = st.one_of(
    st.text(max_size=40),
    st.tuples(st.sampled_from(["flydsl/__init__.py", "flydsl/x.py", "flydsl-0.2.2.dist-info/RECORD", "../x", "/abs",
                               "flydsl-0.2.2.data/scripts/s", ""]),
              st.sampled_from(["", "sha256=", "sha256=AAAA", "md5=x", "sha256=" + "A" * 43]),
              st.sampled_from(["", "1", "-1", "x", "99999999999999999999999", "3"]))
    .map(lambda t: ",".join(t)),
)


WHEEL_FILES = {
    "flydsl/__init__.py": b"__version__ = '0.2.2'\n",
    "flydsl-0.2.2.dist-info/METADATA": b"Metadata-Version: 2.1\nName: flydsl\nVersion: 0.2.2\n",
    "flydsl-0.2.2.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}


def record_line(name: str, data: bytes) -> str:
    import base64
    import hashlib

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


@FUZZ
@given(lines=st.lists(RECORD_LINE, max_size=6), raw=st.binary(max_size=40),
       kind=st.sampled_from(["raw", "lines", "full"]), keep=st.lists(st.sampled_from(sorted(WHEEL_FILES)), unique=True))
def test_a_wheels_record_installs_or_is_refused_with_exit_8(lines: List[str], raw: bytes, kind: str,
                                                            keep: List[str]) -> None:
    """Arbitrary bytes, arbitrary lines, or the true lines of some files with arbitrary ones added."""
    folder = tempfile.mkdtemp(prefix="fuzz-wheel-")
    try:
        wheel = os.path.join(folder, "flydsl-0.2.2-py3-none-any.whl")
        if kind == "full":
            lines = [record_line(n, WHEEL_FILES[n]) for n in keep] + ["flydsl-0.2.2.dist-info/RECORD,,"] + lines
        record = raw if kind == "raw" else ("\n".join(lines) + "\n").encode()
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, data in WHEEL_FILES.items():
                archive.writestr(name, data)
            archive.writestr("flydsl-0.2.2.dist-info/RECORD", record)
        try:
            install_wheel_file(INTERP, wheel, "0.2.2", os.path.join(folder, "target"), lambda line: None)
        except EnsureError as exc:
            assert exc.code == ExitCode.ARTIFACT
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- .pth files and site customisation in the warm fingerprint --------------------------------------------------------

PTH_NAME = st.one_of(st.sampled_from(["easy-install.pth", "sitecustomize.py", "usercustomize.py", "sitecustomize",
                                      "a.pth", "b.pth"]),
                     NAME.filter(lambda n: bool(n) and "\0" not in n).map(lambda n: n + ".pth"))


@FUZZ
@given(files=st.lists(st.tuples(PTH_NAME, st.sampled_from(["file", "folder", "fifo", "link", "unreadable"]),
                                st.binary(max_size=60)), max_size=5))
def test_the_site_fingerprint_takes_any_pth_file(files: List[Any]) -> None:
    with empty_cwd() as site:
        for name, kind, content in files:
            path = os.path.join(site, name)
            if os.path.lexists(path):
                continue
            if kind == "folder":
                os.makedirs(os.path.join(path, "__init__.py"))
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "link":
                os.symlink(os.path.join(site, "nowhere"), path)
            else:
                with open(path, "wb") as handle:
                    handle.write(content)
                if kind == "unreadable":
                    os.chmod(path, 0)
        folders = [site, site + "/missing", "rel\0nul"]
        recorded = json.loads(json.dumps({"sites": site_stats(folders)}))  # as the twin keeps it
        assert same(recorded, {"sites": site_stats(folders)})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10 ** 400, True, "3", None])
def test_a_number_field_refuses_what_is_not_a_finite_number(value: object) -> None:
    from ensure_flydsl.support.fields import number

    assert number(value) is None
