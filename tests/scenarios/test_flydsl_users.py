"""Other FlyDSL users in the interpreter (issue 41, item 8): aiter's ``aiter.ops.flydsl`` refuses a flydsl below
its floor (0.3.2 today), and one process loads one flydsl: a process that sources the env file (the pin's 0.2.2
first) loses aiter's FlyDSL kernels.  The run still succeeds (the pin is what was asked for) and says so; the
warm call, ``verify``, ``doctor`` and ``--json`` (``conflicts``) say the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.geak import bare_venv
from tests.helpers.result_schema import validate
from tests.helpers.workspace import Workspace

# aiter/ops/flydsl/__init__.py's check as aiter writes it (without packaging, which a bare venv lacks).
AITER_FLYDSL = '''
_MIN_FLYDSL_VERSION = "{floor}"
import flydsl as _flydsl

installed_flydsl_version = getattr(_flydsl, "__version__", None)
_base = tuple(int(p) for p in installed_flydsl_version.split("+")[0].split("."))
if _base < tuple(int(p) for p in _MIN_FLYDSL_VERSION.split(".")):
    raise ImportError(
        "Unsupported `flydsl` version: "
        f"expected >=`{{_MIN_FLYDSL_VERSION}}`, "
        f"got `{{installed_flydsl_version}}`."
    )
'''
ERROR = "ImportError: Unsupported `flydsl` version: expected >=`0.3.2`, got `0.2.2`."


def python_with_aiter(ws: Workspace, floor: str) -> str:
    """A venv whose site-packages hold an aiter with ``floor`` (its own interpreter: FLYDSL_PYTHON)."""
    python = bare_venv(sys.executable, os.path.join(os.path.dirname(ws.base), "venv"))
    site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip()
    package = os.path.join(site, "aiter", "ops", "flydsl")
    os.makedirs(package)
    for folder in ("aiter", os.path.join("aiter", "ops")):
        open(os.path.join(site, folder, "__init__.py"), "w").close()
    with open(os.path.join(package, "__init__.py"), "w") as handle:
        handle.write(AITER_FLYDSL.format(floor=floor))
    return python


def test_a_user_with_a_higher_floor_is_named_by_every_command(ws: Workspace) -> None:
    python = python_with_aiter(ws, "0.3.2")
    cold = ws.run("--json", FLYDSL_PYTHON=python)
    assert cold.returncode == 0, cold.stderr  # the pin is what was asked for: the run succeeds
    result = validate(json.loads(cold.stdout), "ensure")
    assert result["conflicts"] == [{"module": "aiter.ops.flydsl", "error": ERROR, "floor": "0.3.2"}]
    warning = ("warning: aiter.ops.flydsl fails to import with this tree first (flydsl 0.2.2) (it needs flydsl >= "
               f"0.3.2): {ERROR}; one process loads one flydsl: a process that needs aiter.ops.flydsl needs its own "
               "PYTHONPATH, without this env file (docs/GEAK.md)")
    assert warning in cold.stderr
    warm = ws.run(FLYDSL_PYTHON=python)
    assert warm.returncode == 0 and "nothing changed since the last success" in warm.stdout, warm.stdout
    assert [line.split("ensure-flydsl: ", 1)[1] for line in warm.stdout.splitlines() if "warning:" in line] == [
        warning]
    door = ws.run(FLYDSL_PYTHON=python)  # the front door's answer: the lines the command line's warm answer said
    said = [[line.split("] ", 1)[1] for line in out.stdout.splitlines()] for out in (warm, door)]
    assert said[0] == said[1] and said[0][-1].startswith("ensure-flydsl: ready: flydsl 0.2.2"), said
    assert json.loads(ws.run("--json", FLYDSL_PYTHON=python).stdout)["conflicts"] == result["conflicts"]
    verified = ws.run("verify", "--json", FLYDSL_PYTHON=python)
    assert verified.returncode == 0 and validate(json.loads(verified.stdout), "verify")["conflicts"] == \
        result["conflicts"]
    assert warning in ws.run("verify", FLYDSL_PYTHON=python).stdout
    doctor = json.loads(ws.run("doctor", "--json", FLYDSL_PYTHON=python).stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "flydsl-users")
    assert check["status"] == "wrong" and not check["blocking"] and ERROR in check["detail"], check
    assert "(it needs >= 0.3.2)" in check["detail"] and "own PYTHONPATH" in check["remedy"]


@pytest.mark.parametrize("floor", ["0.2.0", None])
def test_a_user_the_tree_satisfies_or_none_is_not_named(ws: Workspace, floor: str) -> None:
    python = python_with_aiter(ws, floor) if floor else bare_venv(sys.executable,
                                                                  os.path.join(os.path.dirname(ws.base), "venv"))
    cold = ws.run("--json", FLYDSL_PYTHON=python)
    assert cold.returncode == 0, cold.stderr
    assert json.loads(cold.stdout)["conflicts"] == [] and "warning:" not in cold.stderr
    doctor = json.loads(ws.run("doctor", "--json", FLYDSL_PYTHON=python).stdout)
    assert next(c for c in doctor["checks"] if c["name"] == "flydsl-users")["status"] == "ok"
