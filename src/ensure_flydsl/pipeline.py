"""The ensure run, in the order it happens: check, probe, decide, lock, probe again, provision, verify, publish.

Each stage is a small function taking the run; a failure is an EnsureError with its exit code, which the
run turns into the failure marker before it propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from . import gitsource, markers
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
from .errors import BadInput, EnsureError, ExitCode, exit_code_of
from .fixes import check_hip, provide_hip_overlay
from .gate import Verdict, evaluate, is_within, package_folder, tree_folders
from .lock import build_lock, check_lock_path
from .probe import Interpreter, Probe, describe_interpreter, probe_modules, run_probe
from .progress import Tracker
from .report import Reporter
from .runs import STEP_ORDER, RunStore, new_run_id
from .settings import Settings
from .state import RootState, Stamps, claim_root, classify_root, exclude_from_git, is_ours, move_aside, remove_tree
from .util import atomic_write_json, read_json

HOW_REUSED = "reused"
HOW_BUILT = "built"


@dataclasses.dataclass(frozen=True)
class Result:
    """What ``ensure`` returns: the tree in use and how it was obtained."""

    how: str  # reused | built | released | cached: how the tree came to be
    action: str  # what this call did: "warm" (nothing changed), "reused", "provisioned"
    root: str
    tree: str
    version: str
    python: str
    python_version: str
    abi: str
    commit: Optional[str]
    env: Dict[str, str]
    env_file: str
    prepend: List[str]  # the folders the env file puts first on PYTHONPATH
    files: Dict[str, str]
    durations: Dict[str, float]
    run_id: str

    def to_json(self) -> Dict[str, object]:
        data = dataclasses.asdict(self)
        data["durations"] = {k: round(v, 3) for k, v in self.durations.items()}
        return data


@dataclasses.dataclass
class Decision:
    ok: bool
    reason: str
    how: str = HOW_REUSED
    tree: Optional[str] = None
    prepend: List[str] = dataclasses.field(default_factory=list)
    probe: Optional[Probe] = None
    verdict: Optional[Verdict] = None
    commit: Optional[str] = None


class Run:
    """One ensure run: its settings, the caller's environment, messages, step durations and progress."""

    def __init__(
        self, settings: Settings, reporter: Reporter, environ: Mapping[str, str], run_id: str = "", *,
        kind: str = "blocking", alive_fd: Optional[int] = None,
    ) -> None:
        self.settings = settings
        self.reporter = reporter
        self.environ = dict(environ)
        self.run_id = run_id or new_run_id()
        self.kind = kind
        self.alive_fd = alive_fd
        self.durations: Dict[str, float] = {}
        self.step_name = "settings"
        self.interpreter: Optional[Interpreter] = None
        self.stamps = Stamps(settings.root)
        self.tracker: Optional[Tracker] = None
        self._worked = False

    def say(self, message: str) -> None:
        self.reporter.say(message)

    def track(self) -> None:
        """From here on the run is visible to ``status`` and ``wait``, and its death is noticed."""
        if self.tracker is None:
            s = self.settings
            self.tracker = Tracker.begin(
                RunStore(s.root), self.run_id, request=s.request(), fail_marker=s.fail_marker, log=s.log_file,
                kind=self.kind, alive_fd=self.alive_fd,
            )
            if self.step_name in STEP_ORDER:
                self.tracker.step_started(self.step_name)

    def worked(self) -> None:
        """The current step did its real work (not a no-op): its duration counts for future ETAs."""
        self._worked = True

    def build_line(self, line: str) -> None:
        self.reporter.build_line(line)
        if self.tracker is not None:
            percent = self.tracker.line(line)
            if percent is not None:
                self.reporter.progress(self.step_name, percent, self.tracker.eta())

    def build_started(self, pgid: Optional[int]) -> None:
        if self.tracker is not None:
            self.tracker.build_group(pgid)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.step_name = name
        self._worked = False
        started = time.monotonic()
        self.reporter.step(name, "started")
        if self.tracker is not None:
            self.tracker.step_started(name)
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            self.durations[name] = self.durations.get(name, 0.0) + seconds
            self.reporter.step(name, "finished", seconds)
            if self.tracker is not None:
                self.tracker.step_ended(name, seconds, self._worked or name not in ("fetch", "llvm", "build"))


