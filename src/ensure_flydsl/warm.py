"""The front door: a warm ``ensure`` call answered from the root's stamp (marshal; pipeline/warm.py writes it),
keyed by the call's raw inputs, with no other module of the package; the fingerprint decides, any doubt misses."""

from __future__ import annotations

import marshal
import os
import stat
import sys
import time

STATE_DIR = ".ensure_flydsl"
DEFAULT_ROOT = "/opt/flydsl/FlyDSL"
ENV_FILE_NAME = "flydsl_env.sh"
ENV_JSON_NAME = "flydsl_env.json"
STAMP_FORMAT = 1
FINGERPRINT_VERSION = 8  # 8: every PYTHON* variable, ctime; 7: pyvenv.cfg, HOME; 6: hardlinked trees copied again
MAX_OWN_FILE_BYTES = 16 << 20  # the tool's own files hold a few KB; the stamp a tree's listing
INTERRUPTED_AT_START = "ensure-flydsl: interrupted (SIGINT) before it began; nothing was changed\n"
SITE_HOOKS = ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize")


def interrupted_at_start(*_: object) -> None:
    """SIGINT's handler until the command line takes Ctrl-C over (the hand-off, the parser, the command's import):
    one line and exit 130 at once. Not an exception: raised while a class is made, before 3.12 a RuntimeError."""
    sys.stderr.write(INTERRUPTED_AT_START)
    sys.stderr.flush()
    os._exit(130)


def stamp_path(root: str) -> str:
    return os.path.join(root, STATE_DIR, "warm")


def key_tokens(argv: list[str]) -> list[str]:
    """The setting flags of an ``ensure`` call: its argv without ``--json`` and a leading ``ensure``."""
    tokens = [arg for arg in argv if arg != "--json"]
    return tokens[1:] if tokens[:1] == ["ensure"] else tokens


def read_regular(path: str, limit: int = MAX_OWN_FILE_BYTES, *, head: bool = False, own: bool = False
                 ) -> bytes | None:
    """The bytes of the regular file ``path`` (its head when ``head``), else None; a planted FIFO never blocks.
    ``own``: only a file this user wrote alone, not through a link (judged on the file opened, not the path)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if own else 0)
    try:
        with open(os.open(path, flags), "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or own and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
                return None
            raw = handle.read(limit if head else limit + 1)
    except OSError:
        return None
    return raw if head or len(raw) <= limit else None


def regular_text(path: str) -> str | None:
    return None if (raw := read_regular(path)) is None else raw.decode("utf-8", errors="replace")


def without_folders(pythonpath: str | None, folders: list[str]) -> str:
    """``pythonpath`` less the env file's own folders (it puts them first, once), the rest kept in order."""
    drop = {f for f in folders if f}
    return os.pathsep.join(e for e in pythonpath.split(os.pathsep) if e not in drop) if pythonpath else ""


def python_environment(environ: dict[str, str], tree_folders: list[str]) -> dict[str, str | None]:
    """The variables that steer imports, as the env file leaves them (an empty PYTHONPATH is none)."""
    # Every PYTHON* variable (PYTHONWARNINGS=error fails an import that warns); HOME: the user site folder, unless
    # PYTHONUSERBASE names it.  Not the loader's LD_LIBRARY_PATH, LD_PRELOAD: valgrind, which counts a warm call's
    # instructions (benchmarks/warm_call.py), sets both.
    env: dict[str, str | None] = {k: v for k, v in environ.items() if k.startswith("PYTHON") or k == "HOME"}
    env["PYTHONPATH"] = rest = without_folders(env.get("PYTHONPATH"), tree_folders) or None
    if rest and not all(entry.startswith("/") for entry in rest.split(os.pathsep)):
        try:  # Python makes a relative entry (an empty one too) absolute from where it starts
            env["relative_to"] = os.getcwd()
        except OSError:
            env["relative_to"] = None
    return env


