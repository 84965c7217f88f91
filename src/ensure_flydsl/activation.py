"""``activate()``: apply a result to this process, idempotently, and never on top of another tree's modules."""

from __future__ import annotations

import os
import sys
from typing import Optional, Tuple

from ensure_flydsl.errors import AlreadyImported
from ensure_flydsl.result import Result
from ensure_flydsl.support.pythonpath import without_folders


def activate(result: Result) -> None:
    conflict = imported_elsewhere(result)
    if conflict is not None:
        raise AlreadyImported(*conflict)
    for name, value in result.env.items():
        if name != "PYTHONPATH":
            os.environ[name] = value
    # From the PYTHONPATH as it is now (what sourcing the env file now would give), not the one ensure() saw.
    rest = without_folders(os.environ.get("PYTHONPATH"), result.prepend)
    os.environ["PYTHONPATH"] = os.pathsep.join(list(result.prepend) + ([rest] if rest else []))
    sys.path[:] = list(result.prepend) + [entry for entry in sys.path if entry not in result.prepend]


def imported_elsewhere(result: Result) -> Optional[Tuple[str, str, str]]:
    """(module, the file it was imported from, the tree's file) for the first of the tree's modules already
    imported in this process from another file; None if there is none."""
    from ensure_flydsl.probe.gate import TREE_PACKAGES, package_folder, same_folder

    for name, tree_file in sorted(result.files.items()):
        top = name.split(".")[0]
        if top not in TREE_PACKAGES:
            continue
        module_file = _file_of(name)
        if module_file is not None and not same_folder(module_file, tree_file):
            return name, module_file, tree_file
        package_file = _file_of(top) if top != name else None
        if package_file is not None and not same_folder(package_folder(top, package_file),
                                                        package_folder(name, tree_file)):
            return top, package_file, tree_file
    return None


def _file_of(name: str) -> Optional[str]:
    """The file a module in sys.modules came from; for a namespace package (a folder without
    ``__init__.py``), the first folder of its path.  None if it is not imported.

    A namespace package's path is computed again when sys.path changes, but only from the other namespace
    portions: the tree's regular ``kernels`` package never joins it, so ``import kernels.moe_gemm_2stage``
    after the activation would still look in the old folder and fail."""
    module = sys.modules.get(name)
    if module is None:
        return None
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        return file
    try:
        portions = [str(entry) for entry in getattr(module, "__path__", None) or ()]
    except Exception:  # a module's __path__ is its own business: anything it raises means "unknown"
        return None
    return portions[0] if portions else None


