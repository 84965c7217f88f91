"""Provisioning under the lock: claim the root, fetch and check out the pin, then a release wheel or a
source build (fixes, LLVM/MLIR, FlyDSL), and the full verification of what was made."""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Mapping, Optional, Tuple

from . import faults, gitsource
from .build import (
    build_environment,
    file_sha256,
    is_mlir_install,
    llvm_key,
    mlir_install_of,
    prepare_toolchain,
    resolve_jobs,
    run_script,
    tools_dir,
)
from .cache import Cache
from .cached import llvm_label, mlir_from_cache, open_run_cache, publish_mlir, publish_tree, tree_from_cache
from .context import HOW_BUILT, HOW_RELEASED, Decision, Run
from .decide import probe_tree, tree_key
from .doctor import run_checks, stop_if_blocked
from .errors import BadInput, EnsureError, ExitCode
from .fixes import drop_stale_hip_dir, fix_hip
from .gate import evaluate, is_within, tree_folders
from .needs import build_tools, find_needs, tool_minimums
from .publish import publish
from .release import check_versions_agree, install_wheel, installed_version, pin_as_tag, release_tags, static_version
from .result import Result
from .runs import RELEASE_PLAN, SOURCE_PLAN
from .state import claim_root, classify_root, exclude_from_git, move_aside, remove_tree
from .toolchain import provide_build_tools
from .util import atomic_write_json, cmd_output, read_json


def provision(run: Run) -> Result:
    """Under the lock: the pin into the root, then its release wheel (when the strategy allows and there is
    one) or a source build, verified with the full probe and published."""
    claim_for_build(run)
    with run.step("fetch"):
        commit = fetch_and_checkout(run)
    settings = run.settings
    version = release_version(run, commit)
    if settings.strategy == "release" and version is None:
        raise EnsureError(
            ExitCode.ARTIFACT,
            f"the pin {settings.pin} (commit {commit[:12]}) is not the commit of a release tag vX.Y.Z",
            stage="release",
            hint="pin a release tag (for example v0.2.2) or a version (0.2.2), or use FLYDSL_STRATEGY=source",
        )
    if version is not None and settings.strategy in ("auto", "release"):
        try:
            return provision_release(run, commit, version)
        except EnsureError as exc:
            if settings.strategy == "release" or exc.code != ExitCode.ARTIFACT:
                raise
            run.say(f"no release wheel to use ({exc.reason}); building the pin from source instead")
    return provision_source(run, commit)


def claim_for_build(run: Run) -> None:
    settings, root = run.settings, run.settings.root
    state = classify_root(root, settings.repo)
    if state.kind == "foreign":  # changed since the preflight
        raise BadInput(settings.label("root"), root, f"an empty or new folder; {state.reason}")
    if state.kind != "ours":
        os.makedirs(root, exist_ok=True)
        claim_root(root, created=state.kind == "absent", adopted=state.kind == "adoptable")
        if state.kind == "adoptable":
            run.say(f"adopting {root}: {state.reason}")
    faults.point("root-claimed")


def fetch_and_checkout(run: Run) -> str:
    """The pin's commit, checked out in the root (submodules come later, for a source build only)."""
    settings, root, stamps = run.settings, run.settings.root, run.stamps
    pin = pin_as_tag(settings.pin) if settings.strategy == "release" else settings.pin
    gitsource.clear_stale_git_locks(root, run.say)
    gitsource.ensure_repository(root, settings.repo)
    exclude_from_git(root)
    commit = gitsource.fetch_pin(root, pin, settings.repo, run.say, on_fetch=run.worked)
    run.say(f"pin {pin} is commit {commit}")
    faults.point("fetched")
    checkout_key = {"commit": commit}
    started = stamps.started_key("checkout")
    interrupted = started is not None and not stamps.done("checkout", started)
    deleted = False if interrupted else check_local_changes(root, settings.repo)
    head = gitsource.head_commit(root, settings.repo)
    if deleted or not (stamps.done("checkout", checkout_key) and head == commit):
        stamps.begin("checkout", checkout_key)
        faults.point("checkout-begun")
        gitsource.checkout(root, commit, settings.repo, force=interrupted or deleted)
        stamps.finish("checkout", checkout_key)
        run.say(f"checked out {commit[:12]} in {root}")
        faults.point("checked-out")
    return commit


def update_submodules(run: Run, commit: str) -> None:
    """The checkout's submodules (C++ dependencies: a source build needs them, a release does not)."""
    key = {"commit": commit}
    if not run.stamps.done("submodules", key):
        run.stamps.begin("submodules")
        if gitsource.update_submodules(run.settings.root, run.settings.repo):
            run.worked()
            run.say("submodules updated")
        run.stamps.finish("submodules", key)


