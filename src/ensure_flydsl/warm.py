"""The front door's answer: a warm call answered from the root's stamp, with no other module of the package.

Every call enters through ``__main__.main`` (the installed command, ``python -m ensure_flydsl``, the GEAK
folder), which asks :func:`answer` first and hands a miss to the command line; most calls are warm.  The stamp
(``ROOT/.ensure_flydsl/warm``, marshal) is written after the JSON twin and before the env file
(pipeline/warm.py: ``keep_warm``); its entries are keyed by a call's raw inputs (setting flags, the settings'
variables, the working folder), and the fingerprint proves that nothing the answer depends on changed since.
Any doubt is a miss."""

from __future__ import annotations

import marshal
import os
import stat
import time

STATE_DIR = ".ensure_flydsl"
DEFAULT_ROOT = "/opt/flydsl/FlyDSL"
ENV_FILE_NAME = "flydsl_env.sh"
ENV_JSON_NAME = "flydsl_env.json"
STAMP_FORMAT = 1
FINGERPRINT_VERSION = 5
MAX_OWN_FILE_BYTES = 16 << 20  # the tool's own files hold a few KB; the stamp a tree's listing
PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "PYTHONUSERBASE")
SITE_HOOKS = ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize")


def stamp_path(root: str) -> str:
    return os.path.join(root, STATE_DIR, "warm")


def key_tokens(argv: list[str]) -> list[str]:
    """The setting flags of an ``ensure`` call: its argv without ``--json`` and a leading ``ensure``."""
    tokens = [arg for arg in argv if arg != "--json"]
    return tokens[1:] if tokens[:1] == ["ensure"] else tokens


def read_regular(path: str, limit: int = MAX_OWN_FILE_BYTES, *, head: bool = False) -> bytes | None:
    """The bytes of the regular file ``path`` (its first ``limit`` when ``head``); None when it is missing, not a
    regular file or (not ``head``) over ``limit``.  Opened without blocking: a FIFO planted there must not hang."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            raw = handle.read(limit if head else limit + 1)
    except OSError:
        return None
    return raw if head or len(raw) <= limit else None


def regular_text(path: str) -> str | None:
    raw = read_regular(path)
    return None if raw is None else raw.decode("utf-8", errors="replace")


# -- the fingerprint --------------------------------------------------------------------------------------------
def without_folders(pythonpath: str | None, folders: list[str]) -> str:
    """``pythonpath`` less the env file's own folders (it puts them first, once), the rest kept in order."""
    if not pythonpath:
        return ""
    drop = {f for f in folders if f}
    return os.pathsep.join(entry for entry in pythonpath.split(os.pathsep) if entry not in drop)


def python_environment(environ: dict[str, str], tree_folders: list[str]) -> dict[str, str | None]:
    """The variables that steer imports, as the env file leaves them (an empty PYTHONPATH is none)."""
    env = {name: environ.get(name) for name in PYTHON_ENV}
    env["PYTHONPATH"] = without_folders(env["PYTHONPATH"], tree_folders) or None
    return env


def folder_listing(folder: str) -> list[list[object]] | None:
    """(relative path, mode, size, mtime) of everything under ``folder``, bytecode left out (the workflow's own
    imports write it); None if absent."""
    if not os.path.isdir(folder):
        return None
    listing: list[list[object]] = []
    _list_into(listing, folder, ".")
    return listing


def _list_into(listing: list[list[object]], current: str, rel: str) -> None:
    try:
        with os.scandir(current) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except OSError:
        return
    dirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if entry.name != "__pycache__":
                dirs.append(entry)
        elif not entry.name.endswith((".pyc", ".pyo")):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            listing.append([f"{rel}/{entry.name}", st.st_mode, st.st_size, st.st_mtime_ns])
    listing.extend([f"{rel}/{entry.name}/", 0, 0, 0] for entry in dirs)
    for entry in dirs:
        if not entry.is_symlink():
            _list_into(listing, entry.path, entry.name if rel == "." else f"{rel}/{entry.name}")