# ---------------------------------------------------------------------------------------------------------
# Checks that need the file system, before anything is touched
# ---------------------------------------------------------------------------------------------------------


def _nearest_existing(path: str) -> str:
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_root_location(settings: Settings) -> RootState:
    root, label = settings.root, settings.label("root")
    anchor = _nearest_existing(root)
    if anchor != root and not os.path.isdir(anchor):
        raise BadInput(label, root, f"a folder path; {anchor} is a file, so nothing can be created under it")
    if anchor != root and not os.access(anchor, os.W_OK | os.X_OK):
        raise BadInput(label, root, f"a path this user can create; {anchor} is not writable")
    state = classify_root(root, settings.repo)
    if state.kind == "foreign":
        raise BadInput(label, root, f"an empty or new folder, or a checkout made by ensure-flydsl; {state.reason}")
    return state


def preflight(settings: Settings, environ: Mapping[str, str]) -> Interpreter:
    """Everything that can refuse the request, checked before any file is written."""
    check_root_location(settings)
    for name in ("lock_file", "fail_marker"):
        path = getattr(settings, name)
        anchor = _nearest_existing(os.path.dirname(path))
        if not os.path.isdir(anchor):
            raise BadInput(settings.label(name), path, f"a file path; {anchor} is not a folder")
    problem = check_lock_path(settings.lock_file)
    if problem:
        raise BadInput(settings.label("lock_file"), settings.lock_file, f"a lock file path; {problem}")
    if settings.mlir_path is not None and not is_mlir_install(settings.mlir_path):
        raise BadInput(
            settings.label("mlir_path"), settings.mlir_path, "an MLIR install prefix holding lib/cmake/mlir"
        )
    try:
        return describe_interpreter(settings.python, environ)
    except EnsureError as exc:
        allowed = f"a Python interpreter that runs; {exc.reason}"
        raise BadInput(settings.label("python"), settings.python, allowed) from None


# ---------------------------------------------------------------------------------------------------------
# Probe and decide
# ---------------------------------------------------------------------------------------------------------


def _probe(run: Run, prefix: List[str]) -> Probe:
    return run_probe(
        run.settings.python, modules=probe_modules(run.settings.require), prefix=prefix, environ=run.environ
    )


def tree_key(settings: Settings, commit: str, interpreter: Interpreter) -> Dict[str, object]:
    """What a finished tree in the root must have been made for to satisfy a request."""
    return {"repo": settings.repo, "pin": settings.pin, "commit": commit, "abi": interpreter.abi}


def _stamped_tree_matches(run: Run) -> Optional[Dict[str, object]]:
    stamp = run.stamps.read("tree")
    if not stamp or not isinstance(stamp.get("key"), dict) or run.interpreter is None:
        return None
    key = stamp["key"]
    assert isinstance(key, dict)
    wanted = tree_key(run.settings, str(key.get("commit")), run.interpreter)
    return stamp if key == wanted else None


def _ambient_prepend(probe: Probe, verdict: Verdict) -> List[str]:
    """The folders a reused tree needs on PYTHONPATH: those of its modules not already on sys.path."""
    skip = {os.path.normpath(p) for p in probe.interpreter.site_dirs + (probe.interpreter.stdlib,)}
    folders: List[str] = []
    for name, file in verdict.files.items():
        folder = package_folder(name, file)
        if os.path.normpath(folder) not in skip and folder not in folders:
            folders.append(folder)
    return folders


