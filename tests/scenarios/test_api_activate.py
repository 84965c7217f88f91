"""The Python API's activate() and the env file, applied more than once: nothing grows, nothing mixes.

The API tests run in a fresh process of the real interpreter per scenario (activate() changes the process);
the env file is sourced by real bash and dash.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Dict, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensure_flydsl.runs.markers import EnvFile
from tests.helpers.flydsl_fixture import make_installed_tree
from tests.helpers.run_folders import for_the_run
from tests.helpers.workspace import Workspace, other_python

SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]


def test_both_shells_are_here() -> None:
    assert SHELLS == ["bash", "dash"], "install dash (apt-get install -y dash): the env file must work in it"


# -- the env file, sourced twice -----------------------------------------------------------------------------
SOURCE_TWICE = r"""
PYTHONPATH="$CALLER"; export PYTHONPATH
[ -n "$UNSET" ] && unset PYTHONPATH
. "$1" && . "$1" && printf '%s\0' "$PYTHONPATH"
"""
CANARY_DIR = for_the_run(tempfile.mkdtemp(prefix="ensure-flydsl-canary-"))
CANARY = os.path.join(CANARY_DIR, "CANARY")
# No ":" (it separates PYTHONPATH entries: no folder with one can be on it) and no NUL (no path has one).
PIECES = ["'", '"', "$", "\\", "`", "\n", " ", ";", "&", "|", "*", "?", "~", "#", "!", "{", "}", "(", ")", "[",
          "]", "-", "%", f"$(touch {CANARY})", f"`touch {CANARY}`", f"'; touch {CANARY}; '", "$((1+1))",
          "${PYTHONPATH}", "ü", "日本語", "\x01", "\u0101", "\U0001f600"]
FOLDER = st.lists(
    st.one_of(st.sampled_from(PIECES),
              st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00:"),
                      max_size=6)),
    min_size=1, max_size=6,
).map(lambda parts: "/" + "".join(parts))


def source_twice(shell: str, env_file: str, caller: Optional[str], cwd: str) -> str:
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "CALLER": caller or "", "UNSET": "" if caller else "1"}
    out = subprocess.run([shell, "-c", SOURCE_TWICE, shell, env_file], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, check=False)
    assert out.returncode == 0 and out.stderr == b"", (shell, out.stderr)
    return out.stdout.decode("utf-8").split("\0")[0]


def expected_pythonpath(prepend: List[str], caller: Optional[str]) -> str:
    kept = [e for e in (caller.split(":") if caller else []) if e not in prepend]
    rest = ":".join(kept)
    return ":".join(prepend) + (":" + rest if rest else "")


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("caller", [None, "", "/a", "/a:/b c", "/a:ROOT:/b:ROOT/build-fly/python_packages:/c",
                                    "ROOT", "/a::/b", "/a:", ":/a"])
def test_sourcing_the_env_file_twice_gives_each_folder_once(tmp_path: "os.PathLike[str]", shell: str,
                                                            caller: Optional[str]) -> None:
    root = os.path.join(str(tmp_path), "my root's $(touch x) `y`\nz")
    prepend = [os.path.join(root, "build-fly", "python_packages"), root]
    caller = None if caller is None else caller.replace("ROOT", root)
    env_file = os.path.join(str(tmp_path), "flydsl_env.sh")
    with open(env_file, "w") as handle:
        handle.write(EnvFile(root, tuple(prepend), None, True).text())
    cwd = os.path.join(str(tmp_path), "cwd")
    os.makedirs(cwd)
    got = source_twice(shell, env_file, caller, cwd)
    assert got == expected_pythonpath(prepend, caller)
    # The caller's entries kept, in their order; the tree's folders first, once.
    assert got.split(":")[:2] == prepend and all(got.split(":").count(p) == 1 for p in prepend)
    # What the Python API says the env file gives is what sourcing it gives.
    assert EnvFile(root, tuple(prepend), None, True).mapping(caller)["PYTHONPATH"] == got
    assert os.listdir(cwd) == []



@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("caller", [None, "", "/a", "/a:/b"])
def test_a_tree_on_the_interpreters_own_path_leaves_the_callers_pythonpath_as_it_was(
        tmp_path: "os.PathLike[str]", shell: str, caller: Optional[str]) -> None:
    """A tree reused from the interpreter's site folder puts no folder first: sourcing the env file must not turn
    the caller's ``/a`` into ``:/a``, whose empty entry puts the working folder on sys.path."""
    env_file = os.path.join(str(tmp_path), "flydsl_env.sh")
    with open(env_file, "w") as handle:
        handle.write(EnvFile("/root", (), None, True).text())
    got = source_twice(shell, env_file, caller, str(tmp_path))
    assert got == (caller or "") == EnvFile("/root", (), None, True).mapping(caller)["PYTHONPATH"]