def site_stats(site_dirs: list[str]) -> list[list[object]]:
    """Each site folder's mtime, and the text of what ``site`` runs from it (``.pth`` files, site hooks): an
    in-place rewrite of a ``.pth`` changes no folder's mtime."""
    stats: list[list[object]] = []
    for folder in site_dirs:
        try:
            mtime = os.stat(folder).st_mtime_ns
            names = sorted(name for name in os.listdir(folder) if name.endswith(".pth") or name in SITE_HOOKS)
        except (OSError, ValueError):  # ValueError: a NUL in the name
            stats.append([folder, None])
            continue
        hooks = {}
        for name in names:
            path = os.path.join(folder, name)
            hooks[name] = regular_text(os.path.join(path, "__init__.py") if "." not in name else path)
        stats.append([folder, mtime, hooks])
    return stats


def interpreter_identity(python: str, environ: dict[str, str], executable: str) -> dict[str, object] | None:
    """What the name ``python`` runs now, when that is ``executable`` (the probe's ``sys.executable``); None when
    it cannot be told without running it, or is another (a launcher that runs another interpreter)."""
    now = landing(python, environ)
    if now is None or os.path.abspath(now.executable) != os.path.abspath(executable):
        return None
    real = os.path.realpath(now.executable)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return {"found": now.found, "executable": now.executable, "real": real, "size": st.st_size,
            "mtime": st.st_mtime_ns, "dispatch": now.dispatch}


def caller_part(python: str, executable: str, environ: dict[str, str], tree_folders: list[str]) -> dict[str, object]:
    """The part of the fingerprint a caller's environment decides: the interpreter and the import variables."""
    return {"version": FINGERPRINT_VERSION, "interpreter": interpreter_identity(python, environ, executable),
            "environment": python_environment(environ, tree_folders)}


def tree_part(watch: list[str], site_dirs: list[str], tree_stamp: str) -> dict[str, object]:
    """The part the files decide: the tree's folders, the site folders and the root's tree stamp."""
    return {"tree": {folder: folder_listing(folder) for folder in watch}, "sites": site_stats(site_dirs),
            "stamp": regular_text(tree_stamp)}


def fingerprint(python: str, executable: str, environ: dict[str, str], watch: list[str], site_dirs: list[str],
                tree_stamp: str, tree_folders: list[str]) -> dict[str, object]:
    """Everything a warm answer depends on, as plain data compared for equality (the twin keeps it as JSON)."""
    return {**caller_part(python, executable, environ, tree_folders), **tree_part(watch, site_dirs, tree_stamp)}


# -- the interpreter a name runs, read from the files (pyenv's shim included) -------------------------------------
ELF_MAGIC = b"\x7fELF"
SHIM_MAX_BYTES = 4096  # pyenv's shim is about 300 bytes
# What `pyenv rehash` writes for every shim, around its root and its pyenv (SHIM_PATH: pyenv 2.3.36 on).
SHIM_HEAD = '#!/usr/bin/env bash\nset -e\n[ -n "$PYENV_DEBUG" ] && set -x\n\nprogram="${0##*/}"\n\nexport PYENV_ROOT="'
SHIM_PATH_LINES = ('SHIM_PATH=${{0%/*}}\nif [[ $SHIM_PATH != "{root}/shims" ]]; then\n'
                   '  export _PYENV_SHIM_PATH="$SHIM_PATH"\nfi\n')
SHIM_EXEC = ('exec "', '" exec "$program" "$@"\n')
VERSION_LINE_MAX = 1024  # pyenv-version-file-read: read -n 1024
HOOK_COMMANDS = ("version-name", "which", "exec")  # the hooks that run between the shim and the interpreter
SYSTEM_HOOK_PATH = ("/usr/etc/pyenv.d", "/usr/local/etc/pyenv.d", "/etc/pyenv.d", "/usr/lib/pyenv/hooks")


class Landing:
    """What a name runs: ``found`` (what PATH gives), the ``executable`` it lands on, and what a shim's choice
    rests on (``dispatch``, plain data)."""

    __slots__ = ("dispatch", "executable", "found")

    def __init__(self, found: str, executable: str, dispatch: object = None) -> None:
        self.found, self.executable, self.dispatch = found, executable, dispatch


