"""End to end: the blocking ensure against FlyDSL-shaped repositories, with real git, builds and processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ensure_flydsl.source.root import claim_root
from tests.helpers.flydsl_fixture import make_installed_tree, make_split_trees
from tests.helpers.scenario import Barrier, assert_one_tree, wait_for
from tests.helpers.workspace import Workspace, other_python


def test_cold_build_then_warm_reuse(ws: Workspace) -> None:
    first = ws.run("--json")
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["how"] == "built" and result["action"] == "provisioned"
    assert result["commit"] == ws.repo.commits["dev"] and result["version"] == "0.2.2"
    assert result["tree"] == ws.root and result["env_file"] == ws.env_file
    assert set(result["durations"]) >= {"probe", "lock", "fetch", "fixes", "llvm", "build", "verify", "publish"}
    assert ws.count("llvm") == 1 and ws.count("build") == 1
    assert not os.path.exists(ws.fail_marker)
    assert_one_tree(ws)
    twin = ws.env_twin()
    assert twin["commit"] == ws.repo.commits["dev"] and twin["how"] == "built"
    assert twin["python"] == sys.executable and twin["version"] == "0.2.2"

    mtime = os.stat(ws.env_file).st_mtime_ns
    second = ws.run("--json")
    assert second.returncode == 0, second.stderr
    warm = json.loads(second.stdout)
    assert warm["action"] == "warm" and warm["how"] == "built"
    assert ws.count("build") == 1 and ws.count("llvm") == 1  # nothing rebuilt
    assert os.stat(ws.env_file).st_mtime_ns == mtime  # an unchanged env file is not rewritten


def test_a_cold_build_describes_its_interpreter_once(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """The doctor's checks before the build take the interpreter as the run described it: one probe that
    imports nothing (before, the checks probed it again: a Python start more for each source build)."""
    calls, python = os.path.join(str(tmp_path), "probes"), os.path.join(str(tmp_path), "python")
    with open(python, "w") as handle:  # logs the modules each import probe is asked for ("" to describe it)
        handle.write(f'#!/bin/sh\ncase "$1:$2" in "-c:"*"\\"\\"\\"The import probe"*) '
                     f'printf "[%s]\\n" "$3" >> {calls};; esac\nexec {sys.executable} "$@"\n')
    os.chmod(python, 0o755)
    out = ws.run("--json", FLYDSL_PYTHON=python)
    assert out.returncode == 0 and json.loads(out.stdout)["how"] == "built", out.stderr
    with open(calls) as handle:
        asked = handle.read().splitlines()
    assert asked.count("[]") == 1, asked  # the preflight's
    assert "[flydsl,kernels.moe_gemm_2stage]" in asked, asked  # the gate's and the verification's


def test_output_says_what_was_decided_and_why(ws: Workspace) -> None:
    out = ws.run()
    assert out.returncode == 0, out.stderr
    assert "no reusable FlyDSL" in out.stdout and "No module named 'flydsl'" in out.stdout
    assert f"wrote {ws.env_file}" in out.stdout and "ready: flydsl 0.2.2 (built)" in out.stdout
    again = ws.run()
    assert "is current" in again.stdout and "building" not in again.stdout


def test_env_file_exports_the_contract(ws: Workspace) -> None:
    shim = os.path.join(ws.base, "shim dir")
    assert ws.run(FLYDSL_SHIM_DIR=shim).returncode == 0
    out = subprocess.run(
        ["bash", "-c", '. "$1"; echo "$FLYDSL_ROOT|$PYTHONPATH|$FLYDSL_SHIM_DIR|${VLLM_USE_FLYDSL_MOE-unset}"',
         "bash", ws.env_file],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": "/caller/path"}, stdout=subprocess.PIPE, text=True,
    ).stdout.strip()
    pkgs = os.path.join(ws.root, "build-fly", "python_packages")
    assert out == f"{ws.root}|{ws.root}:{pkgs}:/caller/path|{shim}|1"


def test_vllm_moe_off_and_no_shim_dir(ws: Workspace) -> None:
    assert ws.run("--no-vllm-moe").returncode == 0
    text = open(ws.env_file).read()
    assert "VLLM_USE_FLYDSL_MOE" not in text and "FLYDSL_SHIM_DIR" not in text
    out = subprocess.run(["sh", "-c", '. "$1"; echo "${PYTHONPATH}"', "sh", ws.env_file],
                         env={"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE, text=True).stdout.strip()
    assert out == f"{ws.root}:{ws.root}/build-fly/python_packages"  # no stray ':' without a caller path


def test_ambient_flydsl_is_reused_without_cloning(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    ambient = make_installed_tree(os.path.join(str(tmp_path), "site"), "0.2.5")
    out = ws.run("--json", PYTHONPATH=ambient)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "reused" and result["tree"] == ambient and result["version"] == "0.2.5"
    assert not os.path.exists(os.path.join(ws.root, ".git"))
    assert ws.count("build") == 0 and ws.count("llvm") == 0
    assert "reusing the tree found on the interpreter's path" in out.stderr
    text = open(ws.env_file).read()
    assert f"export PYTHONPATH={ambient}" in text  # the env file works without the caller's PYTHONPATH
    env = {"PATH": os.environ["PATH"]}
    check = subprocess.run(
        ["bash", "-c", f'. "$1"; {sys.executable} -c "import kernels.moe_gemm_2stage as k; print(k.__file__)"',
         "bash", ws.env_file], env=env, stdout=subprocess.PIPE, text=True, cwd="/")
    assert check.stdout.strip() == os.path.join(ambient, "kernels", "moe_gemm_2stage.py")


def test_ambient_below_the_floor_is_not_reused(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    ambient = make_installed_tree(os.path.join(str(tmp_path), "site"), "0.2.1")
    out = ws.run("--json", PYTHONPATH=ambient)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    assert "older than the floor 0.2.2" in out.stderr
    assert_one_tree(ws)


def test_ambient_split_across_two_trees_is_not_reused(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    out = ws.run("--json", PYTHONPATH=make_split_trees(str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    assert "different trees" in out.stderr


def test_two_processes_at_once_build_once(ws: Workspace) -> None:
    slow = {"FIXTURE_BUILD_SLEEP": "0.5"}
    a = ws.popen("--json", **slow)
    wait_for(os.path.join(ws.counter, "build.started"))
    b = ws.popen("--json", **slow)
    out_a, err_a = a.communicate(timeout=60)
    out_b, err_b = b.communicate(timeout=60)
    assert a.returncode == 0, err_a
    assert b.returncode == 0, err_b
    assert ws.count("build") == 1 and ws.count("llvm") == 1
    assert "waiting for the build lock" in err_b and f"pid {a.pid}" in err_b
    assert "another run finished this while we waited for the lock" in err_b
    assert json.loads(out_b)["commit"] == json.loads(out_a)["commit"]


def test_a_run_that_waited_probes_again_when_the_roots_stamp_changed_and_takes_that_tree(ws: Workspace) -> None:
    """The first run's env file does not answer the second's request (no VLLM_USE_FLYDSL_MOE in it), so the warm
    check under the lock cannot; the root's tree stamp changed while the second waited, so it probes again and
    takes the first run's tree instead of building it a second time (pipeline/decide.py: decide_again)."""
    slow = {"FIXTURE_BUILD_SLEEP": "0.5"}
    a = ws.popen("--json", **slow)
    wait_for(os.path.join(ws.counter, "build.started"))
    b = ws.popen("--json", FLYDSL_VLLM_MOE="0", **slow)
    out_a, err_a = a.communicate(timeout=60)
    out_b, err_b = b.communicate(timeout=60)
    assert a.returncode == 0, err_a
    assert b.returncode == 0, err_b
    assert ws.count("build") == 1 and ws.count("llvm") == 1, err_b
    assert "waiting for the build lock" in err_b
    assert "another run finished this while we waited for the lock" in err_b
    assert json.loads(out_b)["tree"] == json.loads(out_a)["tree"] == ws.root
    with open(ws.env_file) as handle:
        assert "VLLM_USE_FLYDSL_MOE" not in handle.read()  # the second request's env file


