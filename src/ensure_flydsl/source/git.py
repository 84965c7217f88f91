"""Every git command of the tool, through one environment builder (:func:`git_env`): the pin's :class:`Checkout`,
local reads, the mirrors, the store's shared objects.  Settings reaching git never start with ``-``."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ensure_flydsl import layout
from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.settings import GitMirrors, Settings, git_config_count
from ensure_flydsl.support.files import held_lock
from ensure_flydsl.support.processes import (
    CommandFailed,
    Silent,
    cmd_output,
    network_silence_s,
    run_captured,
    watched_output,
)
from ensure_flydsl.support.urls import shown_location

HEX = re.compile(r"^[0-9a-fA-F]{7,40}\Z")
_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")  # as ls-remote prints one (SHA-1 or SHA-256)
# Lock files a killed git leaves behind; under the build lock, in a root of ours, nobody else runs git.
_GIT_LOCKS = ("index.lock", "HEAD.lock", "config.lock", "packed-refs.lock", "shallow.lock", "FETCH_HEAD.lock")
# Refs of the store's shared repository, one namespace per root (what keeps its objects reachable).
ROOT_REFS = "refs/roots"
# A checkout's folders that are not the pin's: git's own, the build's, the tool's.
_NOT_THE_PINS = (".git", layout.BUILD_DIR, layout.STATE_DIR)

UNREACHABLE = ("check that FLYDSL_REPO is reachable from here (or point it at a local mirror, or map its URL "
               "to a mirror with FLYDSL_GIT_MIRRORS=FROM=TO)")
WRONG_PIN = "check FLYDSL_PIN (a full commit hash or a tag such as v0.2.2)"
SUBMODULES_UNREACHABLE = ("a submodule's repository is unreachable from here; check the network, or map its URL to "
                          "a reachable mirror with FLYDSL_GIT_MIRRORS=FROM=TO (a URL or a local path)")
_CLONE_FAILED = re.compile(r"clone of '([^']+)' into submodule path '([^']+)' failed")
# git submodule update's words, to name the remote a silent one waits for
_REGISTERED = re.compile(r"Submodule '[^']*' \(([^)]+)\) registered for path '([^']+)'")
_CLONING = re.compile(r"Cloning into '([^']+)'")
_NETWORK = {"ls-remote", "fetch", "clone", "submodule"}
# `git rev-parse --local-env-vars` but the caller's own config (GIT_CONFIG_COUNT, GIT_CONFIG_PARAMETERS): set in a
# git hook, they would send the checkout's index and objects into the caller's repository.
_CALLERS_REPOSITORY = ("GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_OBJECT_DIRECTORY", "GIT_DIR",
                       "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE",
                       "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX",
                       "GIT_SHALLOW_FILE", "GIT_COMMON_DIR")


@contextlib.contextmanager
def failing_as(code: ExitCode, reason: str, *, stage: Stage, hint: str = "") -> Iterator[None]:
    """A git command that fails inside becomes the run's failure: exit ``code``, its output as the detail."""
    try:
        yield
    except CommandFailed as exc:
        raise EnsureError(code, reason, stage=stage, hint=hint, detail=exc.describe()) from None


def is_local_repo(repo: str) -> bool:
    return repo.startswith(("/", "file://"))


def with_git_config(environ: Mapping[str, str], mirrors: GitMirrors) -> Dict[str, str]:
    """``environ`` without the caller's repository (a git hook's GIT_INDEX_FILE...), with ``mirrors`` as insteadOf and
    the silence limit as http.lowSpeed* after the caller's own config entries (build scripts' git too)."""
    env = {k: v for k, v in environ.items() if k not in _CALLERS_REPOSITORY}
    raw = env.get("GIT_CONFIG_COUNT", "").strip()
    if raw and not raw.isdigit() and not mirrors:
        return env  # git refuses every command then; with mirrors it is bad input (git_config_count)
    entries = [(f"url.{to}.insteadOf", source) for source, to in mirrors]
    if any(is_local_repo(to) for _, to in mirrors):
        # git >= 2.38 refuses file:// submodules by default (CVE-2022-39253); the user chose this local mirror.
        entries.append(("protocol.file.allow", "always"))
    entries += [("http.lowSpeedLimit", "1"), ("http.lowSpeedTime", str(max(1, int(network_silence_s(environ)))))]
    first = git_config_count(environ)
    for index, (key, value) in enumerate(entries, start=first):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_CONFIG_COUNT"] = str(first + len(entries))
    return env