def decide(run: Run, again: bool = False) -> Decision:
    """Probe with the root's folders first; reuse what passes the gate, else say why not."""
    settings = run.settings
    before = "after taking the lock, still " if again else ""
    root = settings.root
    prefix = tree_folders(root)
    probe = _probe(run, prefix)
    verdict = evaluate(probe, settings.min_version, settings.require)
    if verdict.reusable and verdict.tree and is_within(verdict.tree, root):
        if not is_ours(root):
            run.say(f"found a working tree in {root} made by another tool: {verdict.reason}")
            return Decision(True, verdict.reason, HOW_REUSED, verdict.tree, prefix, probe, verdict)
        stamp = _stamped_tree_matches(run)
        if stamp is not None:
            return Decision(
                True, verdict.reason, str(stamp.get("how", HOW_BUILT)), root, prefix, probe, verdict,
                str(dict(stamp["key"]).get("commit")),  # type: ignore[call-overload]
            )
        why = "it was not built for this pin, repository and interpreter (or its build did not finish)"
        run.say(f"the tree in {root} imports, but {why}")
    elif verdict.reusable:
        run.say(f"reusing the tree found on the interpreter's path: {verdict.reason}")
        prepend = _ambient_prepend(probe, verdict)
        return Decision(True, verdict.reason, HOW_REUSED, verdict.tree, prepend, probe, verdict)
    else:
        run.say(f"{before}no reusable FlyDSL with {root} first on PYTHONPATH: {verdict.reason}")
    if any(is_within(f, root) for f in verdict.files.values()):
        # The root shadowed whatever else the interpreter has; look at that on its own.
        ambient = _probe(run, [])
        other = evaluate(ambient, settings.min_version, settings.require)
        if other.reusable:
            run.say(f"reusing the tree found on the interpreter's path: {other.reason}")
            prepend = _ambient_prepend(ambient, other)
            return Decision(True, other.reason, HOW_REUSED, other.tree, prepend, ambient, other)
        run.say(f"nothing reusable elsewhere either: {other.reason}")
    return Decision(False, verdict.reason, probe=probe, verdict=verdict)


# ---------------------------------------------------------------------------------------------------------
# Markers
# ---------------------------------------------------------------------------------------------------------


def withdraw_stale_markers(run: Run) -> None:
    """Before this run does anything: no marker of an earlier run may answer for this one."""
    settings = run.settings
    if os.path.exists(settings.fail_marker) and os.path.isfile(settings.fail_marker):
        os.unlink(settings.fail_marker)
    twin = markers.read_env_json(settings.env_json)
    if os.path.exists(settings.env_file) and (twin is None or twin.get("request") != settings.request()):
        markers.withdraw_env_file(settings.env_file, settings.env_json)
        run.say("took away an env file written for a different request")


