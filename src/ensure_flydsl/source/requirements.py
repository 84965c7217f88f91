"""The third-party modules a pin's code imports unconditionally, read from its sources with ``ast``.

Starting from the required modules, every module-level import is followed through the tree's own packages
(each parent package's ``__init__.py`` too, as Python runs them); what the walk reaches outside those
packages is a requirement, recorded with the first file and line that imports it.  An import the module
treats as optional or late is not one: inside any ``try`` (the module handles its absence), a function or
method (runs only when called), or an ``if`` (``TYPE_CHECKING``, a version or platform test, ``__main__``).
Reporting a module the code can do without would refuse a tree that works; one missed here is still caught
by the final probe.  A module of a tree package that has no source file (``flydsl._mlir``) is the build's,
not a requirement.  The standard library is left to the caller: only the target interpreter knows its own.

Pure: the sources come from a :class:`Sources` (a checkout, or a commit read with git); nothing is imported.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections import deque
from typing import Deque, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

from ensure_flydsl.layout import PACKAGE_SOURCES
from ensure_flydsl.source.needs import _git, _git_path, read_blobs, resolve_in
from ensure_flydsl.support.processes import CommandFailed


@dataclasses.dataclass(frozen=True)
class Requirement:
    """A top-level module outside the tree, the first file (relative to the tree) and line importing it,
    and the chain of the tree's modules from a required module to that file."""

    module: str
    file: str
    line: int
    via: Tuple[str, ...]

    def where(self) -> str:
        return f"{self.file} line {self.line}"


class Sources(Protocol):
    """The pin's Python sources: which files exist (paths relative to the tree, ``/``-separated), and
    their text (None when unreadable); ``where`` says where they are read from."""

    @property
    def where(self) -> str: ...

    def has(self, rel: str) -> bool: ...

    def read(self, rel: str) -> Optional[str]: ...


@dataclasses.dataclass(frozen=True)
class FileSources:
    """Sources held in memory (a commit read with git, or a test's tree)."""

    files: Mapping[str, str]
    where: str = "memory"

    def has(self, rel: str) -> bool:
        return rel in self.files

    def read(self, rel: str) -> Optional[str]:
        return self.files.get(rel)


@dataclasses.dataclass(frozen=True)
class CheckoutSources:
    """Sources read from a checkout on disk, file by file as the walk reaches them."""

    top: str

    @property
    def where(self) -> str:
        return f"checkout {self.top}"

    def has(self, rel: str) -> bool:
        return os.path.isfile(os.path.join(self.top, rel))

    def read(self, rel: str) -> Optional[str]:
        try:
            with open(os.path.join(self.top, rel), "rb") as handle:
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return None


def readable_checkout(top: str) -> bool:
    """Whether ``top`` holds the sources of every tree package (a checkout of the pin)."""
    return all(os.path.isfile(os.path.join(top, folder, "__init__.py")) for _, folder in PACKAGE_SOURCES)


# -- resolving a module name to its source file -------------------------------------------------------------


def source_file(module: str, sources: Sources,
                packages: Mapping[str, str]) -> Optional[str]:
    """The file of ``module`` (``pkg/a.py`` or ``pkg/a/__init__.py``) when it is one of the tree's, else None."""
    parts = module.split(".")
    folder = packages.get(parts[0])
    if folder is None:
        return None
    base = "/".join([folder, *parts[1:]])
    for rel in (f"{base}/__init__.py", f"{base}.py"):
        if sources.has(rel):
            return rel
    return None


def _absolute(module: str, is_package: bool, level: int, name: Optional[str]) -> Optional[str]:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(parts) - 1:
        return None  # beyond the top-level package: an error at import time, not a requirement
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def _prefixes(name: str) -> Iterator[str]:
    """``a``, ``a.b``, ``a.b.c`` for ``a.b.c``: importing it runs each package's ``__init__`` on the way."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


# -- which statements run when the module is imported -------------------------------------------------------


def unconditional_imports(tree: ast.Module) -> Iterator[ast.stmt]:
    """The import statements that run whenever the module is imported: its body and class bodies, and
    ``with``/``for``/``while`` bodies at that level; not ``try``, ``if``, ``match``, functions."""
    pending: List[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.ClassDef):
            pending[:0] = node.body
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            pending[:0] = node.body
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            pending[:0] = node.body  # the body may run zero times, but an import in it is not optional
        # ast.Try (and TryStar), ast.If, ast.Match, functions: the module treats those imports as optional


def _imported_names(node: ast.stmt, module: str, is_package: bool) -> Iterator[Tuple[str, bool]]:
    """(absolute name, may be an attribute) for each module ``node`` imports: ``from a import b`` names
    ``a`` and ``a.b`` (a submodule or just an attribute of ``a``)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, False
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(module, is_package, node.level, node.module)
        if base is None:
            return
        yield base, False
        for alias in node.names:
            if alias.name != "*":
                yield f"{base}.{alias.name}", True