def rewrite(url: str, mirrors: GitMirrors) -> Tuple[str, Optional[Tuple[str, str]]]:
    """The URL git uses for ``url`` and the mirror it went through (None: none); the longest FROM wins."""
    matches = [(source, to) for source, to in mirrors if url.startswith(source)]
    if not matches:
        return url, None
    source, to = max(matches, key=lambda pair: len(pair[0]))
    return to + url[len(source):], (source, to)


def describe(url: str, mirrors: GitMirrors, label: str = "FLYDSL_GIT_MIRRORS") -> str:
    """``url`` and the mirror it goes through, as messages show them (a password as ``***``)."""
    where, mirror = rewrite(url, mirrors)
    if mirror is None:
        return shown_location(url)
    return (f"{shown_location(url)} through the mirror {shown_location(where)} "
            f"({label} {shown_location(mirror[0])}={shown_location(mirror[1])})")


def git_env(environ: Mapping[str, str], mirrors: Optional[GitMirrors], *, at: Optional[str] = None) -> Dict[str, str]:
    """Every git command's: no prompt, C messages, no caller's GIT_* (``mirrors`` None: a local read) or else mirrors
    and plain transports; ``at``: never above that folder (a torn ``.git`` fails, not the checkout around it)."""
    if mirrors is None:
        env = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
    else:
        env = with_git_config(environ, mirrors)
        # Only plain transports: no ext:: or fd:: helpers, whatever the repository or .gitmodules say.
        env.update({"GIT_ASKPASS": "true", "GIT_ALLOW_PROTOCOL": "file:https:http:ssh:git"})
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    if at is not None:
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(os.path.abspath(at))
    return env


