"""The warm-call fingerprint: a call may skip the import probe only when nothing it depends on changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict

from ensure_flydsl.probe.fingerprint import watch_folders
from ensure_flydsl.warm import folder_listing
from tests.helpers.scenario import assert_one_tree, ensure_json
from tests.helpers.workspace import Workspace


def warm(result: Dict[str, object]) -> bool:
    """Answered from the fingerprint, without a probe."""
    return result["action"] == "warm" and set(result["durations"]) == {"fingerprint"}  # type: ignore[arg-type]


def test_second_call_is_answered_from_the_fingerprint(ws: Workspace) -> None:
    first = ensure_json(ws)
    assert first["action"] == "provisioned"
    second = ensure_json(ws)
    assert warm(second)
    for key in ("how", "tree", "version", "python", "abi", "commit", "files", "prepend", "env_file"):
        assert second[key] == first[key], key
    out = ws.run()
    assert "nothing changed since the last success (fingerprint)" in out.stdout


def previous_request(ws: Workspace) -> Dict[str, object]:
    """The request as the tool wrote it before it was a record (``Settings.request()`` made this dict)."""
    return {"root": ws.root, "min_version": "0.2.2", "pin": ws.repo.commits["dev"], "repo": ws.repo.url,
            "python": sys.executable, "require": ["flydsl", "kernels.moe_gemm_2stage"], "strategy": "source",
            "mlir_path": None, "shim_dir": None, "vllm_moe": True, "exact_pin": False}


def rewrite_twin(ws: Workspace, request: Dict[str, object]) -> None:
    """The twin with ``request`` in it, written as the tool writes it."""
    twin = ws.env_twin()
    twin["request"] = request
    with open(ws.env_json, "w") as handle:
        handle.write(json.dumps(twin, indent=2, sort_keys=True) + "\n")


def test_a_twin_the_previous_version_wrote_still_answers_warm(ws: Workspace) -> None:
    """The request is a record now; its JSON is the dict the previous version wrote, key for key, so the env
    file and its twin that version left answer this one warm."""
    ensure_json(ws)
    twin = ws.env_twin()
    assert twin["request"] == previous_request(ws)
    rewrite_twin(ws, previous_request(ws))
    assert warm(ensure_json(ws))


def test_an_older_twin_says_why_it_is_not_read_and_the_full_run_answers(ws: Workspace) -> None:
    """A twin whose request is not one this version writes (the tool before --exact-pin wrote no exact_pin;
    a planted one holds a relative root): never warm, never a traceback; the full run says in one line that it
    took the env file away, probes the root's tree and publishes it again."""
    ensure_json(ws)
    for request in ({k: v for k, v in previous_request(ws).items() if k != "exact_pin"},
                    dict(previous_request(ws), root="FlyDSL"), dict(previous_request(ws), strategy="fastest")):
        rewrite_twin(ws, request)
        again = ensure_json(ws)
        assert again["action"] == "verified" and "probe" in again["durations"], again
        assert (f"took away {ws.env_file}: it has no JSON twin this version can read (none, a torn one, or "
                "another version's)") in again["_stderr"], again["_stderr"]
        assert ws.env_twin()["request"] == previous_request(ws)
        assert warm(ensure_json(ws))


def test_verify_forces_the_full_probe(ws: Workspace) -> None:
    ensure_json(ws)
    verified = ensure_json(ws, "--verify")
    assert not warm(verified) and verified["action"] == "verified" and "probe" in verified["durations"]
    assert not warm(ensure_json(ws, FLYDSL_VERIFY="1"))
    assert warm(ensure_json(ws))


def test_a_file_added_removed_or_changed_in_the_tree_means_a_probe(ws: Workspace) -> None:
    ensure_json(ws)
    packages = os.path.join(ws.root, "build-fly", "python_packages", "flydsl")
    extra = os.path.join(packages, "extra.py")
    with open(extra, "w") as handle:
        handle.write("x = 1\n")
    assert not warm(ensure_json(ws))
    assert warm(ensure_json(ws))
    with open(os.path.join(ws.root, "kernels", "moe_gemm_2stage.py"), "a") as handle:
        handle.write("\n")
    result = ensure_json(ws)
    assert not warm(result)
    os.unlink(extra)
    assert not warm(ensure_json(ws))


