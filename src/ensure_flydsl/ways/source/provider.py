"""The source way: the pin's submodules, the doctor's checks, the fixes and private build tools, MLIR (given,
built before, cached, or built now), FlyDSL's build.sh and the probe; each build under the fleet's lease."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

from ensure_flydsl import layout
from ensure_flydsl.errors import EnsureError, ExitCode, Plan, Stage
from ensure_flydsl.result import How
from ensure_flydsl.source.git import Checkout, CheckoutFiles
from ensure_flydsl.source.needs import LlvmInputs, build_tools, pin_needs
from ensure_flydsl.source.root import recording
from ensure_flydsl.support import faults
from ensure_flydsl.support.files import file_sha256
from ensure_flydsl.support.processes import stream_command
from ensure_flydsl.trees.lease import HeldLease
from ensure_flydsl.trees.manifest import cache_key
from ensure_flydsl.trees.remote import Cache
from ensure_flydsl.ways import Way, falls_back
from ensure_flydsl.ways.base import DoctorCheck, Early, Provider, Shared
from ensure_flydsl.ways.cache import provider as cached
from ensure_flydsl.ways.cache.fleet import Turn, end_turn, holding, mlir_turn, take_turn
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.release.provider import release_suggestion
from ensure_flydsl.ways.source import environment as steps
from ensure_flydsl.ways.source import prebuilt
from ensure_flydsl.ways.source.checks import predict_build
from ensure_flydsl.ways.source.tools import ProvidedTools, package_spec, provide_build_tools
from ensure_flydsl.ways.tree import building, verify_tree

Mlir = Tuple[str, Dict[str, object]]  # an MLIR install and what identifies it in the build's stamp


class Prepared(NamedTuple):
    """What the fixes step found or made for the build steps."""

    mlir: Optional[Mlir]
    llvm: LlvmInputs  # the pin's, read once for the MLIR lookups and the LLVM build
    hip: steps.HipFix
    provided: ProvidedTools
    rocm: str  # the ROCm prefix the build uses

    def environment(self, run: Run, jobs: int, mlir_path: Optional[str], *, hip: bool) -> Dict[str, str]:
        """A build step's environment; ``hip``: the hip overlay first, for FlyDSL's configure only (LLVM's
        must not find ROCm's own LLVM through it)."""
        prefixes = self.hip.cmake_prefixes if hip else ()
        env = steps.build_environment(run.environ, run.settings.root, run.interpreter.executable,
                                      cmake_prefixes=prefixes, rocm_path=self.rocm, mlir_path=mlir_path, jobs=jobs,
                                      git_mirrors=run.settings.git_mirrors)
        return self.provided.apply(env)


@dataclass
class SourceProvider(Provider):
    way = Way.SOURCE
    route = Plan.SOURCE
    cache: Optional[Cache]  # MLIR from it, and the new tree and MLIR to it
    early: Early
    doctor: DoctorCheck
    built_now: bool = False
    tree_lease: Optional[HeldLease] = None  # held from before build.sh until the tree is published
    prebuilt: Optional[str] = None  # the prebuilt MLIR build.sh runs against (FLYDSL_MLIR_URL)

    @classmethod
    def for_run(cls, run: Run, shared: Shared) -> SourceProvider:
        return cls(shared.cache, shared.early, shared.doctor)

    predict = staticmethod(predict_build)

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        try:
            return self._provide(run, commit)
        except EnsureError as exc:
            if not falls_back(run.settings.strategy) or exc.code in (ExitCode.LOCK, ExitCode.INTERRUPTED):
                raise
            # auto could not build: the hint names a release that would work instead, if there is one
            suggestion = release_suggestion(run.settings, run.interpreter, run.environ)
            if suggestion is None:
                raise
            run.say(f"instead of building: {suggestion}")
            raise exc.amended(hint=f"{exc.hint}; or, without a build, {suggestion}" if exc.hint else suggestion
                              ) from exc

    def _provide(self, run: Run, commit: str) -> Optional[Decision]:
        self.early.stop_probe()  # started for a quick way that gave way to this one
        run.plan(Plan.SOURCE)
        settings = run.settings
        with run.step(Stage.FETCH):  # the submodules: C++ dependencies a source build needs, a release does not
            if not run.stamps.done("submodules", {"commit": commit}):
                run.stamps.begin("submodules")
                if Checkout.of(settings, run.environ).update_submodules():
                    run.worked()
                    run.say("submodules updated")
                run.stamps.finish("submodules", {"commit": commit})
        try:
            return self._build(run, commit, take_prebuilt=True)
        except EnsureError as exc:
            if exc.code != ExitCode.FLYDSL_BUILD or self.prebuilt is None:
                raise
            prebuilt.discard(run, self.prebuilt, exc.reason)
        held, self.tree_lease = self.tree_lease, None
        if held is not None:
            held.release(published=False)  # taken again for the build against the MLIR built now
        return self._build(run, commit, take_prebuilt=False)

    def _build(self, run: Run, commit: str, *, take_prebuilt: bool) -> Decision:
        """The fixes and tools, MLIR (``take_prebuilt``: FLYDSL_MLIR_URL's, when set), build.sh and the probe."""
        with run.step(Stage.FIXES):
            prepared = prepare(run, self.cache, self.doctor, take_prebuilt)
        faults.point("fixes-applied")
        jobs = run.settings.jobs or steps.default_jobs(steps.cpu_count(), steps.available_memory())
        with run.step(Stage.LLVM):
            mlir_path, mlir_identity = prepared.mlir or self._mlir(
                run, prepared.environment(run, jobs, None, hip=False), jobs, prepared.llvm)
        self.prebuilt = mlir_path if "prebuilt" in mlir_identity else None
        env = prepared.environment(run, jobs, mlir_path, hip=True)
        with run.step(Stage.BUILD):
            fetched = self._tree_turn(run, commit)
            if fetched is not None:
                return fetched
            self.built_now = build_flydsl(run, commit, mlir_identity, env, jobs)
        while True:  # at most twice: a build found finished that fails is built once more
            try:
                with run.step(Stage.VERIFY):
                    return verify_tree(run, commit, How.BUILT)
            except EnsureError:
                # A finished build that does not import must not count as finished, or every later run would
                # skip the build and fail the same way (the bash executor's "exit 6 forever").
                run.stamps.undo("build")
                if self.built_now:
                    raise
                run.say("the finished build does not import now (damaged since?); building it again")
            with run.step(Stage.BUILD):
                self.built_now = build_flydsl(run, commit, mlir_identity, env, jobs)

    def _mlir(self, run: Run, env: Dict[str, str], jobs: int, inputs: LlvmInputs) -> Mlir:
        """FlyDSL's build_llvm.sh, into ``$(dirname ROOT)/llvm-project`` (recorded as ours), under the MLIR key's
        lease, unless another host publishes that MLIR meanwhile."""
        settings = run.settings
        key = inputs.key(run.interpreter.abi)
        turn: Turn[str] = Turn()  # an unknown LLVM commit: nothing to share, so no lease either
        if key is not None:
            turn = mlir_turn(run, self.cache, key, f"MLIR for LLVM {cached.llvm_label(key)}")
        if turn.fetched is not None:
            run.facts.mlir = "cached"
            return turn.fetched, {"llvm": key}
        with holding(turn.held):
            llvm_folder = layout.llvm_dir(settings.base_dir)
            install = layout.mlir_install(settings.base_dir)
            record = steps.LlvmRecord.read(settings.base_dir)
            if os.path.lexists(llvm_folder) and not (record is not None and record.created):
                raise EnsureError(ExitCode.LLVM_BUILD, f"{llvm_folder} exists and was not made by ensure-flydsl; "
                                  "build_llvm.sh would build into it", stage=Stage.LLVM,
                                  hint="move it away, or set MLIR_PATH to an MLIR install built for this interpreter")
            steps.LlvmRecord(created=True, started=key).write(settings.base_dir)
            suggest = f"; {prebuilt.SUGGESTION}" if settings.mlir_url == prebuilt.OFF and inputs.commit else ""
            run.say(f"building LLVM/MLIR {inputs.describe()} with {jobs} jobs (the long step){suggest}")
            run.worked()
            # The install is always made where the tool and build.sh look (the MLIR key leaves these out: TOOL_SET).
            env = {**env, **dict(inputs.minimal), "LLVM_INSTALL_DIR": install, "LLVM_PACKAGE_INSTALL": "1"}
            # clean removes only what it made
            with recording(llvm_folder, layout.llvm_made_record(settings.base_dir)):
                run_script(run, "build_llvm.sh", jobs, env, ExitCode.LLVM_BUILD, Stage.LLVM, "the LLVM/MLIR build")
            if not steps.is_mlir_install(install):
                raise EnsureError(ExitCode.LLVM_BUILD, f"build_llvm.sh finished but {install} holds no lib/cmake/mlir",
                                  stage=Stage.LLVM)
            faults.point("llvm-built")
            steps.LlvmRecord(created=True, started=key, done=key).write(settings.base_dir)
            if key is None:
                # Not reusable: the build.sh stamp must not match a later run's MLIR (built anew) either.
                return install, {"llvm": None, "built": os.urandom(8).hex()}
            if self.cache is not None:
                cached.publish_mlir(run, self.cache, key, install)
            run.facts.mlir = "built"
            return install, {"llvm": key}

    def _tree_turn(self, run: Run, commit: str) -> Optional[Decision]:
        """The tree key's lease before build.sh; a verified cached tree when another host published it."""
        cache = self.cache
        if cache is None or (fields := cached.tree_fields(run, commit)) is None:
            return None
        key = cache_key("tree", fields)
        turn = take_turn(run, cache, "tree", key, f"the FlyDSL tree for {commit[:8]}",
                         lambda: cached.tree_from_cache(run, cache, commit))
        self.tree_lease = turn.held
        return turn.fetched

    def after_publish(self, run: Run, commit: str) -> None:
        with holding(self.tree_lease):
            self.tree_lease = None
            if self.cache is not None and self.built_now:
                with run.step(Stage.CACHE):
                    cached.publish_tree(run, self.cache, commit)  # after the env file: pollers need not wait for it

    def abandon(self, run: Run, error: BaseException) -> None:
        held, self.tree_lease = self.tree_lease, None
        end_turn(held, error)


def prepare(run: Run, cache: Optional[Cache], doctor: DoctorCheck, take_prebuilt: bool) -> Prepared:
    """MLIR if it needs no build; the doctor's checks with what is known now (rather than after an hour of
    compiling); the hip fix; the private build tools."""
    settings, root = run.settings, run.settings.root
    needs = pin_needs(CheckoutFiles(root), run.environ)
    inputs = needs.llvm
    assert inputs is not None  # read from the checkout
    mlir = ready_mlir(run, cache, inputs, take_prebuilt)
    # The prebuilt is decided: the checks need not ask its server again.
    checked = replace(settings, mlir_path=mlir[0] if mlir else settings.mlir_path, mlir_url=prebuilt.OFF)
    doctor(checked, run.environ, root, run.interpreter)
    rocm = steps.choose_rocm(settings.rocm_path, run.interpreter.executable, run.environ)
    if rocm.rocm_sdk is not None:
        run.say(f"ROCm: {rocm.said(settings.label('rocm_path'))}")
    hip = steps.fix_hip(rocm.path, layout.rocm_overlay(root), in_place=settings.fix_rocm_in_place,
                        build_dir=layout.build_dir(root))
    run.say("fix: " + hip.message)
    provided = provide_build_tools(layout.tools_dir(root), build_tools(needs, llvm=mlir is None), run.environ,
                                   python=run.interpreter.executable, say=run.say,
                                   code=ExitCode.LLVM_BUILD if mlir is None else ExitCode.FLYDSL_BUILD)
    run.say("build tools: " + provided.summary())
    # Every pip install of the build (build_llvm.sh's unguarded one) is held to the nanobind MLIR configures with.
    held = [package_spec("nanobind", needs.nanobind_spec)]
    steps.prepare_toolchain(root, run.interpreter, held)
    return Prepared(mlir=mlir, llvm=inputs, hip=hip, provided=provided, rocm=rocm.path)


def ready_mlir(run: Run, cache: Optional[Cache], inputs: LlvmInputs, take_prebuilt: bool) -> Optional[Mlir]:
    """An MLIR install that needs no build (MLIR_PATH, this host's build of the pin's LLVM, the cache's), or None."""
    settings = run.settings
    if settings.mlir_path is not None:
        run.say(f"using MLIR_PATH={settings.mlir_path}; skipping the LLVM/MLIR build")
        run.facts.mlir = f"given {settings.mlir_path}"
        return settings.mlir_path, {"mlir_path": settings.mlir_path}
    key = inputs.key(run.interpreter.abi)
    if key is None:
        run.say(f"warning: the LLVM commit of this pin cannot be determined ({inputs.problem}): its LLVM/MLIR "
                "is built for this run, neither reused from an earlier build nor shared through the cache")
        return None
    install = steps.built_mlir(settings.base_dir, inputs, run.interpreter)
    if install is not None:
        run.say(f"MLIR for LLVM {cached.llvm_label(key)} is already built in {install}")
        run.facts.mlir = "built"
        return install, {"llvm": key}
    fetched = cached.mlir_from_cache(run, cache, key) if cache is not None else None
    if fetched:
        run.facts.mlir = "cached"
        return fetched, {"llvm": key}
    return prebuilt.take_prebuilt(run, cache, str(inputs.commit)) if take_prebuilt else None


def build_flydsl(run: Run, commit: str, mlir_identity: Dict[str, object], env: Dict[str, str], jobs: int) -> bool:
    """Build FlyDSL unless a finished build for the same inputs is there; return whether build.sh ran."""
    root, stamps = run.settings.root, run.stamps
    key = {
        "commit": commit,
        "abi": run.interpreter.abi,
        "mlir": mlir_identity,
        "script": file_sha256(os.path.join(root, "scripts", "build.sh")),
    }
    packages = layout.packages_dir(root)
    if stamps.done("build", key) and os.path.isdir(packages):
        run.say("FlyDSL is already built for this commit and interpreter")
        return False
    with building(run, key) as folder:
        run.say(f"building FlyDSL {commit[:12]} for {run.interpreter.executable} with {jobs} jobs")
        run.worked()
        env = {**env, "FLY_BUILD_DIR": folder}  # where the package is taken from, whatever the caller says
        run_script(run, "build.sh", jobs, env, ExitCode.FLYDSL_BUILD, Stage.BUILD, "the FlyDSL build")
    if not os.path.isdir(os.path.join(packages, "flydsl")):
        raise EnsureError(ExitCode.FLYDSL_BUILD, f"build.sh finished but {packages}/flydsl does not exist",
                          stage=Stage.BUILD)
    faults.point("build-done")
    stamps.finish("build", key)
    return True


def run_script(run: Run, script: str, jobs: int, env: Mapping[str, str], code: ExitCode, stage: Stage,
               what: str) -> None:
    """One of the checkout's build scripts, its output streamed into the run's log and progress."""
    path = os.path.join(run.settings.root, "scripts", script)
    if not os.path.isfile(path):
        raise EnsureError(code, f"the checkout has no scripts/{script}", stage=stage,
                          hint="FLYDSL_PIN names a commit this tool does not know how to build")
    cmd = ["bash", path, f"-j{jobs}"]
    run.build_line(f"$ {shlex.join(cmd)}")
    status = stream_command(cmd, cwd=run.settings.root, env=env, sink=run.build_line, on_start=run.tracker.build_group)
    if status != 0:
        raise EnsureError(code, f"{what} failed: scripts/{script} exited with {status}", stage=stage,
                          hint="the log's last lines are below; the full output is in the log")
