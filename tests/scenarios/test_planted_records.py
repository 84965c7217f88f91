"""Records read for their meaning, end to end (issue 26, item 12): a record of the tool's own kind whose fields
have the right types but values no run of the tool writes (an exit code no failure has, a `how` outside the
enumeration, a relative interpreter, a commit that is no object name) is refused by its reader, so the
commands that read it never steer by it: `status` and `wait` never answer 0 or 75 from a planted failure, a
stamp does not crash the decision (exit 70), `cache list` takes any manifest.

The unit properties behind these are in tests/unit/test_readers_meaning.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Dict

import pytest

from ensure_flydsl.trees.manifest import cache_key
from tests.helpers.scenario import ensure_json, status
from tests.helpers.workspace import Workspace


def request_of(ws: Workspace) -> Dict[str, object]:
    """The request the workspace's settings make (from the tool's own JSON answer)."""
    out = ws.run("ensure", "--json")
    assert out.returncode == 0, out.stderr
    twin = ws.env_twin()
    request = twin["request"]
    assert isinstance(request, dict)
    return request


def plant_marker(ws: Workspace, request: Dict[str, object], code: object) -> None:
    """The failure marker, for the request, as the only word on it (the env file and the run records gone)."""
    os.unlink(ws.env_file)
    shutil.rmtree(os.path.join(ws.base, ".ensure_flydsl", "runs"))
    with open(ws.fail_marker, "w") as handle:
        json.dump({"stage": "build", "exit_code": code, "reason": "planted", "hint": "", "log": None,
                   "log_tail": [], "run_id": "planted", "request": request}, handle)


@pytest.mark.parametrize("code", [75, 1, 255, 200, 69])
def test_a_failure_marker_with_an_exit_code_no_failure_has_is_not_answered(ws: Workspace, code: int) -> None:
    """A failure marker names this request with exit code 75 ("still running": an agent following the
    README would `wait` for ever), 1 ("absent") or any code the tool never gives: not a failure."""
    request = request_of(ws)
    plant_marker(ws, request, code)
    out = ws.run("wait", "--timeout", "0")
    assert out.returncode == 1, out.stdout + out.stderr  # absent: nothing was started for it
    assert status(ws)["state"] == "absent"


@pytest.mark.parametrize("code", [5, 9, 70, 130])
def test_a_failure_marker_with_a_code_a_run_records_is_answered(ws: Workspace, code: int) -> None:
    """What a failed run does write (a build's 5, a dead worker's 9, a bug's 70, an interrupt's 130) is told."""
    request = request_of(ws)
    plant_marker(ws, request, code)
    out = ws.run("wait", "--timeout", "0")
    assert out.returncode == code, out.stdout + out.stderr
    assert status(ws)["state"] == "failed"


@pytest.mark.parametrize("code", [75, 1, 254])
def test_a_run_record_failed_with_an_exit_code_no_failure_has_is_no_run(ws: Workspace, code: int) -> None:
    """The run record of a failure with exit code 75 would send `wait`'s caller back to wait for ever."""
    request = request_of(ws)
    plant_marker(ws, request, 5)
    os.unlink(ws.fail_marker)
    runs = os.path.join(ws.base, ".ensure_flydsl", "runs", "FlyDSL")
    os.makedirs(runs)
    record = {"run_id": "20260101-000000-abcdef", "root": ws.root, "request": request, "kind": "blocking",
              "state": "failed", "started": 1.0, "finished": 2.0, "steps": [], "log": "", "fail_marker": "",
              "host": "h", "locked": True, "failure": {"stage": "build", "exit_code": code, "reason": "planted"}}
    with open(os.path.join(runs, "20260101-000000-abcdef.json"), "w") as handle:
        json.dump(record, handle)
    out = ws.run("wait", "--timeout", "0")
    assert out.returncode == 1, out.stdout + out.stderr
    assert status(ws)["state"] == "absent"


