"""Issue 18, point F: one result shape for success and failure, for every command that prints JSON, valid
against docs/schema/ (and GEAK's gate schema, a subset); under --json stderr carries JSON events only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers.result_schema import SCHEMAS, json_lines, validate
from tests.helpers.scenario import start, status
from tests.helpers.workspace import Workspace

COMMON = ("schema_version", "ok", "exit_code", "stage", "built", "how", "env_file", "version", "reason", "hint",
          "log", "run_id", "elapsed_s")


def test_the_schemas_hold_the_common_keys_and_geak_is_a_subset() -> None:
    # GEAK's string keys are left out rather than null: required are the others.
    optional = ("env_file", "version", "reason")
    assert tuple(SCHEMAS["result"]["required"]) == tuple(k for k in COMMON if k not in optional)  # type: ignore[arg-type]
    assert all(SCHEMAS["result"]["properties"][k]["type"] == "string" for k in optional)  # type: ignore[index]
    assert SCHEMAS["geak_gate"]["required"] == ["ok"]
    assert set(SCHEMAS["geak_gate"]["properties"]) <= set(COMMON)  # type: ignore[arg-type]


def test_ensure_json_success_failure_and_status_keep_one_shape(ws: Workspace) -> None:
    # absent, before anything
    absent = validate(status(ws), "status")
    assert absent["state"] == "absent" and absent["exit_code"] == 1 and absent["ok"] is False and absent["hint"]
    # a failure: the same keys, ok false, and stderr JSON events only (no text block)
    out = ws.run("--json", FIXTURE_BUILD_FAIL="1")
    assert out.returncode == 5
    failed = validate(json.loads(out.stdout), "ensure")
    assert failed["ok"] is False and failed["stage"] == "build" and failed["built"] is False
    events = json_lines(out.stderr)
    assert events[-1]["event"] == "failed" and events[-1]["reason"] == failed["reason"]
    shown = validate(status(ws), "status")
    assert shown["state"] == "failed" and shown["exit_code"] == 5 and shown["hint"] == failed["hint"]
    assert shown["run_id"] == failed["run_id"] and isinstance(shown["elapsed_s"], float)
    waited = ws.run("wait", "--timeout", "0")
    assert waited.returncode == 5 and f"next: {failed['hint']}" in waited.stdout  # the hint, in wait's output
    # a success: built, and status keeps its run id and time
    out = ws.run("--json")
    assert out.returncode == 0, out.stderr
    done = validate(json.loads(out.stdout), "ensure")
    assert done["ok"] is True and done["exit_code"] == 0 and done["built"] is True and done["how"] == "built"
    assert done["env_file"] == ws.env_file and done["version"] == "0.2.2" and done["log"] == ws.log
    json_lines(out.stderr)
    after = validate(status(ws), "status")
    assert after["state"] == "succeeded" and after["ok"] is True and after["built"] is True
    assert after["run_id"] == done["run_id"] and isinstance(after["elapsed_s"], float)
    # warm: not built
    warm = validate(json.loads(ws.run("--json").stdout), "ensure")
    assert warm["action"] == "warm" and warm["built"] is False and warm["ok"] is True
    # bad input under --json: the same shape, exit 64, stderr JSON only
    bad = ws.run("--json", FLYDSL_JOBS="many")
    assert bad.returncode == 64
    refused = validate(json.loads(bad.stdout), "ensure")
    assert refused["stage"] == "settings" and "FLYDSL_JOBS" in str(refused["reason"])
    assert json_lines(bad.stderr)[-1]["event"] == "failed"


def test_start_wait_env_verify_clean_and_the_api(ws: Workspace) -> None:
    started = validate(start(ws, FIXTURE_BUILD_SLEEP="0.5"), "start")
    assert started["state"] == "running" and started["ok"] is True and started["exit_code"] == 0
    assert started["joined"] is False and "env_file" not in started and "version" not in started
    running = validate(status(ws), "status")
    assert running["state"] == "running" and running["exit_code"] == 75 and running["hint"]
    out = ws.run("wait", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    waited = validate(json.loads(out.stdout), "status")
    assert waited["state"] == "succeeded" and waited["run_id"] == started["run_id"] and waited["built"] is True
    assert {e["event"] for e in json_lines(out.stderr)} <= {"message", "heartbeat"}
    env = validate(json.loads(ws.run("env", "--json").stdout), "env")
    assert env["ok"] is True and env["env"]["FLYDSL_ROOT"] == ws.root  # type: ignore[index]
    other = ws.run("env", "--json", FLYDSL_MIN_VERSION="0.2.3")
    unanswered = validate(json.loads(other.stdout), "env")
    assert other.returncode == 1 and unanswered["ok"] is False and unanswered["installed"]["version"] == "0.2.2"
    verified = validate(json.loads(ws.run("verify", "--json").stdout), "verify")
    assert verified["ok"] is True and verified["tree"] == ws.root
    not_usable = validate(json.loads(ws.run("verify", "--json", FLYDSL_MIN_VERSION="0.2.3").stdout), "verify")
    assert not_usable["ok"] is False and not_usable["exit_code"] == 1  # the env file does not answer it
    api = subprocess.run([sys.executable, "-c", "import ensure_flydsl, json; "
                          "print(json.dumps(ensure_flydsl.ensure().to_json()))"],
                         env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert api.returncode == 0, api.stderr
    result = validate(json.loads(api.stdout), "ensure")
    assert result["ok"] is True and result["action"] == "warm"
    out = ws.run("clean", "--json")
    assert out.returncode == 0, out.stderr
    cleaned = validate(json.loads(out.stdout), "clean")
    assert cleaned["ok"] is True and ws.root in cleaned["removed"]  # type: ignore[operator]
    assert not os.path.exists(ws.root)
    json_lines(out.stderr)