# -- the walk ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Walk:
    """The outcome: requirements in the order first met, the tree's files read, and files that did not parse."""

    requirements: List[Requirement] = dataclasses.field(default_factory=list)
    files: List[str] = dataclasses.field(default_factory=list)
    unparsed: List[str] = dataclasses.field(default_factory=list)

    def names(self) -> List[str]:
        return [r.module for r in self.requirements]


def find_requirements(required: Sequence[str], sources: Sources,
                      packages: Optional[Mapping[str, str]] = None) -> Walk:
    """Walk the module-level imports from ``required`` through the tree's packages (``packages``: top-level
    name -> folder in the tree; by default the pin's own, :data:`ensure_flydsl.layout.PACKAGE_SOURCES`)."""
    folders = dict(PACKAGE_SOURCES) if packages is None else dict(packages)
    walk = Walk()
    seen_modules: Set[str] = set()
    found: Dict[str, Requirement] = {}
    queue: Deque[Tuple[str, Tuple[str, ...]]] = deque()

    def reach(name: str, via: Tuple[str, ...], attribute: bool, rel: str, line: int) -> None:
        top = name.split(".")[0]
        if top not in folders:
            # ``rel`` is empty for a required module outside the tree: the probe's to judge, not the walk's.
            if rel and not attribute and top not in found:
                found[top] = Requirement(top, rel, line, via)
            return
        for prefix in _prefixes(name):
            if prefix not in seen_modules and source_file(prefix, sources, folders) is not None:
                seen_modules.add(prefix)
                queue.append((prefix, via + (prefix,)))

    for name in required:
        reach(name, (), False, "", 0)
    while queue:
        module, via = queue.popleft()
        rel = source_file(module, sources, folders)
        text = sources.read(rel) if rel else None
        if rel is None or text is None:
            continue
        walk.files.append(rel)
        try:
            tree = ast.parse(text, filename=rel)
        except (SyntaxError, ValueError):
            walk.unparsed.append(rel)  # the final probe says what is wrong with it
            continue
        is_package = rel.endswith("/__init__.py")
        for node in unconditional_imports(tree):
            for name, attribute in _imported_names(node, module, is_package):
                reach(name, via, attribute, rel, node.lineno)
    walk.requirements = list(found.values())  # in the order first met
    return walk


# -- reading the pin's sources ------------------------------------------------------------------------------


def _python_files(listing: Iterable[str], folders: Iterable[str]) -> List[str]:
    tops = tuple(f.rstrip("/") + "/" for f in folders)
    return [p for p in listing if p.endswith(".py") and p.startswith(tops)]


def read_commit_sources(path: str, commit: str) -> FileSources:
    """The tree packages' ``.py`` files of ``commit`` in the local repository at ``path`` (no checkout)."""
    folders = [folder for _, folder in PACKAGE_SOURCES]
    raw = _git(path, "ls-tree", "-r", "-z", "--name-only", commit, "--", *folders)
    wanted = _python_files((p.decode(errors="replace") for p in raw.split(b"\0") if p), folders)
    files = read_blobs(path, commit, wanted)
    return FileSources(files, f"repository {path} at {commit[:12]}")


def pin_sources(root: str, repo: str, pin: str, checkout: Optional[str] = None) -> Optional[Sources]:
    """The pin's sources: ``checkout`` when given and readable; else the commit the pin names in the root's
    repository or a local ``repo``, read with git; None when neither can be read here."""
    if checkout is not None:
        return CheckoutSources(checkout) if readable_checkout(checkout) else None
    candidates = [root] if os.path.isdir(os.path.join(root, ".git")) else []
    if repo.startswith("file://") or os.path.isabs(repo):
        candidates.append(_git_path(repo))
    for path in candidates:
        if not os.path.isdir(path):
            continue
        commit = resolve_in(path, pin)
        if commit is None:
            continue
        try:
            return read_commit_sources(path, commit)
        except (CommandFailed, OSError, ValueError):
            continue
    return None