def publish(run: Run, decision: Decision, action: str) -> Result:
    settings = run.settings
    assert decision.probe is not None and decision.tree is not None and decision.verdict is not None
    interp = decision.probe.interpreter
    if not os.path.isdir(settings.root):
        os.makedirs(settings.root)
        claim_root(settings.root, created=True, adopted=False)
    details = {
        "request": settings.request(),
        "how": decision.how,
        "tree": decision.tree,
        "version": decision.probe.version,
        "python": interp.executable,
        "python_version": interp.version,
        "abi": interp.abi,
        "commit": decision.commit,
        "files": decision.verdict.files,
    }
    text = markers.render_env_sh(settings.root, decision.prepend, settings.shim_dir, settings.vllm_moe)
    twin = markers.read_env_json(settings.env_json) or {}
    current = {k: twin.get(k) for k in details} == details and _read_text(settings.env_file) == text
    with run.step("publish"):
        if current:
            run.say(f"{settings.env_file} is current")
        else:
            markers.publish_env_file(
                settings.env_file, settings.env_json, root=settings.root, prepend=decision.prepend,
                shim_dir=settings.shim_dir, vllm_moe=settings.vllm_moe, details=details,
            )
            run.say(f"wrote {settings.env_file}")
    env = markers.env_mapping(
        settings.root, decision.prepend, run.environ.get("PYTHONPATH"), settings.shim_dir, settings.vllm_moe
    )
    return Result(
        how=decision.how, action=action, root=settings.root, tree=decision.tree,
        version=str(decision.probe.version), python=interp.executable, python_version=interp.version,
        abi=interp.abi, commit=decision.commit, env=env, env_file=settings.env_file,
        prepend=list(decision.prepend), files=dict(decision.verdict.files), durations=dict(run.durations),
        run_id=run.run_id,
    )


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def record_failure(run: Run, exc: BaseException) -> None:
    """Write the failure marker for this run (any failure, Ctrl-C included)."""
    settings = run.settings
    code = exit_code_of(exc)
    if isinstance(exc, EnsureError):
        reason, hint, stage = exc.reason, exc.hint, exc.stage or run.step_name
    elif code == ExitCode.INTERRUPTED:
        reason = f"interrupted ({exc})" if str(exc) else "interrupted"
        hint, stage = "run it again: it resumes", run.step_name
    else:
        reason = f"internal error: {type(exc).__name__}: {exc}"
        hint, stage = "this is a bug in ensure-flydsl; the log has the traceback", run.step_name
    if run.tracker is not None:
        run.tracker.failed(int(code), stage, reason)
    if not os.path.isdir(os.path.dirname(settings.fail_marker)):
        return  # bad input about the marker's own folder: nothing may be created
    markers.write_failure_marker(
        settings.fail_marker, stage=stage, exit_code=int(code), reason=reason, hint=hint,
        log=run.reporter.log_path, log_tail=run.reporter.tail(20), run_id=run.run_id, request=settings.request(),
    )


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


def ensure_run(run: Run) -> Result:
    if run.kind == "detached":
        run.track()  # a detached worker is visible from its first step
    try:
        result = _ensure(run)
    except BaseException as exc:
        if isinstance(exc, (SystemExit, GeneratorExit)):
            raise
        record_failure(run, exc)
        raise
    else:
        if run.tracker is not None:
            run.tracker.succeeded(result.to_json())
        return result
    finally:
        if run.tracker is not None:
            run.tracker.close()  # last: a waiter that sees the run end finds its final state written


def _ensure(run: Run) -> Result:
    settings = run.settings
    with run.step("probe"):
        run.interpreter = preflight(settings, run.environ)
        withdraw_stale_markers(run)
        decision = decide(run)
    if decision.ok:
        action = "warm" if decision.how != HOW_REUSED and is_within(str(decision.tree), settings.root) else "reused"
        return publish(run, decision, action)
    if settings.strategy == "reuse-only":
        raise EnsureError(
            ExitCode.PROBE,
            f"nothing reusable ({decision.reason}) and FLYDSL_STRATEGY=reuse-only never provisions",
            stage="probe",
            hint="install FlyDSL for this interpreter, or use FLYDSL_STRATEGY=auto to build the pin",
        )
    if shutil.which("git", path=run.environ.get("PATH")) is None:
        raise BadInput("PATH", run.environ.get("PATH", ""), "a PATH with git on it (needed to fetch the pin)")
    run.track()
    with contextlib.ExitStack() as held:
        with run.step("lock"):
            held.enter_context(
                build_lock(settings.lock_file, timeout=settings.lock_timeout, run_id=run.run_id, say=run.say)
            )
        run.reporter.open_log(settings.log_file)
        with run.step("probe"):
            decision = decide(run, again=True)  # a concurrent run may have finished while we waited
        if decision.ok:
            run.say("another run finished this while we waited for the lock")
            return publish(run, decision, "warm" if is_within(str(decision.tree), settings.root) else "reused")
        # Under the lock nobody else publishes: an env file still here answers for a tree that fails now.
        if markers.withdraw_env_file(settings.env_file, settings.env_json):
            run.say(f"took away {settings.env_file}: the tree it names does not pass the probe now")
        return provision_from_source(run)


