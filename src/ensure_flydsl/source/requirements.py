"""The modules a pin's code imports unconditionally (read with ``ast``), the required modules its sources lack, and
the newest release whose tag holds them (its tree fetched shallow and blobless when missing here)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import os
import tempfile
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from packaging.version import InvalidVersion, Version

from ensure_flydsl.errors import EnsureError
from ensure_flydsl.layout import BUILT_PACKAGES, PACKAGE_SOURCES
from ensure_flydsl.settings import GitMirrors
from ensure_flydsl.source.git import (
    HEX,
    Checkout,
    CheckoutFiles,
    CommitFiles,
    PinFiles,
    local_repositories,
    pin_commits,
    read_git,
    read_texts,
    ref_objects,
    resolve_in,
    tag_commits,
)
from ensure_flydsl.support.processes import CommandFailed

_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


@dataclass(frozen=True)
class Requirement:
    """A module outside the tree, the first file and line importing it, and the tree's modules on the way."""

    module: str
    file: str
    line: int
    via: Tuple[str, ...]

    def where(self) -> str:
        return f"{self.file} line {self.line}"


@dataclass(frozen=True)
class Sources:
    """A pin's Python sources by path (a checkout's, a commit's, a test's); ``listing``: every file when more exist."""

    files: Mapping[str, str]
    where: str = "memory"
    listing: Tuple[str, ...] = ()

    def has(self, rel: str) -> bool:
        return rel in self.files or rel in self.listing

    def entries(self, folder: str) -> Optional[List[str]]:
        """The names in ``folder`` (``/`` after a sub-folder's), or None when there is no such folder."""
        prefix = folder.rstrip("/") + "/" if folder else ""
        inside = [path[len(prefix):] for path in self.listing or self.files
                  if path.startswith(prefix) and len(path) > len(prefix)]
        found = {head + sep for head, sep, _ in (rest.partition("/") for rest in inside)}
        return sorted(found) if found else None


def readable_checkout(top: str) -> bool:
    """Whether ``top`` holds the sources of every tree package (a checkout of the pin)."""
    return all(os.path.isfile(os.path.join(top, folder, "__init__.py")) for _, folder in PACKAGE_SOURCES)


def source_file(module: str, sources: Sources, packages: Mapping[str, str]) -> Optional[str]:
    """The file of ``module`` (``pkg/a.py`` or ``pkg/a/__init__.py``) when it is one of the tree's, else None."""
    parts = module.split(".")
    folder = packages.get(parts[0])
    if folder is None:
        return None
    base = "/".join([folder, *parts[1:]])
    return next((rel for rel in (f"{base}/__init__.py", f"{base}.py") if sources.has(rel)), None)


