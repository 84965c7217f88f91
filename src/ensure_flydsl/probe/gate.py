"""The reuse decision, pure: every required module imports, all from one tree, and the release segment of
``flydsl.__version__`` is at least the floor (one that cannot be parsed fails the gate)."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.version import InvalidVersion

from ensure_flydsl.layout import BUILD_DIR, PACKAGE_SOURCES, PACKAGES_DIR
from ensure_flydsl.probe.results import Probe
from ensure_flydsl.settings import release_at_least


@dataclass(frozen=True)
class Verdict:
    reusable: bool
    reason: str
    tree: Optional[str] = None  # the one folder that holds every imported module, when there is one
    version: Optional[str] = None
    files: Dict[str, str] = field(default_factory=dict)
    folders: Dict[str, str] = field(default_factory=dict)
    # Whether one of them is a folder the probe put first on PYTHONPATH (a root's: it shadows any other copy).
    from_first: bool = False


def package_folder(module: str, file: str) -> str:
    """The folder on sys.path ``module`` came from: X for ``X/kernels/moe.py``, P for ``P/flydsl/__init__.py``."""
    levels = module.count(".") + 1
    if os.path.basename(file).startswith("__init__."):
        levels += 1
    folder = os.path.normpath(file)
    for _ in range(levels):
        folder = os.path.dirname(folder)
    return folder


def is_within(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def own_tree(folder: str) -> str:
    """The tree an import folder belongs to: X for X/build-fly/python_packages, else the folder itself."""
    norm = os.path.normpath(folder)
    parent, leaf = os.path.split(norm)
    grand, middle = os.path.split(parent)
    return grand if (middle, leaf) == (BUILD_DIR, PACKAGES_DIR) else norm


# The top-level packages of a FlyDSL tree: with a tree first on PYTHONPATH they shadow any other copy, and
# one already imported from elsewhere stays in sys.modules whatever sys.path says.
TREE_PACKAGES = tuple(name for name, _ in PACKAGE_SOURCES)


def same_folder(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def one_tree(folders: Sequence[str]) -> Optional[str]:
    """The tree every folder in ``folders`` is an import folder of, or None.  ROOT/build-fly/python_packages
    and ROOT are one tree; ROOT/.venv/lib/.../site-packages and ROOT are two installs."""
    real = {own_tree(os.path.realpath(f)) for f in folders}
    if len(real) != 1:  # none, or more than one
        return None
    # Name the tree as the caller spelled it (the root may sit behind a symlink such as /tmp).
    spelled = [t for t in (own_tree(f) for f in folders) if os.path.realpath(t) in real]
    return min(spelled, key=len) if spelled else real.pop()


def evaluate(probe: Probe, floor: str, require: Sequence[str], first: Sequence[str] = ()) -> Verdict:
    """The gate's verdict on what ``probe`` saw; ``first``: the folders it put first on PYTHONPATH."""
    files = {m.name: m.file for m in probe.modules if m.file}
    folders = {name: package_folder(name, path) for name, path in files.items()}
    from_first = any(same_folder(folder, own) for folder in folders.values() for own in first)
    verdict = functools.partial(Verdict, files=files, folders=folders, from_first=from_first)
    failed = [m for m in probe.modules if m.error or not m.file]
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return verdict(False, f"{failed[0].name} does not import: {failed[0].error}{more}")
    tree = one_tree(list(folders.values()))
    if tree is None:
        where = ", ".join(f"{name} from {folder}" for name, folder in folders.items())
        return verdict(False, f"the modules come from different trees ({where})")
    verdict = functools.partial(verdict, tree=tree, version=probe.version)
    if probe.version is None:
        why = probe.version_error or "flydsl has no __version__"
        return verdict(False, f"{why}; cannot check it against the floor {floor}")
    try:
        ok = release_at_least(probe.version, floor)
    except InvalidVersion:
        return verdict(False, f"flydsl.__version__ {probe.version!r} cannot be parsed, so it cannot be shown to be "
                       f">= {floor}")
    if not ok:
        return verdict(False, f"flydsl {probe.version} in {tree} is older than the floor {floor}")
    return verdict(True, f"flydsl {probe.version} >= {floor} and {', '.join(require)} import from one tree: {tree}")


def imported_elsewhere(files: Mapping[str, str]) -> Optional[Tuple[str, str, str]]:
    """(module, its file, the tree's file) for the first of a tree's modules (``files``: each one's file) that
    this process imported from elsewhere, or None (``activate()`` refuses to mix two trees)."""
    for name, tree_file in sorted(files.items()):
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
    """A module's file; for a namespace package, its first folder (sys.path changes never reach it)."""
    module = sys.modules.get(name)  # None: not imported, and neither attribute below is there
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        return file
    try:
        portions = [str(entry) for entry in getattr(module, "__path__", None) or ()]
    except Exception:  # a module's __path__ is its own business: anything it raises means "unknown"
        return None
    return portions[0] if portions else None


def shadow_candidates(require: Sequence[str]) -> List[str]:
    """The names in the caller's working folder that would shadow the tree's packages (shadowing's, warm.py's)."""
    try:
        here = os.getcwd()
    except OSError:
        return []
    names = dict.fromkeys(["flydsl", *(module.split(".")[0] for module in require)])
    return [path for name in names for path in (os.path.join(here, name), os.path.join(here, f"{name}.py"))]


def shadowing(require: Sequence[str]) -> List[str]:
    """What in the caller's working folder Python imports instead of the tree (first on the path for `python -c`)."""
    found = [path for path in shadow_candidates(require) if os.path.exists(path)]
    return [f"{path} is imported instead of the tree by `python -c` and scripts run in {os.path.dirname(path)} "
            "(Python puts that folder first): import from another folder (`cd /`), or run `python -P` (3.11+)"
            for path in found]
