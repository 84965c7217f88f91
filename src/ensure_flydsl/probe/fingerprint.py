"""The warm-call fingerprint: cheap stat data proving that nothing a successful probe depended on changed.

A full import probe costs seconds (``kernels.moe_gemm_2stage`` imports torch).  After a success the
tool records a fingerprint of everything the answer depends on; a later call with the same fingerprint
may answer without probing.  The fingerprint covers:

- the request (every setting that changes the answer);
- the interpreter the name lands on now (probe/shims.py): the file PATH gives for it; when that is a binary,
  the file itself; when it is pyenv's shim, the version's ``bin/<name>`` that PYENV_VERSION, a
  ``.python-version`` from the working folder (or PYENV_DIR) up, or pyenv's global ``version`` file
  selects, with pyenv's hook scripts; its path (which must be the probe's ``sys.executable``: a venv is
  its path, not the binary it links to), real path, size and mtime.  A name that lands where this cannot
  tell without running it (any other script, a shim choice pyenv's rules do not settle, a launcher that
  runs another interpreter) has no identity: never warm;
- the tree: every file under the watched folders (the package folders of the imported modules, the root's
  ``build-fly/python_packages``), as relative path, size, mtime and mode; ``__pycache__`` is left out
  because the workflow's own imports write into it;
- the interpreter's site folders (their mtime changes when a package is installed or removed), with the
  text of their ``.pth`` files and site customisation modules (edited in place, they change no mtime of
  the folder), and the folders the probe found ``sitecustomize``/``usercustomize`` in;
- the caller's PYTHONPATH and the variables that change how Python finds modules (PYTHONPATH without the
  tree's own folders: the env file puts them first, once, so a caller that already has them, e.g. after
  ``activate()`` or sourcing the env file, gets the very same imports);
- the root's finished-tree stamp (commit, how it was made).

Anything different, or ``--verify``, means a full probe.  The fingerprint is the data itself (a JSON
value kept in the env file's twin), compared for equality: no hashing, and standard library only, since
this runs on the warm path where every import counts (hashlib alone costs more than the whole check).
"""

from __future__ import annotations

import os

from ensure_flydsl.layout import packages_dir
from ensure_flydsl.probe.shims import landing
from ensure_flydsl.support.files import read_regular
from ensure_flydsl.support.pythonpath import without_folders

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import Dict, List, Mapping, Optional, Sequence

    from ensure_flydsl.probe.results import Interpreter
    from ensure_flydsl.settings_table import Request

FINGERPRINT_VERSION = 4
PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "PYTHONUSERBASE")


def interpreter_identity(python: str, environ: Mapping[str, str], executable: str) -> Optional[Dict[str, object]]:
    """What the name ``python`` runs now (probe/shims.py: ``landing``): the file PATH gives, the interpreter it
    lands on (its path, real path, size and mtime) and what a shim's choice rests on; None when that cannot
    be told without running it, or when it is not ``executable``, the probe's ``sys.executable``: a script
    or launcher that runs something else (a shim pyenv's rules do not settle, asdf's, mise's) is never
    answered warm."""
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


def folder_listing(folder: str) -> Optional[List[List[object]]]:
    """(relative path, mode, size, mtime) of everything under ``folder``, in a stable order (as ``os.walk``:
    each folder's files sorted, then its subfolders, then each of them, links to folders not entered); None if
    absent.  Written with ``os.scandir`` for the warm call: ``os.walk`` and a path join per file cost more
    than the stat calls themselves."""
    if not os.path.isdir(folder):
        return None
    listing: List[List[object]] = []
    _list_into(listing, folder, ".")
    return listing


def _list_into(listing: List[List[object]], current: str, rel: str) -> None:
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


SITE_HOOKS = ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize")


def site_stats(site_dirs: Sequence[str]) -> List[List[object]]:
    """Each site folder's mtime (a package installed or removed), and the text of what ``site`` runs from it:
    its ``.pth`` files and ``sitecustomize``/``usercustomize`` modules (or packages).  ``setup.py develop``
    and ``conda develop`` rewrite a ``.pth`` in place, which a folder's mtime does not show."""
    stats: List[List[object]] = []
    for folder in site_dirs:
        try:
            mtime: Optional[int] = os.stat(folder).st_mtime_ns
            # What site reads, sorted: not the whole folder (the standard library's hundreds of names).
            names = sorted(name for name in os.listdir(folder) if name.endswith(".pth") or name in SITE_HOOKS)
        except (OSError, ValueError):  # ValueError: a NUL in the name
            stats.append([folder, None])
            continue
        hooks: Dict[str, Optional[str]] = {}
        for name in names:
            path = os.path.join(folder, name)
            hooks[name] = regular_text(os.path.join(path, "__init__.py") if "." not in name else path)
        stats.append([folder, mtime, hooks])
    return stats


