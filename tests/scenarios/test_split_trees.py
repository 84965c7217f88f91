"""Split trees that look like one: a checkout with its own `.venv` inside it.

flydsl comes from CHECKOUT/.venv/lib/pythonX.Y/site-packages, kernels from CHECKOUT: the venv's folder is
inside the folder that holds `kernels/`, but it is not one of that tree's import folders (the folder itself
or its build-fly/python_packages), so these are two installs and must not be reused as one tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Tuple

import pytest

from ensure_flydsl.probe.gate import evaluate, one_tree
from ensure_flydsl.probe.interpreter import Interpreter, ModuleResult, Probe
from tests.helpers.flydsl_fixture import make_installed_tree, write
from tests.helpers.workspace import Workspace

REQUIRE = ("flydsl", "kernels.moe_gemm_2stage")
SITE = "/home/me/FlyDSL/.venv/lib/python3.11/site-packages"
INTERP = Interpreter("/home/me/FlyDSL/.venv/bin/python", "3.11.7", "cpython", "cpython-311",
                     "cpython-311-x86_64-linux-gnu", "linux-x86_64", "/home/me/FlyDSL/.venv", "/usr", (SITE,),
                     "/usr/lib/python3.11", "")


def _probe(flydsl: str, kernel: str) -> Probe:
    modules = (ModuleResult("flydsl", flydsl, None), ModuleResult("kernels.moe_gemm_2stage", kernel, None))
    return Probe(INTERP, modules, "0.2.5", None, "", 0.1)


@pytest.mark.parametrize("flydsl", [
    f"{SITE}/flydsl/__init__.py",  # the checkout's own venv
    "/home/me/FlyDSL/python/flydsl/__init__.py",  # the source folder, not a build's output
    "/home/me/FlyDSL/build-fly/other/flydsl/__init__.py",
    "/home/me/FlyDSL/sub/build-fly/python_packages/flydsl/__init__.py",  # another tree's build inside it
])
def test_a_folder_inside_the_tree_is_not_the_tree(flydsl: str) -> None:
    verdict = evaluate(_probe(flydsl, "/home/me/FlyDSL/kernels/moe_gemm_2stage.py"), "0.2.2", REQUIRE)
    assert not verdict.reusable and verdict.tree is None
    assert "different trees" in verdict.reason and "flydsl from " + os.path.dirname(os.path.dirname(flydsl)) \
        in verdict.reason


@pytest.mark.parametrize("flydsl, kernel, tree", [
    ("/r/build-fly/python_packages/flydsl/__init__.py", "/r/kernels/moe_gemm_2stage.py", "/r"),
    ("/r/flydsl/__init__.py", "/r/kernels/moe_gemm_2stage.py", "/r"),
    (f"{SITE}/flydsl/__init__.py", f"{SITE}/kernels/moe_gemm_2stage.py", SITE),  # both in the venv: one install
])
def test_the_trees_own_import_folders_are_one_tree(flydsl: str, kernel: str, tree: str) -> None:
    verdict = evaluate(_probe(flydsl, kernel), "0.2.2", REQUIRE)
    assert verdict.reusable and verdict.tree == tree


def test_one_tree_and_own_tree() -> None:
    from ensure_flydsl.probe.gate import own_tree

    assert own_tree("/r/build-fly/python_packages") == "/r"
    assert own_tree("/r/build-fly/python_packages/") == "/r"
    assert own_tree("/r/.venv/lib/python3.11/site-packages") == "/r/.venv/lib/python3.11/site-packages"
    assert one_tree(["/r", "/r/.venv/lib/python3.11/site-packages"]) is None
    assert one_tree(["/r/.venv/lib/python3.11/site-packages", "/r"]) is None
    assert one_tree(["/r", "/r/python"]) is None
    assert one_tree(["/r", "/r/build-fly/python_packages", "/r"]) == "/r"
    assert one_tree([]) is None


def test_one_tree_sees_through_symlinks(tmp_path: "os.PathLike[str]") -> None:
    real = os.path.join(str(tmp_path), "real")
    os.makedirs(os.path.join(real, "build-fly", "python_packages"))
    link = os.path.join(str(tmp_path), "link")
    os.symlink(real, link)
    assert one_tree([link, os.path.join(real, "build-fly", "python_packages")]) == link
    os.makedirs(os.path.join(real, ".venv"))
    assert one_tree([link, os.path.join(real, ".venv")]) is None


def _checkout_with_venv(folder: str) -> Tuple[str, str]:
    """A FlyDSL-like checkout (kernels/ at its top) holding its own venv, whose site-packages has flydsl
    (and no kernels).  Returns (checkout, the venv's python)."""
    checkout = os.path.join(folder, "FlyDSL-checkout")
    venv = os.path.join(checkout, ".venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    assert site.startswith(venv + os.sep)
    make_installed_tree(site, "0.2.5", python)
    shutil.rmtree(os.path.join(site, "kernels"))  # the venv has flydsl only
    # The checkout's kernels (its flydsl, under python/, is unbuilt and not on the path).
    installed = make_installed_tree(os.path.join(folder, "scratch"), "0.2.5", python)
    shutil.copytree(os.path.join(installed, "kernels"), os.path.join(checkout, "kernels"))
    write(os.path.join(checkout, "python", "flydsl", "__init__.py"), '__version__ = "0.2.5"\n')
    return checkout, python


@pytest.fixture
def checkout_with_venv(tmp_path: "os.PathLike[str]") -> Tuple[str, str]:
    return _checkout_with_venv(os.path.join(str(tmp_path), "work"))


def test_verify_names_the_split(ws: Workspace, checkout_with_venv: Tuple[str, str]) -> None:
    checkout, python = checkout_with_venv
    out = ws.run("verify", FLYDSL_PYTHON=python, PYTHONPATH=checkout)
    assert out.returncode == 6, out.stdout + out.stderr
    assert "different trees" in out.stdout
    assert f"kernels.moe_gemm_2stage from {checkout}" in out.stdout
    assert f"flydsl from {checkout}/.venv/lib/" in out.stdout
    data = json.loads(ws.run("verify", "--json", FLYDSL_PYTHON=python, PYTHONPATH=checkout).stdout)
    assert data["ok"] is False and data["tree"] is None


def test_ensure_does_not_reuse_a_split_as_one_tree(ws: Workspace, checkout_with_venv: Tuple[str, str]) -> None:
    checkout, python = checkout_with_venv
    out = ws.run("--json", FLYDSL_PYTHON=python, PYTHONPATH=checkout)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "built" and result["tree"] == ws.root, result
    assert "reusing the tree found" not in out.stderr and "different trees" in out.stderr
    assert ws.env_twin()["tree"] == ws.root
