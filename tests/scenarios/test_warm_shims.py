"""The warm path under an interpreter that is a shim (issue 26, item 3): ``python3`` on PATH is often pyenv's
shim, a script that picks the interpreter from PYENV_VERSION, a ``.python-version`` up from the working
folder or pyenv's global version file.  A warm answer must be for the interpreter the name lands on now.

The pyenv root here is made in a temp folder: ``shims/python3`` is the exact script ``pyenv rehash`` writes,
and ``versions/A`` and ``versions/B`` are two venvs of the test interpreter (two interpreters that both work,
told apart by their ``sys.executable`` and prefix, as pyenv-virtualenv's environments are).  The shim runs
either this machine's real pyenv or a stand-in with pyenv's lookup (tests/helpers/pyenv_root.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Dict

import pytest

from tests.helpers.pyenv_root import PyenvRoot, write
from tests.helpers.scenario import ensure_json
from tests.helpers.workspace import Workspace


def warm(result: Dict[str, object]) -> bool:
    """Answered from the fingerprint, without a probe."""
    return result["action"] == "warm" and set(result["durations"]) == {"fingerprint"}  # type: ignore[arg-type]


@pytest.fixture(params=["stand-in", "real"])
def pyenv(request: pytest.FixtureRequest, tmp_path: "os.PathLike[str]", ws: Workspace) -> PyenvRoot:
    made = PyenvRoot(os.path.join(str(tmp_path), "pyenv-root"), "real" if request.param == "real" else "fake")
    for name in [k for k in ws.env if k.startswith("PYENV")]:  # a pyenv's own (`pyenv exec` exports them)
        del ws.env[name]
    ws.env.update(made.env())
    return made


def test_a_pyenv_version_switch_is_probed_and_answered_for_the_new_interpreter(ws: Workspace,
                                                                               pyenv: PyenvRoot) -> None:
    first = ensure_json(ws)
    assert first["python"] == pyenv.python("A")
    assert warm(ensure_json(ws))  # an unchanged selection stays warm
    switched = ensure_json(ws, PYENV_VERSION="B")
    assert not warm(switched), "PYENV_VERSION=B was answered warm for the interpreter of the last call"
    assert switched["python"] == pyenv.python("B")
    again = ensure_json(ws, PYENV_VERSION="B")
    assert warm(again) and again["python"] == pyenv.python("B")
    back = ensure_json(ws)  # the global file's A again
    assert not warm(back) and back["python"] == pyenv.python("A")


def test_a_python_version_file_in_the_callers_folder_selects_the_interpreter(ws: Workspace, pyenv: PyenvRoot,
                                                                            tmp_path: "os.PathLike[str]") -> None:
    project = os.path.join(str(tmp_path), "project")
    inner = os.path.join(project, "src", "deep")
    os.makedirs(inner)
    assert ensure_json(ws, cwd=project)["python"] == pyenv.python("A")
    write(os.path.join(project, ".python-version"), "B\n")
    chosen = ensure_json(ws, cwd=project)
    assert not warm(chosen) and chosen["python"] == pyenv.python("B")
    # pyenv looks for the file from the working folder up to /: a call from a folder below finds it too.
    below = ensure_json(ws, cwd=inner)
    assert warm(below) and below["python"] == pyenv.python("B")
    # A call from elsewhere gets the global version, and PYENV_DIR stands for the working folder.
    elsewhere = ensure_json(ws, cwd=str(tmp_path))
    assert not warm(elsewhere) and elsewhere["python"] == pyenv.python("A")
    by_dir = ensure_json(ws, cwd=str(tmp_path), PYENV_DIR=inner)
    assert not warm(by_dir) and by_dir["python"] == pyenv.python("B")


def test_a_detached_start_probes_the_interpreter_of_the_callers_folder(ws: Workspace, pyenv: PyenvRoot,
                                                                        tmp_path: "os.PathLike[str]") -> None:
    """``start``'s worker runs where its caller does: the caller's ``.python-version`` picks for it too."""
    project = os.path.join(str(tmp_path), "project")
    write(os.path.join(project, ".python-version"), "B\n")
    out = ws.run("start", cwd=project)
    assert out.returncode == 0, out.stderr
    waited = ws.run("wait", "--timeout", "120", "--json", cwd=project)
    assert waited.returncode == 0, waited.stderr
    assert ws.env_twin()["python"] == pyenv.python("B")
    assert warm(ensure_json(ws, cwd=project))


def test_files_in_the_callers_folder_shadow_nothing_the_probe_imports(ws: Workspace,
                                                                     tmp_path: "os.PathLike[str]") -> None:
    """The probe runs in the caller's folder (for the shims' sake) but takes it off sys.path first.  The tool
    runs as its console script here: ``python -m`` would put that folder on the tool's own path."""
    script = os.path.join(os.path.dirname(sys.executable), "ensure-flydsl")
    if not os.path.isfile(script):
        pytest.skip(f"no console script {script} (the tool is not installed in the test interpreter's prefix)")
    folder = os.path.join(str(tmp_path), "caller")
    for name in ("json.py", "importlib.py", "traceback.py", "sysconfig.py", os.path.join("flydsl", "__init__.py")):
        write(os.path.join(folder, name), 'raise SystemExit("imported from the caller\'s folder")\n')
    for args in (["--json"], ["--json", "--verify"]):
        out = subprocess.run([script, *args], env=ws.env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert str(result["tree"]).startswith(ws.root) and result["python"] == sys.executable


def test_pyenv_global_selects_the_interpreter(ws: Workspace, pyenv: PyenvRoot) -> None:
    ensure_json(ws)
    pyenv.select_global("B")  # `pyenv global B`
    chosen = ensure_json(ws)
    assert not warm(chosen) and chosen["python"] == pyenv.python("B")
    assert warm(ensure_json(ws))


def test_a_script_interpreter_it_does_not_know_is_never_warm(ws: Workspace, venv_python: str,
                                                            tmp_path: "os.PathLike[str]") -> None:
    """A wrapper script may land anywhere, on anything it reads: every call probes (correct, slower)."""
    wrapper = os.path.join(str(tmp_path), "bin", "python3")
    write(wrapper, f'#!/bin/sh\nexec "{venv_python}" "$@"\n', executable=True)
    first = ensure_json(ws, FLYDSL_PYTHON=wrapper)
    assert first["python"] == venv_python
    second = ensure_json(ws, FLYDSL_PYTHON=wrapper)
    assert not warm(second) and second["python"] == venv_python


def test_a_compiled_launcher_that_runs_another_interpreter_is_never_warm(ws: Workspace, venv_python: str,
                                                                        tmp_path: "os.PathLike[str]") -> None:
    """mise's shims are links to the mise binary, which runs the selected interpreter: an ELF file on PATH
    counts as the interpreter only when the probe's ``sys.executable`` is that very file."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here to build a launcher")
    source = os.path.join(str(tmp_path), "launcher.c")
    write(source, '#include <unistd.h>\nint main(int argc, char **argv) { (void)argc; '
                  f'argv[0] = "{venv_python}"; execv(argv[0], argv); return 127; }}\n')
    launcher = os.path.join(str(tmp_path), "bin", "python3")
    os.makedirs(os.path.dirname(launcher))
    subprocess.run([cc, "-o", launcher, source], check=True)
    first = ensure_json(ws, FLYDSL_PYTHON=launcher)
    assert first["python"] == venv_python
    second = ensure_json(ws, FLYDSL_PYTHON=launcher)
    assert not warm(second) and second["python"] == venv_python


@pytest.fixture(scope="module")
def real_root(tmp_path_factory: pytest.TempPathFactory) -> PyenvRoot:
    made = PyenvRoot(str(tmp_path_factory.mktemp("real-pyenv") / "root"), "real")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.path.join(made.root, "versions", "A", "envs",
                                                                                  "e")], check=True)
    return made


# (PYENV_VERSION or None, the .python-version file's text and where (None: none), PYENV_DIR, the version the
# shim lands on, or None where ensure_flydsl/warm.py does not settle it).
AGREEMENT = {
    "global": (None, None, False, "A"),
    "variable": ("B", None, False, "B"),
    "python- prefix": ("python-B", None, False, "B"),
    "a list": ("B:A", None, False, "B"),
    "a virtualenv's name": ("A/envs/e", None, False, "A/envs/e"),
    "a file above, with comments and CRLF": (None, "# pinned\r\n\r\nB other\r\n", False, "B"),
    "PYENV_DIR": (None, "B\n", True, "B"),
    "not installed, then A": ("Z:A", None, False, None),
}


@pytest.mark.parametrize("case", sorted(AGREEMENT))
def test_the_landing_read_from_the_files_is_where_real_pyenv_goes(real_root: PyenvRoot, case: str,
                                                                   tmp_path: "os.PathLike[str]",
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """ensure_flydsl/warm.py against this machine's pyenv, run for real through the shim."""
    from ensure_flydsl.warm import landing

    selected, text, by_dir, expected = AGREEMENT[case]
    project = os.path.join(str(tmp_path), "project")
    caller = os.path.join(project, "inner") if not by_dir else os.path.join(str(tmp_path), "elsewhere")
    os.makedirs(caller)
    env = real_root.env()
    env["PWD"] = caller
    if selected is not None:
        env["PYENV_VERSION"] = selected
    if text is not None:
        write(os.path.join(project, ".python-version"), text)
    if by_dir:
        env["PYENV_DIR"] = project
    ran = subprocess.run([real_root.shim, "-c", "import sys; print(sys.executable)"], env=env, cwd=caller,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    monkeypatch.chdir(caller)
    found = landing("python3", env)
    if expected is None:
        assert found is None, f"settled {found} where pyenv ran {ran.stdout.strip()}"
        return
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == real_root.python(expected)
    assert found is not None and found.executable == real_root.python(expected)


def test_the_landing_follows_the_path_the_caller_used(real_root: PyenvRoot, tmp_path: "os.PathLike[str]",
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """bash takes PWD when it names the working folder: pyenv walks up the path the caller used (a link)."""
    from ensure_flydsl.warm import landing

    real = os.path.join(str(tmp_path), "real", "deep")
    os.makedirs(real)
    link = os.path.join(str(tmp_path), "linked", "here")
    os.makedirs(os.path.dirname(link))
    os.symlink(real, link)
    write(os.path.join(str(tmp_path), "linked", ".python-version"), "B\n")
    for pwd, expected in ((link, "B"), (real, "A")):
        env = dict(real_root.env(), PWD=pwd)
        ran = subprocess.run([real_root.shim, "-c", "import sys; print(sys.executable)"], env=env, cwd=pwd,
                             stdout=subprocess.PIPE, text=True, check=True)
        monkeypatch.chdir(pwd)
        found = landing("python3", env)
        assert ran.stdout.strip() == real_root.python(expected) == (found.executable if found else None)
