"""Rules of the code that no linter here checks: a private name stays in its module, and layout.py alone
spells the names of the tool's own files and folders.

ruff's PLC2701 (import-private-name) ignores imports within the same package, which is every import here.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Set

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKED = ("src", "benchmarks", os.path.join("docs", "reliability_figures.py"))
# A file type or a dot, not a name of the tool's (records of the cache and of pins end so too); the tool's
# own name, which its messages say and which names its folder in the user's cache folder.
GENERIC = {".json", ".", "ensure-flydsl"}


def _python_files() -> Iterator[str]:
    for name in CHECKED:
        path = os.path.join(TOP, name)
        if os.path.isfile(path):
            yield path
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))


def private_imports(source: str) -> List[str]:
    """Each ``from X import _name`` (a private name of another module; dunders such as __version__ are
    public), as ``X._name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{'.' * node.level}{node.module or ''}.{alias.name}")
    return found


def test_the_check_finds_a_private_import() -> None:
    assert private_imports("from ensure_flydsl.doctor.check import OK, _ok\nfrom x import __version__\n") == [
        "ensure_flydsl.doctor.check._ok"]


def test_no_private_name_is_imported_across_modules() -> None:
    found = []
    for path in _python_files():
        with open(path, encoding="utf-8") as f:
            found.extend(f"{os.path.relpath(path, TOP)}: {name}" for name in private_imports(f.read()))
    assert found == []


def _strings(source: str) -> Set[str]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs}


def own_file_names() -> Set[str]:
    """The names layout.py gives the tool's files and folders that look like file names (a dot, a dash or a
    slash in them): an exact copy of one elsewhere is a second owner of that path."""
    with open(os.path.join(TOP, "src", "ensure_flydsl", "layout.py"), encoding="utf-8") as f:
        return {s for s in _strings(f.read())
                if ("." in s or "-" in s or "/" in s) and " " not in s and s not in GENERIC}


def test_layout_names_the_files_it_owns() -> None:
    assert {"owner.json", "tools.json", "start.lock", ".alive", "history.json", "history.lock",
            "rocm-overlay", "python/flydsl"} <= own_file_names()  # FlyDSL's own checkout layout too


def test_no_module_but_layout_spells_the_tools_file_names() -> None:
    owned, found = own_file_names(), []
    for path in _python_files():
        # warm.py names the files a warm call reads (the front door imports no other module); layout takes them.
        if path.endswith((os.path.join("ensure_flydsl", "layout.py"), os.path.join("ensure_flydsl", "warm.py"))) \
                or not path.startswith(os.path.join(TOP, "src")):
            continue
        with open(path, encoding="utf-8") as f:
            found.extend(f"{os.path.relpath(path, TOP)}: {name!r}" for name in sorted(_strings(f.read()) & owned))
    assert found == []


def _class_names() -> Set[str]:
    names: Set[str] = set()
    for path in _python_files():
        if path.startswith(os.path.join(TOP, "src")):
            with open(path, encoding="utf-8") as f:
                names.update(node.name for node in ast.walk(ast.parse(f.read())) if isinstance(node, ast.ClassDef))
    return names


def positional_constructions(source: str, classes: Set[str]) -> List[str]:
    """Each call of one of ``classes`` with more than four positional arguments (a record's fields are
    named where it is made: a swapped pair of strings would otherwise pass every type check)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and len(node.args) > 4:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in classes:
                found.append(f"{node.lineno}: {name} with {len(node.args)} positional arguments")
    return found


def test_the_check_finds_a_positional_construction() -> None:
    assert positional_constructions("Check('a', 1, 'b', 'c', True, None)\nCheck(name='a')\n", {"Check"}) == [
        "1: Check with 6 positional arguments"]


def test_records_of_more_than_four_fields_are_made_by_keyword() -> None:
    classes, found = _class_names(), []
    tests = os.path.join(TOP, "tests")
    for path in [*_python_files(), *(os.path.join(folder, f) for folder, _, files in os.walk(tests)
                                      for f in sorted(files) if f.endswith(".py"))]:
        with open(path, encoding="utf-8") as f:
            found.extend(f"{os.path.relpath(path, TOP)}:{where}"
                         for where in positional_constructions(f.read(), classes))
    assert found == []


# Who may call what: a process is started only by support/processes.py (its errors, its group, its stop), and a
# file or folder is renamed into place only by support/files.py (the rename, then its folder flushed).
OWNED_CALLS = {
    ("subprocess", "Popen"): os.path.join("ensure_flydsl", "support", "processes.py"),
    ("subprocess", "run"): os.path.join("ensure_flydsl", "support", "processes.py"),
    ("subprocess", "call"): os.path.join("ensure_flydsl", "support", "processes.py"),
    ("subprocess", "check_output"): os.path.join("ensure_flydsl", "support", "processes.py"),
    ("subprocess", "check_call"): os.path.join("ensure_flydsl", "support", "processes.py"),
    ("os", "rename"): os.path.join("ensure_flydsl", "support", "files.py"),
    ("os", "replace"): os.path.join("ensure_flydsl", "support", "files.py"),
}


def owned_calls(source: str) -> List[str]:
    """Each ``module.function(...)`` call of ``OWNED_CALLS`` in ``source``, as ``line: module.function``."""
    return [f"{node.lineno}: {node.func.value.id}.{node.func.attr}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in OWNED_CALLS]


def test_the_check_finds_an_owned_call() -> None:
    assert owned_calls("import os\nos.replace(a, b)\nos.path.join(a)\n") == ["2: os.replace"]


def test_processes_and_renames_have_one_owner_each() -> None:
    found = []
    for path in _python_files():
        if not path.startswith(os.path.join(TOP, "src")):
            continue
        with open(path, encoding="utf-8") as f:
            for call in owned_calls(f.read()):
                module, function = call.split(": ")[1].split(".")
                if OWNED_CALLS[(module, function)] not in path:
                    found.append(f"{os.path.relpath(path, TOP)}:{call}")
    assert found == []


# The standard library is used as it is (issue 40): no private C modules standing for their wrappers, no
# `TYPE_CHECKING = False` (typing imported for the type checker only), no record or enum library of our own.
STAND_INS = {"_json", "_signal", "_collections", "_functools", "_operator", "_thread", "_abc", "_io"}


def stand_ins(source: str) -> List[str]:
    """What in ``source`` stands for the standard library: an import of its private C module, a hand-rolled
    ``TYPE_CHECKING = False``, a class hook (``__init_subclass__``) that builds fields or members itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in STAND_INS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in STAND_INS:
            found.append(str(node.module))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TYPE_CHECKING"
                                                  for t in node.targets):
            found.append(f"line {node.lineno}: TYPE_CHECKING assigned")
        elif isinstance(node, ast.FunctionDef) and node.name == "__init_subclass__":
            found.append(f"line {node.lineno}: __init_subclass__")
    return found


