"""Which interpreter a name runs, read from the files without running anything (the warm path's question).

``python3`` on PATH is often a shim: pyenv's is a bash script that runs the interpreter of the version
selected by PYENV_VERSION, a ``.python-version`` file from the working folder up, or pyenv's global
``version`` file.  The last call's interpreter says nothing about the next one's, so :func:`landing`
answers what the name lands on now:

- a binary (an ELF file, or a chain of links to one): the file PATH gives is the interpreter;
- pyenv's shim (the exact script ``pyenv rehash`` writes): the selected version's ``bin/<name>``, found by
  pyenv's own lookup (``libexec/pyenv-version-file``, ``-version-file-read``, ``-version-name``, ``-which``),
  for the case it settles without asking anything else: the first selected version is installed and has
  the program.  ``system``, a version prefix for ``pyenv latest`` to resolve, a version that is not
  installed or lacks the program are not settled here;
- anything else (another script: asdf's shims, a wrapper of one's own) is not settled.

Not settled means None: no warm answer, the full probe runs (correct, slower).  A binary that runs another
interpreter (mise's shims are links to the mise binary) is caught by the caller, which compares the landing
with the probe's ``sys.executable`` (probe/fingerprint.py).  Light to import: the warm path uses it.
"""

from __future__ import annotations

import os

from ensure_flydsl.support.files import read_head, read_regular
from ensure_flydsl.support.frozen import Frozen

# re is imported where a value is matched: the warm call imports none (under python3 -E -S, as the GEAK folder
# runs the tool, its import costs as much as the interpreter's start: tests/scenarios/test_warm_imports.py)
TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import List, Mapping, Optional, Sequence

ELF_MAGIC = b"\x7fELF"
SHIM_MAX_BYTES = 4096  # pyenv's shim is about 300 bytes

# What `pyenv rehash` writes for every shim (libexec/pyenv-rehash: create_prototype_shim), with the root and
# the pyenv it ran; pyenv before 2.3.36 wrote it without the SHIM_PATH lines.  Quotes, `$`, backslashes and
# backquotes in either path would be expanded by bash: such a shim is not read.
_PATH = r'[^"$`\\\n]+'
PYENV_SHIM = (  # compiled at first use (re caches it): only a script interpreter needs it
    r'#!/usr/bin/env bash\nset -e\n\[ -n "\$PYENV_DEBUG" \] && set -x\n\nprogram="\$\{0##\*/\}"\n\n'
    rf'export PYENV_ROOT="(?P<root>{_PATH})"\n'
    r'(?:SHIM_PATH=\$\{0%/\*\}\nif \[\[ \$SHIM_PATH != "(?P=root)/shims" \]\]; then\n'
    r'  export _PYENV_SHIM_PATH="\$SHIM_PATH"\nfi\n)?'
    rf'exec "(?P<pyenv>{_PATH})" exec "\$program" "\$@"\n'
)
VERSION_NAME = r"[^\s:*?\[\]]+"
VERSION_LINE_MAX = 1024  # pyenv-version-file-read: read -n 1024
HOOK_COMMANDS = ("version-name", "which", "exec")  # the hooks that run between the shim and the interpreter
SYSTEM_HOOK_PATH = ("/usr/etc/pyenv.d", "/usr/local/etc/pyenv.d", "/etc/pyenv.d", "/usr/lib/pyenv/hooks")


class Landing(Frozen):
    """What ``python`` runs: ``found`` is what PATH gives for it, ``executable`` the interpreter it lands on
    (``found`` itself for a binary), and ``dispatch`` what a shim's choice also rests on (JSON data)."""

    found: str
    executable: str
    dispatch: Optional[object] = None


def landing(python: str, environ: Mapping[str, str]) -> Optional[Landing]:
    """The interpreter ``python`` (a path, or a name looked up on the environment's PATH) runs now, or None
    when it cannot be told without running it."""
    if os.sep in python:
        found: Optional[str] = python
    else:
        import shutil  # here: the warm call of an interpreter given as a path needs no shutil

        found = shutil.which(python, path=environ.get("PATH"))
    if not found:
        return None
    found = os.path.abspath(found)
    head = read_head(found, SHIM_MAX_BYTES)
    if head is None:
        return None
    if head.startswith(ELF_MAGIC):
        return Landing(found, found)
    if head.startswith(b"#!") and len(head) < SHIM_MAX_BYTES:
        return pyenv_landing(found, head, environ)
    return None


