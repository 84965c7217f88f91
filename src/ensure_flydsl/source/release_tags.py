"""Which release of a repository holds the required modules, read from its tags' trees, so the release hint never
names a release a run would refuse (FlyDSL v0.3.1 has a wheel and no ``kernels.moe_gemm_2stage``).  Tags are read
where their objects are; those missing are fetched shallow and blobless into a temporary bare repository.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.version import InvalidVersion, Version

from ensure_flydsl.errors import EnsureError
from ensure_flydsl.layout import BUILT_PACKAGES, PACKAGE_SOURCES
from ensure_flydsl.settings import GitMirrors
from ensure_flydsl.source.git import HEX, commit_listing, describe, git, local_repositories, rewrite, tag_commits
from ensure_flydsl.source.requirements import FileSources, absent_modules
from ensure_flydsl.support.processes import CommandFailed

# The most releases one hint reads (newest first): a bound on the reads and on the one fetch.
MAX_RELEASES = 12


def checked_modules(required: Sequence[str]) -> List[str]:
    """The required modules a tag's files show: of the tree's source packages (``kernels.*``, not ``flydsl``)."""
    folders = dict(PACKAGE_SOURCES)
    return [m for m in required if m.split(".")[0] in folders and m.split(".")[0] not in BUILT_PACKAGES]


@dataclass(frozen=True)
class TagAnswer:
    """The newest release holding the modules; else the newest that could not be read, and why."""

    holding: Optional[str] = None
    unread: Optional[str] = None
    why: str = ""


def _why(exc: Exception) -> str:
    """One line: an EnsureError's reason, else the command's last line."""
    if isinstance(exc, EnsureError):
        return exc.reason
    assert isinstance(exc, CommandFailed)
    lines = [line.strip() for line in exc.output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else f"git exited with {exc.returncode}"


@dataclass(frozen=True)
class TagSource:
    """The repository whose tags are read, through the mirrors, each network command given ``silence_s``."""

    root: str
    repo: str
    mirrors: GitMirrors
    silence_s: float

    def shown(self) -> str:
        return describe(self.repo, self.mirrors)

    def tags(self, work: str) -> Tuple[Optional[Dict[str, str]], str]:
        try:
            out = git(work, "ls-remote", "--tags", self.repo, repo=self.repo, mirrors=self.mirrors,
                      silence_s=self.silence_s)
        except (CommandFailed, EnsureError) as exc:
            return None, f"the tags of {self.shown()} could not be listed: {_why(exc)}"
        return tag_commits(out), ""

    def fetch(self, work: str, tags: Sequence[str]) -> Tuple[Optional[str], str]:
        """A bare repository in ``work`` holding the commits and trees of ``tags``, or None and why not."""
        into = os.path.join(work, "tags.git")
        try:
            git(work, "init", "-q", "--bare", into, repo=self.repo, mirrors=self.mirrors)
            git(into, "fetch", "--quiet", "--no-tags", "--depth=1", "--filter=blob:none", self.repo,
                *(f"+refs/tags/{t}:refs/tags/{t}" for t in tags), repo=self.repo, mirrors=self.mirrors,
                silence_s=self.silence_s)
        except (CommandFailed, EnsureError) as exc:
            return None, f"git fetch of {', '.join(tags)} from {self.shown()} failed: {_why(exc)}"
        return into, ""


def _listing(repositories: Sequence[str], commit: str) -> Optional[FileSources]:
    folders = [folder for _, folder in PACKAGE_SOURCES]
    for path in repositories:
        try:
            return FileSources({}, f"repository {path} at {commit[:12]}", commit_listing(path, commit, *folders))
        except (CommandFailed, OSError):
            continue
    return None


def _holds(found: Optional[FileSources], modules: Sequence[str]) -> bool:
    return found is not None and not absent_modules(modules, found)


def release_holding(source: TagSource, versions: Sequence[str], modules: Sequence[str]) -> TagAnswer:
    """Of ``versions`` (newest first, tags ``vX``), the newest whose tag holds ``modules`` (or is tagged)."""
    if not versions:
        return TagAnswer()
    with tempfile.TemporaryDirectory(prefix="ensure-flydsl-tags-") as work:
        commits, why = source.tags(work)
        if commits is None:
            return TagAnswer(unread=versions[0], why=why)
        tagged = [v for v in versions if f"v{v}" in commits][:MAX_RELEASES]
        if not modules or not tagged:
            return TagAnswer(holding=tagged[0] if tagged else None)
        return _read_tags(source, work, tagged, {v: commits[f"v{v}"] for v in tagged}, modules)


def _read_tags(source: TagSource, work: str, tagged: Sequence[str], commits: Mapping[str, str],
               modules: Sequence[str]) -> TagAnswer:
    # The root's repository, and a local FLYDSL_REPO or mirror.
    local = local_repositories(source.root, rewrite(source.repo, source.mirrors)[0])
    found: Dict[str, Optional[FileSources]] = {}
    for version in tagged:  # newest first, up to the first that holds the modules
        found[version] = _listing(local, commits[version])
        if _holds(found[version], modules):
            break
    unread = [v for v, listing in found.items() if listing is None]
    why = ""
    if unread:
        fetched, why = source.fetch(work, [f"v{v}" for v in unread])
        if fetched is not None:
            for version in unread:
                found[version] = _listing([fetched], commits[version])
                if found[version] is None:
                    why = why or f"the fetch from {source.shown()} did not bring the commit of v{version}"
    holding = next((v for v, listing in found.items() if _holds(listing, modules)), None)
    if holding is not None:
        return TagAnswer(holding=holding)
    still = next((v for v, listing in found.items() if listing is None), None)
    return TagAnswer(unread=still, why=why) if still is not None else TagAnswer()


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