def release_version(run: Run, commit: str) -> Optional[str]:
    """X when the commit is the one a release tag vX names (the newest, if several do)."""
    versions = release_tags(gitsource.tags_at(run.settings.root, commit, run.settings.repo))
    return versions[0] if versions else None


def provision_release(run: Run, commit: str, version: str) -> Result:
    root, stamps = run.settings.root, run.stamps
    assert run.interpreter is not None
    run.plan(RELEASE_PLAN)
    key = {"release": version, "commit": commit, "abi": run.interpreter.abi}
    with run.step("release"):
        build_dir = prepare_build_dir(run, key)
        packages = os.path.join(build_dir, "python_packages")
        if stamps.done("build", key) and os.path.isdir(packages):
            run.say(f"the flydsl {version} wheel is already installed in {packages}")
        else:
            stamps.begin("build", key)
            run.worked()
            run.say(f"release v{version}: installing the flydsl=={version} wheel for {run.interpreter.executable}")
            os.makedirs(build_dir, exist_ok=True)
            staging = os.path.join(build_dir, ".python_packages.installing")
            remove_tree(staging)  # a leftover of an interrupted install of ours
            install_wheel(run.interpreter, version, staging, run.build_line)
            faults.point("release-installed")
            check_versions_agree(
                "v" + version,
                static_version(os.path.join(root, "python", "flydsl", "__init__.py")),
                installed_version(staging),
                static_version(os.path.join(staging, "flydsl", "__init__.py")),
            )
            remove_tree(packages)
            os.rename(staging, packages)
            stamps.finish("build", key)
    with run.step("verify"):
        try:
            decision = verify_tree(run, commit, HOW_RELEASED)
        except EnsureError:
            stamps.undo("build")
            raise
    return finish(run, commit, decision)


def provision_source(run: Run, commit: str) -> Result:
    """The cache's tree for this commit and interpreter, else a build: doctor, fixes and private tools,
    MLIR (given, built before, cached, or built now), FlyDSL, verification; then share it in the cache."""
    settings, root, stamps = run.settings, run.settings.root, run.stamps
    assert run.interpreter is not None
    cache = open_run_cache(run)
    if cache is not None:
        with run.step("cache"):
            decision = tree_from_cache(run, cache, commit)
        if decision is not None:
            return finish(run, commit, decision)
        run.plan(SOURCE_PLAN)
    with run.step("fetch"):
        update_submodules(run, commit)
    with run.step("fixes"):
        mlir = ready_mlir(run, cache)
        # The doctor, with what is known now: stop here rather than after an hour of compiling.
        checked = dataclasses.replace(settings, mlir_path=mlir[0] if mlir else settings.mlir_path)
        stop_if_blocked(run_checks(checked, run.environ, checkout=root), settings.strategy)
        needs = find_needs(root, settings.repo, settings.pin, checkout=root)
        hip = fix_hip(settings.rocm_path, os.path.join(tools_dir(root), "rocm-overlay"),
                      in_place=settings.fix_rocm_in_place)
        run.say("fix: " + hip.message)
        provided = provide_build_tools(
            tools_dir(root), build_tools(needs, llvm=mlir is None), run.environ,
            python=run.interpreter.executable, say=run.say, minimums=tool_minimums(needs),
            code=ExitCode.LLVM_BUILD if mlir is None else ExitCode.FLYDSL_BUILD,
        )
        run.say("build tools: " + provided.summary())
        toolchain = prepare_toolchain(root, run.interpreter, [])
    faults.point("fixes-applied")
    jobs = resolve_jobs(settings.jobs)
    with run.step("llvm"):
        if mlir is None:
            env = provided.apply(build_environment(run.environ, toolchain, rocm_path=settings.rocm_path,
                                                   mlir_path=None, jobs=jobs))
            mlir = build_mlir(run, env, jobs, cache)
    mlir_path, mlir_identity = mlir
    # The hip overlay is for FlyDSL's configure only (LLVM's must not find ROCm's own LLVM through it).
    build_chain = dataclasses.replace(toolchain, cmake_prefixes=list(hip.cmake_prefixes))
    env = provided.apply(build_environment(run.environ, build_chain, rocm_path=settings.rocm_path,
                                           mlir_path=mlir_path, jobs=jobs))
    if hip.check.needs_fix and not settings.fix_rocm_in_place:
        drop_stale_hip_dir(os.path.join(root, "build-fly"), os.path.join(tools_dir(root), "rocm-overlay", "lib",
                                                                       "cmake", "hip"))
    with run.step("build"):
        built_now = build_flydsl(run, commit, mlir_identity, env, jobs)
    try:
        with run.step("verify"):
            decision = verify_tree(run, commit, HOW_BUILT)
    except EnsureError:
        # A finished build that does not import must not count as finished, or every later run would
        # skip the build and fail the same way (the seed's "exit 6 forever").
        stamps.undo("build")
        if built_now:
            raise
        run.say("the finished build does not import now (damaged since?); building it again")
        with run.step("build"):
            build_flydsl(run, commit, mlir_identity, env, jobs)
        with run.step("verify"):
            decision = verify_tree(run, commit, HOW_BUILT)
    result = finish(run, commit, decision)
    if cache is not None and built_now:
        with run.step("cache"):
            publish_tree(run, cache, commit)  # after the env file: pollers need not wait for the upload
    return result


