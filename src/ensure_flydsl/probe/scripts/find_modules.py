"""Each top-level name in argv[1] (comma-separated): "stdlib", "missing" or "present", by ``find_spec`` (no code of
it runs); before 3.10, a module built in, frozen, or under the stdlib folders is the standard library's."""
import importlib.util
import os
import sys
import sysconfig
from importlib.machinery import ModuleSpec

names = [name for name in sys.argv[1].split(",") if name]
known = getattr(sys, "stdlib_module_names", None)
paths = sysconfig.get_paths()
std_dirs = set(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k))


def find(name: str) -> "ModuleSpec | None | bool":
    try:
        return importlib.util.find_spec(name)
    except BaseException:
        return False  # present but odd: not provably missing; the final probe judges it


def is_std(name: str, spec: "ModuleSpec | None | bool") -> bool:
    if known is not None:
        return name in known
    if name in sys.builtin_module_names:
        return True
    if not isinstance(spec, ModuleSpec):
        return False
    if spec.origin == "built-in" or spec.origin == "frozen":
        return True
    where = spec.origin or next(iter(spec.submodule_search_locations or []), "")
    where = os.path.realpath(where)
    return (any(where.startswith(d + os.sep) for d in std_dirs)
            and "site-packages" not in where and "dist-packages" not in where)


answer = {}
for name in names:
    spec = find(name)
    answer[name] = "stdlib" if is_std(name, spec) else ("missing" if spec is None else "present")
sys.stdout.write("result " + repr(answer) + "\n")
sys.stdout.flush()
