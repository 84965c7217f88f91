"""Where everything lives: the one owner of every path under a root, its parent folder and the host's cache.

    BASE/                                  the root's parent folder (``$(dirname ROOT)``)
      .flydsl_build.lock                   the build lock (FLYDSL_BUILD_LOCK); never deleted
      .flydsl_build.lock.holder            who holds it (pid, host, start, run id)
      .flydsl_build.failed                 the failure marker (FLYDSL_BUILD_FAILED); JSON
      ensure_flydsl.log                    the log of provisioning runs
      .ensure_flydsl/                      state shared by the roots of BASE
        runs/<root name>/                  <run id>.json/.alive/.reserve (record, alive lock, room), current,
                                           start.lock
        mlir/                              MLIR installs fetched from the binary cache
      llvm-project/mlir_install/           an LLVM/MLIR build (FlyDSL's build.sh finds it here)
      .llvm-project.ensure-flydsl.json     the record that this tool made llvm-project/, and for what
      ROOT/                                the checkout of the pin (FLYDSL_ROOT)
        flydsl_env.sh, flydsl_env.json     the env file (the success signal, written last) and its twin
        build-fly/python_packages/         the built (or installed) flydsl package; kernels/ is at ROOT
        build-fly/.wheel-download/         the release wheel between its download and its install
        build-fly/.python_packages.installing/  the release wheel installed here, then moved into place
        .ensure_flydsl/                    the tool's records for the root
          owner.json                       the tool made or adopted the root
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
          wheel-download/                  a release wheel downloaded while the pin is fetched
          store.json                       which store tree build-fly/python_packages is linked from

    HOST/                                  the user's cache folder: ${XDG_CACHE_HOME:-~/.cache}/ensure-flydsl
      runs/<run id>.json                   a timing record of each run of the host (runs/timings.py)
      history.json                         step durations of this host's runs, per route, for ETAs
      history.lock                         held while a run adds its durations (never deleted)
      store/                               the host store (FLYDSL_STORE; docs/store.md)
        store.lock                         held shared while a root links a tree, exclusive to add or prune
        trees/<key>/manifest.json          the tree's members, each file's sha256 (trees/manifest.py)
        trees/<key>/seal.json              each stored file's inode, size and mtime as stored: a cheap check
        trees/<key>/probed.json            the probes this tree passed, per interpreter fingerprint
        trees/<key>/files/                 the tree itself (read-only files)
        trees/.staging-*/                  a tree being added (renamed to trees/<key> when whole)
        refs/<root hash>.json              a root that links a tree (prune keeps what a root still uses)
        git/                               a bare repository holding the objects every root's checkout shares

The default lock, marker and log paths are shared by the roots of one folder, as the bash executor had them.
"""

from __future__ import annotations

import os
from typing import List, Mapping, Optional, Tuple

from ensure_flydsl.warm import ENV_FILE_NAME as ENV_FILE_NAME
from ensure_flydsl.warm import ENV_JSON_NAME as ENV_JSON_NAME
from ensure_flydsl.warm import STATE_DIR as STATE_DIR
from ensure_flydsl.warm import stamp_path

BUILD_DIR = "build-fly"
PACKAGES_DIR = "python_packages"
STAMP_SUFFIX = ".json"
RUN_RECORD_SUFFIX = ".json"
# FlyDSL's checkout: the tree's packages and their sources (the build copies FLYDSL_SOURCES into
# build-fly/python_packages, a release wheel holds it unchanged; kernels/ is imported from the root itself).
FLYDSL_SOURCES = "python/flydsl"
PACKAGE_SOURCES = (("flydsl", FLYDSL_SOURCES), ("kernels", "kernels"))
BUILT_PACKAGES = ("flydsl",)  # the build stages these and adds compiled modules (flydsl._mlir) to them


# -- under the root -----------------------------------------------------------------------------------------
def state_dir(root: str) -> str:
    return os.path.join(root, STATE_DIR)


