"""Where everything lives: the one owner of every path under a root, its parent folder and the host's cache.

    BASE/                                  the root's parent folder (``$(dirname ROOT)``)
      .flydsl_build.lock                   the build lock (FLYDSL_BUILD_LOCK); never deleted
      .flydsl_build.lock.holder            who holds it (pid, host, start, run id)
      .flydsl_build.failed                 the failure marker (FLYDSL_BUILD_FAILED); JSON
      ensure_flydsl.log                    the log of provisioning runs
      .ensure_flydsl/                      state shared by the roots of BASE
        runs/<root name>/                  <run id>.json/.alive/.reserve (record, alive lock, room), current,
                                           start.lock
        mlir/                              MLIR installs fetched from the binary cache; KEY.json: who signed KEY
      llvm-project/mlir_install/           an LLVM/MLIR build (FlyDSL's build.sh finds it here)
      .llvm-project.ensure-flydsl.json     the record that this tool made llvm-project/, and for what
      .llvm-project.ensure-flydsl.made.json.gz  what build_llvm.sh made there (`clean` removes only that)
      ROOT/                                the checkout of the pin (FLYDSL_ROOT)
        flydsl_env.sh, flydsl_env.json     the env file (the success signal, written last) and its twin
        build-fly/python_packages/         the built (or installed) flydsl package; kernels/ is at ROOT
        build-fly/.python_packages.installing/  the release wheel installed here, then moved into place
        build-fly/.python_packages.linking/     the store's tree copied here, then moved into place
        .ensure_flydsl/                    the tool's records for the root
          owner.json                       the tool made or adopted the root
          build-fly.made.json.gz           what the build steps made in build-fly (`clean` removes only that)
          warm                             the front door's stamp (warm.py; marshal): warm calls' answers
          stamps/<step>.json               steps finished, keyed by their inputs (tree.json: the whole tree)
          stamps/<step>.started.json       the inputs of a step that began (its outputs are for them)
          tools/                           private build tools, shims, the ROCm overlay
            bin/, pylib/                   python3/pip shims for the target; where the build's pip installs go
            pip-constraints.txt            what every pip install of the build is held to (nanobind<3)
            provided/                      the build tools installed from the package index
              tools.json                   which tools, at which versions
            rocm-overlay/                  a copy of ROCm's lib/ with hip's CMake files fixed
            rocm-overlay.json              the ROCm install and fix the overlay is for
          wheel-download/                  the release wheel between its download (beside the fetch) and its install
          store.json                       an earlier version's record that the tree is hardlinked from the store

    HOST/                                  the user's cache folder: ${XDG_CACHE_HOME:-~/.cache}/ensure-flydsl
      runs/<run id>.json                   a timing record of each run of the host (runs/timings.py)
      history.json                         step durations of this host's runs, per route, for ETAs
      history.lock                         held while a run adds its durations (never deleted)
      vendored-wheels/                     the pinned wheels `ensure-flydsl skill` vendors into a GEAK folder
      store/                               the host store (FLYDSL_STORE; docs/store.md)
        store.lock                         held shared while a root copies a tree, exclusive to add or remove one
        trees/<key>/manifest.json          the tree's members, each file's sha256 (trees/manifest.py)
        trees/<key>/seal.json              each stored file's inode, size, mtime and ctime as stored: a cheap check
        trees/<key>/probed.json            the probes this tree passed, per interpreter fingerprint
        trees/<key>/files/                 the tree itself (read-only files, copied into each root)
        trees/.staging-*/                  a tree being added (renamed to trees/<key> when whole)
        git/                               a bare repository holding the objects every root's checkout shares

The default lock, marker and log paths are shared by the roots of one folder, as the bash executor had them.
"""

from __future__ import annotations

import os
from typing import List, Mapping, Optional

from ensure_flydsl.warm import ENV_FILE_NAME as ENV_FILE_NAME
from ensure_flydsl.warm import ENV_JSON_NAME as ENV_JSON_NAME
from ensure_flydsl.warm import STATE_DIR as STATE_DIR
from ensure_flydsl.warm import stamp_path

BUILD_DIR = "build-fly"
PACKAGES_DIR = "python_packages"
RUN_RECORD_SUFFIX = ".json"
# FlyDSL's checkout: the tree's packages and their sources (the build copies FLYDSL_SOURCES into
# build-fly/python_packages, a release wheel holds it unchanged; kernels/ is imported from the root itself).
FLYDSL_SOURCES = "python/flydsl"
PACKAGE_SOURCES = (("flydsl", FLYDSL_SOURCES), ("kernels", "kernels"))
BUILT_PACKAGES = ("flydsl",)  # the build stages these and adds compiled modules (flydsl._mlir) to them


class Under:
    """The path at ``parts`` under a folder of the kind ``base`` names (the map above says what each is)."""

    def __init__(self, base: str, *parts: str) -> None:
        self.base, self.parts = base, parts

    def __call__(self, folder: str) -> str:
        return os.path.join(folder, *self.parts)


