"""The reader of a pin's LLVM inputs (source/needs.py), on script texts in upstream's forms (written
here, not copied): the commit from either file or the environment, the patches the script names, and the
variables it lets the caller override."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from typing import Dict, Optional, Union

import pytest

from ensure_flydsl.source.git import CheckoutFiles, CommitFiles
from ensure_flydsl.source.needs import (
    LLVM_HASH_FILE,
    LLVM_INFO_FILE,
    LLVM_SCRIPT,
    LlvmInputs,
    named_files,
    overridable,
    pin_llvm_inputs,
    read_llvm_inputs,
)
from tests.helpers.flydsl_fixture import LLVM_HASH_A, LLVM_HASH_B, LLVM_PATCHES, NEXT_PATCHES, FixtureRepo

HASH_SCRIPT = """
LLVM_INSTALL_DIR="${LLVM_INSTALL_DIR:-$SRC/mlir_install}"
LLVM_COMMIT_DEFAULT=$(cat "${REPO_ROOT}/thirdparty/llvm-hash.txt" | tr -d '[:space:]')
LLVM_REF="${LLVM_REF:-${LLVM_COMMIT:-$LLVM_COMMIT_DEFAULT}}"
LLVM_REMOTE="${LLVM_REMOTE:-https://example.invalid/llvm-project.git}"
LLVM_TARGETS_TO_BUILD="${LLVM_TARGETS_TO_BUILD:-X86;AMDGPU}"
"""

INFO_SCRIPT = """
LLVM_BUILD_INFO="${REPO_ROOT}/thirdparty/llvm-build-info.json"
LLVM_COMMIT_DEFAULT=$(python3 -c "import json; print(json.load(open('$LLVM_BUILD_INFO'))['upstream']['llvm_hash'])")
LLVM_REF="${LLVM_REF:-${LLVM_COMMIT:-$LLVM_COMMIT_DEFAULT}}"
LLVM_PATCH="${REPO_ROOT}/thirdparty/llvm-fix.patch"
# thirdparty/not-used.patch is only mentioned in a comment
LLVM_BUILD_PROFILE="${LLVM_BUILD_PROFILE:-full}"
LLVM_ENABLE_RUNTIMES="${LLVM_ENABLE_RUNTIMES-compiler-rt}"
LLVM_INSTALL_TGZ="${LLVM_INSTALL_TGZ:-$SRC/mlir_install.tgz}"
LLVM_PACKAGE_INSTALL="${LLVM_PACKAGE_INSTALL:-1}"
echo "${LLVM_NEXT_KNOB:=on}"
"""


def info(commit: str) -> str:
    return json.dumps({"upstream": {"repository": "x", "llvm_hash": commit}, "internal": {"llvm_hash": "f" * 40}})


def read(script: str, environ: Optional[Dict[str, str]] = None, **files: Union[str, bytes, None]) -> LlvmInputs:
    mapping: Dict[str, Union[str, bytes, None]] = {LLVM_SCRIPT: script}
    for name, content in files.items():
        mapping[{"hash": LLVM_HASH_FILE, "info": LLVM_INFO_FILE}.get(name, f"thirdparty/{name}")] = content
    return read_llvm_inputs(mapping, environ or {})


def test_the_overridable_variables_are_read_from_the_script_in_every_form() -> None:
    assert overridable(INFO_SCRIPT) == (("LLVM_REF", False), ("LLVM_COMMIT", False), ("LLVM_BUILD_PROFILE", False),
                                        ("LLVM_ENABLE_RUNTIMES", True), ("LLVM_INSTALL_TGZ", False),
                                        ("LLVM_PACKAGE_INSTALL", False), ("LLVM_NEXT_KNOB", False))
    assert named_files(INFO_SCRIPT) == ("thirdparty/llvm-fix.patch",)
    assert named_files(HASH_SCRIPT) == ()


def test_the_commit_from_llvm_hash_txt_and_from_llvm_build_info_json() -> None:
    old = read(HASH_SCRIPT, hash=LLVM_HASH_A + "\n")
    assert (old.commit, old.commit_from, old.files) == (LLVM_HASH_A, LLVM_HASH_FILE, ())
    new = read(INFO_SCRIPT, info=info(LLVM_HASH_B), **{"llvm-fix.patch": b"--- a\n+++ b\n"})
    assert (new.commit, new.commit_from) == (LLVM_HASH_B, LLVM_INFO_FILE)
    digest = hashlib.sha256(b"--- a\n+++ b\n").hexdigest()
    assert new.files == (("thirdparty/llvm-fix.patch", digest),)
    assert new.key("cpython-311") == {"llvm_commit": LLVM_HASH_B, "abi": "cpython-311",
                                      "script": hashlib.sha256(INFO_SCRIPT.encode()).hexdigest(),
                                      "files": {"thirdparty/llvm-fix.patch": digest},
                                      "environment": {"LLVM_BUILD_PROFILE": "amd-minimal"}}  # (the tool's default)
    # The v0.2.2 shape keeps the key it always had for the build with every target: no empty "files" or
    # "environment"; the tool's own build names its targets.
    assert set(old.key("cpython-311", minimal=False) or {}) == {"llvm_commit", "abi", "script"}
    assert (old.key("cpython-311") or {})["environment"] == {"LLVM_TARGETS_TO_BUILD": "X86;AMDGPU"}


def test_every_input_changes_the_key_and_nothing_else_does() -> None:
    base = read(INFO_SCRIPT, info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p1"})
    key = base.key("cp")
    changed = [
        read(INFO_SCRIPT, info=info(LLVM_HASH_B), **{"llvm-fix.patch": "p1"}),
        read(INFO_SCRIPT, info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p2"}),
        read(INFO_SCRIPT + "\n# edited\n", info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p1"}),
        read(INFO_SCRIPT, {"LLVM_BUILD_PROFILE": "full"}, info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p1"}),
        read(INFO_SCRIPT, {"LLVM_ENABLE_RUNTIMES": ""}, info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p1"}),
        read(INFO_SCRIPT, {"LLVM_NEXT_KNOB": "off"}, info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p1"}),
        read(INFO_SCRIPT, info=info(LLVM_HASH_A), **{"llvm-fix.patch": None}),
    ]
    keys = [json.dumps(c.key("cp"), sort_keys=True) for c in changed]
    assert len(set(keys + [json.dumps(key, sort_keys=True)])) == len(changed) + 1
    same = [
        # where things go or come from, the values the tool sets, an empty `:-` value, names the script lacks
        read(INFO_SCRIPT, {"LLVM_INSTALL_TGZ": "/x.tgz", "LLVM_REMOTE": "https://mirror.invalid/llvm.git",
                           "LLVM_INSTALL_DIR": "/elsewhere", "LLVM_PACKAGE_INSTALL": "0", "LLVM_BUILD_PROFILE": "",
                           "LLVM_TARGETS_TO_BUILD": "X86", "HOME": "/h"}, info=info(LLVM_HASH_A),
             **{"llvm-fix.patch": "p1"}),
        # LLVM_COMMIT naming the commit the file names
        read(INFO_SCRIPT, {"LLVM_COMMIT": LLVM_HASH_A.upper()}, info=info(LLVM_HASH_A), **{"llvm-fix.patch": "p1"}),
    ]
    assert [c.key("cp") for c in same] == [key, key]
    assert same[1].commit_from == "LLVM_COMMIT"


def test_only_what_flydsl_needs_is_built_where_the_script_lets_the_caller_say_so() -> None:
    profile = read(INFO_SCRIPT, info=info(LLVM_HASH_A))
    assert profile.minimal == (("LLVM_BUILD_PROFILE", "amd-minimal"),)
    assert "environment" not in (profile.key("cp", minimal=False) or {})  # the build with every target
    assert read(HASH_SCRIPT, hash=LLVM_HASH_A).minimal == (("LLVM_TARGETS_TO_BUILD", "X86;AMDGPU"),)
    chosen = read(INFO_SCRIPT, {"LLVM_BUILD_PROFILE": "full"}, info=info(LLVM_HASH_A))
    assert chosen.minimal == () and (chosen.key("cp") or {})["environment"] == {"LLVM_BUILD_PROFILE": "full"}
    silent = read(HASH_SCRIPT.replace("LLVM_TARGETS_TO_BUILD", "TARGETS"), hash=LLVM_HASH_A)
    assert silent.minimal == () and "environment" not in (silent.key("cp") or {})  # nothing to say it with


def test_llvm_ref_wins_over_llvm_commit_and_the_file_but_only_where_the_script_honours_it() -> None:
    env = {"LLVM_REF": LLVM_HASH_B, "LLVM_COMMIT": "c" * 40}
    assert read(HASH_SCRIPT, env, hash=LLVM_HASH_A).commit == LLVM_HASH_B
    assert read(HASH_SCRIPT, {"LLVM_COMMIT": "c" * 40}, hash=LLVM_HASH_A).commit == "c" * 40
    no_ref = 'LLVM_COMMIT_DEFAULT=$(cat thirdparty/llvm-hash.txt)\nLLVM_COMMIT="${LLVM_COMMIT:-$LLVM_COMMIT_DEFAULT}"\n'
    assert read(no_ref, env, hash=LLVM_HASH_A).commit == "c" * 40  # LLVM_REF means nothing to that script
    assert read("echo no overrides\n", env, hash=LLVM_HASH_A).commit == LLVM_HASH_A


@pytest.mark.parametrize("env,files,problem", [
    ({"LLVM_REF": "main"}, {"hash": LLVM_HASH_A}, "LLVM_REF=main is not a 40-digit commit hash"),
    ({}, {"hash": ""}, "thirdparty/llvm-hash.txt does not hold a 40-digit commit hash"),
    ({}, {"hash": "7f77ca0"}, "thirdparty/llvm-hash.txt does not hold a 40-digit commit hash"),
    ({}, {}, "the pin has no thirdparty/llvm-hash.txt"),
])
def test_an_unknown_commit_has_no_key_and_says_why(env: Dict[str, str], files: Dict[str, str], problem: str) -> None:
    inputs = read(HASH_SCRIPT, env, **files)
    assert inputs.commit is None and inputs.key("cp") is None
    assert inputs.problem is not None and inputs.problem.startswith(problem)
    assert inputs.describe().startswith("LLVM (commit unknown: " + problem)


@pytest.mark.parametrize("content,problem", [
    ('{"llvm_hash": "' + LLVM_HASH_A + '"}', "has no upstream.llvm_hash"),  # a top-level key is not read
    ('{"upstream": {"llvm_hash": 7}}', "has no upstream.llvm_hash"),
    ("[1, 2]", "has no upstream.llvm_hash"),
    ("{not json", "is not valid JSON"),
])
def test_a_build_info_without_upstream_llvm_hash_is_an_unknown_commit(content: str, problem: str) -> None:
    inputs = read(INFO_SCRIPT, info=content)
    assert inputs.commit is None and inputs.problem == f"{LLVM_INFO_FILE} {problem}"


def test_a_literal_default_in_a_script_that_reads_no_file() -> None:
    inputs = read('LLVM_COMMIT="${LLVM_COMMIT:-04f968b02917}"\n')
    assert inputs.commit == "04f968b02917" and inputs.commit_from == f"{LLVM_SCRIPT} (its default)"


def test_the_checkout_and_the_commit_read_with_git_agree(tmp_path: "os.PathLike[str]") -> None:
    repo = FixtureRepo(os.path.join(str(tmp_path), "repo"))
    os.makedirs(repo.path)
    subprocess.run(["git", "init", "-q", "-b", "main", repo.path], check=True)
    patch = "--- a/x\n+++ b/x\n"
    sha = repo.commit("p", "0.3.2", llvm_hash=LLVM_HASH_B, layout="v0.3.2",
                      files={"thirdparty/llvm-rocdl-lld-argv0.patch": patch})
    env = {"LLVM_BUILD_PROFILE": "amd-minimal"}
    from_git = pin_llvm_inputs(CommitFiles(repo.path, sha), env)
    from_checkout = pin_llvm_inputs(CheckoutFiles(repo.path), env)
    assert from_git == from_checkout
    assert from_git.commit == LLVM_HASH_B and from_git.environment == (("LLVM_BUILD_PROFILE", "amd-minimal"),)
    assert [path for path, _ in from_git.files] == ["thirdparty/llvm-rocdl-lld-argv0.patch"]


# -- issue 26 item 11: upstream's newer sources apply every patch in a folder ---------------------------------

FOLDER_SCRIPT = INFO_SCRIPT.replace('LLVM_PATCH="${REPO_ROOT}/thirdparty/llvm-fix.patch"',
                                    'LLVM_PATCH_DIR="${REPO_ROOT}/thirdparty/llvm-patches"\n'
                                    'for p in "${LLVM_PATCH_DIR}"/*.patch; do git apply "$p"; done')
PATCHES = {"llvm-patches/0001-a.patch": "--- a\n+++ a\n", "llvm-patches/0002-b.patch": "--- b\n+++ b\n"}


def test_every_file_of_a_named_folder_is_in_the_key_sorted_with_its_sha256() -> None:
    """Before: the folder was read as a file (absent), so no patch in it was keyed."""
    assert named_files(FOLDER_SCRIPT) == ("thirdparty/llvm-patches",)
    inputs = read(FOLDER_SCRIPT, info=info(LLVM_HASH_A), **dict(reversed(list(PATCHES.items()))))
    assert inputs.files == tuple((f"thirdparty/{rel}", hashlib.sha256(text.encode()).hexdigest())
                                 for rel, text in sorted(PATCHES.items()))
    key = inputs.key("cp")
    assert key is not None and key["files"] == dict(inputs.files)


@pytest.mark.parametrize("change", ["a patch edited", "a patch added", "a patch removed", "a patch in a subfolder"])
def test_the_key_follows_each_file_of_the_patches_folder(change: str) -> None:
    base = read(FOLDER_SCRIPT, info=info(LLVM_HASH_A), **PATCHES)
    files: Dict[str, Union[str, bytes, None]] = dict(PATCHES)
    if change == "a patch edited":
        files["llvm-patches/0002-b.patch"] = "--- b\n+++ b\n@@ changed @@\n"
    elif change == "a patch added":
        files["llvm-patches/0003-c.patch"] = "--- c\n"
    elif change == "a patch removed":
        del files["llvm-patches/0001-a.patch"]
    else:
        files["llvm-patches/extra/0001-d.patch"] = "--- d\n"
    assert read(FOLDER_SCRIPT, info=info(LLVM_HASH_A), **files).key("cp") != base.key("cp")
    # The same files in another order are the same key.
    assert read(FOLDER_SCRIPT, info=info(LLVM_HASH_A), **dict(reversed(list(PATCHES.items())))).key("cp") == \
        base.key("cp")


def test_a_named_folder_that_is_missing_or_empty_is_named_absent() -> None:
    assert read(FOLDER_SCRIPT, info=info(LLVM_HASH_A)).files == (("thirdparty/llvm-patches", None),)
    # A file whose name only starts like the folder's is not in it.
    assert read(FOLDER_SCRIPT, info=info(LLVM_HASH_A), **{"llvm-patches-old/x.patch": "x"}).files == \
        (("thirdparty/llvm-patches", None),)


def test_the_checkout_and_git_read_the_patches_folder_alike(tmp_path: "os.PathLike[str]") -> None:
    repo = FixtureRepo(os.path.join(str(tmp_path), "repo"))
    os.makedirs(repo.path)
    subprocess.run(["git", "init", "-q", "-b", "main", repo.path], check=True)
    first = repo.commit("p1", "0.3.3", llvm_hash=LLVM_HASH_B, layout="next")
    from_git = pin_llvm_inputs(CommitFiles(repo.path, first), {})
    assert from_git == pin_llvm_inputs(CheckoutFiles(repo.path), {})
    assert [path for path, _ in from_git.files] == sorted(NEXT_PATCHES)
    assert all(digest for _, digest in from_git.files)
    added = repo.commit("p2", "0.3.3", llvm_hash=LLVM_HASH_B, layout="next",
                        files={f"{LLVM_PATCHES}/0003-added.patch": "--- added\n"})
    later = pin_llvm_inputs(CommitFiles(repo.path, added), {})
    assert later == pin_llvm_inputs(CheckoutFiles(repo.path), {}) and len(later.files) == 3
    assert later.key("cp") != from_git.key("cp")


def test_a_symlinked_patch_is_keyed_alike_from_the_checkout_and_from_git(tmp_path: "os.PathLike[str]") -> None:
    """git holds a symlink as the name it points to: the checkout's reader reads the same, so a tree's MLIR key does
    not depend on which of the two named it (before, the checkout's followed the link and keyed its target)."""
    repo = FixtureRepo(os.path.join(str(tmp_path), "repo"))
    os.makedirs(repo.path)
    subprocess.run(["git", "init", "-q", "-b", "main", repo.path], check=True)
    repo.commit("p1", "0.3.3", llvm_hash=LLVM_HASH_B, layout="next")
    first = sorted(NEXT_PATCHES)[0]
    os.symlink(os.path.basename(first), os.path.join(repo.path, LLVM_PATCHES, "0003-linked.patch"))
    subprocess.run(["git", "-C", repo.path, "add", "-A"], check=True)
    subprocess.run(["git", "-C", repo.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "link"],
                   check=True)
    sha = subprocess.run(["git", "-C", repo.path, "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    from_git = pin_llvm_inputs(CommitFiles(repo.path, sha), {})
    assert from_git == pin_llvm_inputs(CheckoutFiles(repo.path), {})
    linked = dict(from_git.files)[f"{LLVM_PATCHES}/0003-linked.patch"]
    assert linked == hashlib.sha256(os.path.basename(first).encode()).hexdigest()