def stamps_dir(root: str) -> str:
    return os.path.join(root, STATE_DIR, "stamps")


def stamp_file(root: str, step: str) -> str:
    """The stamp of ``step`` (``source/root.py: Stamps``)."""
    return os.path.join(stamps_dir(root), step + STAMP_SUFFIX)


def owner_file(root: str) -> str:
    return os.path.join(root, STATE_DIR, "owner.json")


def wheel_download_dir(root: str) -> str:
    """Where a release run's wheel lands while git fetches the pin (removed when the run ends)."""
    return os.path.join(root, STATE_DIR, "wheel-download")


def tools_dir(root: str) -> str:
    """Private build tools, shims and the ROCm overlay (never on the system's paths)."""
    return os.path.join(root, STATE_DIR, "tools")


def pip_constraints(tools: str) -> str:
    """What every ``pip install`` of a build step is held to (nanobind below 3, or what the pin says)."""
    return os.path.join(tools, "pip-constraints.txt")


def provided_dir(tools: str) -> str:
    """The build tools installed from the package index."""
    return os.path.join(tools, "provided")


def provided_stamp(tools: str) -> str:
    """Which build tools ``provided_dir`` holds, at which versions."""
    return os.path.join(provided_dir(tools), "tools.json")


def rocm_overlay(root: str) -> str:
    """ROCm's lib/ as links, with hip's CMake package files copied and fixed (``ways/source/rocm.py``)."""
    return os.path.join(tools_dir(root), "rocm-overlay")


def overlay_stamp(overlay: str) -> str:
    """The ROCm install and fix an overlay was made for."""
    return overlay + ".json"


def build_dir(root: str) -> str:
    return os.path.join(root, BUILD_DIR)


def wheel_install_dirs(root: str) -> Tuple[str, str]:
    """The downloaded release wheel, and where it is installed before it moves to ``packages_dir``."""
    return (os.path.join(root, BUILD_DIR, ".wheel-download"),
            os.path.join(root, BUILD_DIR, "." + PACKAGES_DIR + ".installing"))


def store_linking_dir(root: str) -> str:
    """Where the host store's tree is linked before it moves to ``packages_dir``."""
    return os.path.join(root, BUILD_DIR, "." + PACKAGES_DIR + ".linking")


def build_made_record(root: str) -> str:
    """What the build steps made in ``build-fly`` (``source/ownership.py``): ``clean`` removes only that."""
    return os.path.join(root, STATE_DIR, "build-fly.made.json.gz")


def packages_dir(root: str) -> str:
    """Where a build (or the release wheel, or the cache) puts the flydsl package."""
    return os.path.join(root, BUILD_DIR, PACKAGES_DIR)


def tree_folders(root: str) -> List[str]:
    """The tree's import folders, in PYTHONPATH order: ``kernels/`` is at the root, flydsl in the build's."""
    return [root, packages_dir(root)]


def env_file(root: str) -> str:
    return os.path.join(root, ENV_FILE_NAME)


def env_json(root: str) -> str:
    return os.path.join(root, ENV_JSON_NAME)


def warm_stamp(root: str) -> str:
    """The front door's stamp (warm.py names the files a warm call reads)."""
    return stamp_path(root)


# -- under the root's parent folder ---------------------------------------------------------------------------
def default_lock_file(root: str) -> str:
    return os.path.join(os.path.dirname(root), ".flydsl_build.lock")


def default_fail_marker(root: str) -> str:
    return os.path.join(os.path.dirname(root), ".flydsl_build.failed")


def log_file(root: str) -> str:
    return os.path.join(os.path.dirname(root), "ensure_flydsl.log")


def base_state_dir(base_dir: str) -> str:
    return os.path.join(base_dir, STATE_DIR)


def runs_dir(root: str) -> str:
    """The run records of ``root``, beside it: they survive `clean` of the root's files."""
    return os.path.join(base_state_dir(os.path.dirname(root)), "runs", os.path.basename(root))


