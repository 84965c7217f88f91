"""env, verify, clean, the Python API, and the README's detached procedure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.helpers.flydsl_fixture import make_installed_tree, make_split_trees
from tests.helpers.result_schema import json_lines
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace


def test_env_prints_the_env_file_and_its_twin(ws: Workspace) -> None:
    missing = ws.run("env")
    assert missing.returncode == 1 and "no env file at" in missing.stderr
    assert ws.run().returncode == 0
    sh = ws.run("env")
    assert sh.returncode == 0 and sh.stdout == open(ws.env_file).read()
    js = json.loads(ws.run("env", "--format", "json").stdout)
    assert js["FLYDSL_ROOT"] == ws.root and js["commit"] == ws.repo.commits["dev"]
    assert js["pythonpath_prepend"] == [ws.root, os.path.join(ws.root, "build-fly", "python_packages")]
    assert js["VLLM_USE_FLYDSL_MOE"] == "1" and js["how"] == "built" and js["python"] == sys.executable


def test_verify_prints_each_modules_file(ws: Workspace) -> None:
    bad = ws.run("verify")  # no env file: nothing answers this request (exit 1, as the exit-code table says)
    assert bad.returncode == 1 and "flydsl: FAILED: ModuleNotFoundError" in bad.stdout
    assert f"not usable: there is no env file at {ws.env_file}; the probe: " in bad.stdout
    assert ws.run().returncode == 0
    good = ws.run("verify")
    assert good.returncode == 0, good.stdout
    assert f"flydsl: {ws.root}/build-fly/python_packages/flydsl/__init__.py" in good.stdout
    assert f"kernels.moe_gemm_2stage: {ws.root}/kernels/moe_gemm_2stage.py" in good.stdout
    assert f"tree:    {ws.root}" in good.stdout and good.stdout.rstrip().splitlines()[-1].startswith("ok: ")
    data = json.loads(ws.run("verify", "--json").stdout)
    assert data["ok"] is True and data["tree"] == ws.root and data["version"] == "0.2.2"
    os.unlink(os.path.join(ws.root, "kernels", "moe_gemm_2stage.py"))  # the env file answers; its tree broke
    broken = ws.run("verify")
    assert broken.returncode == 6 and "kernels.moe_gemm_2stage: FAILED" in broken.stdout, broken.stdout


def test_verify_fails_for_two_trees(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    out = ws.run("verify", PYTHONPATH=make_split_trees(str(tmp_path)))
    assert out.returncode == 1 and "different trees" in out.stdout  # and no env file answers


def test_verify_follows_a_reused_tree(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    ambient = make_installed_tree(os.path.join(str(tmp_path), "site"), "0.2.5")
    assert ws.run(PYTHONPATH=ambient).returncode == 0
    out = ws.run("verify")  # no PYTHONPATH now: the env file's folders are what counts
    assert out.returncode == 0, out.stdout
    assert f"tree:    {ambient}" in out.stdout


def test_clean_removes_only_what_the_tool_created(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    out = ws.run("clean")
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(ws.root) and not os.path.exists(os.path.join(ws.base, "llvm-project"))
    assert not os.path.exists(ws.log)
    assert sorted(os.listdir(ws.base)) == [".flydsl_build.lock"]  # the lock file is never deleted
    assert ws.run("clean").stdout.strip().endswith("nothing to clean")


def test_clean_keeps_files_it_did_not_create(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    notes = os.path.join(ws.root, "my-notes.txt")
    with open(notes, "w") as handle:
        handle.write("mine")
    neighbour = os.path.join(ws.base, "neighbour")
    os.makedirs(neighbour)
    out = ws.run("clean")
    assert out.returncode == 0
    assert open(notes).read() == "mine" and os.path.isdir(neighbour)
    assert "kept" in out.stdout and "my-notes.txt" in out.stdout
    assert not os.path.exists(os.path.join(ws.root, "build-fly"))
    # the checkout stays the tool's (its owner record), so that the next run may use it
    assert os.listdir(os.path.join(ws.root, ".ensure_flydsl")) == ["owner.json"]
    assert not os.path.exists(ws.env_file)


def test_clean_leaves_an_adopted_checkout(ws: Workspace) -> None:
    subprocess.run(["git", "clone", "-q", ws.repo.url, ws.root], check=True)
    assert ws.run().returncode == 0
    assert ws.run("clean").returncode == 0
    assert os.path.isdir(os.path.join(ws.root, ".git")) and os.path.isfile(os.path.join(ws.root, "kernels",
                                                                                       "moe_gemm_2stage.py"))
    assert not os.path.exists(os.path.join(ws.root, ".ensure_flydsl"))


def test_clean_of_a_foreign_root_deletes_nothing(ws: Workspace) -> None:
    os.makedirs(ws.root)
    with open(os.path.join(ws.root, "x"), "w") as handle:
        handle.write("x")
    out = ws.run("clean")
    assert out.returncode == 0 and os.listdir(ws.root) == ["x"] and "did not create it" in out.stdout


def test_clean_refuses_while_a_build_runs(ws: Workspace) -> None:
    from tests.helpers.scenario import wait_for

    proc = ws.popen(FIXTURE_BUILD_SLEEP="1")  # 3 s of build after it started
    try:
        wait_for(os.path.join(ws.counter, "build.started"))
        out = ws.run("clean")
        assert out.returncode == 7 and "cleaning now would take its files from under it" in out.stderr
        assert os.path.isdir(ws.root)
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_python_api_ensure_and_activate(ws: Workspace) -> None:
    code = textwrap.dedent(
        f"""
        import json, os, sys
        import ensure_flydsl
        result = ensure_flydsl.ensure(root={ws.root!r}, repo={ws.repo.url!r}, pin="v0.2.3", strategy="source",
                                      python=sys.executable, rocm_path="/nonexistent")
        assert "flydsl" not in sys.modules  # never imported into the tool's own process
        ensure_flydsl.activate(result)
        import flydsl, kernels.moe_gemm_2stage as k
        print(json.dumps({{"how": result.how, "version": flydsl.__version__, "k": k.__file__,
                           "env": os.environ["FLYDSL_ROOT"], "moe": os.environ["VLLM_USE_FLYDSL_MOE"]}}))
        try:
            ensure_flydsl.ensure(root={ws.root!r}, jobs=0)
        except ensure_flydsl.EnsureError as exc:
            print(int(exc.code))
        """
    )
    env = {k: v for k, v in ws.env.items() if not k.startswith("FLYDSL_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    data = json.loads(first)
    assert data == {"how": "built", "version": "0.2.3", "k": os.path.join(ws.root, "kernels", "moe_gemm_2stage.py"),
                    "env": ws.root, "moe": "1"}
    assert second == "64"


def test_seed_procedure_with_ensure_flydsl(ws: Workspace) -> None:
    """The seed document's Procedure, with `ensure-flydsl` in place of `bash "$SH"`, prints one tree."""
    bindir = os.path.dirname(sys.executable)
    script = textwrap.dedent(
        """
        FR="${FLYDSL_ROOT:-/opt/flydsl/FlyDSL}"; ENV="$FR/flydsl_env.sh"; FAIL="$(dirname "$FR")/.flydsl_build.failed"
        mkdir -p "$(dirname "$FR")"
        nohup ensure-flydsl > "$(dirname "$FR")/ensure_flydsl.log" 2>&1 &   # detached
        for i in $(seq 1 300); do
          [ -f "$ENV" ]  && break
          [ -f "$FAIL" ] && { echo "flydsl build FAILED (see ensure_flydsl.log)"; break; }
          sleep 0.1
        done
        [ -f "$ENV" ] && source "$ENV" && \\
          "$PY" -c "import flydsl, kernels.moe_gemm_2stage as k; print(flydsl.__file__, k.__file__)"  # ONE tree
        wait
        """
    )
    env = dict(ws.env)
    env["PATH"] = bindir + os.pathsep + env["PATH"]
    env["PY"] = sys.executable
    env["FIXTURE_BUILD_SLEEP"] = "0.3"
    out = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    pkgs = os.path.join(ws.root, "build-fly", "python_packages")
    assert out.stdout.strip() == f"{pkgs}/flydsl/__init__.py {ws.root}/kernels/moe_gemm_2stage.py"
    log = open(ws.log).read()
    # stdout already was the log: every line is there once, build output included.
    assert log.count("wrote " + ws.env_file) == 1 and "Build complete!" in log


