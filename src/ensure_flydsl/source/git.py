"""Fetch the pinned source into the root: :class:`Checkout` and every git command on it.

Every git call goes through :func:`git`: it never prompts, refuses remote helpers that run commands
(``ext::``), and applies the run's mirrors.  Settings that reach git were validated not to start with
``-`` and come after their options, so they are never read as options.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.settings import GitMirrors, Settings
from ensure_flydsl.source.mirrors import describe, is_local, with_mirrors, with_network_limits
from ensure_flydsl.support.processes import CommandFailed, Silent, cmd_output, run_captured, watched_output

_HEX = re.compile(r"^[0-9a-fA-F]{7,40}\Z")
_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")  # as ls-remote prints one (SHA-1 or SHA-256)
# Lock files a killed git leaves behind; under the build lock, in a root of ours, nobody else runs git.
_GIT_LOCKS = ("index.lock", "HEAD.lock", "config.lock", "packed-refs.lock", "shallow.lock", "FETCH_HEAD.lock")


UNREACHABLE = ("check that FLYDSL_REPO is reachable from here (or point it at a local mirror, or map its URL "
               "to a mirror with FLYDSL_GIT_MIRRORS=FROM=TO)")
SUBMODULES_UNREACHABLE = ("a submodule's repository is unreachable from here; check the network, or map its URL to "
                          "a reachable mirror with FLYDSL_GIT_MIRRORS=FROM=TO (a URL or a local path)")
_CLONE_FAILED = re.compile(r"clone of '([^']+)' into submodule path '([^']+)' failed")
# git submodule update's words, to name the remote a silent one waits for
_REGISTERED = re.compile(r"Submodule '[^']*' \(([^)]+)\) registered for path '([^']+)'")
_CLONING = re.compile(r"Cloning into '([^']+)'")
_NETWORK = {"ls-remote", "fetch", "clone", "submodule"}


@contextlib.contextmanager
def failing_as(code: ExitCode, reason: str, *, stage: Stage, hint: str = "") -> Iterator[None]:
    """A git command that fails inside becomes the run's failure: exit ``code``, its output as the detail."""
    try:
        yield
    except CommandFailed as exc:
        raise EnsureError(code, reason, stage=stage, hint=hint, detail=exc.describe()) from None


def is_local_repo(repo: str) -> bool:
    return is_local(repo)


def git_env(environ: Mapping[str, str], mirrors: Optional[GitMirrors], *,
            answer_within: Optional[float] = None) -> Dict[str, str]:
    """The environment of every git command: never a prompt, C messages, never the caller's GIT_DIR.

    ``mirrors`` None: a local read, without the caller's GIT_* variables.  Else a command that may talk to
    a remote: mirrors, plain transports, and the network silence limit.  With ``answer_within`` (the doctor's
    reachability checks), a transfer and an ssh connection are given up after that many seconds instead."""
    if mirrors is None:
        env = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
        env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
        return env
    env = with_mirrors(environ, mirrors)
    if answer_within is None:
        env = with_network_limits(env)
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            "LC_ALL": "C",
            # Only plain transports: no ext:: or fd:: helpers, whatever the repository or .gitmodules say.
            "GIT_ALLOW_PROTOCOL": "file:https:http:ssh:git",
        }
    )
    if answer_within is not None:
        seconds = str(max(1, int(answer_within)))
        # a stalled https transfer gives up after the timeout instead of curl's minutes
        env.update({"GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": seconds})
        if "GIT_SSH_COMMAND" not in environ and "GIT_SSH" not in environ:
            env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o ConnectTimeout={seconds}"
    return env