def test_sourcing_twice_is_idempotent_for_arbitrary_paths(tmp_path: "os.PathLike[str]") -> None:
    cwd = os.path.join(str(tmp_path), "cwd")
    os.makedirs(cwd)
    env_file = os.path.join(str(tmp_path), "flydsl_env.sh")
    ran = {"examples": 0}

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(FOLDER, st.lists(st.one_of(FOLDER, st.just("ROOT"), st.just("PKG"), st.just("")), max_size=5))
    def check(root: str, caller_parts: List[str]) -> None:
        prepend = [root + "/build-fly/python_packages", root]
        caller = ":".join({"ROOT": root, "PKG": prepend[0]}.get(p, p) for p in caller_parts)
        with open(env_file, "w", encoding="utf-8") as handle:
            handle.write(EnvFile(root, tuple(prepend), root + "/shim", False).text())
        for shell in SHELLS:
            assert source_twice(shell, env_file, caller, cwd) == expected_pythonpath(prepend, caller), shell
        mapping = EnvFile(root, tuple(prepend), None, False).mapping(caller)
        assert mapping["PYTHONPATH"] == expected_pythonpath(prepend, caller)
        assert not os.path.exists(CANARY) and os.listdir(cwd) == [], "sourcing ran code from a path"
        ran["examples"] += 1

    check()
    assert ran["examples"] >= 40


# -- the Python API in a fresh process -----------------------------------------------------------------------
PRELUDE = r"""
import json, os, sys
import ensure_flydsl
from ensure_flydsl import EnsureError, ExitCode

def state():
    return {"sys_path": list(sys.path), "PYTHONPATH": os.environ.get("PYTHONPATH")}
"""