def test_damaged_tree_is_repaired(ws: Workspace) -> None:
    ws.env["FLYDSL_STORE"] = "off"  # built again; from the host store: test_host_store.py
    assert ws.run().returncode == 0
    os.unlink(os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "_mlir", "_mlir_libs", "_mlir.py"))
    out = ws.run("--json")
    assert out.returncode == 0, out.stderr
    assert "building it again" in out.stderr
    assert_one_tree(ws)


def test_removed_kernels_are_restored(ws: Workspace) -> None:
    import shutil

    assert ws.run().returncode == 0
    shutil.rmtree(os.path.join(ws.root, "kernels"))
    out = ws.run()
    assert out.returncode == 0, out.stderr
    assert_one_tree(ws)


def test_clean_keeps_the_llvm_build_another_root_shares(ws: Workspace) -> None:
    second = os.path.join(ws.base, "FlyDSL-second")
    assert ws.run().returncode == 0
    assert ws.run(FLYDSL_ROOT=second).returncode == 0
    llvm = os.path.join(ws.base, "llvm-project")
    out = ws.run("clean")
    assert out.returncode == 0 and os.path.isdir(llvm) and "kept " + llvm in out.stdout
    assert os.path.isdir(second) and not os.path.exists(ws.root)
    assert ws.run("clean", FLYDSL_ROOT=second).returncode == 0
    assert not os.path.exists(llvm)


def test_clean_json_lists_what_its_lines_say(ws: Workspace) -> None:
    """`clean --json` and clean's lines come from one record: every removed path and every kept line is in
    both, in the same order, and the reason is the lines joined."""
    assert ws.run().returncode == 0
    with open(os.path.join(ws.root, "my-notes.txt"), "w") as handle:
        handle.write("mine")
    out = ws.run("clean", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    said = [str(event["text"]) for event in json_lines(out.stderr) if event["event"] == "message"]
    assert data["kept"] and all(line.startswith("kept ") for line in data["kept"])
    assert any("my-notes.txt" in line for line in data["kept"]) and ws.env_file in data["removed"]
    assert said == [*data["kept"], *(f"removed {path}" for path in data["removed"])]  # nothing else said
    assert data["reason"] == "; ".join(said)
    again = json.loads(ws.run("clean", "--json").stdout)
    assert again["removed"] == [] and again["reason"].endswith("nothing to clean")