def test_new_pin_with_a_raised_floor_rebuilds(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    out = ws.run("--json", FLYDSL_PIN="v0.2.3", FLYDSL_MIN_VERSION="0.2.3")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["commit"] == ws.repo.commits["v0.2.3"] and result["version"] == "0.2.3"
    assert ws.count("build") == 2
    assert "older than the floor 0.2.3" in out.stderr
    assert "removed" in out.stderr and "build-fly" in out.stderr  # the old build is not kept
    staged = open(os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "__init__.py")).read()
    assert '"0.2.3"' in staged
    assert_one_tree(ws)


def test_new_pin_with_the_same_floor_reuses_the_tree_as_the_seed_did(ws: Workspace) -> None:
    # The seed's gate is version-only, for the root's own tree too: the pin is what gets built when a build
    # is needed, never a reason to replace a tree that passes the floor.
    assert ws.run().returncode == 0
    out = ws.run("--json", FLYDSL_PIN=ws.repo.commits["v0.2.2"], FLYDSL_REPO="file:///nonexistent/FlyDSL.git")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["commit"] == ws.repo.commits["dev"] and result["action"] == "warm", result
    assert result["ok"] is True and result["built"] is False
    # The full probe says why the tree is taken.
    out = ws.run("--json", "--verify", FLYDSL_PIN=ws.repo.commits["v0.2.2"], FLYDSL_REPO="file:///nonexistent")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["action"] == "verified"
    assert f"was built from {ws.repo.commits['dev']}, not from the pin" in out.stderr
    assert ws.count("build") == 1  # nothing built, nothing fetched (the repository does not even exist)
    assert ws.env_twin()["commit"] == ws.repo.commits["dev"]
    assert_one_tree(ws)


