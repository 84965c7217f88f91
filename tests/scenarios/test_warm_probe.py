"""The final probe's interpreter is started before the tree is in place (issue 13): it imports the heavy
third-party modules the requirements preflight found while the cache entry (or the wheel) is fetched and
unpacked, then answers exactly as a fresh probe would.  A module the finished tree shadows sends the
question to a fresh probe; nothing of it outlives the run."""

from __future__ import annotations

import json
import os
import sys
from typing import List, Tuple

from ensure_flydsl.probe.interpreter import EarlyProbe, run_probe
from tests.helpers.flydsl_fixture import KERNEL, FixtureRepo
from tests.helpers.scenario import assert_one_tree, wait_for
from tests.helpers.workspace import Workspace

# The kernel says, each time it is imported, whether filelock was imported before it in that process (it
# is only when the warm probe preloaded it) and which filelock it got.
TRACED_KERNEL = KERNEL + '''import os, sys
_preloaded = "filelock" in sys.modules
import filelock
with open(os.environ["FIXTURE_TRACE"], "a") as _trace:
    _trace.write("kernel preloaded=%s filelock=%s\\n" % (_preloaded, filelock.__file__))
'''
# A build that puts its own filelock into python_packages: once the tree is in place, it shadows the
# interpreter's, which the warm probe had already imported.
SHADOW_HOOK = ('mkdir -p "$PKG/filelock" && printf "%s\\n" "__version__ = \\"shadow\\"" '
               '"import os; open(os.environ[\\"FIXTURE_TRACE\\"], \\"a\\").write(\\"shadow imported\\\\n\\")" '
               '> "$PKG/filelock/__init__.py"')


def hosts(tmp_path: "os.PathLike[str]", repo: FixtureRepo, pin: str) -> List[Workspace]:
    """Two roots sharing one binary cache: the first builds and publishes, the second hits."""
    cache = os.path.join(str(tmp_path), "cache")
    made = []
    for name in ("a", "b"):
        ws = Workspace(os.path.join(str(tmp_path), name, "base"), repo)
        ws.env.update({"FLYDSL_PIN": pin, "FLYDSL_CACHE": cache,
                       "FIXTURE_TRACE": os.path.join(str(tmp_path), name + ".trace")})
        made.append(ws)
    return made


def trace(ws: Workspace) -> List[str]:
    path = ws.env["FIXTURE_TRACE"]
    return open(path).read().splitlines() if os.path.exists(path) else []