# -- under the root -----------------------------------------------------------------------------------------
state_dir = Under("root", STATE_DIR)
stamps_dir = Under("root", STATE_DIR, "stamps")
owner_file = Under("root", STATE_DIR, "owner.json")
wheel_download_dir = Under("root", STATE_DIR, "wheel-download")
tools_dir = Under("root", STATE_DIR, "tools")
rocm_overlay = Under("root", STATE_DIR, "tools", "rocm-overlay")
build_made_record = Under("root", STATE_DIR, "build-fly.made.json.gz")
root_store_record = Under("root", STATE_DIR, "store.json")
build_dir = Under("root", BUILD_DIR)
packages_dir = Under("root", BUILD_DIR, PACKAGES_DIR)
wheel_staging_dir = Under("root", BUILD_DIR, "." + PACKAGES_DIR + ".installing")
store_linking_dir = Under("root", BUILD_DIR, "." + PACKAGES_DIR + ".linking")
env_file = Under("root", ENV_FILE_NAME)
env_json = Under("root", ENV_JSON_NAME)

# -- under the root's tools_dir -------------------------------------------------------------------------------
pip_constraints = Under("tools", "pip-constraints.txt")
provided_dir = Under("tools", "provided")
provided_stamp = Under("tools", "provided", "tools.json")


def stamp_file(root: str, step: str) -> str:
    return os.path.join(stamps_dir(root), step + ".json")


def overlay_stamp(overlay: str) -> str:
    return overlay + ".json"


def mlir_signers(install: str) -> str:
    """Who signed an MLIR install fetched from the cache; none beside one downloaded from FLYDSL_MLIR_URL."""
    return install + ".json"


def warm_stamp(root: str) -> str:
    """The front door's stamp (warm.py names the files a warm call reads)."""
    return stamp_path(root)


def tree_folders(root: str) -> List[str]:
    """The tree's import folders, in PYTHONPATH order: ``kernels/`` is at the root, flydsl in the build's."""
    return [root, packages_dir(root)]


# -- under the root's parent folder (BASE) ----------------------------------------------------------------------
def default_lock_file(root: str) -> str:
    return os.path.join(os.path.dirname(root), ".flydsl_build.lock")


def default_fail_marker(root: str) -> str:
    return os.path.join(os.path.dirname(root), ".flydsl_build.failed")


def log_file(root: str) -> str:
    return os.path.join(os.path.dirname(root), "ensure_flydsl.log")


base_state_dir = Under("base_dir", STATE_DIR)
cached_mlir_dir = Under("base_dir", STATE_DIR, "mlir")
llvm_dir = Under("base_dir", "llvm-project")
mlir_install = Under("base_dir", "llvm-project", "mlir_install")
llvm_record = Under("base_dir", ".llvm-project.ensure-flydsl.json")
llvm_made_record = Under("base_dir", ".llvm-project.ensure-flydsl.made.json.gz")


def runs_dir(root: str) -> str:
    """The run records of ``root``, beside it: they survive `clean` of the root's files."""
    return os.path.join(base_state_dir(os.path.dirname(root)), "runs", os.path.basename(root))


def run_record_file(runs: str, run_id: str) -> str:
    return os.path.join(runs, run_id + RUN_RECORD_SUFFIX)


def run_alive_file(runs: str, run_id: str) -> str:
    return os.path.join(runs, run_id + ".alive")


def run_reserve_file(runs: str, run_id: str) -> str:
    return os.path.join(runs, run_id + ".reserve")


current_run_file = Under("runs", "current")
start_lock_file = Under("runs", "start.lock")

# -- the host's, in the user's cache folder (HOST) --------------------------------------------------------------
HOST_VARIABLES = ("XDG_CACHE_HOME", "HOME")  # what host_cache_dir reads


def host_cache_dir(environ: Mapping[str, str]) -> Optional[str]:
    """The tool's folder in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``); None when neither
    names an absolute folder (the XDG rule: a relative value is ignored)."""
    cache = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):
        home = environ.get("HOME") or os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        cache = os.path.join(home, ".cache")
    return os.path.join(cache, "ensure-flydsl")


vendored_wheels_dir = Under("host_dir", "vendored-wheels")
timings_dir = Under("host_dir", "runs")
history_file = Under("host_dir", "history.json")
history_lock = Under("host_dir", "history.lock")
default_store_dir = Under("host_dir", "store")


def timing_file(timings: str, run_id: str) -> str:
    return os.path.join(timings, run_id + RUN_RECORD_SUFFIX)


# -- the store's local tier (trees/local.py): of the store, then of one of its trees ------------------------------
store_lock = Under("store", "store.lock")
store_trees_dir = Under("store", "trees")
store_git_dir = Under("store", "git")
store_manifest = Under("tree", "manifest.json")
store_seal = Under("tree", "seal.json")
store_probed = Under("tree", "probed.json")
store_files = Under("tree", "files")


def store_tree_dir(store: str, key: str) -> str:
    return os.path.join(store, "trees", key)