def test_pycache_written_by_imports_does_not_spoil_the_fingerprint(ws: Workspace) -> None:
    ensure_json(ws)
    out = subprocess.run(["bash", "-c", f'. "$1" && {sys.executable} -c "import kernels.moe_gemm_2stage"', "bash",
                          ws.env_file], env={"PATH": os.environ["PATH"]}, cwd="/")
    assert out.returncode == 0
    assert os.path.isdir(os.path.join(ws.root, "kernels", "__pycache__"))
    assert warm(ensure_json(ws))


def test_a_damaged_tree_is_detected_and_repaired(ws: Workspace) -> None:
    ws.env["FLYDSL_STORE"] = "off"  # built again; from the host store: test_host_store.py
    ensure_json(ws)
    os.unlink(os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "_mlir", "_mlir_libs", "_mlir.py"))
    out = ws.run("--json")
    assert out.returncode == 0, out.stderr
    repaired = json.loads(out.stdout)
    assert repaired["action"] == "provisioned" and "building it again" in out.stderr
    assert_one_tree(ws)
    assert warm(ensure_json(ws))


def test_the_callers_pythonpath_matters(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    ensure_json(ws)
    other = os.path.join(str(tmp_path), "elsewhere")
    os.makedirs(other)
    assert not warm(ensure_json(ws, PYTHONPATH=other))
    assert warm(ensure_json(ws, PYTHONPATH=other))
    assert not warm(ensure_json(ws))  # back to no PYTHONPATH: another probe


def test_a_relative_pythonpath_is_read_from_the_working_folder(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """Python makes a relative PYTHONPATH entry absolute from where it starts (an empty one is that folder): the
    same text from another folder puts other modules before the standard library, so it is another probe."""
    folders = [os.path.join(str(tmp_path), name) for name in ("a", "b")]
    for folder in folders:
        os.makedirs(os.path.join(folder, "rel"))
    ensure_json(ws, cwd=folders[0], PYTHONPATH="rel")
    assert warm(ensure_json(ws, cwd=folders[0], PYTHONPATH="rel"))
    assert not warm(ensure_json(ws, cwd=folders[1], PYTHONPATH="rel"))
    assert warm(ensure_json(ws, cwd=folders[1], PYTHONPATH="rel"))


def test_settings_matter(ws: Workspace) -> None:
    ensure_json(ws)
    assert not warm(ensure_json(ws, "--no-vllm-moe"))
    ensure_json(ws)
    # The env file answers every request its tree passes the gate of (a lower floor, fewer modules, another
    # pin): nothing changed, so warm; a module it was never probed for is not.
    assert warm(ensure_json(ws, FLYDSL_MIN_VERSION="0.2.1"))
    assert warm(ensure_json(ws, FLYDSL_REQUIRE="flydsl"))
    assert warm(ensure_json(ws, FLYDSL_PIN="v0.2.3"))
    assert not warm(ensure_json(ws, FLYDSL_REQUIRE="flydsl,kernels"))
    assert not warm(ensure_json(ws, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1"))


def test_the_interpreter_matters(ws: Workspace, venv_python: str) -> None:
    ensure_json(ws, FLYDSL_PYTHON=venv_python)
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))
    # The venv's interpreter replaced by another file (an upgrade in place).
    real = os.path.realpath(venv_python)
    os.unlink(venv_python)
    shutil.copy2(real, venv_python)
    assert not warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))


def test_a_venvs_configuration_matters(ws: Workspace, venv_python: str) -> None:
    """pyvenv.cfg decides which site folders the venv's interpreter reads (its binary is the base's): edited in
    place, the site folders the twin watches may no longer be the ones an import reads."""
    ensure_json(ws, FLYDSL_PYTHON=venv_python)
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))
    config = os.path.join(os.path.dirname(os.path.dirname(venv_python)), "pyvenv.cfg")
    with open(config) as handle:
        text = handle.read()
    with open(config, "w") as handle:
        handle.write(text.replace("include-system-site-packages = false", "include-system-site-packages = true"))
    assert not warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))
    assert warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))