def read_git(path: str, *args: str, stdin: bytes = b"", timeout: float = 30.0) -> bytes:
    """A local git command on the repository at ``path`` (it fetches nothing): its stdout; CommandFailed with
    its stderr when it fails, cannot start or runs past ``timeout``."""
    cmd = ["git", "-C", path, *args]
    try:
        proc = run_captured(cmd, input=stdin, env=git_env(os.environ, None), timeout=timeout,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CommandFailed(cmd, -1, str(exc)) from None
    if proc.returncode != 0:
        raise CommandFailed(cmd, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc.stdout


def ls_remote_within(url: str, refs: Sequence[str], environ: Mapping[str, str], mirrors: GitMirrors,
                     timeout: float) -> "subprocess.CompletedProcess[bytes]":
    """``git ls-remote --quiet url refs`` within ``timeout`` (the doctor's reachability check), through the
    mirrors; OSError when git cannot start, ``subprocess.TimeoutExpired`` past the timeout."""
    env = git_env(environ, mirrors, answer_within=timeout)
    return run_captured(["git", "ls-remote", "--quiet", url, *refs], env=env, stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def tag_commits(ls_remote: str) -> Dict[str, str]:
    """Tag name -> the commit it names, from ``git ls-remote`` output (an annotated tag by its peeled line)."""
    found: Dict[str, str] = {}
    peeled: Dict[str, str] = {}
    for line in ls_remote.splitlines():
        sha, _, ref = (part.strip() for part in line.partition("\t"))
        if not ref.startswith("refs/tags/") or not _OBJECT_ID.match(sha):
            continue
        name = ref[len("refs/tags/"):]
        if name.endswith("^{}"):
            peeled[name[:-3]] = sha
        else:
            found[name] = sha
    found.update((name, sha) for name, sha in peeled.items() if name in found)
    return found


def git(root: str, *args: str, repo: str, mirrors: GitMirrors, timeout: Optional[float] = None,
        silence_s: Optional[float] = None) -> str:
    """Run git in ``root``; a network command is stopped after ``silence_s`` seconds without output (default:
    the network silence limit), exit 2 naming the remote."""
    extra: List[str] = []
    if is_local_repo(repo):
        # git >= 2.38 refuses file:// submodules by default (CVE-2022-39253); a local mirror's submodules
        # are local too, and the user chose that mirror.
        extra = ["-c", "protocol.file.allow=always"]
    cmd = ["git", *extra, "-C", root, *args]
    env = git_env(os.environ, mirrors)
    sub = next((a for a in args if not a.startswith("-")), "")
    if sub not in _NETWORK or (sub == "submodule" and "update" not in args):
        return cmd_output(cmd, env=env, timeout=timeout)
    if sub in ("fetch", "clone", "submodule"):  # progress as objects arrive: output is the sign of life
        at = args.index(sub) + (2 if sub == "submodule" else 1)
        cmd = ["git", *extra, "-C", root, *args[:at], "--progress", *args[at:]]
    remote = describe(repo, mirrors)
    try:
        return watched_output(cmd, env=env, what=f"git {sub}" + (" update" if sub == "submodule" else ""),
                              silence_s=silence_s,
                              remote=(lambda out: _submodule_remote(out, root, mirrors)) if sub == "submodule"
                              else (lambda out: remote))
    except Silent as exc:
        raise EnsureError(
            ExitCode.FETCH,
            f"git {sub}{' update' if sub == 'submodule' else ''} stopped: nothing received from {exc.remote} "
            f"for {exc.seconds:g} s",
            stage=Stage.SUBMODULES if sub == "submodule" else Stage.FETCH,
            hint=SUBMODULES_UNREACHABLE if sub == "submodule" else UNREACHABLE,
            detail=exc.describe(),
        ) from None


def _submodule_remote(output: str, root: str, mirrors: GitMirrors) -> str:
    """The submodule ``git submodule update`` was cloning when it went silent, from what it printed."""
    urls = {os.path.normpath(os.path.join(root, path)): url for url, path in _REGISTERED.findall(output)}
    cloning = _CLONING.findall(output)
    if cloning:
        url = urls.get(os.path.normpath(os.path.join(root, cloning[-1])))
        if url:
            return describe(url, mirrors)
        return f"the repository of the submodule {cloning[-1]}"
    return f"the submodules' repositories of {root}"


def _tags_at(refs: Dict[str, str], commit: str) -> List[str]:
    """The tags ``git ls-remote`` shows pointing at ``commit`` (annotated ones by their peeled line)."""
    tags = [name[len("refs/tags/"):-3] for name, sha in refs.items()
            if name.startswith("refs/tags/") and name.endswith("^{}") and sha == commit]
    tags += [name[len("refs/tags/"):] for name, sha in refs.items()
             if name.startswith("refs/tags/") and not name.endswith("^{}") and sha == commit]
    return tags


def is_deletion(code: str) -> bool:
    return set(code.strip()) == {"D"}


@dataclass(frozen=True)
class Checkout:
    """The pin's checkout in ``root``, fetched from ``repo`` through the run's git ``mirrors``."""

    root: str
    repo: str
    mirrors: GitMirrors

    @classmethod
    def of(cls, settings: Settings) -> "Checkout":
        return cls(settings.root, settings.repo, settings.git_mirrors)

    def git(self, *args: str, timeout: Optional[float] = None, silence_s: Optional[float] = None) -> str:
        return git(self.root, *args, repo=self.repo, mirrors=self.mirrors, timeout=timeout, silence_s=silence_s)

    def clear_stale_git_locks(self, say: Callable[[str], None]) -> None:
        for name in _GIT_LOCKS:
            path = os.path.join(self.root, ".git", name)
            if os.path.exists(path):
                os.unlink(path)
                say(f"removed a stale {name} left by an interrupted git command in {self.root}")

    def ensure_repository(self) -> None:
        """A git repository in the root whose origin is the repo (init it, or point origin at the repo)."""
        with failing_as(ExitCode.FETCH, f"cannot prepare a git repository in {self.root}", stage=Stage.FETCH):
            if not os.path.isdir(os.path.join(self.root, ".git")):
                cmd_output(["git", "init", "-q", self.root], env=git_env(os.environ, self.mirrors))
            try:
                current: Optional[str] = self.git("config", "--get", "remote.origin.url").strip()
            except CommandFailed:
                current = None
            if current is None:
                self.git("remote", "add", "origin", self.repo)
            elif current != self.repo:
                self.git("remote", "set-url", "origin", self.repo)

    def objects_bytes(self) -> Optional[int]:
        """The bytes of the repository's objects, or None: what a fetch added is the difference."""
        total = 0
        try:
            for folder, _, names in os.walk(os.path.join(self.root, ".git", "objects")):
                for name in names:
                    with contextlib.suppress(FileNotFoundError):  # a gc that runs beside us
                        total += os.lstat(os.path.join(folder, name)).st_size
        except OSError:
            return None
        return total

    def resolve_pin(self, pin: str) -> Optional[str]:
        """The commit ``pin`` names in the local repository, or None."""
        for candidate in (f"refs/tags/{pin}", f"refs/remotes/origin/{pin}", pin):
            try:
                return self.git("rev-parse", "--verify", "--quiet", "--end-of-options",
                                f"{candidate}^{{commit}}").strip()
            except CommandFailed:
                continue
        return None

    def has_all_objects(self, commit: str) -> bool:
        """Whether every object of ``commit``'s tree is here: after a fetch killed half-way, git checks out a
        commit missing some blobs without an error."""
        try:
            self.git("rev-list", "--quiet", "--objects", "--no-walk", "--missing=error", commit)
        except CommandFailed:
            return False
        return True

    def remote_refs(self) -> Dict[str, str]:
        """``git ls-remote``: ref name -> commit, with annotated tags peeled (``refs/tags/v1^{}``)."""
        with failing_as(ExitCode.FETCH, f"cannot list the refs of {describe(self.repo, self.mirrors)}",
                        stage=Stage.FETCH, hint=UNREACHABLE):
            out = self.git("ls-remote", "origin")
        refs: Dict[str, str] = {}
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name:
                refs[name.strip()] = sha.strip()
        return refs

    def remote_commit(self, pin: str) -> Optional[str]:
        """The commit ``pin`` names in the repository now: a tag (peeled), else a branch; a full hash is itself;
        None for what the refs do not name (an abbreviated hash)."""
        if len(pin) == 40 and _HEX.match(pin):
            return pin.lower()
        refs = self.remote_refs()
        return refs.get(f"refs/tags/{pin}^{{}}") or refs.get(f"refs/tags/{pin}") or refs.get(f"refs/heads/{pin}")

    def _fetch(self, *refspecs: str) -> None:
        with failing_as(ExitCode.FETCH, f"git fetch from {describe(self.repo, self.mirrors)} failed",
                        stage=Stage.FETCH, hint=UNREACHABLE):
            self.git("fetch", "--quiet", "--force", "--no-tags", "origin", *refspecs)

    def fetch_pin(self, pin: str, say: Callable[[str], None], *,
                  on_fetch: Callable[[], None] = lambda: None,
                  on_tags: Callable[[str, List[str]], None] = lambda commit, tags: None) -> str:
        """Fetch only what names ``pin`` (and the tags at its commit); return its full commit hash.

        The refs are listed first: an unreachable repository is exit 2, a pin it does not have exit 3.
        ``on_tags`` hears the pin's commit and tags before the fetch when the refs tell them (a release run
        starts its wheel download then)."""
        full_hash = len(pin) == 40 and bool(_HEX.match(pin))
        if full_hash:
            known = self.resolve_pin(pin)
            if known and self.has_all_objects(known):
                say(f"commit {pin[:12]} is already in {self.root}; nothing to fetch")
                return known
        say(f"fetching {pin} from {self.repo} into {self.root}")
        on_fetch()
        refs = self.remote_refs()
        early = (refs.get(f"refs/tags/{pin}^{{}}") or refs.get(f"refs/tags/{pin}")
                 or (pin.lower() if full_hash else None))
        if early is not None:
            on_tags(early, _tags_at(refs, early))
        if f"refs/tags/{pin}" in refs:
            self._fetch(f"+refs/tags/{pin}:refs/tags/{pin}")
        elif f"refs/heads/{pin}" in refs:
            self._fetch(f"+refs/heads/{pin}:refs/remotes/origin/{pin}")
        elif full_hash:
            try:
                self.git("fetch", "--quiet", "--no-tags", "origin", pin)
            except CommandFailed:
                pass  # the repository answered (ls-remote) but does not have it: reported below
        elif _HEX.match(pin):
            # An abbreviated hash can only be found among everything the repository has.
            self._fetch("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
        commit = self.resolve_pin(pin)
        if commit is None:
            raise EnsureError(
                ExitCode.CHECKOUT,
                f"the pin {pin} is not a commit, tag or branch of {self.repo}",
                stage=Stage.CHECKOUT,
                hint="check FLYDSL_PIN (a full commit hash or a tag such as v0.2.2)",
            )
        # The tags that point at the commit, so that a release tag's commit is known as one.
        tags = _tags_at(refs, commit)
        missing = sorted(set(tags) - {pin})  # the pin's own tag is already here
        if missing:
            self._fetch(*(f"+refs/tags/{t}:refs/tags/{t}" for t in missing))
        return commit

    def head_commit(self) -> Optional[str]:
        try:
            return self.git("rev-parse", "--verify", "--quiet", "HEAD").strip()
        except CommandFailed:
            return None

    def tracked_changes(self) -> List[Tuple[str, str]]:
        """(status code, path) of each tracked file that differs from HEAD, e.g. (" M", "kernels/x.py")."""
        out = self.git("status", "--porcelain=v1", "--untracked-files=no")
        return [(line[:2], line[3:]) for line in out.splitlines() if line.strip()]

    def checkout(self, commit: str, *, force: bool) -> None:
        """Check out ``commit`` detached.  ``force`` only after the tool's own interrupted checkout; otherwise
        local edits make this fail rather than be overwritten."""
        args = ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach"]
        if force:
            args.append("--force")
        with failing_as(ExitCode.CHECKOUT, f"git checkout of {commit[:12]} in {self.root} failed",
                        stage=Stage.CHECKOUT,
                        hint="the checkout has local changes or is damaged; look at `git -C ROOT status`"):
            self.git(*args, commit)

    def update_submodules(self) -> bool:
        """Initialise and update submodules; return whether there were any.  A failure names the submodules
        git could not clone and where it tried."""
        if not os.path.isfile(os.path.join(self.root, ".gitmodules")):
            return False
        try:
            self.git("submodule", "sync", "--quiet", "--recursive")
            self.git("submodule", "update", "--init", "--recursive", "--force")
        except CommandFailed as exc:
            top = self.root.rstrip("/") + "/"
            failed = [f"{path[len(top):] if path.startswith(top) else path} from {describe(url, self.mirrors)}"
                      for url, path in _CLONE_FAILED.findall(exc.output)]
            what = ": cannot fetch " + "; ".join(dict.fromkeys(failed)) if failed else ""
            raise EnsureError(ExitCode.FETCH, f"git submodule update in {self.root} failed{what}",
                              stage=Stage.SUBMODULES, hint=SUBMODULES_UNREACHABLE, detail=exc.describe()) from None
        return True

    def tags_at(self, commit: str) -> List[str]:
        """The tags that point at ``commit`` (a release tag's commit has its ``vX`` among them)."""
        try:
            out = self.git("tag", "--points-at", commit)
        except CommandFailed:
            return []
        return [line.strip() for line in out.splitlines() if line.strip()]