def regular_text(path: str) -> Optional[str]:
    """The text of ``path`` if it is a regular file (a FIFO planted as a ``.pth`` or at the stamp must not hang
    the call; support/files.py: read_regular)."""
    raw = read_regular(path)
    return None if raw is None else raw.decode("utf-8", errors="replace")


def compute(
    *,
    request: Request,
    python: str,
    executable: str,
    environ: Mapping[str, str],
    watch: Sequence[str],
    site_dirs: Sequence[str],
    tree_stamp: str,
    tree_folders: Sequence[str],
) -> Dict[str, object]:
    """The fingerprint: JSON data, equal to the recorded one exactly when nothing the answer depends on changed
    (``executable`` is the probe's ``sys.executable``, the interpreter the answer is for)."""
    return {
        "version": FINGERPRINT_VERSION,
        "request": request.to_json(),
        "interpreter": interpreter_identity(python, environ, executable),
        "environment": python_environment(environ, tree_folders),
        "tree": {folder: folder_listing(folder) for folder in watch},
        "sites": site_stats(site_dirs),
        "stamp": regular_text(tree_stamp),
    }


def python_environment(environ: Mapping[str, str], tree_folders: Sequence[str]) -> Dict[str, Optional[str]]:
    """The variables that change how Python finds modules, as the env file leaves them.  An empty
    PYTHONPATH is no PYTHONPATH, for Python and for the env file alike."""
    env = {name: environ.get(name) for name in PYTHON_ENV}
    env["PYTHONPATH"] = without_folders(env["PYTHONPATH"], tree_folders) or None
    return env


def site_folders(interp: Interpreter) -> List[str]:
    """What ``site`` reads at start-up: the interpreter's site folders, where its site hooks came from, the
    standard library (once each, in that order)."""
    return [d for d in dict.fromkeys([*interp.site_dirs, *interp.hook_dirs, interp.stdlib]) if d]


def interpreter_part(python: str, environ: Mapping[str, str], interp: Interpreter, tree_folders: Sequence[str],
                     modules: Sequence[str]) -> Optional[Dict[str, object]]:
    """What the fingerprint holds of the interpreter, less the root's own path (the host store keeps it beside a
    tree that passed the probe: pipeline/store_way.py): the interpreter the name lands on, the variables that
    steer imports, the site folders and their hooks, the modules probed; None as :func:`interpreter_identity`."""
    identity = interpreter_identity(python, environ, interp.executable)
    if identity is None:
        return None
    return {"interpreter": identity, "abi": interp.abi, "environment": python_environment(environ, tree_folders),
            "sites": site_stats(site_folders(interp)), "modules": list(modules)}


def same(recorded: object, current: Mapping[str, object]) -> bool:
    """Whether a fingerprint read back from JSON equals one computed now (tuples and lists alike)."""
    if recorded == current:  # the warm call's case, without a copy: lists and dicts compare alike
        return True
    import json  # here: the warm call's fingerprints are equal without it

    return bool(recorded == json.loads(json.dumps(current)))


def watch_folders(root: str, files: Mapping[str, str], package_folders: Mapping[str, str]) -> List[str]:
    """The folders whose contents the answer depends on: each imported module's top-level package, its
    ``<package>.libs`` sibling (auditwheel's bundled libraries), and the root's ``build-fly/python_packages``
    when the tree is in the root.  Folders inside another watched folder are not listed twice."""
    folders = set()
    for name in files:
        top = os.path.join(package_folders[name], name.split(".")[0])
        folders.add(top)
        if os.path.isdir(top + ".libs"):
            folders.add(top + ".libs")
    packages = packages_dir(root)
    if any(f == packages or f.startswith(packages + os.sep) for f in folders):
        folders.add(packages)
    ordered = sorted(folders)
    return [f for f in ordered if not any(f != g and f.startswith(g + os.sep) for g in ordered)]
