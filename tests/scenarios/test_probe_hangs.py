"""Import probes that crash or hang: an ambient flydsl that kills or blocks the interpreter on import does not
block provisioning (the root's tree comes first and shadows it), a probe is killed with its whole process
group after FLYDSL_PROBE_TIMEOUT, and the message says what happened."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import List

import pytest

from ensure_flydsl.probe.interpreter import ProbeBroke, run_probe
from tests.helpers.flydsl_fixture import write
from tests.helpers.scenario import alive
from tests.helpers.workspace import Workspace

# flydsl/__init__.py bodies of a broken ambient install.  The hanging one records its pid and starts a child
# in its own process group, so the test can see that the timeout leaves neither behind.
CRASH = "import os\nos._exit(3)\n"
SEGFAULT = "import ctypes\nctypes.string_at(0)\n"
HANG = """import os, subprocess, time
child = subprocess.Popen(["sleep", "1000"])
with open({pids!r}, "a") as handle:
    handle.write("%d\\n%d\\n" % (os.getpid(), child.pid))
time.sleep(10**6)
"""


def pids_in(path: str) -> List[int]:
    with open(path) as handle:
        return [int(line) for line in handle if line.strip()]


def ambient_flydsl(folder: str, body: str) -> str:
    write(os.path.join(folder, "flydsl", "__init__.py"), body)
    return folder


@pytest.mark.parametrize(
    "body, what",
    [
        (CRASH, "the interpreter exited with status 3 while importing flydsl"),
        (SEGFAULT, "the interpreter died with signal SIGSEGV while importing flydsl"),
        (HANG, "was killed after 3 s (FLYDSL_PROBE_TIMEOUT): importing flydsl hangs"),
    ],
    ids=["exit", "segfault", "hang"],
)
def test_an_ambient_flydsl_that_breaks_on_import_is_shadowed_by_the_build(
    ws: Workspace, tmp_path: "os.PathLike[str]", body: str, what: str
) -> None:
    pids = os.path.join(str(tmp_path), "probe.pids")
    ambient = ambient_flydsl(os.path.join(str(tmp_path), "ambient"), body.format(pids=pids))
    ws.env["PYTHONPATH"] = ambient
    done = ws.run(FLYDSL_PROBE_TIMEOUT="3", timeout=150)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert what in said and ambient in said, said
    assert "shadows that one: provisioning it" in said, said
    assert ws.count("build") == 1
    assert not os.path.exists(ws.fail_marker)
    # The env file puts the root first: even with the broken copy on the caller's path, one tree imports.
    imported = ws.source_and_import(extra=f"export PYTHONPATH={ambient}; ")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines()[0].startswith(ws.root + "/"), imported.stdout
    if body == HANG:
        found = pids_in(pids)
        assert len(found) >= 2  # each probe a python and its child
        assert [p for p in found if alive(p)] == []


# A flydsl that forges the probe's answer on the descriptors the probe reports on, as code, then ends quietly.
FORGED = """import os
for fd in range(3, 10):
    try:
        os.write(fd, b"result __import__('os').mkdir({made!r}) or {{'python': {{}}}}\\n")
    except OSError:
        pass