def run_record_file(runs: str, run_id: str) -> str:
    """A run's record."""
    return os.path.join(runs, run_id + RUN_RECORD_SUFFIX)


def run_alive_file(runs: str, run_id: str) -> str:
    """The file a live run holds an flock on (``runs/liveness.py``)."""
    return os.path.join(runs, run_id + ".alive")


def run_reserve_file(runs: str, run_id: str) -> str:
    """Room a live run keeps on the disk, so its final record and failure marker fit on a full one."""
    return os.path.join(runs, run_id + ".reserve")


def current_run_file(runs: str) -> str:
    """The id of the root's newest run."""
    return os.path.join(runs, "current")


def start_lock_file(runs: str) -> str:
    """Held by `start` while it joins a run or launches one (sixteen agents at once launch one worker)."""
    return os.path.join(runs, "start.lock")


def cached_mlir_dir(base_dir: str) -> str:
    """MLIR installs fetched from the binary cache, one folder per cache key."""
    return os.path.join(base_state_dir(base_dir), "mlir")


def llvm_dir(base_dir: str) -> str:
    return os.path.join(base_dir, "llvm-project")


def mlir_install(base_dir: str) -> str:
    """Where FlyDSL's build_llvm.sh installs MLIR and its build.sh looks for it."""
    return os.path.join(llvm_dir(base_dir), "mlir_install")


def llvm_record(base_dir: str) -> str:
    return os.path.join(base_dir, ".llvm-project.ensure-flydsl.json")


def llvm_made_record(base_dir: str) -> str:
    """What build_llvm.sh made in ``llvm-project`` (``source/ownership.py``): ``clean`` removes only that."""
    return os.path.join(base_dir, ".llvm-project.ensure-flydsl.made.json.gz")


# -- the host's, in the user's cache folder ------------------------------------------------------------------
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


def vendored_wheels_dir(host_dir: str) -> str:
    """The pinned wheels `ensure-flydsl skill` vendors into a GEAK folder, downloaded once."""
    return os.path.join(host_dir, "vendored-wheels")


def timings_dir(host_dir: str) -> str:
    """The timing records of the host's runs (``runs/timings.py``; ``ensure-flydsl stats``)."""
    return os.path.join(host_dir, "runs")


def timing_file(timings: str, run_id: str) -> str:
    """A run's timing record."""
    return os.path.join(timings, run_id + RUN_RECORD_SUFFIX)


def history_file(host_dir: str) -> str:
    """The step durations of the host's runs, per route (``runs/history.py``)."""
    return os.path.join(host_dir, "history.json")


def history_lock(host_dir: str) -> str:
    """Held while a run adds its durations to ``history_file``."""
    return os.path.join(host_dir, "history.lock")


# -- the store's local tier (trees/local.py) -------------------------------------------------------------------
def default_store_dir(host_dir: str) -> str:
    """The host store when FLYDSL_STORE is not set."""
    return os.path.join(host_dir, "store")


def store_lock(store: str) -> str:
    return os.path.join(store, "store.lock")


def store_trees_dir(store: str) -> str:
    return os.path.join(store, "trees")


def store_tree_dir(store: str, key: str) -> str:
    return os.path.join(store, "trees", key)


def store_manifest(tree: str) -> str:
    return os.path.join(tree, "manifest.json")


def store_seal(tree: str) -> str:
    return os.path.join(tree, "seal.json")


def store_probed(tree: str) -> str:
    return os.path.join(tree, "probed.json")


def store_files(tree: str) -> str:
    return os.path.join(tree, "files")


def store_refs_dir(store: str) -> str:
    return os.path.join(store, "refs")


def store_git_dir(store: str) -> str:
    return os.path.join(store, "git")


def root_store_record(root: str) -> str:
    """Which store tree the root's ``packages_dir`` is linked from (read by the store's ``prune``)."""
    return os.path.join(root, STATE_DIR, "store.json")