def landing(python: str, environ: dict[str, str]) -> Landing | None:
    """The interpreter ``python`` (a path, or a name on PATH) runs now, or None when that cannot be told without
    running it: a binary is itself, pyenv's shim is followed as pyenv does for the case its files settle,
    anything else (asdf's shims, wrappers) is not settled."""
    found = python if os.sep in python else _on_path(python, environ.get("PATH"))
    if not found:
        return None
    found = os.path.abspath(found)
    head = read_regular(found, SHIM_MAX_BYTES, head=True)
    if head is None:
        return None
    if head.startswith(ELF_MAGIC):
        return Landing(found, found)
    if head.startswith(b"#!") and len(head) < SHIM_MAX_BYTES:
        return pyenv_landing(found, head, environ)
    return None


def _on_path(name: str, path: str | None) -> str | None:
    """The first executable ``name`` on ``path``, as shutil.which finds it (shutil would bring in re)."""
    for folder in (os.defpath if path is None else path).split(os.pathsep) if path != "" else ():
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.F_OK | os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _plain(path: str) -> bool:
    """A path bash would not expand inside double quotes."""
    return bool(path) and not any(c in path for c in '"$`\\\n')


def pyenv_shim(text: str) -> tuple[str, str] | None:
    """(PYENV_ROOT, the pyenv it runs) when ``text`` is exactly the script `pyenv rehash` writes, else None."""
    if not text.startswith(SHIM_HEAD):
        return None
    root, quote, rest = text[len(SHIM_HEAD):].partition('"\n')
    if not quote or not _plain(root):
        return None
    block = SHIM_PATH_LINES.format(root=root)
    rest = rest[len(block):] if rest.startswith(block) else rest
    start, end = SHIM_EXEC
    pyenv = rest[len(start):-len(end)] if rest.startswith(start) and rest.endswith(end) else ""
    return (root, pyenv) if _plain(pyenv) else None