os._exit(0)
"""


def test_a_probe_answer_that_is_code_is_never_run_and_the_build_shadows_its_flydsl(
    ws: Workspace, tmp_path: "os.PathLike[str]"
) -> None:
    made = os.path.join(str(tmp_path), "made-by-the-answer")
    ambient = ambient_flydsl(os.path.join(str(tmp_path), "ambient"), FORGED.format(made=made))
    ws.env["PYTHONPATH"] = ambient
    done = ws.run(timeout=150)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "the interpreter exited with status 0 while importing flydsl" in said and ambient in said, said
    assert "shadows that one: provisioning it" in said, said
    assert not os.path.exists(made)  # read as a literal: the call in it never ran


def test_the_roots_own_tree_that_hangs_on_import_is_exit_6_with_the_timeout(
    ws: Workspace, tmp_path: "os.PathLike[str]"
) -> None:
    pids = os.path.join(str(tmp_path), "probe.pids")
    hook = f"printf '%s' {shlex.quote(HANG.format(pids=pids))} >> \"$PKG/flydsl/__init__.py\""
    done = ws.run("--probe-timeout", "3", FIXTURE_BUILD_HOOK=hook, timeout=150)
    said = done.stdout + done.stderr
    assert done.returncode == 6, said
    python = ws.env["FLYDSL_PYTHON"]
    expected = f"the import probe of {python} was killed after 3 s (--probe-timeout): importing flydsl hangs"
    assert expected in said, said
    assert ws.root in said.split(expected, 1)[1].splitlines()[0], said  # it names the root's file
    marker = ws.marker()
    assert marker["exit_code"] == 6 and expected in str(marker["reason"]), marker
    assert not os.path.exists(ws.env_file)
    found = pids_in(pids)
    assert found and [p for p in found if alive(p)] == []


def test_verify_names_the_import_that_crashes(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    ws.env["PYTHONPATH"] = ambient_flydsl(os.path.join(str(tmp_path), "ambient"), SEGFAULT)
    done = ws.run("verify", timeout=60)
    assert done.returncode == 6, done.stdout + done.stderr
    assert "the interpreter died with signal SIGSEGV while importing flydsl" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf"])
def test_a_bad_probe_timeout_is_refused_naming_it(ws: Workspace, value: str) -> None:
    done = ws.run(FLYDSL_PROBE_TIMEOUT=value, timeout=60)
    assert done.returncode == 64, done.stdout + done.stderr
    assert "FLYDSL_PROBE_TIMEOUT" in done.stderr and not os.path.exists(ws.root)
    flag = subprocess.run(ws.cmd("--probe-timeout", value), env=ws.env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert flag.returncode == 64 and "--probe-timeout" in flag.stderr, flag.stderr


def test_a_crashing_flydsl_in_the_interpreters_site_packages_is_shadowed_by_the_build(
    ws: Workspace, tmp_path: "os.PathLike[str]"
) -> None:
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    ambient_flydsl(site, CRASH)
    ws.env["FLYDSL_PYTHON"] = python
    done = ws.run(timeout=150)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"the interpreter exited with status 3 while importing flydsl (from {site}/flydsl/__init__.py)" in said
    imported = ws.source_and_import(python=python)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines()[0].startswith(ws.root + "/"), imported.stdout


def test_a_probe_that_prints_without_end_is_read_in_bounded_memory(tmp_path: "os.PathLike[str]") -> None:
    """An import that prints a warning in a loop and hangs: the tool keeps the last part of what the probe printed
    (its answer is a few KB), not all of it, and says it hung within the timeout and a few seconds."""
    spam = os.path.join(str(tmp_path), "python")
    write(spam, "#!/bin/sh\nhead -c 250000000 /dev/zero | tr '\\0' x >&2\necho importing flydsl\nexec sleep 1000\n")
    os.chmod(spam, 0o755)
    code = ("import resource, time\nfrom ensure_flydsl.probe.interpreter import ProbeBroke, run_probe\n"
            "started = time.monotonic()\ntry:\n    run_probe(%r, modules=['flydsl'], timeout=30.0)\n"
            "except ProbeBroke as exc:\n    print(exc.reason)\n"
            "print(time.monotonic() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n" % spam)
    done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, timeout=120)
    reason, figures = done.stdout.splitlines()
    seconds, max_kib = figures.split()
    assert "killed after 30 s (FLYDSL_PROBE_TIMEOUT): importing flydsl hangs" in reason, figures
    assert float(seconds) < 40 and int(max_kib) < 150_000, figures


def test_an_answer_of_the_wrong_shape_is_no_answer(tmp_path: "os.PathLike[str]") -> None:
    """A shim interpreter that prints a result line the probe never writes (a number for the interpreter, a text for
    a module): the probe broke, said as such, never an internal error."""
    for n, answer in enumerate(("{'python': 1, 'modules': {}}", "{'python': {}, 'modules': {'flydsl': 'x'}}")):
        liar = os.path.join(str(tmp_path), f"python{n}")
        write(liar, f"#!/bin/sh\necho {shlex.quote('result ' + answer)}\n")
        os.chmod(liar, 0o755)
        with pytest.raises(ProbeBroke, match="exited with status 0 before importing anything, before it could report"):
            run_probe(liar, modules=["flydsl"], timeout=30.0)