def test_new_pin_with_exact_pin_rebuilds(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    out = ws.run("--json", "--exact-pin", FLYDSL_PIN=ws.repo.commits["v0.2.2"])
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["commit"] == ws.repo.commits["v0.2.2"] and result["built"] is True
    assert "asks for a tree built from the pin" in out.stderr
    assert ws.count("build") == 2 and ws.count("llvm") == 1  # same LLVM commit: MLIR kept
    twin = ws.env_twin()
    assert twin["commit"] == ws.repo.commits["v0.2.2"] and twin["pin"] == ws.repo.commits["v0.2.2"]
    # The same request again: the tree built from the pin answers it (warm: nothing changed).
    again = ws.run("--json", FLYDSL_PIN=ws.repo.commits["v0.2.2"], FLYDSL_EXACT_PIN="1")
    assert json.loads(again.stdout)["action"] == "warm"


def test_pin_by_tag_and_by_short_hash(ws: Workspace) -> None:
    ws.env["FLYDSL_EXACT_PIN"] = "1"
    out = ws.run("--json", FLYDSL_PIN="v0.2.3")
    assert out.returncode == 0 and json.loads(out.stdout)["commit"] == ws.repo.commits["v0.2.3"]
    short = ws.repo.commits["v0.2.2"][:10]
    out = ws.run("--json", FLYDSL_PIN=short)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["commit"] == ws.repo.commits["v0.2.2"]


def test_repo_by_plain_path(ws: Workspace) -> None:
    out = ws.run("--json", FLYDSL_REPO=ws.repo.path)
    assert out.returncode == 0, out.stderr
    assert_one_tree(ws)


def test_kill_9_during_the_build_then_rerun_succeeds(ws: Workspace) -> None:
    staged_barrier = Barrier(ws.counter, "staged")  # build.sh has staged python_packages/flydsl, not yet _mlir
    proc = ws.popen(FIXTURE_STAGED_HOOK=staged_barrier.hook)
    staged_barrier.wait_reached()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    staged = os.path.join(ws.root, "build-fly", "python_packages", "flydsl")
    assert os.path.isdir(staged) and not os.path.exists(os.path.join(staged, "_mlir"))
    assert not os.path.exists(ws.env_file)  # no success marker for an unfinished tree
    # The seed took the half-built python_packages for a finished build and failed with 6 forever.
    out = ws.run("--json")
    assert out.returncode == 0, out.stderr
    assert f"resuming the interrupted build in {os.path.join(ws.root, 'build-fly')}" in out.stderr
    assert ws.count("build") == 2 and ws.count("llvm") == 1
    assert_one_tree(ws)


def test_kill_9_during_llvm_then_rerun_succeeds(ws: Workspace) -> None:
    proc = ws.popen(FIXTURE_LLVM_SLEEP="5")
    wait_for(os.path.join(ws.counter, "llvm.started"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    out = ws.run()
    assert out.returncode == 0, out.stderr
    assert ws.count("llvm") == 2 and ws.count("build") == 1
    assert_one_tree(ws)


def test_other_interpreter_rebuilds(ws: Workspace) -> None:
    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    other = other_python(tag)
    assert other, "this machine has pyenv interpreters; the test needs one of another minor version"
    assert ws.run().returncode == 0
    # The built _mlir refuses another interpreter, as a compiled extension would.
    broken = ws.source_and_import(other)
    assert broken.returncode != 0 and "was built for" in broken.stderr
    out = ws.run("--json", FLYDSL_PYTHON=other)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["python"] == other and result["action"] == "provisioned"
    assert ws.count("build") == 2 and ws.count("llvm") == 2  # MLIR's python bindings are per interpreter
    assert_one_tree(ws, other)


@pytest.mark.parametrize(
    "name",
    ["with space", "quote'in", 'double"quote', "$(touch PWNED)", "`touch PWNED`", "semi;touch PWNED", "a\\b"],
)
def test_hostile_root_paths_are_exported_literally(ws: Workspace, name: str) -> None:
    root = os.path.join(ws.base, name, "FlyDSL")
    out = ws.run("--json", FLYDSL_ROOT=root)
    assert out.returncode == 0, out.stderr
    env_file = os.path.join(root, "flydsl_env.sh")
    for shell in ("bash", "sh"):
        got = subprocess.run([shell, "-c", '. "$1" && printf %s "$FLYDSL_ROOT"', shell, env_file], cwd=ws.base,
                             stdout=subprocess.PIPE, env={"PATH": os.environ["PATH"]}).stdout.decode()
        assert got == root
    assert not os.path.exists(os.path.join(ws.base, "PWNED")) and not os.path.exists("/PWNED")
    check = subprocess.run(
        ["bash", "-c", f'. "$1" && {sys.executable} -c "import kernels.moe_gemm_2stage as k; print(k.__file__)"',
         "bash", env_file], env={"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE, text=True, cwd="/")
    assert check.stdout.strip() == os.path.join(root, "kernels", "moe_gemm_2stage.py")


@pytest.mark.parametrize("inside", [False, True], ids=["alone", "inside-another-checkout"])
@pytest.mark.parametrize("left", [[], ["config", "objects/"], ["HEAD", "objects/", "refs/"]])
def test_a_git_init_torn_by_a_full_disk_is_completed_by_the_next_run(ws: Workspace, left: "list[str]",
                                                                      inside: bool) -> None:
    # git init on a full disk leaves a .git without its HEAD or refs: the next run took that folder for a
    # repository and failed with 2 ("not a git repository") at every run after room was made.  Inside another
    # checkout (a GEAK skill folder is one), git found that one instead and the run set its origin.
    if inside:
        subprocess.run(["git", "init", "-q", ws.base], check=True)
        subprocess.run(["git", "-C", ws.base, "remote", "add", "origin", "https://example.com/geak.git"], check=True)
    subprocess.run(["git", "init", "-q", os.path.join(ws.base, "whole")], check=True)
    claim_root(ws.root, created=True, adopted=False)  # the run that tore it had claimed the root
    for name in left:
        source = os.path.join(ws.base, "whole", ".git", name.rstrip("/"))
        target = os.path.join(ws.root, ".git", name.rstrip("/"))
        os.makedirs(target if name.endswith("/") else os.path.dirname(target), exist_ok=True)
        if not name.endswith("/"):
            with open(source, "rb") as handle, open(target, "wb") as copy:
                copy.write(handle.read())
    os.makedirs(os.path.join(ws.root, ".git"), exist_ok=True)
    out = ws.run()
    assert out.returncode == 0, out.stderr
    assert_one_tree(ws)
    if inside:
        origin = subprocess.run(["git", "-C", ws.base, "config", "--get", "remote.origin.url"],
                                stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        assert origin == "https://example.com/geak.git"
        assert subprocess.run(["git", "-C", ws.base, "rev-parse", "--verify", "--quiet", "HEAD"],
                              stdout=subprocess.PIPE, check=False).returncode == 1  # nothing committed there


def test_foreign_non_empty_root_is_refused_and_kept(ws: Workspace) -> None:
    os.makedirs(ws.root)
    precious = os.path.join(ws.root, "thesis.tex")
    with open(precious, "w") as handle:
        handle.write("five years of work\n")
    out = ws.run()
    assert out.returncode == 64
    assert out.stderr.strip().count("\n") == 0  # one line
    assert out.stderr.startswith(f"ensure-flydsl: FLYDSL_ROOT='{ws.root}' is not allowed")
    assert "thesis.tex" in out.stderr and "not a checkout made by ensure-flydsl" in out.stderr
    assert os.listdir(ws.root) == ["thesis.tex"] and open(precious).read() == "five years of work\n"
    assert ws.marker()["exit_code"] == 64


def test_seed_checkout_is_adopted(ws: Workspace) -> None:
    # A checkout of the configured repository made by another tool (the seed's script), clean apart from
    # build outputs and the seed's env file, is adopted rather than refused.
    subprocess.run(["git", "clone", "-q", ws.repo.url, ws.root], check=True)
    with open(os.path.join(ws.root, "flydsl_env.sh"), "w") as handle:
        handle.write("export FLYDSL_ROOT=/opt/flydsl/FlyDSL\n")
    out = ws.run("--json")
    assert out.returncode == 0, out.stderr
    assert "adopting" in out.stderr
    assert_one_tree(ws)


def test_checkout_with_local_changes_is_refused(ws: Workspace) -> None:
    subprocess.run(["git", "clone", "-q", ws.repo.url, ws.root], check=True)
    with open(os.path.join(ws.root, "kernels", "moe_gemm_2stage.py"), "a") as handle:
        handle.write("# my experiment\n")
    out = ws.run()
    assert out.returncode == 64 and "local changes" in out.stderr and "moe_gemm_2stage.py" in out.stderr


def test_checkout_of_another_repository_is_refused(ws: Workspace, own_repo) -> None:  # type: ignore[no-untyped-def]
    subprocess.run(["git", "clone", "-q", own_repo.url, ws.root], check=True)
    out = ws.run()
    assert out.returncode == 64 and "not of the configured repository" in out.stderr


def test_stale_failure_marker_never_answers_for_this_run(ws: Workspace) -> None:
    assert ws.run(FIXTURE_BUILD_FAIL="1").returncode == 5
    assert os.path.exists(ws.fail_marker)
    assert ws.run().returncode == 0
    assert not os.path.exists(ws.fail_marker)


def test_env_file_of_another_request_is_withdrawn_when_the_build_starts(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    out = ws.run(FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1", FIXTURE_BUILD_FAIL="1")
    assert out.returncode == 5
    assert not os.path.exists(ws.env_file) and not os.path.exists(ws.env_json)
    assert f"took away {ws.env_file} (flydsl 0.2.2, built): the tree in {ws.root} changes now" in out.stdout


def test_reuse_only_never_provisions(ws: Workspace) -> None:
    out = ws.run("--strategy", "reuse-only")
    assert out.returncode == 6
    assert "reuse-only never provisions" in out.stderr
    assert not os.path.exists(os.path.join(ws.root, ".git")) and ws.count("build") == 0
    assert ws.marker()["exit_code"] == 6


def test_mlir_path_skips_the_llvm_build(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    mlir = os.path.join(str(tmp_path), "mlir")
    os.makedirs(os.path.join(mlir, "lib", "cmake", "mlir"))
    out = ws.run(MLIR_PATH=mlir)
    assert out.returncode == 0, out.stderr
    assert ws.count("llvm") == 0 and f"MLIR_PATH: {mlir}" in open(ws.log).read()


def test_build_steps_use_the_target_interpreter_and_the_private_pip(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    log = open(ws.log).read()
    tools = os.path.join(ws.root, ".ensure_flydsl", "tools", "bin")
    assert f"pip is {tools}/pip" in log and f"python3 is {tools}/python3" in log
    tag = open(os.path.join(ws.base, "llvm-project", "mlir_install", "python-tag.txt")).read().strip()
    assert tag == sys.implementation.cache_tag


def test_jobs_setting_reaches_the_build(ws: Workspace) -> None:
    assert ws.run("--jobs", "3").returncode == 0
    assert "jobs: 3" in open(ws.log).read()


def test_submodules_are_updated(ws: Workspace, own_repo, tmp_path: "os.PathLike[str]") -> None:  # type: ignore[no-untyped-def]
    from tests.helpers.flydsl_fixture import add_submodule

    sha = add_submodule(own_repo, os.path.join(str(tmp_path), "dlpack.git"), "with-sub")
    out = ws.run(FLYDSL_REPO=own_repo.url, FLYDSL_PIN=sha)
    assert out.returncode == 0, out.stderr
    assert os.path.isfile(os.path.join(ws.root, "thirdparty", "dlpack", "include", "dlpack", "dlpack.h"))
    assert "submodules updated" in out.stdout


def test_build_pip_install_goes_to_the_private_folder(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    from tests.helpers.flydsl_fixture import make_tool_wheel

    wheels = make_tool_wheel(str(tmp_path))
    out = ws.run(FIXTURE_PIP_INSTALL=f"--no-index --find-links {wheels} fixture-tool")
    assert out.returncode == 0, out.stderr
    pylib = os.path.join(ws.root, ".ensure_flydsl", "tools", "pylib")
    assert f"fixture_tool from {pylib}/fixture_tool.py" in open(ws.log).read()
    # Nothing landed in the interpreter's own site-packages.
    check = subprocess.run([sys.executable, "-c", "import fixture_tool"], stderr=subprocess.PIPE, text=True)
    assert check.returncode != 0 and "No module named 'fixture_tool'" in check.stderr


def test_a_mirror_missing_objects_of_other_branches_still_serves_the_pin(ws: Workspace, own_repo) -> None:  # type: ignore[no-untyped-def]
    """Only the pin's history is fetched: a snapshot mirror that lost an unrelated branch's objects works."""
    from tests.helpers.flydsl_fixture import git

    git(own_repo.path, "checkout", "-q", "-b", "unrelated")
    with open(os.path.join(own_repo.path, "other.txt"), "w") as handle:
        handle.write("other\n")
    git(own_repo.path, "add", "other.txt")
    git(own_repo.path, "commit", "-q", "-m", "unrelated work")
    lost = git(own_repo.path, "rev-parse", "HEAD")
    git(own_repo.path, "checkout", "-q", "main")
    os.unlink(os.path.join(own_repo.path, ".git", "objects", lost[:2], lost[2:]))
    out = ws.run("--json", FLYDSL_REPO=own_repo.url, FLYDSL_PIN="v0.2.3")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["commit"] == own_repo.commits["v0.2.3"]


def test_seed_checkout_is_adopted_whatever_git_dir_the_caller_has(ws: Workspace, own_repo) -> None:  # type: ignore[no-untyped-def]
    # The root's origin and status are read as every git command of the tool reads: not through the
    # caller's GIT_DIR (here another repository's), which would name that repository's origin instead.
    subprocess.run(["git", "clone", "-q", ws.repo.url, ws.root], check=True)
    other = os.path.join(ws.base, "other")
    subprocess.run(["git", "clone", "-q", own_repo.url, other], check=True)
    out = ws.run("--json", GIT_DIR=os.path.join(other, ".git"))
    assert out.returncode == 0, out.stderr
    assert "adopting" in out.stderr
    assert_one_tree(ws)


def test_the_callers_index_and_object_folder_are_never_written(ws: Workspace, tmp_path: str) -> None:
    """Run from a git hook (GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY set), the checkout wrote its index over the
    caller's and fetched into the caller's object folder; the build's git commands inherited them too."""
    index, objects = os.path.join(str(tmp_path), "callers-index"), os.path.join(str(tmp_path), "callers-objects")
    out = ws.run(GIT_INDEX_FILE=index, GIT_OBJECT_DIRECTORY=objects,
                 FIXTURE_BUILD_HOOK='[ -z "${GIT_INDEX_FILE}${GIT_OBJECT_DIRECTORY}" ] || exit 9')
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(index) and not os.path.exists(objects)
    assert os.path.isfile(os.path.join(ws.root, ".git", "index"))
    assert_one_tree(ws)


def test_a_checkout_where_git_holds_a_lock_is_not_adopted(ws: Workspace) -> None:
    """Another tool's checkout with .git/index.lock (its git running, or killed): the fetch removed the lock as a
    stale one of the tool's own before the checkout was adopted."""
    subprocess.run(["git", "clone", "-q", ws.repo.url, ws.root], check=True)
    lock = os.path.join(ws.root, ".git", "index.lock")
    open(lock, "w").close()
    out = ws.run()
    assert out.returncode == 64 and ".git/index.lock" in out.stderr, out.stderr
    assert os.path.exists(lock)


def test_a_ref_lock_left_by_a_killed_fetch_is_cleared(ws: Workspace) -> None:
    """A fetch killed while it updated a ref leaves refs/tags/X.lock: every later fetch of that tag failed (exit 2,
    "check that FLYDSL_REPO is reachable") until somebody removed it by hand."""
    assert ws.run().returncode == 0
    lock = os.path.join(ws.root, ".git", "refs", "tags", "v0.2.3.lock")
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    open(lock, "w").close()
    out = ws.run(FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    assert out.returncode == 0, out.stderr
    assert "removed a stale refs/tags/v0.2.3.lock" in out.stdout