def test_a_tree_stamp_with_an_unknown_how_is_no_finished_tree(ws: Workspace) -> None:
    """`how` outside the enumeration: the stamp is not one (the tree is rebuilt), never exit 70."""
    first = ensure_json(ws)
    assert first["how"] == "built"
    stamp = os.path.join(ws.root, ".ensure_flydsl", "stamps", "tree.json")
    with open(stamp) as handle:
        data = json.load(handle)
    data["how"] = "stolen"
    with open(stamp, "w") as handle:
        json.dump(data, handle)
    out = ws.run("ensure", "--verify")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    with open(stamp) as handle:
        assert json.load(handle)["how"] == "built"


@pytest.mark.parametrize("field, value", [("python", "bin/python3"), ("commit", "v0.2.2"), ("tree", "FlyDSL"),
                                          ("pythonpath_prepend", ["build-fly/python_packages"]),
                                          ("elapsed_s", -5.0)])
def test_an_env_twin_with_a_meaningless_field_answers_nothing(ws: Workspace, field: str, value: object) -> None:
    """The tool writes absolute paths, a commit's object name and durations >= 0; a twin with anything else is
    not its own, so `status` and `wait` do not call the request succeeded from it."""
    ensure_json(ws)
    twin = ws.env_twin()
    twin[field] = value
    with open(ws.env_json, "w") as handle:
        json.dump(twin, handle)
    if field == "elapsed_s":
        assert status(ws)["state"] == "succeeded"  # a field of a later version: read as not recorded
        assert status(ws)["elapsed_s"] is None or status(ws)["elapsed_s"] >= 0  # type: ignore[operator]
        return
    assert status(ws)["state"] != "succeeded"
    assert ws.run("wait", "--timeout", "0").returncode != 0


def test_cache_list_takes_a_manifest_of_any_creation_time(tmp_path: "os.PathLike[str]") -> None:
    """`created` NaN or past year 9999 (Python's json reads both) once ended `cache list` with exit 70."""
    cache = os.path.join(str(tmp_path), "cache")
    fields = {"repo": "example.org/FlyDSL", "commit": "0" * 40}
    key = cache_key("tree", fields)
    os.makedirs(os.path.join(cache, "entries", "tree"))
    for created in ("NaN", "1e300", "-1", "true"):
        text = (f'{{"format": 1, "kind": "tree", "key": "{key}", "fields": {json.dumps(fields)}, "blob": "{"c" * 64}", '
                f'"size": 10, "created": {created}, "host": "h", "tool": "t", "members": []}}')
        with open(os.path.join(cache, "entries", "tree", key + ".json"), "w") as handle:
            handle.write(text)
        for args in (["cache", "list", "--cache", cache], ["cache", "list", "--json", "--cache", cache]):
            out = subprocess.run([sys.executable, "-m", "ensure_flydsl", *args], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, check=False)
            assert out.returncode == 0 and "Traceback" not in out.stderr, (created, out.stderr)
            if "--json" in args:
                json.loads(out.stdout, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


def test_cache_list_shows_a_planted_escape_sequence_escaped(tmp_path: "os.PathLike[str]") -> None:
    """A shared cache's fields are anybody's text: `cache list` shows an escape sequence in one, never sends it to
    the terminal (before, only `store list` escaped what it printed)."""
    cache = os.path.join(str(tmp_path), "cache")
    fields = {"repo": "example.org/FlyDSL", "commit": "\x1b]0;owned\x07\x1b[2J"}
    key = cache_key("tree", fields)
    os.makedirs(os.path.join(cache, "entries", "tree"))
    text = (f'{{"format": 1, "kind": "tree", "key": "{key}", "fields": {json.dumps(fields)}, "blob": "{"c" * 64}", '
            f'"size": 10, "created": 1, "host": "h", "tool": "t", "members": []}}')
    with open(os.path.join(cache, "entries", "tree", key + ".json"), "w") as handle:
        handle.write(text)
    out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "cache", "list", "--cache", cache],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout + out.stderr
    assert "commit=\\x1b]0;owned\\x07\\x1b[2J" in out.stdout, out.stdout
