"""Security: the env file exports exactly the path it was given and runs nothing (property-based, sourced by
bash and by sh); hostile cache entries are rejected before anything is written outside the root; nothing the
tool creates is world-writable, whatever the umask; no symlink at the log's path is followed; `clean`
removes only what the tool created."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from typing import List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensure_flydsl.runs.markers import EnvFile
from tests.helpers.cache_entries import _member, blob_file, manifest_file, publish_raw
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.reliability import device, listing, record
from tests.helpers.run_folders import for_the_run
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace

# -- the env file, for arbitrary paths ---------------------------------------------------------------------
BATCH = 25  # paths per shell invocation (one bash and one sh process per example)
EXAMPLES = 20  # examples per run: BATCH * EXAMPLES paths, each sourced by bash and by sh, with and without
# a caller's PYTHONPATH
CANARY_DIR = for_the_run(tempfile.mkdtemp(prefix="ensure-flydsl-canary-"))
CANARY = os.path.join(CANARY_DIR, "CANARY")
PIECES = ["'", '"', "$", "\\", "`", "\n", "\r", "\t", " ", ";", "&", "|", "*", "?", "~", "#", "!", "{", "}", "(",
          ")", "<", ">", ":", "=", "%", "-", "--", "${PATH}", "$((1+1))", "$'\\x41'", "'\"'\"'", "\\'", "\\n",
          f"$(touch {CANARY})", f"`touch {CANARY}`", f"'; touch {CANARY}; '", f"\ntouch {CANARY}\n",
          "$(touch CANARY)", "`touch CANARY`", "ü", "日本語", "\u200b", "\x7f", "\x01", "\x1b[31m", "\U0001f600"]
PATH_TEXT = st.lists(
    st.one_of(st.sampled_from(PIECES),
              st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10)),
    max_size=8,
).map("".join)
CALLER_PYTHONPATH = "/caller's path/$(touch CANARY)/`x`"
SOURCE_ALL = r"""
for f in "$@"; do
  ( unset PYTHONPATH FLYDSL_ROOT FLYDSL_SHIM_DIR VLLM_USE_FLYDSL_MOE
    . "$f" && printf '%s\0%s\0%s\0%s\0' "$FLYDSL_ROOT" "${FLYDSL_SHIM_DIR-<unset>}" "$PYTHONPATH" \
      "${VLLM_USE_FLYDSL_MOE-<unset>}" ) || printf 'SOURCING FAILED\0\0\0\0'
  ( PYTHONPATH="$CALLER"; export PYTHONPATH
    . "$f" && printf '%s\0' "$PYTHONPATH" ) || printf 'SOURCING FAILED\0'