def provision_from_source(run: Run) -> Result:
    settings, root = run.settings, run.settings.root
    assert run.interpreter is not None
    state = classify_root(root, settings.repo)
    if state.kind == "foreign":  # changed since the preflight
        raise BadInput(settings.label("root"), root, f"an empty or new folder; {state.reason}")
    if state.kind != "ours":
        created = state.kind == "absent"
        os.makedirs(root, exist_ok=True)
        claim_root(root, created=created, adopted=state.kind == "adoptable")
        if state.kind == "adoptable":
            run.say(f"adopting {root}: {state.reason}")
    stamps = run.stamps
    with run.step("fetch"):
        gitsource.clear_stale_git_locks(root, run.say)
        gitsource.ensure_repository(root, settings.repo)
        exclude_from_git(root)
        commit = gitsource.fetch_pin(root, settings.pin, settings.repo, run.say, on_fetch=run.worked)
        run.say(f"pin {settings.pin} is commit {commit}")
        checkout_key = {"commit": commit}
        started = stamps.started_key("checkout")
        interrupted = started is not None and not stamps.done("checkout", started)
        deleted = False if interrupted else check_local_changes(root, settings.repo)
        head = gitsource.head_commit(root, settings.repo)
        if deleted or not (stamps.done("checkout", checkout_key) and head == commit):
            stamps.begin("checkout", checkout_key)
            gitsource.checkout(root, commit, settings.repo, force=interrupted or deleted)
            stamps.finish("checkout", checkout_key)
            run.say(f"checked out {commit[:12]} in {root}")
        if not stamps.done("submodules", checkout_key):
            stamps.begin("submodules")
            if gitsource.update_submodules(root, settings.repo):
                run.say("submodules updated")
            stamps.finish("submodules", checkout_key)
    with run.step("fixes"):
        toolchain_prefixes = apply_fixes(run)
        toolchain = prepare_toolchain(root, run.interpreter, toolchain_prefixes)
    jobs = resolve_jobs(settings.jobs)
    env = build_environment(run.environ, toolchain, rocm_path=settings.rocm_path, mlir_path=None, jobs=jobs)
    with run.step("llvm"):
        mlir_path, mlir_identity = provide_mlir(run, env, jobs)
    env = build_environment(run.environ, toolchain, rocm_path=settings.rocm_path, mlir_path=mlir_path, jobs=jobs)
    with run.step("build"):
        built_now = build_flydsl(run, commit, mlir_identity, env, jobs)
    try:
        with run.step("verify"):
            decision = verify_built_tree(run, commit)
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
            decision = verify_built_tree(run, commit)
    stamps.finish("tree", tree_key(settings, commit, run.interpreter), how=HOW_BUILT, commit=commit,
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


def apply_fixes(run: Run) -> List[str]:
    """The hip CMake library-name fix (a private overlay; ROCm is never written). Returns CMake prefixes."""
    settings = run.settings
    check = check_hip(settings.rocm_path)
    if check.needs_fix:
        overlay = os.path.join(tools_dir(settings.root), "rocm-overlay")
        changed = provide_hip_overlay(settings.rocm_path, overlay, check)
        names = ", ".join(check.missing)
        run.say(
            f"fix: the hip CMake package in {settings.rocm_path} names {names}, which is missing; "
            f"{'provided' if changed else 'using'} a private corrected copy at {overlay} "
            f"(pointing at {os.path.basename(str(check.actual))}); {settings.rocm_path} is left untouched"
        )
        return [overlay]
    if check.unfixable:
        run.say(f"warning: the hip CMake package names {', '.join(check.missing)} and no libamdhip64 exists "
                f"in {settings.rocm_path}/lib; a build that needs HIP will fail to configure")
    elif check.package_dir:
        run.say(f"fix: hip CMake package in {settings.rocm_path} names libraries that exist; nothing to fix")
    return []


def llvm_record_path(base_dir: str) -> str:
    return os.path.join(base_dir, ".llvm-project.ensure-flydsl.json")


def provide_mlir(run: Run, env: Dict[str, str], jobs: int) -> Tuple[str, Dict[str, object]]:
    settings, root = run.settings, run.settings.root
    if settings.mlir_path is not None:
        run.say(f"using MLIR_PATH={settings.mlir_path}; skipping the LLVM/MLIR build")
        return settings.mlir_path, {"mlir_path": settings.mlir_path}
    assert run.interpreter is not None
    key = llvm_key(root, run.interpreter)
    llvm_dir = os.path.join(settings.base_dir, "llvm-project")
    install = mlir_install_of(settings.base_dir)
    record_path = llvm_record_path(settings.base_dir)
    record = read_json(record_path) or {}
    if record.get("done") == key and is_mlir_install(install):
        run.say(f"MLIR for LLVM {str(key['llvm_commit'])[:12]} is already built in {install}")
        return install, {"llvm": key}
    created = bool(record.get("created"))
    if os.path.lexists(llvm_dir) and not created:
        raise EnsureError(
            ExitCode.LLVM_BUILD,
            f"{llvm_dir} exists and was not made by ensure-flydsl; build_llvm.sh would build into it",
            stage="llvm",
            hint="move it away, or set MLIR_PATH to an MLIR install built for this interpreter",
        )
    atomic_write_json(record_path, {"created": True, "started": key, "done": None})
    run.say(f"building LLVM/MLIR {str(key['llvm_commit'])[:12]} with {jobs} jobs (the long step)")
    run.worked()
    run_script(root, "build_llvm.sh", jobs, env, run.build_line, on_start=run.build_started,
               code=ExitCode.LLVM_BUILD, stage="llvm", what="the LLVM/MLIR build")
    if not is_mlir_install(install):
        raise EnsureError(ExitCode.LLVM_BUILD, f"build_llvm.sh finished but {install} holds no lib/cmake/mlir",
                          stage="llvm")
    atomic_write_json(record_path, {"created": True, "started": key, "done": key})
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
    build_dir = os.path.join(root, "build-fly")
    packages = os.path.join(build_dir, "python_packages")
    if stamps.done("build", key) and os.path.isdir(packages):
        run.say("FlyDSL is already built for this commit and interpreter")
        return False
    started = stamps.started_key("build")
    if os.path.lexists(build_dir):
        if started is None:
            moved = move_aside(build_dir)
            run.say(f"moved {build_dir}, which ensure-flydsl did not make, to {moved}")
        elif started != key:
            run.say(f"removing {build_dir}: it was made for another commit, interpreter or MLIR")
            remove_tree(build_dir)
        else:
            run.say(f"resuming the interrupted build in {build_dir}")
    stamps.begin("build", key)
    run.say(f"building FlyDSL {commit[:12]} for {run.interpreter.executable} with {jobs} jobs")
    run.worked()
    run_script(root, "build.sh", jobs, env, run.build_line, on_start=run.build_started,
               code=ExitCode.FLYDSL_BUILD, stage="build", what="the FlyDSL build")
    if not os.path.isdir(os.path.join(packages, "flydsl")):
        raise EnsureError(ExitCode.FLYDSL_BUILD, f"build.sh finished but {packages}/flydsl does not exist",
                          stage="build")
    stamps.finish("build", key)
    return True


def verify_built_tree(run: Run, commit: str) -> Decision:
    settings = run.settings
    prefix = tree_folders(settings.root)
    probe = _probe(run, prefix)
    verdict = evaluate(probe, settings.min_version, settings.require)
    if not verdict.reusable:
        raise EnsureError(
            ExitCode.PROBE,
            f"built, but the import probe fails: {verdict.reason}",
            stage="verify",
            hint="the build finished but the tree does not import for this interpreter; "
            "see the module files and errors with `ensure-flydsl verify`",
        )
    if not (verdict.tree and is_within(verdict.tree, settings.root)):
        raise EnsureError(
            ExitCode.PROBE,
            f"built, but the modules import from {verdict.tree}, not from the built tree {settings.root}",
            stage="verify",
        )
    run.say(f"verified: {verdict.reason}")
    return Decision(True, verdict.reason, HOW_BUILT, settings.root, prefix, probe, verdict, commit)