def finish(run: Run, commit: str, decision: Decision) -> Result:
    """The tree is verified: stamp it as finished for this request, then publish the env file."""
    assert run.interpreter is not None
    faults.point("verified")
    run.stamps.finish("tree", tree_key(run.settings, commit, run.interpreter), how=decision.how, commit=commit,
                      version=decision.probe.version if decision.probe else None)
    return publish(run, decision, "provisioned")


def check_local_changes(root: str, repo: str) -> bool:
    """Refuse edits to tracked files: somebody's work and not the pin, never built, never overwritten.
    Return whether tracked files were deleted (those are restored: nothing of anybody's is lost)."""
    found = gitsource.tracked_changes(root, repo) if gitsource.head_commit(root, repo) else []
    changed = [path for code, path in found if not gitsource.is_deletion(code)]
    if changed:
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        raise EnsureError(
            ExitCode.CHECKOUT,
            f"the checkout in {root} has local changes to tracked files ({shown}); they are not the pin",
            stage="checkout",
            hint=f"save them elsewhere, then `git -C {root} checkout -- .`; ensure-flydsl never overwrites them",
        )
    return bool(found)


def llvm_record_path(base_dir: str) -> str:
    return os.path.join(base_dir, ".llvm-project.ensure-flydsl.json")


def ready_mlir(run: Run, cache: Optional[Cache]) -> Optional[Tuple[str, Dict[str, object]]]:
    """An MLIR install that needs no build: MLIR_PATH, this host's finished LLVM build for the pin's LLVM
    commit and this interpreter, or the cache's; None when the LLVM/MLIR step has to build it."""
    settings = run.settings
    if settings.mlir_path is not None:
        run.say(f"using MLIR_PATH={settings.mlir_path}; skipping the LLVM/MLIR build")
        return settings.mlir_path, {"mlir_path": settings.mlir_path}
    assert run.interpreter is not None
    key = llvm_key(settings.root, run.interpreter)
    install = mlir_install_of(settings.base_dir)
    record = read_json(llvm_record_path(settings.base_dir)) or {}
    if record.get("done") == key and is_mlir_install(install):
        run.say(f"MLIR for LLVM {llvm_label(key)} is already built in {install}")
        return install, {"llvm": key}
    fetched = mlir_from_cache(run, cache, key) if cache is not None else None
    return (fetched, {"llvm": key}) if fetched else None


def build_mlir(run: Run, env: Dict[str, str], jobs: int, cache: Optional[Cache]) -> Tuple[str, Dict[str, object]]:
    """FlyDSL's build_llvm.sh, into ``$(dirname ROOT)/llvm-project`` (where it builds; recorded as ours)."""
    settings, root = run.settings, run.settings.root
    assert run.interpreter is not None
    key = llvm_key(root, run.interpreter)
    llvm_dir = os.path.join(settings.base_dir, "llvm-project")
    install = mlir_install_of(settings.base_dir)
    record_path = llvm_record_path(settings.base_dir)
    record = read_json(record_path) or {}
    if os.path.lexists(llvm_dir) and not record.get("created"):
        raise EnsureError(
            ExitCode.LLVM_BUILD,
            f"{llvm_dir} exists and was not made by ensure-flydsl; build_llvm.sh would build into it",
            stage="llvm",
            hint="move it away, or set MLIR_PATH to an MLIR install built for this interpreter",
        )
    atomic_write_json(record_path, {"created": True, "started": key, "done": None})
    run.say(f"building LLVM/MLIR {llvm_label(key)} with {jobs} jobs (the long step)")
    run.worked()
    run_script(root, "build_llvm.sh", jobs, env, run.build_line, on_start=run.build_started,
               code=ExitCode.LLVM_BUILD, stage="llvm", what="the LLVM/MLIR build")
    if not is_mlir_install(install):
        raise EnsureError(ExitCode.LLVM_BUILD, f"build_llvm.sh finished but {install} holds no lib/cmake/mlir",
                          stage="llvm")
    faults.point("llvm-built")
    atomic_write_json(record_path, {"created": True, "started": key, "done": key})
    if cache is not None:
        publish_mlir(run, cache, key, install)
    return install, {"llvm": key}


