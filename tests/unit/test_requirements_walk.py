"""The requirements walk (source/requirements.py) over small source trees written to tmp_path: which
imports are requirements, which are the tree's own, optional or late, and where each is first imported."""

from __future__ import annotations

import os
import subprocess
import textwrap
from typing import Dict

from ensure_flydsl.source.git import CheckoutFiles, CommitFiles
from ensure_flydsl.source.requirements import (
    Sources,
    absent_modules,
    find_requirements,
    read_sources,
    readable_checkout,
)

REQUIRE = ("flydsl", "kernels.moe_gemm_2stage")


def tree(tmp_path: "os.PathLike[str]", files: Dict[str, str]) -> str:
    """A checkout-shaped tree: python/flydsl and kernels with an __init__.py each unless given."""
    top = str(tmp_path)
    base = {"python/flydsl/__init__.py": "__version__ = '0.2.2'\n", "kernels/__init__.py": "",
            "kernels/moe_gemm_2stage.py": ""}
    base.update(files)
    for rel, text in base.items():
        path = os.path.join(top, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(textwrap.dedent(text).lstrip("\n"))
    return top


def found(top: str, require: tuple = REQUIRE) -> Dict[str, str]:  # type: ignore[type-arg]
    walk = find_requirements(require, read_sources(CheckoutFiles(top)))
    return {r.module: f"{r.file}:{r.line}" for r in walk.requirements}


def test_a_module_level_import_is_found_with_its_file_and_line(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": """
        '''doc'''
        import os
        import numpy as np
        from torch.nn import functional
        """})
    assert found(top) == {"os": "kernels/moe_gemm_2stage.py:2", "numpy": "kernels/moe_gemm_2stage.py:3",
                          "torch": "kernels/moe_gemm_2stage.py:4"}


def test_optional_and_late_imports_are_not_requirements(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": """
        from typing import TYPE_CHECKING
        try:
            import in_try
        except ImportError:
            import in_handler
        else:
            import in_else
        finally:
            import in_finally
        if TYPE_CHECKING:
            import for_typing
        if __name__ == "__main__":
            import for_main
        import sys
        if sys.version_info < (3, 11):
            import tomli
        def f():
            import in_function
        async def g():
            import in_coroutine
        class C:
            import in_class_body
            def method(self):
                import in_method
        lazy = lambda: __import__("in_lambda")
        """})
    assert found(top) == {"typing": "kernels/moe_gemm_2stage.py:1", "sys": "kernels/moe_gemm_2stage.py:14",
                          "in_class_body": "kernels/moe_gemm_2stage.py:22"}  # a class body runs at import


def test_imports_inside_with_and_loops_at_module_level_count(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": """
        import warnings
        with warnings.catch_warnings():
            import quiet_one
        for _ in range(1):
            import looped
        """})
    assert list(found(top)) == ["warnings", "quiet_one", "looped"]


def test_the_walk_follows_the_tree_packages_and_their_parents(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {
        "kernels/moe_gemm_2stage.py": "import flydsl.compiler.jit as jit\nfrom .common import helper\n",
        "kernels/common.py": "from . import shared\ndef helper(): pass\n",
        "kernels/shared.py": "import from_shared\n",
        "python/flydsl/compiler/__init__.py": "import from_compiler_init\n",
        "python/flydsl/compiler/jit.py": "from ..utils import env\nfrom ._mlir_gen import x\n",
        "python/flydsl/utils/__init__.py": "",
        "python/flydsl/utils/env.py": "import from_utils_env\n",
        "python/flydsl/unreached.py": "import never_imported\n",
    })
    walk = find_requirements(REQUIRE, read_sources(CheckoutFiles(top)))
    by_name = {r.module: r for r in walk.requirements}
    assert set(by_name) == {"from_shared", "from_compiler_init", "from_utils_env"}
    assert by_name["from_utils_env"].file == "python/flydsl/utils/env.py"
    assert by_name["from_utils_env"].via == ("kernels.moe_gemm_2stage", "flydsl.compiler.jit", "flydsl.utils.env")
    assert by_name["from_shared"].via == ("kernels.moe_gemm_2stage", "kernels.common", "kernels.shared")
    assert "python/flydsl/unreached.py" not in walk.files


def test_the_flydsl_init_chain_is_walked(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {
        "python/flydsl/__init__.py": "__version__ = '0.2.2'\nfrom .runtime import device as device\n",
        "python/flydsl/runtime/__init__.py": "from .device import *\n",
        "python/flydsl/runtime/device.py": "from os import path\n\nimport hip_runtime_binding\n",
    })
    assert found(top, ("flydsl",)) == {"os": "python/flydsl/runtime/device.py:1",
                                      "hip_runtime_binding": "python/flydsl/runtime/device.py:3"}


def test_what_the_build_makes_and_the_tree_itself_are_not_requirements(tmp_path: "os.PathLike[str]") -> None:
    # flydsl._mlir has no source file: the build (or the wheel) makes it.  kernels and flydsl are the tree's.
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": """
        import flydsl._mlir._mlir_libs._mlir
        from flydsl._mlir import ir
        import kernels
        from flydsl import __version__
        """})
    assert found(top) == {}


def test_the_first_file_that_imports_a_module_is_recorded_once(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {
        "kernels/moe_gemm_2stage.py": "import torch\nfrom . import other\n",
        "kernels/other.py": "import torch.distributed\nimport torch\n",
    })
    walk = find_requirements(REQUIRE, read_sources(CheckoutFiles(top)))
    assert [(r.module, r.file, r.line) for r in walk.requirements] == [("torch", "kernels/moe_gemm_2stage.py", 1)]


def test_a_file_that_does_not_parse_is_left_to_the_probe(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": "import numpy\nfrom . import broken\n",
                          "kernels/broken.py": "def (:\n"})
    walk = find_requirements(REQUIRE, read_sources(CheckoutFiles(top)))
    assert walk.names() == ["numpy"] and walk.unparsed == ["kernels/broken.py"]


def test_relative_imports_beyond_the_top_package_are_ignored(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": "from ... import nothing\nfrom .. import outside\n"})
    assert found(top) == {}


def test_sources_in_memory_and_on_disk_agree(tmp_path: "os.PathLike[str]") -> None:
    files = {"python/flydsl/__init__.py": "import yaml\n", "kernels/__init__.py": "",
             "kernels/moe_gemm_2stage.py": "import numpy\n", "README.md": "import not_python\n"}
    top = tree(tmp_path, files)
    assert [find_requirements(REQUIRE, s).names() for s in (Sources(files), read_sources(CheckoutFiles(top)))] == \
        [["yaml", "numpy"]] * 2
    assert readable_checkout(top) and not readable_checkout(os.path.join(top, "python"))


# -- issue 19 item 12 and issue 17 item 2 ------------------------------------------------------------------


def test_a_module_at_the_checkouts_top_is_the_trees_and_is_walked(tmp_path: "os.PathLike[str]") -> None:
    """The env file puts the checkout first on PYTHONPATH: ``top_helper.py`` and ``tools/`` there are the
    tree's own, not third-party; what they import at module level is followed."""
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": "import top_helper\nimport tools.thing\nimport numpy\n",
                          "top_helper.py": "import from_top_helper\n",
                          "tools/__init__.py": "", "tools/thing.py": "import from_tools\n"})
    assert list(found(top)) == ["numpy", "from_top_helper", "from_tools"]
    listing = {rel: open(os.path.join(top, rel)).read() for rel in
               ("python/flydsl/__init__.py", "kernels/__init__.py", "kernels/moe_gemm_2stage.py", "top_helper.py",
                "tools/__init__.py", "tools/thing.py")}
    assert find_requirements(REQUIRE, Sources(listing)).names() == ["numpy", "from_top_helper", "from_tools"]
    # Read from a commit too: before, only the packages' files and the top's modules were read there, so tools/
    # was a package of the tree without files and what it imports was missed.
    subprocess.run(["git", "init", "-q", top], check=True)
    subprocess.run(["git", "-C", top, "add", "-A"], check=True)
    subprocess.run(["git", "-C", top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"], check=True)
    commit = subprocess.run(["git", "-C", top, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    sources = read_sources(CommitFiles(top, commit.stdout.strip()))
    assert find_requirements(REQUIRE, sources).names() == ["numpy", "from_top_helper", "from_tools"]


def test_an_import_inside_suppress_of_an_import_error_is_optional(tmp_path: "os.PathLike[str]") -> None:
    top = tree(tmp_path, {"kernels/moe_gemm_2stage.py": """
        import contextlib
        from contextlib import suppress
        with contextlib.suppress(ImportError):
            import optional_one
        with suppress(ModuleNotFoundError, AttributeError):
            import optional_two
        with suppress(KeyError):
            import still_needed
        """})
    assert list(found(top)) == ["contextlib", "still_needed"]


def test_required_modules_missing_from_the_sources_and_where_they_are(tmp_path: "os.PathLike[str]") -> None:
    files = {"python/flydsl/__init__.py": "", "kernels/__init__.py": "", "kernels/moe/__init__.py": "",
             "kernels/moe/moe_gemm_2stage.py": "", "kernels/gemm/moe_gemm_2stage/__init__.py": "",
             "kernels/ns/tool.py": "", "kernels/flat.py": ""}
    top = tree(tmp_path, files)
    os.unlink(os.path.join(top, "kernels/moe_gemm_2stage.py"))  # tree() writes the flat one by default
    for sources in (Sources(files), read_sources(CheckoutFiles(top))):
        absent = absent_modules(("flydsl", "flydsl._mlir", "kernels.moe_gemm_2stage", "kernels.flat", "kernels.ns",
                                 "kernels.ns.tool", "kernels.gone", "kernels.moe.gone", "numpy"), sources)
        assert [(a.module, a.instead) for a in absent] == [
            ("kernels.moe_gemm_2stage", (("kernels.gemm.moe_gemm_2stage", "kernels/gemm/moe_gemm_2stage/__init__.py"),
                                         ("kernels.moe.moe_gemm_2stage", "kernels/moe/moe_gemm_2stage.py"))),
            ("kernels.gone", ()), ("kernels.moe.gone", ())]


def test_the_listing_of_sources_in_memory() -> None:
    sources = Sources({"a/b.py": ""}, listing=("a/b.py", "a/c/d.py", "e.py"))
    assert sources.entries("") == ["a/", "e.py"] and sources.entries("a") == ["b.py", "c/"]
    assert sources.entries("x") is None and sources.has("a/c/d.py") and "a/c/d.py" not in sources.files