def _prefixes(name: str) -> Iterator[str]:
    """``a``, ``a.b``, ``a.b.c`` for ``a.b.c``: importing it runs each package's ``__init__`` on the way."""
    parts = name.split(".")
    return (".".join(parts[:i]) for i in range(1, len(parts) + 1))


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def unconditional_imports(tree: ast.Module) -> Iterator[ast.stmt]:
    """The imports that run with the module: its body's, and class, ``with`` and loop bodies' at that level; not
    under ``contextlib.suppress(ImportError)`` (or of a class an import error is one of)."""
    pending: List[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            calls = [item.context_expr for item in node.items if isinstance(item.context_expr, ast.Call)]
            if not any(_name(c.func) == "suppress" and any(_name(a) in _IMPORT_ERRORS for a in c.args) for c in calls):
                pending[:0] = node.body
        elif isinstance(node, (ast.ClassDef, ast.For, ast.AsyncFor, ast.While)):
            pending[:0] = node.body  # a loop's body may run zero times, but an import in it is not optional


def _imported_names(node: ast.stmt, module: str, is_package: bool) -> Iterator[Tuple[str, bool]]:
    """(absolute name, may be an attribute) of each import: ``from a import b`` names ``a`` and ``a.b``."""
    if isinstance(node, ast.Import):
        yield from ((alias.name, False) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            if node.level > len(parts):
                return  # beyond the top-level package: an error at import time, not a requirement
            base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
        yield base, False
        yield from ((f"{base}.{alias.name}", True) for alias in node.names if alias.name != "*")


@dataclass
class Walk:
    """Requirements in the order first met, the tree's files read, and files that did not parse."""

    requirements: List[Requirement] = field(default_factory=list)
    files: List[str] = field(default_factory=list)
    unparsed: List[str] = field(default_factory=list)

    def names(self) -> List[str]:
        return [r.module for r in self.requirements]


def find_requirements(required: Sequence[str], sources: Sources) -> Walk:
    """Walk the unconditional imports from ``required`` through the tree's packages and the modules at its top."""
    tops = (entry[:-1] if entry.endswith("/") else entry[:-3] if entry.endswith(".py") else ""
            for entry in sources.entries("") or [])
    folders = {**{name: name for name in tops if name.isidentifier()}, **dict(PACKAGE_SOURCES)}
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
        text = sources.files.get(rel) if rel else None
        if rel is None or text is None:
            continue
        walk.files.append(rel)
        try:
            tree = ast.parse(text, filename=rel)
        except (SyntaxError, ValueError):
            walk.unparsed.append(rel)  # the final probe says what is wrong with it
            continue
        for node in unconditional_imports(tree):
            for name, attribute in _imported_names(node, module, rel.endswith("/__init__.py")):
                reach(name, via, attribute, rel, node.lineno)
    walk.requirements = list(found.values())
    return walk


@dataclass(frozen=True)
class Absent:
    """A required module the pin lacks, and (module, path) of those of its name it has (a moved module)."""

    module: str
    instead: Tuple[Tuple[str, str], ...]


def _named(last: str, folder: str, module: str, sources: Sources, budget: List[int]) -> Iterator[Tuple[str, str]]:
    """(module, path) of each module called ``last`` under ``folder`` (the module ``module``), depth first."""
    for entry in sources.entries(folder) or []:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if entry == f"{last}.py":
            yield f"{module}.{last}", f"{folder}/{entry}"
        elif entry.endswith("/") and entry[:-1].isidentifier():
            sub = entry[:-1]
            if sub == last:
                init = f"{folder}/{sub}/__init__.py"
                yield f"{module}.{sub}", init if sources.has(init) else f"{folder}/{sub}/"
            else:
                yield from _named(last, f"{folder}/{sub}", f"{module}.{sub}", sources, budget)


def checked_modules(required: Sequence[str]) -> List[str]:
    """The required modules of the tree's source packages (``kernels.*``; not ``flydsl``, which the build adds to)."""
    folders = dict(PACKAGE_SOURCES)
    return [m for m in required if m.split(".")[0] in folders and m.split(".")[0] not in BUILT_PACKAGES]


def absent_modules(required: Sequence[str], sources: Sources) -> List[Absent]:
    """The required modules of the tree's sources (not those the build adds to) that the sources lack."""
    folders = dict(PACKAGE_SOURCES)
    absent: List[Absent] = []
    for name in checked_modules(required):
        top = name.split(".")[0]
        # each step a module file, a package, or a namespace folder
        if all(source_file(prefix, sources, folders) is not None
               or sources.entries("/".join([folders[top], *prefix.split(".")[1:]])) is not None
               for prefix in _prefixes(name)):
            continue
        last = name.split(".")[-1]
        instead = tuple(m for m in _named(last, folders[top], top, sources, [20000]) if m[0] != name)
        absent.append(Absent(name, instead))
    return absent


def read_sources(files: PinFiles) -> Sources:
    """The ``.py`` files the walk may reach (the tree's packages, the top's modules and packages), and the listing."""
    listing = files.listing()
    tops = tuple(f"{folder}/" for _, folder in PACKAGE_SOURCES) + tuple(
        p[:-len("__init__.py")] for p in listing if p.count("/") == 1 and p.endswith("/__init__.py"))
    wanted = [p for p in listing if p.endswith(".py") and (p.startswith(tops) or "/" not in p)]
    return Sources(read_texts(files, wanted), files.where, listing)


def pin_sources(root: str, repo: str, pin: str, checkout: Optional[str] = None,
                mirrors: GitMirrors = ()) -> Optional[Sources]:
    """The pin's sources: ``checkout`` if readable, else its commit in a local repository, else None."""
    if checkout is not None:
        return read_sources(CheckoutFiles(checkout)) if readable_checkout(checkout) else None
    for path, commit in pin_commits(root, repo, pin, mirrors):
        with contextlib.suppress(CommandFailed, OSError, ValueError):
            return read_sources(CommitFiles(path, commit))
    return None


# The most releases one hint reads (newest first): a bound on the reads and on the one fetch.
MAX_RELEASES = 12


@dataclass(frozen=True)
class TagAnswer:
    """The newest release holding the modules; else the newest that could not be read, and why."""

    holding: Optional[str] = None
    unread: Optional[str] = None
    why: str = ""
    commit: Optional[str] = None  # the tag's commit, of ``holding`` or ``unread``


def _listing(repositories: Sequence[str], commit: str) -> Optional[Sources]:
    folders = [folder for _, folder in PACKAGE_SOURCES]
    for files in (CommitFiles(path, commit) for path in repositories):
        with contextlib.suppress(CommandFailed, OSError):
            return Sources({}, files.where, files.listing(*folders))
    return None


def _git_answer(source: Checkout, silence_s: float, where: str, *args: str, doing: str) -> Tuple[Optional[str], str]:
    """A git command's output, or None and why not (an EnsureError's reason, else git's last line)."""
    try:
        return dataclasses.replace(source, root=where, silence_s=silence_s).git(*args), ""
    except EnsureError as exc:
        return None, f"{doing}: {exc.reason}"
    except CommandFailed as exc:
        lines = [line.strip() for line in exc.output.splitlines() if line.strip()]
        return None, f"{doing}: {lines[-1][:300] if lines else f'git exited with {exc.returncode}'}"


def release_holding(source: Checkout, versions: Sequence[str], modules: Sequence[str], silence_s: float) -> TagAnswer:
    """Of ``versions`` (newest first, tags ``vX``), the newest whose tag holds ``modules`` (or is tagged), read in
    the local repositories, else from the tags' trees fetched shallow and blobless (git silent ``silence_s``: stop)."""
    if not versions:
        return TagAnswer()
    run = functools.partial(_git_answer, source, silence_s)
    with tempfile.TemporaryDirectory(prefix="ensure-flydsl-tags-") as work:
        out, why = run(work, "ls-remote", "--tags", source.repo,
                       doing=f"the tags of {source.shown} could not be listed")
        if out is None:
            return TagAnswer(unread=versions[0], why=why)
        commits = tag_commits(ref_objects(out))
        tagged = [v for v in versions if f"v{v}" in commits][:MAX_RELEASES]
        if not modules or not tagged:
            return TagAnswer(holding=tagged[0], commit=commits[f"v{tagged[0]}"]) if tagged else TagAnswer()
        def holds(listing: Optional[Sources]) -> bool:
            return listing is not None and not absent_modules(modules, listing)

        local = local_repositories(source.root, source.repo, source.mirrors)
        found: Dict[str, Optional[Sources]] = {}
        for version in tagged:  # newest first, up to the first that holds the modules
            found[version] = _listing(local, commits[f"v{version}"])
            if holds(found[version]):
                return TagAnswer(holding=version, commit=commits[f"v{version}"])
        unread = [v for v, listing in found.items() if listing is None]
        if unread:
            into, doing = os.path.join(work, "tags.git"), \
                f"git fetch of {', '.join(f'v{v}' for v in unread)} from {source.shown} failed"
            fetched, why = run(work, "init", "-q", "--bare", into, doing=doing)
            if fetched is not None:
                fetched, why = run(into, "fetch", "--quiet", "--no-tags", "--depth=1", "--filter=blob:none",
                                   source.repo, *(f"+refs/tags/v{v}:refs/tags/v{v}" for v in unread), doing=doing)
            for version in unread if fetched is not None else ():
                found[version] = _listing([into], commits[f"v{version}"])
                if found[version] is None:
                    why = why or f"the fetch from {source.shown} did not bring the commit of v{version}"
        holding = next((v for v, got in found.items() if holds(got)), None)
        still = next((v for v, got in found.items() if got is None), None)
    if holding is not None:
        return TagAnswer(holding=holding, commit=commits[f"v{holding}"])
    return TagAnswer(unread=still, why=why, commit=commits[f"v{still}"]) if still is not None else TagAnswer()


def beyond_release(repositories: Sequence[str], tag_commit: str, pin: str) -> Optional[List[Tuple[str, str, bool]]]:
    """The pin's commits its release tag lacks, newest first: short hash, subject, whether it changes compiled code
    (a file outside the packages' sources); None when no repository on disk holds both."""
    sources = tuple(f"{folder}/" for _, folder in PACKAGE_SOURCES)
    for path in repositories:
        commit = resolve_in(path, pin)
        if commit is None:
            continue
        try:
            out = read_git(path, "log", "--format=%x00%h %s", "--name-only", f"{tag_commit}..{commit}")
        except CommandFailed:
            continue  # the tag's commit is not there
        commits = []
        for entry in out.decode(errors="replace").split("\0")[1:]:
            head, *files = [line for line in entry.splitlines() if line]
            short, _, subject = head.partition(" ")
            commits.append((short, subject, any(not f.startswith(sources) for f in files)))
        return commits
    return None


def tag_version(tag: str) -> Optional[str]:
    """``v0.2.2`` -> ``0.2.2``; None for a tag that is not a release (``v0.2.5.dev732`` is not)."""
    try:
        version = Version(tag[1:]) if tag.startswith("v") else None
    except InvalidVersion:
        return None
    if version is None or version.is_devrelease or version.is_prerelease or version.local:
        return None
    return tag[1:]


def release_tags(tags: List[str]) -> List[str]:
    versions = [v for v in (tag_version(t) for t in tags) if v]
    return sorted(versions, key=Version, reverse=True)


def pin_as_tag(pin: str) -> str:
    """Under ``--strategy release`` a pin may be a version: ``0.2.2`` names the tag ``v0.2.2``."""
    if HEX.match(pin):
        return pin
    try:
        Version(pin)
    except InvalidVersion:
        return pin
    return pin if pin.startswith("v") else "v" + pin