def folder_listing(folder: str) -> list[list[object]] | None:
    """(relative path, mode, size, mtime, ctime) of all under ``folder`` but bytecode (imports write it); None if
    absent.  The ctime: ``cp -p``, ``rsync -a`` and ``tar x`` keep a rewritten file's mtime."""
    if not os.path.isdir(folder):
        return None
    listing: list[list[object]] = []
    for current, dirs, names in os.walk(folder):  # top-down, links to folders listed but not followed
        rel = current[len(folder):].lstrip(os.sep) or "."
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                try:
                    st = os.lstat(os.path.join(current, name))
                except OSError:
                    continue
                listing.append([f"{rel}/{name}", st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
        listing.extend([f"{rel}/{name}/", 0, 0, 0, 0] for name in dirs)
    return listing


def site_stats(site_dirs: list[str]) -> list[list[object]]:
    """Each site folder's mtime and the text of its ``.pth`` files and site hooks (rewritten in place: no mtime)."""
    stats: list[list[object]] = []
    for folder in site_dirs:
        try:
            mtime = os.stat(folder).st_mtime_ns
            names = sorted(name for name in os.listdir(folder) if name.endswith(".pth") or name in SITE_HOOKS)
        except (OSError, ValueError):  # ValueError: a NUL in the name
            stats.append([folder, None])
            continue
        hooks = {name: regular_text(os.path.join(folder, name, "__init__.py") if "." not in name
                                    else os.path.join(folder, name)) for name in names}
        stats.append([folder, mtime, hooks])
    return stats


def interpreter_identity(python: str, environ: dict[str, str], executable: str) -> dict[str, object] | None:
    """What the name ``python`` runs now, when that is ``executable`` (the probe's); None if unsettled or other."""
    now = landing(python, environ)
    if now is None or os.path.abspath(now.executable) != os.path.abspath(executable):
        return None
    real = os.path.realpath(now.executable)
    try:
        st = os.stat(real)
    except OSError:
        return None
    # A venv's binary is the base's: its pyvenv.cfg (beside it or one up, as getpath looks) decides the site folders.
    bin_dir = os.path.dirname(now.executable)
    venv = [regular_text(os.path.join(folder, "pyvenv.cfg")) for folder in (bin_dir, os.path.dirname(bin_dir))]
    return {"found": now.found, "executable": now.executable, "real": real, "size": st.st_size,
            "mtime": st.st_mtime_ns, "dispatch": now.dispatch, "venv": venv}


def caller_part(python: str, executable: str, environ: dict[str, str], tree_folders: list[str]) -> dict[str, object]:
    """The part of the fingerprint a caller's environment decides: the interpreter and the import variables."""
    return {"version": FINGERPRINT_VERSION, "interpreter": interpreter_identity(python, environ, executable),
            "environment": python_environment(environ, tree_folders)}


def tree_part(watch: list[str], site_dirs: list[str], tree_stamp: str) -> dict[str, object]:
    """The part the files decide: the tree's folders, the site folders and the root's tree stamp."""
    return {"tree": {folder: folder_listing(folder) for folder in watch}, "sites": site_stats(site_dirs),
            "stamp": regular_text(tree_stamp)}


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
    """What a name runs: what PATH gives, the executable it lands on, what a shim's choice rests on."""

    def __init__(self, found: str, executable: str, dispatch: object = None) -> None:
        self.found, self.executable, self.dispatch = found, executable, dispatch


def landing(python: str, environ: dict[str, str]) -> Landing | None:
    """The interpreter ``python`` runs now, read from the files: a binary, or pyenv's shim; None if unsettled."""
    found = python if os.sep in python else _on_path(python, environ.get("PATH"))
    if not found:
        return None
    found = os.path.abspath(found)
    head = read_regular(found, SHIM_MAX_BYTES, head=True) or b""
    if head.startswith(b"\x7fELF"):
        return Landing(found, found)
    return pyenv_landing(found, head, environ) if head.startswith(b"#!") and len(head) < SHIM_MAX_BYTES else None


def _on_path(name: str, path: str | None) -> str | None:
    """The first executable ``name`` on ``path``, as shutil.which finds it (shutil would bring in re)."""
    for folder in (os.defpath if path is None else path).split(os.pathsep) if path != "" else ():
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.F_OK | os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def pyenv_landing(shim: str, text: bytes, environ: dict[str, str]) -> Landing | None:
    """Where pyenv's shim, exactly as `pyenv rehash` writes it, dispatches; None when the files do not settle it."""
    try:
        shim_text = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not shim_text.startswith(SHIM_HEAD):
        return None
    root, quote, rest = shim_text[len(SHIM_HEAD):].partition('"\n')
    block = SHIM_PATH_LINES.format(root=root)
    rest = rest[len(block):] if rest.startswith(block) else rest
    start, end = SHIM_EXEC
    pyenv = rest[len(start):-len(end)] if rest.startswith(start) and rest.endswith(end) else ""
    if not quote or not all(path and not any(c in path for c in '"$`\\\n') for path in (root, pyenv)):
        return None  # a path bash would expand inside double quotes
    root = root[:-1] if root.endswith("/") else root  # pyenv: ${PYENV_ROOT%/}
    version = pyenv_version(root, environ)
    binary = os.path.join(root, "versions", version or "", "bin", os.path.basename(shim))
    if version is None or not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return None  # pyenv would try the next version, then the system's
    return Landing(shim, binary, {"pyenv": root, "hooks": pyenv_hooks(root, pyenv, environ)})


def pyenv_version(root: str, environ: dict[str, str]) -> str | None:
    """pyenv-version-name: the first selected version when it is installed (``ROOT/versions/<it>``), else None."""
    pwd = shell_pwd(environ)
    if pwd is None:
        return None
    pyenv_dir = environ.get("PYENV_DIR") or pwd
    if not pyenv_dir.startswith("/"):
        if environ.get("CDPATH"):
            return None
        pyenv_dir = os.path.join(pwd, pyenv_dir)
    pyenv_dir = os.path.normpath(pyenv_dir)  # `cd -L`
    if pyenv_dir.startswith("//") or not os.path.isdir(pyenv_dir):
        return None
    selected = environ.get("PYENV_VERSION")
    if not selected:  # the first .python-version from PYENV_DIR up, then from the working folder, else ROOT/version
        found = local_version_file(pyenv_dir) or (local_version_file(pwd) if pyenv_dir != pwd else None)
        selected = read_version_file(found or os.path.join(root, "version"))
    if not selected:
        return None  # unreadable, or no selection: pyenv's "system"
    first = selected.split(":")[0]
    if first == "system" or not safe_version(first):
        return None
    candidates = (first, first[len("python-"):]) if first.startswith("python-") else (first,)
    # Not installed: a prefix that `pyenv latest` would resolve, or nothing (pyenv then tries the system's).
    return next((v for v in candidates if v and os.path.isdir(os.path.join(root, "versions", v))), None)


def safe_version(name: str) -> bool:
    """A version name pyenv takes as it is: no space, glob or ':', and a path of plain parts only."""
    return (bool(name) and not any(c.isspace() or c in ":*?[]" for c in name)
            and all(part not in ("", ".", "..") for part in name.split("/")))


def shell_pwd(environ: dict[str, str]) -> str | None:
    """The working folder as bash has it: PWD when it names the working folder, else the physical one."""
    try:
        here = os.getcwd()
    except OSError:
        return None
    pwd = environ.get("PWD", "")
    try:
        return os.path.normpath(pwd) if pwd.startswith("/") and os.path.samefile(pwd, here) else here
    except (OSError, ValueError):
        return here


def local_version_file(folder: str) -> str | None:
    """pyenv's find_local_version_file: ``.python-version`` (a regular file) in ``folder`` or above."""
    current = folder.rstrip("/")
    while not os.path.isfile(current + "/.python-version"):
        if not current:
            return None
        current = current.rpartition("/")[0]
    return current + "/.python-version"


def read_version_file(path: str) -> str | None:
    """pyenv-version-file-read: the words joined by ``:``; "" when empty or missing, None when unsure."""
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
    for _ in range(40):  # libexec/pyenv's abs_dirname: links of the last part followed, as the kernel does
        try:
            pyenv = os.path.normpath(os.path.join(os.path.dirname(pyenv), os.readlink(pyenv)))
        except OSError:
            break
    prefix = os.path.dirname(os.path.dirname(pyenv))  # libexec/pyenv's install prefix
    folders = [*(f for f in environ.get("PYENV_HOOK_PATH", "").split(":") if f), os.path.join(root, "pyenv.d")]
    if prefix != root:
        folders.append(os.path.join(prefix, "pyenv.d"))
    folders.extend(SYSTEM_HOOK_PATH)
    plugins = os.path.join(root, "plugins")
    folders.extend(os.path.join(plugins, name, "etc", "pyenv.d") for name in _names(plugins))
    present = [f for f in folders if os.path.isdir(f)]
    hooks: list[list[object]] = []
    for folder in (os.path.join(f, command) for command in HOOK_COMMANDS for f in present):
        for path in (os.path.join(folder, name) for name in _names(folder) if name.endswith(".bash")):
            try:
                st = os.stat(path)
            except OSError:
                continue
            hooks.append([path, st.st_size, st.st_mtime_ns])
    return hooks


def _names(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


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
    """The root's stamp when this user wrote it (nobody else may write it) and its fields are the writer's."""
    raw = read_regular(stamp_path(root), own=True)
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
        # Every FLYDSL_ variable set is one the writer named: a setting it did not know is no setting unset.
        if isinstance(variables, dict) and all(environ.get(k) == v for k, v in variables.items()) \
                and all(k in variables for k in environ if k.startswith("FLYDSL_")) \
                and all(isinstance(entry.get(k), str) for k in ("python", "executable", "fail_marker")) \
                and all(_texts(entry.get(k)) for k in ("say", "out", "err")) and isinstance(entry.get("print"), dict) \
                and isinstance(entry.get("shadows"), dict):
            return entry
    return None


def answer(argv: list[str], environ: dict[str, str]) -> tuple[str, str] | None:
    """What a warm ``ensure`` call prints (stdout, stderr), or None: the command line decides."""
    started = time.monotonic()
    tokens = key_tokens(argv)
    if "_ARGCOMPLETE" in environ or (tokens and not tokens[0].startswith("-")):
        return None  # a TAB press (argcomplete asks the command line what to offer), or another command
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


def _filled(template: list[str], holes: dict[str, str]) -> str:
    """A template of the writer's: literal texts at even places, the names of holes at odd ones."""
    return "".join(holes.get(part, "") if i % 2 else part for i, part in enumerate(template))


def _unchanged(stamp: dict[str, object], entry: dict[str, object], environ: dict[str, str]) -> bool:
    """Whether the files and the fingerprint are as the stamp found them, and no failure marker is there."""
    root, tree = str(stamp["root"]), stamp["tree"]
    assert isinstance(tree, dict)  # read_stamp
    if read_regular(os.path.join(root, ENV_FILE_NAME)) != stamp["env_file"] \
            or file_identity(os.path.join(root, ENV_JSON_NAME)) != stamp["twin"] \
            or os.path.lexists(str(entry["fail_marker"])):  # the command line's to judge: maybe another root's
        return False
    shadows = entry["shadows"]  # the working folder's names that shadow the tree: said as they are now
    assert isinstance(shadows, dict)  # matching_entry
    if any(os.path.exists(str(path)) != there for path, there in shadows.items()):
        return False
    caller = caller_part(str(entry["python"]), str(entry["executable"]), environ, tree["folders"])
    return (caller["interpreter"] is not None and caller == entry["print"]  # an unsettled name is never warm
            and tree_part(tree["watch"], tree["site_dirs"], tree["stamp"]) == stamp["print"])


def _root(tokens: list[str], environ: dict[str, str], cwd: str) -> str | None:
    """The root as the settings have it: the last ``--root``, else FLYDSL_ROOT, else the default."""
    root = environ.get("FLYDSL_ROOT") or DEFAULT_ROOT
    for i, token in enumerate(tokens):
        if token == "--root":
            root = tokens[i + 1] if i + 1 < len(tokens) else ""
        elif token.startswith("--root="):
            root = token[len("--root="):]
    return os.path.normpath(os.path.join(cwd, root)) if root else None