done
"""


def test_the_env_file_exports_exactly_the_path_and_runs_nothing(tmp_path: "os.PathLike[str]") -> None:
    cwd = os.path.join(str(tmp_path), "cwd")
    files = os.path.join(str(tmp_path), "envs")
    os.makedirs(cwd)
    os.makedirs(files)
    checked = {"paths": 0, "examples": 0, "sourcings": 0}

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
    @given(st.lists(st.tuples(PATH_TEXT, st.one_of(st.none(), PATH_TEXT), st.booleans()),
                    min_size=BATCH, max_size=BATCH))
    def check(batch: List[Tuple[str, Optional[str], bool]]) -> None:
        paths = []
        expected: List[List[str]] = []
        for n, (root, shim, moe) in enumerate(batch):
            prepend = [root, root + "/build-fly/python_packages"]
            path = os.path.join(files, f"env{n}.sh")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(EnvFile(root, tuple(prepend), shim, moe).text())
            paths.append(path)
            joined = ":".join(prepend)
            expected.append([root, "<unset>" if shim is None else shim, joined, "1" if moe else "<unset>",
                             joined + ":" + CALLER_PYTHONPATH])
        for shell in ("bash", "sh"):
            out = subprocess.run([shell, "-c", SOURCE_ALL, shell, *paths], cwd=cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env={"PATH": os.environ["PATH"], "LC_ALL": "C",
                                                              "CALLER": CALLER_PYTHONPATH})
            assert out.returncode == 0 and out.stderr == b"", (shell, out.stderr)
            fields = out.stdout.decode("utf-8").split("\0")[:-1]
            got = [fields[i:i + 5] for i in range(0, len(fields), 5)]
            assert got == expected, shell
            checked["sourcings"] += 2 * len(paths)
        assert not os.path.exists(CANARY) and os.listdir(cwd) == [], "sourcing ran code from a path"
        checked["paths"] += len(batch)
        checked["examples"] += 1

    check()
    assert checked["examples"] >= EXAMPLES  # every example ran (none skipped, none filtered away)
    record("fuzz", what="flydsl_env.sh for arbitrary paths (root, shim dir), sourced by bash and by sh",
           examples=checked["examples"], paths=checked["paths"], sourcings=checked["sourcings"], failures=0)


# -- hostile cache entries in a real run -------------------------------------------------------------------
@pytest.fixture(scope="module")
def published_cache(tmp_path_factory: pytest.TempPathFactory, fixture_repo: FixtureRepo) -> str:
    """A cache holding the tree and the MLIR install of a real build (by another "host")."""
    top = tmp_path_factory.mktemp("cache-host1")
    cache = str(top / "cache")
    host = Workspace(str(top / "base"), fixture_repo)
    assert host.run(FLYDSL_CACHE=cache).returncode == 0
    return cache


def _entry_file(cache: str, kind: str) -> str:
    folder = os.path.join(cache, "entries", kind)
    names = [n for n in os.listdir(folder) if n.endswith(".json")]
    assert len(names) == 1
    return os.path.join(folder, names[0])


def _flip_blob(cache: str, kind: str) -> None:
    with open(_entry_file(cache, kind)) as handle:
        blob = os.path.join(cache, "blobs", json.load(handle)["blob"] + ".tar.gz")
    with open(blob, "r+b") as handle:
        handle.seek(os.path.getsize(blob) // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x01]))


def _edit_manifest(cache: str, edit: str) -> None:
    path = _entry_file(cache, "tree")
    with open(path) as handle:
        manifest = json.load(handle)
    files = [m for m in manifest["members"] if m["type"] == "file"]
    if edit == "sha256":
        files[0]["sha256"] = "0" * 64
    else:
        files[0]["mode"] = 0o4755
    with open(path, "w") as handle:
        json.dump(manifest, handle)


def _hostile(cache: str, members: List[Tuple[tarfile.TarInfo, bytes]]) -> None:
    """Replace the tree entry by a hostile tarball with a manifest that is correct for its bytes (built as
    tests/helpers/cache_entries.py: publish_raw does, keeping the real entry's key fields, which its key is
    the hash of)."""
    path = _entry_file(cache, "tree")
    with open(path) as handle:
        fields = json.load(handle)["fields"]
    scratch = tempfile.mkdtemp(prefix="hostile-")
    try:
        entry = publish_raw(scratch, members)  # a hand-made entry under the cache tests' key
        with open(manifest_file(scratch), encoding="utf-8") as handle:
            manifest = json.load(handle)
        shutil.copy(blob_file(scratch, entry), os.path.join(cache, "blobs", entry.blob + ".tar.gz"))
    finally:
        shutil.rmtree(scratch)
    manifest.update(fields=fields, key=os.path.basename(path)[:-len(".json")])
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)


CACHE_ATTACKS = ["blob: a flipped byte", "manifest: a file's sha256", "manifest: a setuid mode", "member: ../evil",
                 "member: an absolute path", "member: a symlink out, then a file through it",
                 "member: a hard link to a file outside", "mlir blob: a flipped byte"]


@pytest.mark.parametrize("attack", CACHE_ATTACKS)
def test_a_hostile_cache_entry_is_rejected_and_nothing_is_written_outside_the_root(
        published_cache: str, fixture_repo: FixtureRepo, tmp_path: "os.PathLike[str]", attack: str) -> None:
    top = str(tmp_path)
    cache = os.path.join(top, "cache")
    shutil.copytree(published_cache, cache)
    outside = os.path.join(top, "outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "victim"), "w") as handle:
        handle.write("precious")
    ws = Workspace(os.path.join(top, "host2", "base"), fixture_repo)
    dest = os.path.join(ws.root, "build-fly", "python_packages")
    if attack == "blob: a flipped byte":
        _flip_blob(cache, "tree")
    elif attack == "mlir blob: a flipped byte":
        _flip_blob(cache, "mlir")
        os.unlink(_entry_file(cache, "tree"))  # so that a build, and so the MLIR install, is needed
    elif attack.startswith("manifest"):
        _edit_manifest(cache, "sha256" if "sha256" in attack else "mode")
    elif attack == "member: ../evil":
        _hostile(cache, [_member("../evil", data=b"x"), _member("../../../outside/evil", data=b"x")])
    elif attack == "member: an absolute path":
        _hostile(cache, [_member(os.path.join(outside, "abs-evil"), data=b"x")])
    elif attack.startswith("member: a symlink out"):
        target = os.path.relpath(outside, dest)
        _hostile(cache, [_member("link", tarfile.SYMTYPE, target=target), _member("link/evil", data=b"x")])
    else:
        _hostile(cache, [_member("g", tarfile.LNKTYPE, target=os.path.join(outside, "victim"))])
    before = listing(top, skip=["host2"])
    out = ws.run("--json", FLYDSL_CACHE=cache)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    if attack.startswith("mlir"):
        assert result["how"] == "built" and ws.count("llvm") == 1  # the MLIR install was built instead
        assert "could not be used" in out.stderr
    else:
        assert result["how"] == "built" and ws.count("build") == 1 and ws.count("llvm") == 0
        assert "is corrupt and was not installed" in out.stderr, out.stderr
    assert_one_tree(ws)
    with open(os.path.join(outside, "victim")) as handle:
        assert handle.read() == "precious"
    after = listing(top, skip=["host2"])
    written = {p for p in set(after) | set(before) if before.get(p) != after.get(p) and not p.startswith("cache")}
    assert written == set(), f"written outside the root: {written}"
    leftovers = [n for n in os.listdir(os.path.dirname(dest)) if ".fetch-" in n]
    assert leftovers == []
    record("cache_attack", attack=attack, rejected=True, written_outside=0, run="succeeded by building")


# -- modes ---------------------------------------------------------------------------------------------------
def world_writable(*tops: str) -> List[str]:
    found = []
    for top in tops:
        for folder, dirs, files in os.walk(top):
            for name in [""] + dirs + files:
                path = os.path.join(folder, name) if name else folder
                st_ = os.lstat(path)
                if not stat.S_ISLNK(st_.st_mode) and st_.st_mode & stat.S_IWOTH:
                    found.append(path)
    return sorted(set(found))


def _umask_000() -> None:
    os.umask(0)


def test_nothing_the_tool_creates_is_world_writable_even_under_umask_000(ws: Workspace,
                                                                         tmp_path: "os.PathLike[str]") -> None:
    cache = os.path.join(str(tmp_path), "cache")

    def run(*args: str, **env: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(ws.cmd(*args), env=dict(ws.env, FLYDSL_CACHE=cache, **env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=_umask_000)

    assert run().returncode == 0  # a build: checkout, LLVM, FlyDSL, markers, log, lock, cache upload
    assert run("start", FLYDSL_PIN="v0.2.3").returncode == 0  # a detached run: its records, its watchdog
    assert run("wait", "--timeout", "60", FLYDSL_PIN="v0.2.3").returncode == 0
    assert run(FLYDSL_PIN="v9.9.9", FLYDSL_EXACT_PIN="1").returncode == 3  # a failure marker
    api_root = os.path.join(ws.base, "API root")
    code = ("import os, sys, ensure_flydsl\n"
            "os.umask(0)\n"
            f"ensure_flydsl.ensure(root={api_root!r}, repo={ws.repo.url!r}, pin='v0.2.2', strategy='source',\n"
            f"                     python=sys.executable, rocm_path='/nonexistent', cache={cache!r})\n"
            "print(oct(os.umask(0)))\n")
    api = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in ws.env.items()
                                                            if not k.startswith("FLYDSL_")},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert api.returncode == 0, api.stderr
    assert api.stdout.strip() == "0o0"  # the caller's umask is given back
    counted = sum(len(dirs) + len(files) + 1 for top in (ws.base, cache) for _f, dirs, files in os.walk(top))
    bad = world_writable(ws.base, cache)
    assert bad == [], bad
    record("modes", umask="000", paths_checked=counted, world_writable=len(bad))


# -- symlinks planted where the tool writes ----------------------------------------------------------------
@pytest.mark.parametrize("command", ["ensure", "start"])
def test_a_symlink_at_the_log_path_is_refused_and_its_target_untouched(ws: Workspace, tmp_path: "os.PathLike[str]",
                                                                        command: str) -> None:
    victim = os.path.join(str(tmp_path), "victim")
    with open(victim, "w") as handle:
        handle.write("precious\n")
    os.chmod(victim, 0o600)
    os.symlink(victim, ws.log)
    out = ws.run(*([] if command == "ensure" else [command]))
    assert out.returncode == 64, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "FLYDSL_ROOT=" in out.stderr and "symbolic link" in out.stderr
    with open(victim) as handle:
        assert handle.read() == "precious\n"
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600 and os.path.islink(ws.log)
    assert not os.path.exists(ws.root)
    record("bad_input_extra", setting="FLYDSL_ROOT", value="its log path is a symlink", command=command,
           result="refused (64)")


def test_a_device_as_the_failure_marker_is_never_replaced(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """FLYDSL_BUILD_FAILED=/dev/null (here: a copy of that device) must not turn /dev/null into a JSON file."""
    null = device(os.path.join(str(tmp_path), "null"))
    for env in ({"FLYDSL_BUILD_FAILED": null}, {"FLYDSL_BUILD_FAILED": null, "FLYDSL_JOBS": "0"}):
        out = ws.run(**env)
        assert out.returncode == 64, out.stderr
        assert stat.S_ISCHR(os.lstat(null).st_mode)


# -- clean ----------------------------------------------------------------------------------------------------
def test_clean_removes_only_what_the_tool_created(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    other_root = os.path.join(ws.base, "Other")
    assert ws.run().returncode == 0
    assert ws.run(FLYDSL_ROOT=other_root).returncode == 0
    outside = os.path.join(str(tmp_path), "outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "victim"), "w") as handle:
        handle.write("precious")
    foreign = {os.path.join(ws.base, "notes.txt"): "mine", os.path.join(ws.base, ".hidden", "f"): "mine",
               os.path.join(ws.root, "my-notes.txt"): "mine", os.path.join(ws.root, "kernels", "mine.py"): "mine"}
    for path, text in foreign.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    os.symlink(outside, os.path.join(ws.base, "link-out"))
    os.symlink(outside, os.path.join(ws.root, "link-out"))
    other_before = listing(other_root)
    lock = os.stat(ws.lock_file).st_ino
    out = ws.run("clean")
    assert out.returncode == 0, out.stderr
    for path, text in foreign.items():
        with open(path) as handle:
            assert handle.read() == text, path
    assert os.listdir(outside) == ["victim"] and open(os.path.join(outside, "victim")).read() == "precious"
    assert os.path.islink(os.path.join(ws.base, "link-out")) and os.path.islink(os.path.join(ws.root, "link-out"))
    # the checkout stays the tool's (its owner record), so that the next run may use it
    assert os.listdir(os.path.join(ws.root, ".ensure_flydsl")) == ["owner.json"]
    assert not os.path.exists(os.path.join(ws.root, "build-fly")) and not os.path.exists(ws.env_file)
    assert os.stat(ws.lock_file).st_ino == lock
    # The other root of the same base is untouched and still works.
    assert listing(other_root) == other_before
    check = subprocess.run(["bash", "-c", f'. "$1" && {sys.executable} -c "import kernels.moe_gemm_2stage as k; '
                            'print(k.__file__)"', "bash", os.path.join(other_root, "flydsl_env.sh")],
                           stdout=subprocess.PIPE, text=True, cwd="/", env={"PATH": os.environ["PATH"]})
    assert check.stdout.strip() == os.path.join(other_root, "kernels", "moe_gemm_2stage.py")
    assert os.path.isdir(os.path.join(ws.base, ".ensure_flydsl", "runs", "Other"))
    kept = sum(1 for _ in foreign) + 2
    record("clean", foreign_paths=kept, foreign_kept=kept, other_root_intact=True)
    # The root is still the tool's checkout (its owner record stayed): the next run builds in it again,
    # and the user's files stay where they are.
    again = ws.run()
    assert again.returncode == 0, again.stdout + again.stderr
    for path, text in foreign.items():
        with open(path) as handle:
            assert handle.read() == text, path