def read_git(path: str, *args: str, stdin: bytes = b"", timeout: float = 30.0) -> bytes:
    """A local git command's stdout; CommandFailed when it fails, cannot start (-1) or runs past ``timeout``."""
    cmd = ["git", "-C", path, *args]
    try:
        proc = run_captured(cmd, input=stdin, env=git_env(os.environ, None, at=path), timeout=timeout,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CommandFailed(cmd, -1, str(exc)) from None
    if proc.returncode != 0:
        raise CommandFailed(cmd, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc.stdout


def is_repository(path: str) -> bool:
    try:
        return bool(read_git(path, "rev-parse", "--git-dir"))
    except CommandFailed:
        return False


def ls_remote_within(url: str, refs: Sequence[str], environ: Mapping[str, str], mirrors: GitMirrors,
                     timeout: float) -> "subprocess.CompletedProcess[bytes]":
    """``git ls-remote`` within ``timeout`` (the doctor's check); OSError, or TimeoutExpired past it."""
    seconds = str(max(1, int(timeout)))
    # a stalled https transfer gives up after the timeout instead of curl's minutes (over http.lowSpeed*)
    env = {**git_env(environ, mirrors), "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": seconds}
    if "GIT_SSH_COMMAND" not in environ and "GIT_SSH" not in environ:
        env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o ConnectTimeout={seconds}"
    return run_captured(["git", "ls-remote", "--quiet", url, *refs], env=env, stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def is_full_hash(pin: str) -> bool:
    return len(pin) == 40 and HEX.match(pin) is not None


def ref_objects(ls_remote: str) -> Dict[str, str]:
    """Ref name -> object, from ``git ls-remote`` output (annotated tags also as ``refs/tags/v1^{}``)."""
    refs: Dict[str, str] = {}
    for line in ls_remote.splitlines():
        sha, _, ref = (part.strip() for part in line.partition("\t"))
        if ref and _OBJECT_ID.match(sha):
            refs[ref] = sha
    return refs


def tag_commits(refs: Mapping[str, str]) -> Dict[str, str]:
    """Tag name -> the commit it names (an annotated tag by its peeled line)."""
    return {ref[len("refs/tags/"):]: refs.get(ref + "^{}", sha) for ref, sha in refs.items()
            if ref.startswith("refs/tags/") and not ref.endswith("^{}")}


def _submodule_remote(output: str, root: str, mirrors: GitMirrors) -> str:
    """The submodule ``git submodule update`` was cloning when it went silent, from what it printed."""
    urls = {os.path.normpath(os.path.join(root, path)): url for url, path in _REGISTERED.findall(output)}
    cloning = _CLONING.findall(output)
    if not cloning:
        return f"the submodules' repositories of {root}"
    url = urls.get(os.path.normpath(os.path.join(root, cloning[-1])))
    return describe(url, mirrors) if url else f"the repository of the submodule {cloning[-1]}"


# -- reading a local repository without a fetch or a checkout ------------------------------------------------

def repo_path(repo: str) -> str:
    return repo[len("file://"):] if repo.startswith("file://") else repo


def resolve_in(path: str, pin: str) -> Optional[str]:
    """The commit ``pin`` names in the repository ``path`` (a tag, branch or hash; not HEAD or FETCH_HEAD), or None."""
    for candidate in (f"refs/tags/{pin}", f"refs/remotes/origin/{pin}", f"refs/heads/{pin}",
                      *([pin] if HEX.match(pin) else [])):
        try:
            out = read_git(path, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}")
            return out.decode().strip()
        except (CommandFailed, OSError):
            continue
    return None


def local_repositories(root: str, repo: str, mirrors: GitMirrors = ()) -> List[str]:
    """The repositories read without a fetch: the root's, and ``repo`` when it (or its mirror) is a local one."""
    found = [root] if os.path.isdir(os.path.join(root, ".git")) else []
    where = rewrite(repo, mirrors)[0]
    if is_local_repo(where) and os.path.isdir(repo_path(where)):
        found.append(repo_path(where))
    return found


def pin_commits(root: str, repo: str, pin: str, mirrors: GitMirrors = (), *,
                own: Optional[str] = None) -> Iterator[Tuple[str, str]]:
    """(repository, commit) for each local repository (``own`` first, a checkout) where ``pin`` names a commit."""
    mine = [own] if own and os.path.isdir(os.path.join(own, ".git")) else []
    for path in mine + local_repositories(root, repo, mirrors):
        commit = resolve_in(path, pin)
        if commit is not None:
            yield path, commit


@dataclass(frozen=True)
class CommitFiles:
    """The files of ``commit`` in the local repository at ``path``, read with git alone (no checkout)."""

    path: str
    commit: str

    @property
    def where(self) -> str:
        return f"repository {self.path} at {self.commit[:12]}"

    def listing(self, *folders: str) -> Tuple[str, ...]:
        """Every file (under ``folders``), from the trees alone (a blobless fetch has no contents)."""
        raw = read_git(self.path, "ls-tree", "-r", "-z", "--name-only", self.commit, "--", *folders)
        return tuple(p.decode(errors="replace") for p in raw.split(b"\0") if p)

    def read(self, wanted: Sequence[str]) -> Dict[str, bytes]:
        """The content of each of ``wanted`` (one ``git cat-file --batch``); a non-file is left out."""
        if not wanted:
            return {}
        out = read_git(self.path, "cat-file", "--batch", stdin="".join(f"{self.commit}:{p}\n" for p in wanted).encode())
        files: Dict[str, bytes] = {}
        pos = 0
        for rel in wanted:
            header_end = out.index(b"\n", pos)
            header = out[pos:header_end].split()
            pos = header_end + 1
            if len(header) < 3 or header[1] != b"blob":
                continue  # "<spec> missing": nothing follows the header
            size = int(header[2])
            files[rel] = out[pos:pos + size]
            pos += size + 1
        return files


@dataclass(frozen=True)
class CheckoutFiles:
    """The files of the checkout at ``top`` as git holds them, without its submodules', the build's or the tool's."""

    top: str

    @property
    def where(self) -> str:
        return f"checkout {self.top}"

    def listing(self, *folders: str) -> Tuple[str, ...]:
        """Every file (under ``folders``; one that is a file is itself)."""
        found: List[str] = []
        for start in folders or ("",):
            path = os.path.join(self.top, start)
            if os.path.islink(path) or os.path.isfile(path):
                found.append(start)
                continue
            for folder, dirs, names in os.walk(path):
                below = os.path.relpath(folder, self.top).replace(os.sep, "/") + "/"
                below = "" if below == "./" else below
                dirs[:] = [d for d in dirs if below + d not in _NOT_THE_PINS
                           and not os.path.exists(os.path.join(folder, d, ".git"))]  # a submodule's
                found += [below + name for name in names]
        return tuple(found)

    def read(self, wanted: Sequence[str]) -> Dict[str, bytes]:
        """Each file's bytes; a symlink's are the name it points to, as git holds it (the keys must not differ)."""
        files: Dict[str, bytes] = {}
        for rel in wanted:
            path = os.path.join(self.top, rel)
            with contextlib.suppress(OSError):
                files[rel] = os.fsencode(os.readlink(path)) if os.path.islink(path) else pathlib.Path(path).read_bytes()
        return files


PinFiles = Union[CommitFiles, CheckoutFiles]


def read_texts(files: PinFiles, wanted: Sequence[str]) -> Dict[str, str]:
    return {rel: data.decode("utf-8", errors="replace") for rel, data in files.read(wanted).items()}


# -- the store's shared objects: a bare repository named in each root's alternates (a second root's fetch of a pin
# transfers nothing); it keeps everything it was given (gc off, never pruned): a root may rely on any object.

def shared_repository(store: str, environ: Mapping[str, str]) -> str:
    """The shared bare repository's folder, made if missing (OSError or CommandFailed when it cannot be)."""
    folder = layout.store_git_dir(store)
    if not os.path.isfile(os.path.join(folder, "HEAD")):
        cmd_output(["git", "init", "-q", "--bare", folder], env=git_env(environ, None))
        for key, value in (("gc.auto", "0"), ("gc.pruneExpire", "never"), ("core.logAllRefUpdates", "false")):
            cmd_output(["git", "--git-dir", folder, "config", key, value], env=git_env(environ, None))
    return folder


def add_lines(path: str, lines: Sequence[str]) -> bool:
    """Append to the file at ``path`` (made if missing) those of ``lines`` it lacks; whether there were any."""
    current = ""
    with contextlib.suppress(FileNotFoundError), open(path) as handle:
        current = handle.read()
    missing = [line for line in lines if line not in current.splitlines()]
    if missing:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write(("\n" if current and not current.endswith("\n") else "") + "\n".join(missing) + "\n")
    return bool(missing)


def borrow_objects(root_git: str, shared: str) -> bool:
    """Name the shared objects in the root's alternates (once); whether they were added now."""
    return add_lines(os.path.join(root_git, "objects", "info", "alternates"), [os.path.join(shared, "objects")])


def give_objects(root_git: str, shared: str, name: str, commit: str, environ: Mapping[str, str], *,
                 timeout: Optional[float], say: Callable[[str], None]) -> None:
    """Fetch the root's refs and ``commit`` into the shared repository's ``refs/roots/NAME``, under its flock
    (LockBusy after ``timeout`` s)."""
    with held_lock(os.path.join(shared, "ensure-flydsl.lock"), timeout=timeout, say=say,
                   what="the shared git repository's lock"):
        cmd_output(["git", "-c", "uploadpack.allowAnySHA1InWant=true", "--git-dir", shared, "fetch", "-q",
                    "--no-tags", "--no-write-fetch-head", root_git, f"+{commit}:{ROOT_REFS}/{name}/pin",
                    f"+refs/tags/*:{ROOT_REFS}/{name}/tags/*",
                    f"+refs/remotes/origin/*:{ROOT_REFS}/{name}/remotes/*"], env=git_env(environ, None), timeout=600)


def git_locks(root: str) -> List[str]:
    """The lock files in the root's ``.git`` (a git command running, or killed), relative to it: a ref's too."""
    git_dir = os.path.join(root, ".git")
    found = [name for name in _GIT_LOCKS if os.path.lexists(os.path.join(git_dir, name))]
    for folder, _, names in os.walk(os.path.join(git_dir, "refs")):
        found += [os.path.relpath(os.path.join(folder, name), git_dir) for name in names if name.endswith(".lock")]
    return found


@dataclass(frozen=True)
class Checkout:
    """The pin's checkout in ``root``, fetched from ``repo`` through the run's git ``mirrors``."""

    root: str
    repo: str
    mirrors: GitMirrors
    silence_s: Optional[float] = None  # a network command silent this long stops (None: the setting's)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, compare=False)  # the run's

    @classmethod
    def of(cls, settings: Settings, environ: Mapping[str, str]) -> "Checkout":
        return cls(settings.root, settings.repo, settings.git_mirrors, environ=environ)

    @property
    def shown(self) -> str:
        """The repository, and the mirror it is fetched through."""
        return describe(self.repo, self.mirrors)

    def git(self, *args: str) -> str:
        """Run git in the root; a network command silent for ``silence_s`` seconds stops: exit 2 naming the remote."""
        # git >= 2.38 refuses file:// submodules by default (CVE-2022-39253); a local mirror's are local too.
        extra = ["-c", "protocol.file.allow=always"] if is_local_repo(self.repo) else []
        env = git_env(self.environ, self.mirrors, at=self.root)
        sub = next((a for a in args if not a.startswith("-")), "")
        if sub not in _NETWORK or (sub == "submodule" and "update" not in args):
            return cmd_output(["git", *extra, "-C", self.root, *args], env=env)
        submodule = sub == "submodule"
        at = args.index(sub) + (2 if submodule else 1)
        # progress as objects arrive: output is the sign of life
        progress = ["--progress"] if sub != "ls-remote" else []
        cmd = ["git", *extra, "-C", self.root, *args[:at], *progress, *args[at:]]
        what = "git submodule update" if submodule else f"git {sub}"
        try:
            return watched_output(cmd, env=env, what=what, silence_s=self.silence_s,
                                  remote=(lambda out: _submodule_remote(out, self.root, self.mirrors)) if submodule
                                  else (lambda out: self.shown))
        except Silent as exc:
            raise EnsureError(
                ExitCode.FETCH, f"{what} stopped: nothing received from {exc.remote} for {exc.seconds:g} s",
                stage=Stage.SUBMODULES if submodule else Stage.FETCH,
                hint=SUBMODULES_UNREACHABLE if submodule else UNREACHABLE, detail=exc.describe(),
            ) from None

    def clear_stale_git_locks(self, say: Callable[[str], None]) -> None:
        for name in git_locks(self.root):
            os.unlink(os.path.join(self.root, ".git", name))
            say(f"removed a stale {name} left by an interrupted git command in {self.root}")

    def ensure_repository(self) -> None:
        """A git repository in the root whose origin is the repo (init it, or point origin at the repo)."""
        with failing_as(ExitCode.FETCH, f"cannot prepare a git repository in {self.root}", stage=Stage.FETCH):
            if not is_repository(self.root):  # none yet, or one a full disk tore (no HEAD): init completes it
                cmd_output(["git", "init", "-q", self.root], env=git_env(self.environ, self.mirrors))
            try:
                current = self.git("config", "--get", "remote.origin.url").strip()
            except CommandFailed:  # no origin yet
                self.git("remote", "add", "origin", self.repo)
            else:
                if current != self.repo:
                    self.git("remote", "set-url", "origin", self.repo)

    def remote_refs(self) -> Dict[str, str]:
        """``git ls-remote``: ref name -> object, with annotated tags peeled (``refs/tags/v1^{}``)."""
        with failing_as(ExitCode.FETCH, f"cannot list the refs of {self.shown}",
                        stage=Stage.FETCH, hint=UNREACHABLE):
            return ref_objects(self.git("ls-remote", "origin"))

    def remote_commit(self, pin: str) -> Optional[str]:
        """The commit ``pin`` names remotely now (tag, branch, or itself as a full hash); None if unnamed."""
        if is_full_hash(pin):
            return pin.lower()
        refs = self.remote_refs()
        return tag_commits(refs).get(pin) or refs.get(f"refs/heads/{pin}")

    def _fetch(self, *refspecs: str) -> None:
        with failing_as(ExitCode.FETCH, f"git fetch from {self.shown} failed",
                        stage=Stage.FETCH, hint=UNREACHABLE):
            self.git("fetch", "--quiet", "--force", "--no-tags", "origin", *refspecs)

    def fetch_pin(self, pin: str, say: Callable[[str], None], *, on_fetch: Callable[[], None],
                  on_tags: Callable[[str, List[str]], None]) -> str:
        """Fetch only what names ``pin`` (and the tags at its commit); its full hash.  The refs come first (unreachable:
        exit 2; no such pin: exit 3); ``on_tags`` hears the pin's commit and tags (a release starts its download)."""
        full_hash = is_full_hash(pin)
        known = resolve_in(self.root, pin) if full_hash else None
        if known:
            # all of its tree must be here: git checks out a half-fetched commit without an error
            with contextlib.suppress(CommandFailed):
                self.git("rev-list", "--quiet", "--objects", "--no-walk", "--missing=error", known)
                say(f"commit {pin[:12]} is already in {self.root}; nothing to fetch")
                return known
        say(f"fetching {pin} from {shown_location(self.repo)} into {self.root}")
        on_fetch()
        refs = self.remote_refs()
        tags = tag_commits(refs)
        early = tags.get(pin) or (pin.lower() if full_hash else None)
        if early is not None:
            on_tags(early, [tag for tag, commit in tags.items() if commit == early])
        if f"refs/tags/{pin}" in refs:
            self._fetch(f"+refs/tags/{pin}:refs/tags/{pin}")
        elif f"refs/heads/{pin}" in refs:
            self._fetch(f"+refs/heads/{pin}:refs/remotes/origin/{pin}")
        elif full_hash:
            with contextlib.suppress(CommandFailed):  # the repository answered but lacks it: reported below
                self.git("fetch", "--quiet", "--no-tags", "origin", pin)
        elif HEX.match(pin):
            # An abbreviated hash can only be found among everything the repository has.
            self._fetch("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
        commit = resolve_in(self.root, pin)
        if commit is None:
            raise EnsureError(ExitCode.CHECKOUT, f"the pin {pin} is not a commit, tag or branch of {self.shown}",
                              stage=Stage.CHECKOUT, hint=WRONG_PIN)
        # The tags at the commit, so that a release tag's commit is known as one (the pin's own is here already).
        missing = sorted(tag for tag, at in tags.items() if at == commit and tag != pin)
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
        """Check out ``commit`` detached; ``force`` only after our own interrupted checkout, never over edits."""
        args = ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", *(["--force"] if force else [])]
        with failing_as(ExitCode.CHECKOUT, f"git checkout of {commit[:12]} in {self.root} failed",
                        stage=Stage.CHECKOUT,
                        hint="the checkout has local changes or is damaged; look at `git -C ROOT status`"):
            self.git(*args, commit)

    def update_submodules(self) -> bool:
        """Initialise and update submodules; whether there were any.  A failure names what git could not clone."""
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
            return self.git("tag", "--points-at", commit).split()
        except CommandFailed:
            return []