def pyenv_landing(shim: str, text: bytes, environ: dict[str, str]) -> Landing | None:
    """Where pyenv's shim dispatches, as ``pyenv exec`` picks it; None when the choice is not one this settles."""
    try:
        paths = pyenv_shim(text.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    if paths is None:
        return None
    root = paths[0][:-1] if paths[0].endswith("/") else paths[0]  # pyenv: ${PYENV_ROOT%/}
    version = pyenv_version(root, environ)
    if version is None:
        return None
    binary = os.path.join(root, "versions", version, "bin", os.path.basename(shim))
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return None  # pyenv would try the next version, then the system's
    return Landing(shim, binary, {"pyenv": root, "hooks": pyenv_hooks(root, paths[1], environ)})


def pyenv_version(root: str, environ: dict[str, str]) -> str | None:
    """pyenv-version-name: the first selected version when it is installed (``ROOT/versions/<it>``), else None."""
    pwd = shell_pwd(environ)
    pyenv_dir = None if pwd is None else resolved_pyenv_dir(environ, pwd)
    if pwd is None or pyenv_dir is None:
        return None
    selected = environ.get("PYENV_VERSION") or version_from_files(root, pyenv_dir, pwd)
    if not selected:
        return None  # unreadable, or no selection: pyenv's "system"
    first = selected.split(":")[0]
    if first == "system" or not safe_version(first):
        return None
    candidates = (first, first[len("python-"):]) if first.startswith("python-") else (first,)
    # Not installed: a prefix that `pyenv latest` would resolve, or nothing (pyenv then tries the system's).
    return next((v for v in candidates if v and os.path.isdir(os.path.join(root, "versions", v))), None)


def safe_version(name: str) -> bool:
    """A version name pyenv takes as it is: no space, glob character or ':', and a path (pyenv-virtualenv's
    ``3.12.1/envs/NAME``) only of plain parts."""
    return (bool(name) and not any(c.isspace() or c in ":*?[]" for c in name)
            and all(part not in ("", ".", "..") for part in name.split("/")))


def resolved_pyenv_dir(environ: dict[str, str], pwd: str) -> str | None:
    """PYENV_DIR (default the working folder) as pyenv resolves it; None where pyenv would stop or this does not
    follow it (``cd`` through CDPATH, a ``//host`` path)."""
    pyenv_dir = environ.get("PYENV_DIR") or pwd
    if not pyenv_dir.startswith("/"):
        if environ.get("CDPATH"):
            return None
        pyenv_dir = os.path.join(pwd, pyenv_dir)
    pyenv_dir = os.path.normpath(pyenv_dir)  # `cd -L`
    if pyenv_dir.startswith("//") or not os.path.isdir(pyenv_dir):
        return None
    return pyenv_dir


def version_from_files(root: str, pyenv_dir: str, pwd: str) -> str | None:
    """The first ``.python-version`` from PYENV_DIR up, then from the working folder, else ``ROOT/version``."""
    found = local_version_file(pyenv_dir)
    if found is None and pyenv_dir != pwd:
        found = local_version_file(pwd)
    return read_version_file(found or os.path.join(root, "version"))


def shell_pwd(environ: dict[str, str]) -> str | None:
    """The working folder as bash has it: PWD when it names the working folder, else the physical one."""
    try:
        here = os.getcwd()
    except OSError:
        return None
    pwd = environ.get("PWD", "")
    try:
        if pwd.startswith("/") and os.path.samefile(pwd, here):
            return os.path.normpath(pwd)
    except (OSError, ValueError):
        pass
    return here


def local_version_file(folder: str) -> str | None:
    """pyenv's find_local_version_file: ``.python-version`` (a regular file) in ``folder`` or above."""
    current = folder.rstrip("/")
    while True:
        candidate = current + "/.python-version"
        if os.path.isfile(candidate):
            return candidate
        if not current:
            return None
        current = current.rpartition("/")[0]


def read_version_file(path: str) -> str | None:
    """The first word of each line that is no comment, joined by ``:`` (pyenv-version-file-read); "" for an
    empty or missing file, None for one this does not read as pyenv would."""
    if not os.path.lexists(path):
        return ""
    raw = read_regular(path, 64 << 10)
    if raw is None or b"\0" in raw:
        return None
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return None
    versions = []
    for line in lines:
        if len(line) > VERSION_LINE_MAX:
            return None
        word = line.strip(" \t\r").replace("\t", " ").replace("\r", " ").partition(" ")[0]
        if not word or word.startswith("#"):
            continue
        if not safe_version(word):
            return None  # pyenv checks such a name against ROOT/versions and may skip it with a warning
        versions.append(word)
    return ":".join(versions)


def pyenv_hooks(root: str, pyenv: str, environ: dict[str, str]) -> list[list[object]]:
    """The hook scripts pyenv runs between the shim and the interpreter, each as path, size and mtime."""
    prefix = os.path.dirname(os.path.dirname(_links_resolved(pyenv)))  # libexec/pyenv's install prefix
    folders = [f for f in environ.get("PYENV_HOOK_PATH", "").split(":") if f]
    folders.append(os.path.join(root, "pyenv.d"))
    if prefix != root:
        folders.append(os.path.join(prefix, "pyenv.d"))
    folders.extend(SYSTEM_HOOK_PATH)
    plugins = os.path.join(root, "plugins")
    folders.extend(os.path.join(plugins, name, "etc", "pyenv.d") for name in _names(plugins))
    present = [f for f in folders if os.path.isdir(f)]
    return [hook for command in HOOK_COMMANDS for folder in present
            for hook in _hook_files(os.path.join(folder, command))]


def _links_resolved(path: str) -> str:
    """libexec/pyenv's abs_dirname: links of the last part followed (at most 40, as the kernel does)."""
    for _ in range(40):
        try:
            target = os.readlink(path)
        except OSError:
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return path


def _names(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _hook_files(folder: str) -> list[list[object]]:
    hooks: list[list[object]] = []
    for name in _names(folder):
        if name.endswith(".bash"):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            hooks.append([path, st.st_size, st.st_mtime_ns])
    return hooks


# -- the stamp --------------------------------------------------------------------------------------------------
def file_identity(path: str) -> list[int] | None:
    """(inode, size, mtime) of the regular file ``path``: a rewrite changes it."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns] if stat.S_ISREG(st.st_mode) else None


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def read_stamp(root: str) -> dict[str, object] | None:
    """The root's stamp when this user wrote it (a regular file of ours nobody else may write) and its fields
    hold what the writer puts there (pipeline/warm.py: ``keep_warm``), else None."""
    path = stamp_path(root)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    raw = read_regular(path)
    try:
        stamp = marshal.loads(raw) if raw is not None else None
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(stamp, dict) or stamp.get("format") != STAMP_FORMAT or stamp.get("root") != root:
        return None
    tree, twin = stamp.get("tree"), stamp.get("twin")
    if not (isinstance(stamp.get("env_file"), bytes) and isinstance(twin, list) and len(twin) == 3
            and all(type(n) is int for n in twin) and isinstance(stamp.get("print"), dict)
            and isinstance(stamp.get("entries"), list) and isinstance(tree, dict)
            and all(_texts(tree.get(k)) for k in ("watch", "site_dirs", "folders"))
            and isinstance(tree.get("stamp"), str)):
        return None
    return stamp


def matching_entry(stamp: dict[str, object], tokens: list[str], environ: dict[str, str],
                   cwd: str) -> dict[str, object] | None:
    """The stamp's entry for these raw inputs, when its fields hold what the writer puts there."""
    for entry in stamp["entries"]:  # type: ignore[attr-defined]  # a list (read_stamp)
        if not isinstance(entry, dict) or entry.get("argv") != tokens or entry.get("cwd") != cwd:
            continue
        variables = entry.get("environ")
        if not isinstance(variables, dict) or any(environ.get(k) != v for k, v in variables.items()):
            continue
        if all(isinstance(entry.get(k), str) for k in ("python", "executable", "fail_marker")) and all(
                _texts(entry.get(k)) for k in ("say", "out", "err")) and isinstance(entry.get("print"), dict):
            return entry
    return None


def answer(argv: list[str], environ: dict[str, str]) -> tuple[str, str] | None:
    """What a warm ``ensure`` call prints (stdout, stderr), or None: the command line decides."""
    started = time.monotonic()
    if "_ARGCOMPLETE" in environ:
        return None  # a TAB press: argcomplete asks the command line what to offer
    tokens = key_tokens(argv)
    if tokens and not tokens[0].startswith("-"):
        return None  # another command
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    root = _root(tokens, environ, cwd)
    stamp = read_stamp(root) if root else None
    entry = matching_entry(stamp, tokens, environ, cwd) if stamp is not None else None
    if stamp is None or entry is None or not _unchanged(stamp, entry, environ):
        return None
    elapsed = repr(round(time.monotonic() - started, 3))
    if "--json" not in argv:
        clock = time.strftime("%H:%M:%S")
        return "".join(f"[{clock}] ensure-flydsl: {line}\n" for line in entry["say"]), ""  # type: ignore[attr-defined]
    holes = {"run_id": '"' + os.urandom(6).hex() + '"', "elapsed": elapsed,
             "durations": '{"fingerprint": ' + elapsed + "}", "time": repr(time.time())}
    return _filled(entry["out"], holes), _filled(entry["err"], holes)  # type: ignore[arg-type]


def _unchanged(stamp: dict[str, object], entry: dict[str, object], environ: dict[str, str]) -> bool:
    """Whether the env file, its twin and everything the fingerprint covers are as the stamp found them, and no
    failure marker is there (one is the command line's to judge: it may be another root's)."""
    root, tree = str(stamp["root"]), stamp["tree"]
    assert isinstance(tree, dict)  # read_stamp
    if read_regular(os.path.join(root, ENV_FILE_NAME)) != stamp["env_file"] \
            or file_identity(os.path.join(root, ENV_JSON_NAME)) != stamp["twin"] \
            or os.path.lexists(str(entry["fail_marker"])):
        return False
    caller = caller_part(str(entry["python"]), str(entry["executable"]), environ, tree["folders"])
    return (caller["interpreter"] is not None and caller == entry["print"]  # an unsettled name is never warm
            and tree_part(tree["watch"], tree["site_dirs"], tree["stamp"]) == stamp["print"])


def _filled(template: list[str], holes: dict[str, str]) -> str:
    """A template of the writer's: literal texts at even places, the names of holes at odd ones."""
    return "".join(holes.get(part, "") if i % 2 else part for i, part in enumerate(template))


def _root(tokens: list[str], environ: dict[str, str], cwd: str) -> str | None:
    """The root as the settings have it: the last ``--root``, else FLYDSL_ROOT, else the default."""
    root = environ.get("FLYDSL_ROOT") or DEFAULT_ROOT
    for i, token in enumerate(tokens):
        if token == "--root":
            if i + 1 == len(tokens):
                return None
            root = tokens[i + 1]
        elif token.startswith("--root="):
            root = token[len("--root="):]
    return os.path.normpath(os.path.join(cwd, root)) if root else None