def test_the_home_folder_matters(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """HOME names the user site folder an interpreter outside a venv reads (its usercustomize, its .pth files):
    another HOME is another probe, not the site folders of the HOME the twin was probed under."""
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    homes = [os.path.join(str(tmp_path), name) for name in ("home-a", "home-b")]
    for home in homes:
        os.makedirs(home)
    ensure_json(ws, FLYDSL_PYTHON=base, HOME=homes[0])
    assert warm(ensure_json(ws, FLYDSL_PYTHON=base, HOME=homes[0]))
    user_site = subprocess.run([base, "-c", "import site; print(site.getusersitepackages())"], env=dict(
        ws.env, HOME=homes[1]), stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    assert user_site.startswith(homes[1])
    os.makedirs(user_site)
    with open(os.path.join(user_site, "usercustomize.py"), "w") as handle:
        handle.write("import sys\nsys.path.insert(0, '/nonexistent')\n")
    assert not warm(ensure_json(ws, FLYDSL_PYTHON=base, HOME=homes[1]))


def test_the_site_folders_matter(ws: Workspace, venv_python: str) -> None:
    ensure_json(ws, FLYDSL_PYTHON=venv_python)
    site = subprocess.run([venv_python, "-c", "import site; print(site.getsitepackages()[0])"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    time.sleep(0.01)
    with open(os.path.join(site, "newly_installed.py"), "w") as handle:
        handle.write("")
    assert not warm(ensure_json(ws, FLYDSL_PYTHON=venv_python))


def test_a_rebuild_changes_the_fingerprint(ws: Workspace) -> None:
    ws.env["FLYDSL_EXACT_PIN"] = "1"
    ensure_json(ws)
    assert ensure_json(ws, FLYDSL_PIN="v0.2.3")["action"] == "provisioned"
    assert warm(ensure_json(ws, FLYDSL_PIN="v0.2.3"))
    assert ensure_json(ws)["action"] == "provisioned"  # back to the first pin: its build is gone


def test_a_reused_ambient_tree_is_fingerprinted_too(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    from tests.helpers.flydsl_fixture import make_installed_tree

    ambient = make_installed_tree(os.path.join(str(tmp_path), "site"), "0.2.5")
    assert ensure_json(ws, PYTHONPATH=ambient)["how"] == "reused"
    assert warm(ensure_json(ws, PYTHONPATH=ambient))
    os.unlink(os.path.join(ambient, "kernels", "moe_gemm_2stage.py"))
    assert ensure_json(ws, PYTHONPATH=ambient)["how"] == "built"


def test_an_edited_env_file_is_rewritten(ws: Workspace) -> None:
    ensure_json(ws)
    with open(ws.env_file, "a") as handle:
        handle.write("export SOMETHING=else\n")
    assert not warm(ensure_json(ws))
    assert "SOMETHING" not in open(ws.env_file).read()


def test_watch_folders_cover_the_tree() -> None:
    files = {"flydsl": "/r/build-fly/python_packages/flydsl/__init__.py",
             "kernels.moe_gemm_2stage": "/r/kernels/moe_gemm_2stage.py"}
    folders = {"flydsl": "/r/build-fly/python_packages", "kernels.moe_gemm_2stage": "/r"}
    assert watch_folders("/r", files, folders) == ["/r/build-fly/python_packages", "/r/kernels"]


def test_folder_listing_sees_size_mtime_and_names_but_not_bytecode(tmp_path: "os.PathLike[str]") -> None:
    folder = os.path.join(str(tmp_path), "pkg")
    os.makedirs(os.path.join(folder, "sub", "__pycache__"))
    path = os.path.join(folder, "sub", "a.py")
    with open(path, "w") as handle:
        handle.write("a")
    first = folder_listing(folder)
    assert folder_listing(folder) == first
    with open(os.path.join(folder, "sub", "__pycache__", "a.cpython-311.pyc"), "w") as handle:
        handle.write("")
    assert folder_listing(folder) == first
    os.utime(path, ns=(1, 1))
    assert folder_listing(folder) != first
    assert folder_listing(os.path.join(str(tmp_path), "none")) is None


def test_every_python_variable_matters(ws: Workspace) -> None:
    """PYTHONWARNINGS=error fails an import that warns: the probe ran without it, so with it is another probe."""
    ensure_json(ws)
    assert not warm(ensure_json(ws, PYTHONWARNINGS="error"))
    assert warm(ensure_json(ws, PYTHONWARNINGS="error"))
    assert not warm(ensure_json(ws))


def test_a_file_rewritten_with_its_size_and_mtime_kept_means_a_probe(ws: Workspace) -> None:
    """`cp -p`, `rsync -a` and `tar x` keep a file's mtime; a rewrite of the same size is then told by its ctime
    (which no one sets)."""
    ensure_json(ws)
    path = os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")
    st = os.stat(path)
    with open(path, "rb") as handle:
        text = handle.read()
    time.sleep(0.01)
    with open(path, "wb") as handle:
        handle.write(text[:-1] + (b" " if text[-1:] != b" " else b"\n"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size
    assert not warm(ensure_json(ws))
    assert warm(ensure_json(ws))