def test_the_check_finds_a_stand_in() -> None:
    source = ("import _json\nfrom _signal import SIGTERM\nTYPE_CHECKING = False\n"
              "class A:\n    def __init_subclass__(c): pass\n")
    assert stand_ins(source) == ["_json", "_signal", "line 3: TYPE_CHECKING assigned", "line 5: __init_subclass__"]


def test_no_module_stands_for_the_standard_library() -> None:
    found = []
    for path in _python_files():
        if path.startswith(os.path.join(TOP, "src")):
            with open(path, encoding="utf-8") as f:
                found.extend(f"{os.path.relpath(path, TOP)}: {what}" for what in stand_ins(f.read()))
    assert found == []


# The line budget (issue 40: the redesign's targets plus 10 %): lines of src/ensure_flydsl, docstrings, comments
# and blank lines included, counted as `find src/ensure_flydsl -name '*.py' | xargs cat | wc -l` counts them.
BUDGETS = {  # a part of the package: its target
    "warm.py": 400, "api": 150, "settings.py": 450, "errors.py": 250, "layout.py": 300, "records": 250,
    "cli": 1000, "pipeline": 1300, "probe": 700, "ways": 3600, "source": 1700, "trees": 2200, "runs": 1700,
    "doctor": 450, "geak": 400, "support": 900,
}
API = {"__init__.py", "__main__.py", "api.py", "result.py", "version.py"}
# Parts still above their budget: a ceiling each, lowered as they shrink, removed once within the budget.
# (settings.py back in it, and api's one line: issue 43's prebuilt MLIR, its module of 264 lines, its setting
# and the answer's `mlir`, to be paid by issue 40's remaining work.)
# (api +10: a Ctrl-C during the hand-off is exit 130 by a handler, as an exception it could become a RuntimeError;
# +6: one before that handler is in place, during the front door's answer or signal's import, is exit 130 too)
NOT_YET = {"api": 200, "cli": 1373, "settings.py": 605}
# The whole package: the cap is 13,500 (and it closes at 12,500); until then a ceiling lowered as it shrinks
# (what each change added or paid is in `git log -p` of this line; +21 at 16,186: six fixes of the warm answer;
# +20 at 16,206: stop 56's reviews, 43 fixes, most paid for by folds in their own parts).
TOTAL_CEILING = 16206


def part_of(relative: str) -> str:
    """The budget a module of src/ensure_flydsl (a path relative to it) counts against."""
    if relative == "support/fields.py":
        return "records"
    head = relative.split("/")[0]
    return "api" if head in API else head


def line_counts() -> Dict[str, int]:
    """Lines per part of the package, as ``wc -l`` counts them."""
    counts: Dict[str, int] = {}
    package = os.path.join(TOP, "src", "ensure_flydsl")
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in (f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                lines = f.read().count(b"\n")
            part = part_of(os.path.relpath(path, package).replace(os.sep, "/"))
            counts[part] = counts.get(part, 0) + lines
    return counts


def test_every_module_counts_against_a_budget() -> None:
    assert set(line_counts()) <= set(BUDGETS), "a new top-level module or package: give it a budget"
    assert set(NOT_YET) <= set(BUDGETS)


def allowed(part: str) -> int:
    return int(BUDGETS[part] * 1.1)


def test_each_part_and_the_whole_stay_within_their_line_budget() -> None:
    counts = line_counts()
    over = {part: (lines, NOT_YET.get(part, allowed(part))) for part, lines in counts.items()
            if lines > NOT_YET.get(part, allowed(part))}
    assert over == {}, "lines, ceiling: pay for what a change adds by what it simplifies"
    assert [part for part, ceiling in NOT_YET.items() if ceiling <= allowed(part)] == [], "within budget: drop it"
    assert sum(counts.values()) <= TOTAL_CEILING