def pyenv_landing(shim: str, text: bytes, environ: Mapping[str, str]) -> Optional[Landing]:
    """Where pyenv's shim ``shim`` (its bytes ``text``) dispatches, as ``pyenv exec`` picks it; None when
    ``text`` is not pyenv's shim or the choice is not one this module settles."""
    import re

    try:
        match = re.fullmatch(PYENV_SHIM, text.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    if match is None:
        return None
    root = match["root"][:-1] if match["root"].endswith("/") else match["root"]  # pyenv: ${PYENV_ROOT%/}
    version = pyenv_version(root, environ)
    if version is None:
        return None
    binary = os.path.join(root, "versions", version, "bin", os.path.basename(shim))
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return None  # pyenv would try the next version, then the system's
    return Landing(shim, binary, {"pyenv": root, "hooks": pyenv_hooks(root, match["pyenv"], environ)})


def pyenv_version(root: str, environ: Mapping[str, str]) -> Optional[str]:
    """pyenv-version-name: the first selected version, an installed one (``ROOT/versions/<it>``), or None."""
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
    """A version name pyenv takes as it is: no glob characters (its list is expanded unquoted), no space,
    and a path (pyenv-virtualenv's ``3.12.1/envs/NAME``) only of plain components under ``versions/``."""
    import re

    return re.fullmatch(VERSION_NAME, name) is not None and all(c not in ("", ".", "..") for c in name.split("/"))


def resolved_pyenv_dir(environ: Mapping[str, str], pwd: str) -> Optional[str]:
    """PYENV_DIR (default: the working folder ``pwd``) as libexec/pyenv resolves it, or None where pyenv would
    stop (not a folder) or this module does not follow it (``cd`` searching CDPATH, a ``//host`` path)."""
    pyenv_dir = environ.get("PYENV_DIR") or pwd
    if not pyenv_dir.startswith("/"):
        if environ.get("CDPATH"):
            return None
        pyenv_dir = os.path.join(pwd, pyenv_dir)
    pyenv_dir = os.path.normpath(pyenv_dir)  # `cd -L`
    if pyenv_dir.startswith("//") or not os.path.isdir(pyenv_dir):
        return None
    return pyenv_dir


def version_from_files(root: str, pyenv_dir: str, pwd: str) -> Optional[str]:
    """pyenv-version-file and -version-file-read: the first ``.python-version`` from PYENV_DIR up to /, then
    from the working folder, else ``ROOT/version``; its versions joined by ``:`` ("" for none), or None for a
    file this module does not read as pyenv would."""
    found = local_version_file(pyenv_dir)
    if found is None and pyenv_dir != pwd:
        found = local_version_file(pwd)
    return read_version_file(found or os.path.join(root, "version"))


def shell_pwd(environ: Mapping[str, str]) -> Optional[str]:
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


def local_version_file(folder: str) -> Optional[str]:
    """pyenv's find_local_version_file: ``.python-version`` (a regular file) in ``folder`` or above."""
    current = folder.rstrip("/")
    while True:
        candidate = current + "/.python-version"
        if os.path.isfile(candidate):
            return candidate
        if not current:
            return None
        current = current.rpartition("/")[0]


def read_version_file(path: str) -> Optional[str]:
    """pyenv-version-file-read: the first word of each line that is not empty or a comment, joined by ``:``;
    "" for an empty or missing file, None for one this module does not read as pyenv would."""
    import re

    if not os.path.lexists(path):
        return ""
    raw = read_regular(path, 64 << 10)
    if raw is None or b"\0" in raw:
        return None
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return None
    versions: List[str] = []
    for line in lines:
        if len(line) > VERSION_LINE_MAX:
            return None
        words = re.split(r"[ \t\r]+", line.strip(" \t\r"))
        if not words[0] or words[0].startswith("#"):
            continue
        if not safe_version(words[0]):
            return None  # pyenv checks such a name against ROOT/versions and may skip it with a warning
        versions.append(words[0])
    return ":".join(versions)


def pyenv_hooks(root: str, pyenv: str, environ: Mapping[str, str]) -> List[List[object]]:
    """The hook scripts pyenv runs on the way from the shim to the interpreter (``pyenv hooks exec`` etc.),
    each as path, size and mtime: a hook installed, removed or edited means another look."""
    prefix = os.path.dirname(os.path.dirname(_links_resolved(pyenv)))  # libexec/pyenv's install prefix
    folders = [f for f in environ.get("PYENV_HOOK_PATH", "").split(":") if f]
    folders.append(os.path.join(root, "pyenv.d"))
    if prefix != root:
        folders.append(os.path.join(prefix, "pyenv.d"))
    folders.extend(SYSTEM_HOOK_PATH)
    plugins = os.path.join(root, "plugins")
    folders.extend(os.path.join(plugins, name, "etc", "pyenv.d") for name in _names(plugins))
    present = [f for f in folders if os.path.isdir(f)]  # most are absent: one stat each, not three listings
    return [hook for command in HOOK_COMMANDS for folder in present
            for hook in _hook_files(os.path.join(folder, command))]


def _links_resolved(path: str) -> str:
    """libexec/pyenv's abs_dirname: ``path`` with links of its last part followed (bin/pyenv is a link to
    ../libexec/pyenv), its folders as they are written; at most 40 links, as the kernel allows."""
    for _ in range(40):
        try:
            target = os.readlink(path)
        except OSError:
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return path


def _names(folder: str) -> Sequence[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return ()


def _hook_files(folder: str) -> List[List[object]]:
    """The ``*.bash`` files in ``folder`` (what ``pyenv hooks`` sources), each as path, size and mtime of what
    it is or links to."""
    hooks: List[List[object]] = []
    for name in _names(folder):
        if name.endswith(".bash"):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            hooks.append([path, st.st_size, st.st_mtime_ns])
    return hooks