def processes_of(root: str) -> List[Tuple[int, str]]:
    """Live probes (the probe script's text is their argv) whose environment names ``root`` (a warm probe's
    PYTHONPATH does), with their command lines for the failure's message."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read()
        except OSError:
            continue
        if root.encode() in environ and b"importing" in argv:
            found.append((int(pid), argv.replace(b"\0", b" ").decode(errors="replace")[:300]))
    return found


def test_a_cache_hit_is_probed_by_the_interpreter_started_early(tmp_path: "os.PathLike[str]",
                                                                 own_repo: FixtureRepo) -> None:
    pin = own_repo.commit("traced", "0.2.2", files={"kernels/moe_gemm_2stage.py": TRACED_KERNEL})
    builder, hitter = hosts(tmp_path, own_repo, pin)
    built = builder.run("--json")
    assert built.returncode == 0, built.stderr
    assert trace(builder) and all("preloaded=False" in line for line in trace(builder))  # a build: no warm probe

    out = hitter.run("--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "cached"
    assert f"importing filelock in {hitter.env['FLYDSL_PYTHON']} while the tree is put in place" in out.stderr
    lines = trace(hitter)
    assert len(lines) == 1 and "preloaded=True" in lines[0], lines  # the probe ran in the warm process
    assert_one_tree(hitter)
    assert processes_of(hitter.root) == []


def test_a_module_the_finished_tree_shadows_is_probed_afresh(tmp_path: "os.PathLike[str]",
                                                             own_repo: FixtureRepo) -> None:
    pin = own_repo.commit("traced", "0.2.2", files={"kernels/moe_gemm_2stage.py": TRACED_KERNEL})
    builder, hitter = hosts(tmp_path, own_repo, pin)
    built = builder.run(FIXTURE_BUILD_HOOK=SHADOW_HOOK)
    assert built.returncode == 0, built.stderr

    out = hitter.run("--json")
    assert out.returncode == 0, out.stderr
    assert "importing filelock" in out.stderr  # it was started
    lines = trace(hitter)
    # Whether the warm process had imported the interpreter's filelock before the tree landed (then it found
    # it stale and a fresh probe answered) or only after (then it imported the tree's, as a fresh probe
    # does), the kernel got the tree's own filelock, as a fresh probe gives it.  The stale case itself is
    # shown without a race below.
    assert lines[0] == "shadow imported" and len(lines) == 2, lines
    assert lines[1].endswith("filelock=" + os.path.join(hitter.root, "build-fly", "python_packages", "filelock",
                                                          "__init__.py")), lines
    assert processes_of(hitter.root) == []


def test_a_warm_probe_answers_none_when_the_tree_shadows_what_it_preloaded(tmp_path: "os.PathLike[str]") -> None:
    """EarlyProbe directly: it preloads a module from the caller's PYTHONPATH, the tree then lands with a
    module of the same name first on the path, and it answers None (a fresh probe must answer)."""
    base = str(tmp_path)
    site, tree = os.path.join(base, "site"), os.path.join(base, "tree")
    log = os.path.join(base, "trace")
    os.makedirs(os.path.join(site, "warmmod"))
    with open(os.path.join(site, "warmmod", "__init__.py"), "w") as handle:
        handle.write(f"open({log!r}, 'a').write('site warmmod imported\\n')\n")
    env = dict(os.environ, PYTHONPATH=site)
    warm = EarlyProbe(sys.executable, modules=["warmmod"], prefix=[tree], environ=env, preload=["warmmod"])
    try:
        wait_for(log, timeout=60)  # it has imported the interpreter's copy
        os.makedirs(os.path.join(tree, "warmmod"))  # the tree lands, with its own warmmod first on the path
        with open(os.path.join(tree, "warmmod", "__init__.py"), "w") as handle:
            handle.write("")
        answer = warm.answer(sys.executable, modules=["warmmod"], prefix=[tree], environ=env, timeout=60,
                             timeout_label="a test")
        assert answer is None
        fresh = run_probe(sys.executable, modules=["warmmod"], prefix=[tree], environ=env)
        assert [m.file for m in fresh.modules] == [os.path.join(tree, "warmmod", "__init__.py")]
    finally:
        warm.close()


def test_a_warm_probe_answers_as_a_fresh_probe_does(tmp_path: "os.PathLike[str]") -> None:
    """Nothing shadowed: the warm process's answer is the fresh probe's, and a probe asked with other
    arguments than it was started for answers None."""
    base = str(tmp_path)
    site, tree = os.path.join(base, "site"), os.path.join(base, "tree")
    os.makedirs(os.path.join(site, "warmmod"))
    open(os.path.join(site, "warmmod", "__init__.py"), "w").close()
    env = dict(os.environ, PYTHONPATH=site)
    warm = EarlyProbe(sys.executable, modules=["warmmod", "treemod"], prefix=[tree], environ=env, preload=["warmmod"])
    os.makedirs(os.path.join(tree, "treemod"))  # the tree lands after the start
    open(os.path.join(tree, "treemod", "__init__.py"), "w").close()
    answer = warm.answer(sys.executable, modules=["warmmod", "treemod"], prefix=[tree], environ=env, timeout=60,
                         timeout_label="a test")
    fresh = run_probe(sys.executable, modules=["warmmod", "treemod"], prefix=[tree], environ=env)
    assert answer is not None
    assert answer.modules == fresh.modules and answer.pythonpath == fresh.pythonpath
    assert answer.interpreter == fresh.interpreter
    other = EarlyProbe(sys.executable, modules=["warmmod"], prefix=[tree], environ=env, preload=["warmmod"])
    assert other.answer(sys.executable, modules=["treemod"], prefix=[tree], environ=env, timeout=60,
                        timeout_label="a test") is None


def test_a_warm_probe_is_stopped_when_the_run_builds_instead(tmp_path: "os.PathLike[str]",
                                                             own_repo: FixtureRepo) -> None:
    pin = own_repo.commit("traced", "0.2.2", files={"kernels/moe_gemm_2stage.py": TRACED_KERNEL})
    _, hitter = hosts(tmp_path, own_repo, pin)  # an empty cache: the cache gives way to the source build
    scan = os.path.join(str(tmp_path), "scan.py")
    with open(scan, "w") as handle:  # run by build.sh: the probes (the script's text is their argv) of this root
        handle.write("import os, sys\n"
                     "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                     "    try:\n"
                     "        args = open('/proc/%s/cmdline' % pid, 'rb').read()\n"
                     "        env = open('/proc/%s/environ' % pid, 'rb').read()\n"
                     "    except OSError:\n"
                     "        continue\n"
                     "    if b'importing %s' in args and sys.argv[1].encode() in env:\n"
                     "        print(pid)\n")
    during = os.path.join(str(tmp_path), "probes-during-build")
    out = hitter.run("--json", FIXTURE_BUILD_HOOK=f"{sys.executable} {scan} {hitter.root} > {during}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    assert "importing filelock" in out.stdout + out.stderr  # it had been started for the cache
    assert "preloaded=False" in trace(hitter)[0]
    assert open(during).read() == ""  # stopped before the build
    assert processes_of(hitter.root) == []


def test_the_tree_is_byte_compiled_while_it_is_probed(ws: Workspace) -> None:
    """The compile runs beside the probe; it is finished when the run is, and the next call is warm."""
    out = ws.run("--json")
    assert out.returncode == 0, out.stderr
    tag = sys.implementation.cache_tag
    packages = os.path.join(ws.root, "build-fly", "python_packages")
    for folder, _dirs, files in os.walk(packages):
        if "__pycache__" in folder:
            continue
        for name in files:
            if name.endswith(".py"):
                assert os.path.exists(os.path.join(folder, "__pycache__", f"{name[:-3]}.{tag}.pyc")), (folder, name)
    assert os.path.exists(os.path.join(ws.root, "kernels", "__pycache__", f"moe_gemm_2stage.{tag}.pyc"))
    assert json.loads(ws.run("--json").stdout)["action"] == "warm"
