"""The import probe: import each module in argv[1] (comma-separated; argv[2]: those to preload, the early probe);
answer one line ``result REPR`` on the descriptor that was stdout (a repr, not JSON: ``json`` imports ``re``)."""
import importlib
import importlib.util
import os
import site
import sys
import sysconfig

out = os.dup(1)
os.dup2(2, 1)  # whatever the imports print goes to stderr; fd `out` carries only our lines
sys.stdout = sys.stderr
modules = [name for name in sys.argv[1].split(",") if name]
preload = [name for name in sys.argv[2].split(",") if name] if len(sys.argv) > 2 else None
if preload is not None:
    # Started early (the early probe): import the heavy third-party modules the tree needs while the tree is put in
    # place, then wait for "go" and probe as always.  A failed import is left to the probe proper to report.
    started_with = set(sys.modules)
    for name in preload:
        os.write(out, ("importing %s\n" % name).encode())
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    os.write(out, b"ready\n")
    if sys.stdin.readline().strip() != "go":
        sys.exit(0)
    importlib.invalidate_caches()
    sys.path_importer_cache.clear()  # the tree's folders may not have existed when the path was first read
    from importlib.machinery import PathFinder
    # Each top-level module the preload brought in must be what the path finds now, the tree's folders first.
    # Else the tree shadows it, and a fresh probe must answer.
    for name in sorted(set(sys.modules) - started_with):
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if "." in name or spec is None or not getattr(spec, "has_location", False):
            continue
        now = PathFinder.find_spec(name)
        if now is None or now.origin != spec.origin:
            os.write(out, ("stale %s\n" % name).encode())
            sys.exit(0)
try:
    site_dirs = list(site.getsitepackages())
except Exception:
    site_dirs = []
try:
    site_dirs.append(site.getusersitepackages())
except Exception:
    pass
hook_dirs = []
for hook in ("sitecustomize", "usercustomize"):  # imported by site at start-up, from anywhere on the path
    hook_file = getattr(sys.modules.get(hook), "__file__", None)
    if isinstance(hook_file, str):
        hook_dir = os.path.dirname(os.path.abspath(hook_file))
        hook_dirs.append(os.path.dirname(hook_dir) if os.path.basename(hook_file).startswith("__init__.") else hook_dir)
info = {
    "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "cache_tag": sys.implementation.cache_tag,
    "soabi": sysconfig.get_config_var("SOABI") or "",
    "platform": sysconfig.get_platform(),
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "site_dirs": site_dirs,
    "hook_dirs": hook_dirs,
    "stdlib": sysconfig.get_paths().get("stdlib", ""),
    "include": sysconfig.get_paths().get("include", ""),
}


def imported(name: str) -> "dict[str, str | None]":
    """Import ``name``: the file it was imported from, or why it could not be (the exception's last line)."""
    try:
        mod = importlib.import_module(name)
        file = getattr(mod, "__file__", None)
    except BaseException as exc:
        import traceback  # here: a probe whose imports all work (most) does not need it, an eighth of its start

        return {"file": None,
                "error": "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]}
    if file is None:
        return {"file": None, "error": "imported as a namespace package without a file (no __init__.py)"}
    return {"file": file, "error": None}


results = {}
for name in modules:
    # Say what is imported next (and from where) before importing it: if the import kills or hangs the
    # interpreter, these lines are all the tool learns.
    os.write(out, ("importing %s\n" % name).encode())
    try:
        spec = importlib.util.find_spec(name.split(".")[0])
        if spec is not None and spec.origin:
            os.write(out, ("origin %s %s\n" % (name, spec.origin)).encode())
    except BaseException:
        pass
    results[name] = imported(name)
version = getattr(sys.modules.get("flydsl"), "__version__", None)
version_error = None
if "flydsl" in sys.modules and not isinstance(version, str):
    bad = "flydsl has no __version__" if version is None else "flydsl.__version__ is not a string: %r" % (version,)
    version_error, version = bad, None
payload = {"python": info, "modules": results, "version": version, "version_error": version_error}
os.write(out, ("result " + repr(payload) + "\n").encode())
os.close(out)
# The answer is out: skip the interpreter's teardown (with torch loaded, a few hundred ms of finalizers).
sys.stderr.flush()
os._exit(0)