def build_flydsl(run: Run, commit: str, mlir_identity: Dict[str, object], env: Dict[str, str], jobs: int) -> bool:
    """Build FlyDSL unless a finished build for the same inputs is there; return whether build.sh ran."""
    root, stamps = run.settings.root, run.stamps
    assert run.interpreter is not None
    key = {
        "commit": commit,
        "abi": run.interpreter.abi,
        "mlir": mlir_identity,
        "script": file_sha256(os.path.join(root, "scripts", "build.sh")),
    }
    packages = os.path.join(root, "build-fly", "python_packages")
    if stamps.done("build", key) and os.path.isdir(packages):
        run.say("FlyDSL is already built for this commit and interpreter")
        return False
    prepare_build_dir(run, key)
    stamps.begin("build", key)
    run.say(f"building FlyDSL {commit[:12]} for {run.interpreter.executable} with {jobs} jobs")
    run.worked()
    run_script(root, "build.sh", jobs, env, run.build_line, on_start=run.build_started,
               code=ExitCode.FLYDSL_BUILD, stage="build", what="the FlyDSL build")
    if not os.path.isdir(os.path.join(packages, "flydsl")):
        raise EnsureError(ExitCode.FLYDSL_BUILD, f"build.sh finished but {packages}/flydsl does not exist",
                          stage="build")
    faults.point("build-done")
    stamps.finish("build", key)
    return True


def prepare_build_dir(run: Run, key: Mapping[str, object]) -> str:
    """``ROOT/build-fly`` ready for a build (or wheel install) with inputs ``key``: one of ours made for
    other inputs is removed, one the tool did not make is moved aside (never deleted)."""
    build_dir = os.path.join(run.settings.root, "build-fly")
    started = run.stamps.started_key("build")
    if os.path.lexists(build_dir):
        if started is None:
            moved = move_aside(build_dir)
            run.say(f"moved {build_dir}, which ensure-flydsl did not make, to {moved}")
        elif started != key:
            run.say(f"removing {build_dir}: it was made for another commit, interpreter, MLIR or release")
            remove_tree(build_dir)
        elif not run.stamps.done("build", key):
            run.say(f"resuming the interrupted build in {build_dir}")
    return build_dir


def compile_tree(run: Run) -> None:
    """Byte-compile the tree once, with the target interpreter: the probe and every later import then skip
    compiling FlyDSL's modules (about 1.2 s of each cold import; a wheel is installed with --no-compile
    because pip would compile for the tool's own Python).  Cached trees carry their bytecode along."""
    assert run.interpreter is not None
    root = run.settings.root
    folders = [f for f in (os.path.join(root, "build-fly", "python_packages"), os.path.join(root, "kernels"))
               if os.path.isdir(f)]
    if folders:
        cmd_output([run.interpreter.executable, "-m", "compileall", "-q", "-j", "0", *folders], check=False,
                   timeout=900)


def verify_tree(run: Run, commit: str, how: str) -> Decision:
    settings = run.settings
    prefix = tree_folders(settings.root)
    compile_tree(run)
    probe = probe_tree(run, prefix)
    verdict = evaluate(probe, settings.min_version, settings.require)
    if not verdict.reusable:
        raise EnsureError(
            ExitCode.PROBE,
            f"{how}, but the import probe fails: {verdict.reason}",
            stage="verify",
            hint="the build finished but the tree does not import for this interpreter; "
            "see the module files and errors with `ensure-flydsl verify`",
        )
    if not (verdict.tree and is_within(verdict.tree, settings.root)):
        raise EnsureError(
            ExitCode.PROBE,
            f"{how}, but the modules import from {verdict.tree}, not from the tree in {settings.root}",
            stage="verify",
        )
    run.say(f"verified: {verdict.reason}")
    return Decision(True, verdict.reason, how, settings.root, prefix, probe, verdict, commit)
