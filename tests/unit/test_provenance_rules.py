"""The pure parts of the release wheel's provenance: the comparison of a wheel (a zip made here) with a
checkout's python/flydsl, its one-line summary, and whose fault a failed probe of an installed wheel is."""

from __future__ import annotations

import os
from typing import Dict, Optional

from ensure_flydsl.probe.results import Interpreter, ModuleResult, Probe
from ensure_flydsl.ways.release.provider import wheel_fault
from ensure_flydsl.ways.release.wheels import check_provenance
from tests.helpers.small_wheel import make_sources, make_wheel


def test_identical_sources_are_proven_and_wheel_only_files_are_not_compared(tmp_path: "os.PathLike[str]") -> None:
    src = {"__init__.py": b"__version__ = '1.0'\n", "sub/mod.py": b"X = 1\n"}
    sources = make_sources(os.path.join(str(tmp_path), "flydsl"), src)
    wheel = make_wheel(os.path.join(str(tmp_path), "w.whl"), {
        **{"flydsl/" + k: v for k, v in src.items()},
        "flydsl/_mlir/_mlir_libs/_mlir.so": b"\x7fELF", "flydsl-1.0.dist-info/RECORD": b""})
    found = check_provenance(wheel, sources, sorted(src))
    assert found.proven and found.summary() == "all 2 files are byte-identical"


def test_changed_and_missing_files_are_counted_and_named(tmp_path: "os.PathLike[str]") -> None:
    src = {"__init__.py": b"a\n", "b.py": b"b\n", "c.py": b"c\n"}
    sources = make_sources(os.path.join(str(tmp_path), "flydsl"), src)
    wheel = make_wheel(os.path.join(str(tmp_path), "w.whl"), {"flydsl/__init__.py": b"A\n", "flydsl/b.py": b"b\n"})
    found = check_provenance(wheel, sources, sorted(src))
    assert not found.proven
    assert found.summary() == ("1 of 3 files differ, e.g. flydsl/__init__.py; "
                               "1 of 3 files are not in the wheel, e.g. flydsl/c.py")


def test_same_size_other_bytes_differ(tmp_path: "os.PathLike[str]") -> None:
    sources = make_sources(os.path.join(str(tmp_path), "flydsl"), {"x.py": b"abc"})
    wheel = make_wheel(os.path.join(str(tmp_path), "w.whl"), {"flydsl/x.py": b"abd"})
    assert check_provenance(wheel, sources, ["x.py"]).differ == ("x.py",)


def test_nothing_to_compare_proves_nothing(tmp_path: "os.PathLike[str]") -> None:
    wheel = make_wheel(os.path.join(str(tmp_path), "w.whl"), {"flydsl/x.py": b""})
    found = check_provenance(wheel, str(tmp_path), [])
    assert not found.proven and "no files in python/flydsl" in found.summary()


INTERPRETER = Interpreter(executable="/usr/bin/python3", version="3.11.7", implementation="cpython",
                          cache_tag="cpython-311", soabi="cpython-311-x86_64-linux-gnu",
                          platform="linux-x86_64", prefix="/usr", base_prefix="/usr", site_dirs=(), stdlib="",
                          include="")


def probe(error: Optional[str]) -> Probe:
    modules = (ModuleResult("flydsl", "/x/flydsl/__init__.py", None),
               ModuleResult("kernels.moe_gemm_2stage", None if error else "/x/kernels/moe_gemm_2stage.py", error))
    return Probe(interpreter=INTERPRETER, modules=modules, version="0.2.2", version_error=None, pythonpath="",
                 seconds=0.1)


def tree(tmp_path: "os.PathLike[str]") -> Dict[str, str]:
    """A checkout's python/flydsl and the packages folder the wheel installed into."""
    base = str(tmp_path)
    sources = make_sources(os.path.join(base, "python", "flydsl"), {"__init__.py": b"", "compiler/__init__.py": b""})
    packages = os.path.join(base, "build-fly", "python_packages")
    make_sources(os.path.join(packages, "flydsl"), {"__init__.py": b"", "compiler/__init__.py": b"",
                                                   "_mlir/_mlir_libs/_mlir.cpython-312-x86_64-linux-gnu.so": b""})
    return {"sources": sources, "packages": packages}


def test_a_generated_module_built_for_another_abi_is_the_wheels_fault(tmp_path: "os.PathLike[str]") -> None:
    t = tree(tmp_path)
    for error in ("ModuleNotFoundError: No module named 'flydsl._mlir._mlir_libs._mlir'",
                  "ImportError: cannot import name 'ir' from 'flydsl._mlir._mlir_libs._mlir' (unknown location)"):
        fault = wheel_fault(probe(error), t["packages"], t["sources"])
        assert fault == f"kernels.moe_gemm_2stage does not import: {error}"


def test_a_wheel_file_that_does_not_load_is_the_wheels_fault(tmp_path: "os.PathLike[str]") -> None:
    t = tree(tmp_path)
    so = os.path.join(t["packages"], "flydsl", "_mlir", "_mlir_libs", "_mlir.cpython-312-x86_64-linux-gnu.so")
    assert wheel_fault(probe(f"ImportError: {so}: file too short"), t["packages"], t["sources"])


def test_what_a_source_build_would_share_is_not_the_wheels_fault(tmp_path: "os.PathLike[str]") -> None:
    t = tree(tmp_path)
    source_file = os.path.join(t["packages"], "flydsl", "compiler", "__init__.py")
    for error in ("ModuleNotFoundError: No module named 'torch'",
                  "ModuleNotFoundError: No module named 'flydsl.not_in_the_wheel'",
                  "ImportError: libamdhip64.so.6: cannot open shared object file: No such file or directory",
                  f"ImportError: cannot import name 'x' from 'flydsl.compiler' ({source_file})",
                  "ImportError: cannot import name 'y' from 'torch' (/usr/lib/python3/torch/__init__.py)"):
        assert wheel_fault(probe(error), t["packages"], t["sources"]) is None, error


def test_a_missing_third_party_module_outweighs_a_wheel_fault(tmp_path: "os.PathLike[str]") -> None:
    t = tree(tmp_path)
    both = Probe(interpreter=INTERPRETER, modules=(
        ModuleResult("flydsl", None, "ModuleNotFoundError: No module named 'numpy'"),
        ModuleResult("kernels.moe_gemm_2stage", None,
                     "ModuleNotFoundError: No module named 'flydsl._mlir._mlir_libs._mlir'")), version=None,
                     version_error=None, pythonpath="", seconds=0.1)
    assert wheel_fault(both, t["packages"], t["sources"]) is None