def api(ws: Workspace, code: str, **env: str) -> Dict[str, object]:
    full = dict(ws.env)
    full.update(env)
    out = subprocess.run([sys.executable, "-c", PRELUDE + code], env=full, cwd="/", stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def test_repeated_ensure_and_activate_neither_grow_nor_miss_the_warm_answer(ws: Workspace) -> None:
    data = api(ws, r"""
first = ensure_flydsl.ensure()
ensure_flydsl.activate(first)
after_one = state()
second = ensure_flydsl.ensure()
ensure_flydsl.activate(second)
ensure_flydsl.activate(second)
after_two = state()
third = ensure_flydsl.ensure()
ensure_flydsl.activate(third)
import flydsl, kernels.moe_gemm_2stage as k
print(json.dumps({"actions": [first.action, second.action, third.action], "prepend": first.prepend,
                  "one": after_one, "two": after_two, "three": state(),
                  "files": [flydsl.__file__, k.__file__]}))
""", PYTHONPATH="/caller/a:/caller/b")
    prepend = data["prepend"]
    assert isinstance(prepend, list) and prepend
    assert data["actions"][1:] == ["warm", "warm"], data["actions"]  # type: ignore[index]
    one = data["one"]
    assert isinstance(one, dict)
    assert one["PYTHONPATH"] == ":".join(prepend + ["/caller/a", "/caller/b"])
    assert one["sys_path"][:len(prepend)] == prepend
    assert data["two"] == one and data["three"] == one  # nothing grows
    assert all(one["sys_path"].count(p) == 1 for p in prepend)
    files = data["files"]
    assert isinstance(files, list)
    assert all(f.startswith(ws.root + os.sep) for f in files), files


def test_activate_moves_the_tree_first_once_when_its_folders_are_already_on_the_path(ws: Workspace) -> None:
    data = api(ws, r"""
result = ensure_flydsl.ensure()
sys.path.append(result.prepend[-1])
sys.path.append(result.prepend[0])
ensure_flydsl.activate(result)
print(json.dumps({"prepend": result.prepend, "after": state()}))
""")
    prepend, after = data["prepend"], data["after"]
    assert isinstance(prepend, list) and isinstance(after, dict)
    assert after["sys_path"][:len(prepend)] == prepend
    assert all(after["sys_path"].count(p) == 1 for p in prepend)
    assert after["PYTHONPATH"] == ":".join(prepend)


def test_activate_after_another_flydsl_was_imported_raises_naming_both(ws: Workspace,
                                                                      tmp_path: "os.PathLike[str]") -> None:
    other = os.path.join(str(tmp_path), "elsewhere")
    make_installed_tree(other, "0.1.9")
    data = api(ws, r"""
result = ensure_flydsl.ensure()
sys.path.insert(0, OTHER)
import flydsl
before = state()
try:
    ensure_flydsl.activate(result)
except EnsureError as exc:
    print(json.dumps({"code": int(exc.code), "message": str(exc), "imported": flydsl.__file__,
                      "tree_file": result.files["flydsl"], "unchanged": state() == before,
                      "type": type(exc).__name__}))
else:
    print(json.dumps({"code": None}))
""".replace("OTHER", repr(other)))
    assert data["code"] == 6, data
    message = str(data["message"])
    assert str(data["imported"]).startswith(other + os.sep)
    assert f"flydsl is already imported from {data['imported']}" in message
    assert str(data["tree_file"]) in message and "fresh process" in message
    assert data["unchanged"] is True  # nothing half-applied


def test_activating_the_same_result_after_importing_from_its_tree_is_fine(ws: Workspace) -> None:
    data = api(ws, r"""
result = ensure_flydsl.ensure()
ensure_flydsl.activate(result)
import flydsl, kernels.moe_gemm_2stage
ensure_flydsl.activate(result)
again = ensure_flydsl.ensure()
ensure_flydsl.activate(again)
print(json.dumps({"file": flydsl.__file__, "action": again.action}))
""")
    assert str(data["file"]).startswith(ws.root + os.sep) and data["action"] == "warm"


def test_activate_after_an_import_that_missed_the_unbuilt_tree_imports_the_built_one(ws: Workspace) -> None:
    """The tree's folders on the path before they existed (an env file sourced before a rebuild): Python cached
    their absence, and activate() makes the import look again."""
    data = api(ws, r"""
try:
    import flydsl
except ImportError:
    pass
result = ensure_flydsl.ensure()
ensure_flydsl.activate(result)
import flydsl, kernels.moe_gemm_2stage
print(json.dumps({"file": flydsl.__file__}))
""", PYTHONPATH=f"{ws.root}/build-fly/python_packages:{ws.root}")
    assert str(data["file"]).startswith(ws.root + os.sep), data


def test_activate_refuses_a_result_made_for_another_interpreter(ws: Workspace) -> None:
    other = other_python(sys.implementation.cache_tag)
    if other is None:
        pytest.skip("needs an interpreter of another Python version")
    data = api(ws, r"""
result = ensure_flydsl.ensure(python=OTHER)
before = state()
try:
    ensure_flydsl.activate(result)
except EnsureError as exc:
    print(json.dumps({"code": int(exc.code), "message": str(exc), "hint": exc.hint, "unchanged": state() == before,
                      "abi": result.abi}))
else:
    print(json.dumps({"code": None}))
""".replace("OTHER", repr(other)))
    assert data["code"] == 6 and data["unchanged"] is True, data
    here = f"{sys.implementation.cache_tag}/{sysconfig.get_config_var('SOABI') or 'none'}/{sysconfig.get_platform()}"
    assert data["message"] == f"the tree was made for {other} ({data['abi']}), not for {sys.executable} ({here})"
    assert "python=sys.executable" in str(data["hint"])
