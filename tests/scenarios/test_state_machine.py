"""Model-based test of the state machine: random interleavings of the real CLI over two roots that share one
parent folder (so they share the default failure marker, lock and log, as the bash executor did).

Rules: `start`, a blocking `ensure` in the background (with and without FLYDSL_LOCK_TIMEOUT=1), `wait
--timeout T`, `status --json`, `clean`, `verify`, a change of request (pin P1/P2, --no-vllm-moe), SIGKILL or
SIGTERM of any live process the machine started, failing and slow builds, files planted in a root, and a
settle step.  After each step the invariants are checked against the files and the live processes
(state_model.py), never against the tool's own bookkeeping:

1. `status --json` and `wait --timeout 0` agree with the truth (success iff the env file answers the
   request; running while a run for it is mid-build; a failure only from a run for it that failed).
2. An env file imports from one tree under its root, built from the pin its twin names.
3. A file the tool did not create is never gone.
4. The failure marker never names a request whose env file is there (answered by a later success).
5. A root's marker is not removed by the other root's runs and commands.
6. No process of the tool or its builds outlives its run (a tag variable in their environment).

The shared cache (issue 19): two more hosts (roots H1 and H2, each in a base of its own) run `ensure` with
FLYDSL_CACHE pointing at one folder: they publish, fetch, take, hold and lose build leases (the kill rule
picks them too), while the cache gets planted records and blobs of every kind (state_model.CACHE_PLANTS:
invalid lease records, a failure record dated an hour ahead, a dead lease, FIFOs as blob and manifest, a
garbage manifest, a truncated blob, links as `blobs` and `leases/tree`), and a second user (nobody, when
the machine can switch to it) runs against the cache, which is read-only to it.  Invariants:

7. A host's run ends 0, or failed because it was asked to fail, was killed, or its fleet failed twice
   (exit 5, "failed twice in the fleet"); never 64, 70 or a traceback; its env file imports as in 2.
8. After a settle, every lease record in state "building" is a planted one or belongs to a run killed with
   SIGKILL: no lease outlives its run.
9. What the planted links point to never changes (nothing written or removed through them).
10. The second user's run succeeds, says once that the cache is read-only (when it uses the cache), and
    writes nothing into it.

Issue 26, item 12 adds what found its items 2 and 3.  Something other than a regular file (a folder, a link to
a folder, a dangling link, a FIFO) is planted at every name the binary cache uses (tests/helpers/
cache_plants.py: manifests, variants, signatures, blobs, uploads in progress, lease generations and their
staged copies, the folders of each), and `cache list` / `cache prune` run over whatever the cache holds:

11. no host's run spins (settle's hang guard) or ends with 70 (invariant 7), nothing is written through a
    link (invariant 9), and `cache list` and `cache prune` answer 0 or 64, never 70 or a traceback.

In some examples (`choose_interpreter`) the roots' interpreter is `python3` on a PATH where it is pyenv's
shim (tests/helpers/pyenv_root.py, the stand-in dispatcher), whose global version a rule switches between two
interpreters:

12. a success of `ensure --json`, warm or not, is for the interpreter the name lands on now: its path,
    version and ABI.

A full file system at every step is the sibling machine's (tests/scenarios/test_state_machine_disk.py).

ENSURE_FLYDSL_SM_EXAMPLES / ENSURE_FLYDSL_SM_STEPS run it longer; ENSURE_FLYDSL_SM_STATS names a JSON file
that receives the counts of what it tried (docs/RELIABILITY.md).  A failure prints the steps and a
@reproduce_failure blob (and the seed, when it cannot be replayed).  ENSURE_FLYDSL_SM_SURVEY names a
JSON-lines file: each kind of violation is written there once (with the steps that led to it) and the run
goes on, to list every distinct defect at once instead of the first one.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Counter, Dict, Iterator, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.helpers.as_nobody import SYSTEM_PYTHON, Nobody, unavailable
from tests.helpers.as_nobody import UID as NOBODY_UID
from tests.helpers.cache_plants import CACHE_NAMES, ODD_KINDS, plant_odd
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.pyenv_root import PyenvRoot
from tests.helpers.reliability import record
from tests.helpers.state_model import (
    CACHE_PLANTS,
    REAL_FAIL,
    SUCCESS,
    TAG_VAR,
    VERSIONS,
    Outcomes,
    Proc,
    Request,
    cache_keys,
    classify,
    file_id,
    import_check,
    kill_tagged,
    lease_records,
    make_sm_repo,
    names,
    names_root,
    owned_by,
    plant_in_cache,
    proc_start_time,
    read_json,
    request_args,
    survivors,
    tree_listing,
)

EXAMPLES = int(os.environ.get("ENSURE_FLYDSL_SM_EXAMPLES") or 6)
STEPS = int(os.environ.get("ENSURE_FLYDSL_SM_STEPS") or 40)
HANG_GUARD_S = 120.0  # a hang guard, not a performance target
WAIT_NOW = ("--timeout", "0")  # "answer at once" (issue 9, item 9)
FAILURE = "failed"
REQUESTS: List[Request] = [(pin, vllm) for pin in ("P1", "P2") for vllm in (True, False)]
PLANTS = ("note", "diff", "dumps", "tmp")
SURVEY = os.environ.get("ENSURE_FLYDSL_SM_SURVEY")
_SURVEYED: set = set()

STATS: Counter[str] = collections.Counter()
_REPO: List[FixtureRepo] = []
_WORK: List[str] = []
_NOBODY: List[Optional[Nobody]] = []  # the second user, when the machine can switch to it
_PYENV: List[PyenvRoot] = []  # a pyenv root whose shim is the roots' interpreter in some examples
_PYENV_FACTS: Dict[str, Tuple[str, str]] = {}  # version -> (python_version, abi) of its interpreter
HOSTS = ("H1", "H2")
LEASE_TTL = "3"


def _cmd(*args: str) -> List[str]:
    return [sys.executable, "-m", "ensure_flydsl", *args]


class ToolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.repo = _REPO[0]
        self.dir = tempfile.mkdtemp(prefix="sm-", dir=_WORK[0])
        self.base = os.path.join(self.dir, "base")
        self.roots = {name: os.path.join(self.base, name) for name in ("A", "B")}
        self.tag = "sm-" + uuid.uuid4().hex
        self.model = Outcomes()
        self.current: Dict[str, Request] = {name: REQUESTS[0] for name in self.roots}
        self.previous: Dict[str, Optional[Request]] = {name: None for name in self.roots}
        self.planted: Dict[str, bytes] = {}
        self.index = 0
        self.serial = 0
        self.touched: set = set()
        self.marker_seen: Optional[Tuple[object, Optional[str]]] = None
        self.marker_seen_at = 0.0
        self.alive_roots_at_check: set = set()
        self.steps: List[str] = []
        # The shared cache and the hosts: world-readable (the second user reads the cache), the hosts' roots
        # each in a base of its own (own lock and marker, as on another machine).
        nobody = _NOBODY[0] if _NOBODY else None
        self.shared = tempfile.mkdtemp(prefix="sm-cache-", dir=nobody.dir if nobody else self.dir)
        os.chmod(self.shared, 0o755)
        self.cache = os.path.join(self.shared, "cache")
        os.makedirs(self.cache)  # root's, mode 755: read-only to the second user (a missing one it cannot create is 64)
        self.sentinel = os.path.join(self.shared, "elsewhere")  # what planted links point to
        os.makedirs(os.path.join(self.sentinel, "victim"))
        with open(os.path.join(self.sentinel, "victim", "0000000001.json"), "w") as handle:
            handle.write("somebody else's file\n")
        self.sentinel_listing = tree_listing(self.sentinel)
        self.hosts = {name: os.path.join(self.dir, "hosts", name, "FlyDSL") for name in HOSTS}
        self.planted_leases: set = set()
        self.host_env_checked: Dict[str, object] = {}
        self.nobody_base = nobody.own_folder(f"nobody-{uuid.uuid4().hex[:8]}") if nobody else None
        self.shim: Optional[PyenvRoot] = None  # the roots' interpreter is `python3`, pyenv's shim (choose_interpreter)
        self.selected = "A"
        STATS["examples"] += 1

    @initialize(shim=st.booleans())
    def choose_interpreter(self, shim: bool) -> None:
        """The roots' FLYDSL_PYTHON: the test interpreter's path, or `python3` on a PATH where it is pyenv's
        shim (tests/helpers/pyenv_root.py), whose selection switch_interpreter changes (issue 26, item 3)."""
        self.note("interpreter:", "pyenv shim python3 (A)" if shim else sys.executable)
        if shim:
            self.shim = _PYENV[0]
            self.shim.select_global("A")
            STATS["examples:shim"] += 1

    # -- helpers ---------------------------------------------------------------------------------------------
    def expect(self, ok: bool, key: str, message: str) -> bool:
        """An invariant: fails the test, or with ENSURE_FLYDSL_SM_SURVEY set (to a JSON-lines file) records
        the first case of each kind of violation and goes on, to list every distinct defect in one run."""
        if ok:
            return True
        STATS["violation:" + key] += 1
        if not SURVEY:
            raise AssertionError(message)
        if key not in _SURVEYED:
            _SURVEYED.add(key)
            with open(SURVEY, "a") as handle:
                handle.write(json.dumps({"key": key, "message": message, "steps": self.steps}) + "\n")
        return False

    def note(self, *step: object) -> None:
        self.steps.append(" ".join(str(s) for s in step))

    @property
    def marker(self) -> str:
        return os.path.join(self.base, ".flydsl_build.failed")

    def env(self, counter: Optional[str] = None, **extra: str) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
        self.serial += 1
        env.update({
            "FLYDSL_REPO": self.repo.url,
            "FLYDSL_PYTHON": sys.executable,
            "FLYDSL_STRATEGY": "source",
            # The model's requests are pins (P1, P2): each answered only by a tree built from it.  With the
            # seed's version-only gate (the default) P1's tree answers P2 too; test_keep_install.py covers that.
            "FLYDSL_EXACT_PIN": "1",
            "ROCM_PATH": os.path.join(self.dir, "no-rocm"),
            "FIXTURE_COUNTER_DIR": counter or os.path.join(self.dir, "counters", "shared"),
            TAG_VAR: self.tag,
        })
        if self.shim is not None:  # `python3` is the shim, first on PATH; no selection of the caller's own
            env = {k: v for k, v in env.items() if k not in ("PYENV_VERSION", "PYENV_DIR")}
            env["PATH"] = os.pathsep.join([os.path.dirname(self.shim.shim), env.get("PATH", "")])
            env["FLYDSL_PYTHON"] = "python3"
        env.update(extra)
        os.makedirs(env["FIXTURE_COUNTER_DIR"], exist_ok=True)
        return env

    def new_counter(self) -> str:
        self.serial += 1
        return os.path.join(self.dir, "counters", f"p{self.serial}")

    def run(self, root: str, *args: str, req: Optional[Request] = None, timeout: float = HANG_GUARD_S
            ) -> subprocess.CompletedProcess:
        full = list(args) + request_args(self.roots[root], req or self.current[root], self.repo)
        return subprocess.run(_cmd(*full), env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, check=False)

    def build_env(self, counter: str, fail: bool, slow: Optional[str], lock_timeout: bool = False) -> Dict[str, str]:
        extra: Dict[str, str] = {}
        if fail:
            extra["FIXTURE_BUILD_FAIL"] = "1"
        if slow:
            extra["FIXTURE_BUILD_SLEEP"] = slow
        if lock_timeout:
            extra["FLYDSL_LOCK_TIMEOUT"] = "1"
        return self.env(counter, **extra)

    def planted_in(self, root: str) -> bool:
        return any(path.startswith(self.roots[root] + os.sep) for path in self.planted)

    def reap(self) -> None:
        for proc in self.model.procs:
            if proc.outcome is None and not proc.alive():
                classify(proc, self.base, self.index)
                STATS["outcome:" + str(proc.outcome)] += 1
                if proc.outcome == REAL_FAIL and not proc.fail and proc.killed is None:
                    STATS[f"unexpected_exit:{proc.code}"] += 1

    def wait_all(self, procs: List[Proc]) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        for proc in procs:
            while proc.alive():
                assert time.monotonic() < deadline, f"pid {proc.pid} ({proc.kind} {proc.req}) still runs"
                time.sleep(0.05)
        self.reap()

    # -- rules -------------------------------------------------------------------------------------------------
    @rule(root=st.sampled_from(["A", "B"]), fail=st.sampled_from([False, False, True]),
          slow=st.sampled_from([None, None, "0.3", "1"]))
    def start(self, root: str, fail: bool, slow: Optional[str]) -> None:
        STATS["rule:start"] += 1
        self.note("start", root, self.current[root], "fail" if fail else "", f"slow={slow}" if slow else "")
        self.touched.add(root)
        counter, req = self.new_counter(), self.current[root]
        env = self.build_env(counter, fail, slow)
        out = subprocess.run(_cmd("start", *request_args(self.roots[root], req, self.repo)), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S)
        if out.returncode == 64 and "local changes" in out.stderr and self.planted_in(root):
            # `clean` kept the root for the files planted in it but took the tool's claim on it: the tool now
            # treats it as somebody else's checkout with local changes and refuses it (reported, not a model
            # error).
            STATS["start:refused_local_changes"] += 1
            return
        assert out.returncode == 0, f"start exited {out.returncode}: {out.stdout}{out.stderr}"
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if data.get("joined"):
            STATS["start:joined"] += 1
            return
        pid = int(data["pid"])
        self.model.procs.append(Proc("worker", self.roots[root], req, pid, counter, fail, run_id=data["run_id"],
                                     started=proc_start_time(pid), started_index=self.index))

    @rule(root=st.sampled_from(["A", "B"]), fail=st.sampled_from([False, False, True]),
          slow=st.sampled_from([None, None, "0.3", "1"]), lock_timeout=st.booleans())
    def ensure(self, root: str, fail: bool, slow: Optional[str], lock_timeout: bool) -> None:
        STATS["rule:ensure" + (":lock_timeout" if lock_timeout else "")] += 1
        self.note("ensure&", root, self.current[root], "fail" if fail else "", f"slow={slow}" if slow else "",
                  "FLYDSL_LOCK_TIMEOUT=1" if lock_timeout else "")
        self.touched.add(root)
        counter, req = self.new_counter(), self.current[root]
        env = self.build_env(counter, fail, slow, lock_timeout)
        log = open(os.path.join(self.dir, f"ensure-{self.serial}.out"), "wb")
        popen = subprocess.Popen(_cmd("ensure", *request_args(self.roots[root], req, self.repo)), env=env,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.model.procs.append(Proc("ensure", self.roots[root], req, popen.pid, counter, fail,
                                     lock_timeout=lock_timeout, popen=popen, started_index=self.index))

    @rule(root=st.sampled_from(["A", "B"]), timeout=st.sampled_from([0, 1, 2, 3]))
    def wait(self, root: str, timeout: int) -> None:
        STATS["rule:wait"] += 1
        self.note("wait --timeout", timeout, root, self.current[root])
        req = self.current[root]
        self.reap()
        live_before = bool(self.model.live(self.roots[root], req))
        out = self.run(root, "wait", "--timeout", str(timeout))
        self.reap()
        self.expect(out.returncode not in (64, 70), "wait-refused",
                    f"wait --timeout {timeout} exited {out.returncode}: {out.stderr}")
        if out.returncode == 75:
            self.expect(live_before, "wait-75-idle",
                        f"wait says still running (75) but no run for {root} {req} lives: {out.stdout}")
        twin = read_json(os.path.join(self.roots[root], "flydsl_env.json"))
        quiet = not self.model.live(self.roots[root])
        if out.returncode == 0 and quiet:
            self.expect(names(twin, self.roots[root], req, self.repo), "wait-0-unanswered",
                        f"wait exited 0 for {root} {req} but the env file answers {(twin or {}).get('request')}")

    @rule(root=st.sampled_from(["A", "B"]))
    def status(self, root: str) -> None:
        STATS["rule:status"] += 1
        self.note("status", root, self.current[root])
        self.check_pair(root, self.current[root])

    @rule(root=st.sampled_from(["A", "B"]))
    def clean(self, root: str) -> None:
        STATS["rule:clean"] += 1
        self.note("clean", root, self.current[root])
        self.touched.add(root)
        workers = [p for p in self.model.live(self.roots[root]) if p.kind == "worker"]
        STATS["check:clean_beside_live_run"] += bool(workers)
        out = self.run(root, "clean")
        still = [p.pid for p in workers if p.alive()]
        self.expect(out.returncode != 0 or not still, "clean-live-run",
                    f"clean exited 0 while the detached run (pid {still[:1]}) for {root} lived: {out.stdout}")
        self.expect(out.returncode not in (64, 70), "clean-exit",
                    f"clean exited {out.returncode}: {out.stdout}{out.stderr}")
        STATS[f"clean:exit{out.returncode}"] += 1
        if out.returncode == 0:
            self.reap()
            self.model.reset_index[self.roots[root]] = self.index

    @rule(root=st.sampled_from(["A", "B"]))
    def verify(self, root: str) -> None:
        STATS["rule:verify"] += 1
        self.note("verify", root, self.current[root])
        out = self.run(root, "verify")
        self.expect(out.returncode != 70 and "Traceback" not in out.stderr, "verify-70", out.stderr)

    @rule(root=st.sampled_from(["A", "B"]), req=st.sampled_from(REQUESTS))
    def change_request(self, root: str, req: Request) -> None:
        STATS["rule:change_request"] += 1
        self.note("use request", root, req)
        if req != self.current[root]:
            self.previous[root], self.current[root] = self.current[root], req

    # No preconditions on timing-dependent state (which processes live, whether a root exists yet): the same
    # choices must draw the same data when hypothesis replays a case; a rule with nothing to act on is a no-op.
    @rule(pick=st.integers(0, 50), sig=st.sampled_from([signal.SIGKILL, signal.SIGTERM]))
    def kill(self, pick: int, sig: int) -> None:
        live = self.model.live()
        if not live:
            return
        proc = live[pick % len(live)]
        STATS[f"rule:kill:{signal.Signals(sig).name}"] += 1
        self.note("kill", signal.Signals(sig).name, proc.kind, os.path.basename(proc.root), proc.req, "pid", proc.pid)
        proc.others_live_at_kill = any(p is not proc for p in self.model.live(proc.root, proc.req))
        proc.killed = sig
        proc.signal(sig)
        self.wait_all([proc])

    @rule(root=st.sampled_from(["A", "B"]), kind=st.sampled_from(PLANTS))
    def plant(self, root: str, kind: str) -> None:
        path = self.roots[root]
        if not os.path.isdir(os.path.join(path, ".git")):
            return
        STATS[f"rule:plant:{kind}"] += 1
        self.note("plant", kind, root)
        self.serial += 1
        rel = {"note": f"sm-note-{self.serial}.txt", "diff": f"tuned-{self.serial}.diff",
               "dumps": f"my_ir_dumps_{self.serial}/x", "tmp": f"tmp/scratch-{self.serial}"}[kind]
        target = os.path.join(path, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        content = f"planted {kind} {self.serial}\n".encode()
        with open(target, "wb") as handle:
            handle.write(content)
        self.planted[target] = content

    @rule(host=st.sampled_from(HOSTS), req=st.sampled_from(REQUESTS), fail=st.sampled_from([False, False, False, True]),
          slow=st.sampled_from([None, "0.3", "1"]))
    def host_ensure(self, host: str, req: Request, fail: bool, slow: Optional[str]) -> None:
        """Another host's `ensure` sharing the cache: it publishes, fetches, takes or waits for a lease."""
        STATS["rule:host_ensure"] += 1
        self.serial += 1
        host_id = f"{host.lower()}-{self.serial}"
        self.note("host ensure&", host, req, host_id, "fail" if fail else "", f"slow={slow}" if slow else "")
        counter = self.new_counter()
        env = self.build_env(counter, fail, slow)
        env.update(FLYDSL_CACHE=self.cache, FLYDSL_HOST_ID=host_id, FLYDSL_LEASE_TTL=LEASE_TTL)
        if _NOBODY and _NOBODY[0] is not None:
            env["FLYDSL_PYTHON"] = SYSTEM_PYTHON  # the second user's interpreter: its runs hit the hosts' entries
        out = os.path.join(self.dir, f"host-{self.serial}.out")
        with open(out, "wb") as log:
            popen = subprocess.Popen(_cmd("ensure", *request_args(self.hosts[host], req, self.repo)), env=env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.model.procs.append(Proc("host", self.hosts[host], req, popen.pid, counter, fail, popen=popen,
                                     started_index=self.index, host=host_id, out=out))

    @rule(kind=st.sampled_from(CACHE_PLANTS), pick=st.integers(0, 50))
    def plant_cache(self, kind: str, pick: int) -> None:
        """Something planted in the shared cache by a broken host or another user."""
        keys = cache_keys(self.cache)
        if not keys and not kind.startswith("link-"):
            return
        key = keys[pick % len(keys)] if keys else ""
        planted = plant_in_cache(self.cache, kind, key, pick, self.sentinel)
        if planted is None:
            return
        STATS[f"rule:plant_cache:{kind}"] += 1
        self.note("plant in cache", kind, key[:12])
        if kind.startswith("lease-"):
            self.planted_leases.add(planted)

    @rule(name=st.sampled_from(sorted(CACHE_NAMES)), kind=st.sampled_from(ODD_KINDS), pick=st.integers(0, 50))
    def plant_odd_in_cache(self, name: str, kind: str, pick: int) -> None:
        """Something other than a regular file at a name the binary cache uses (issue 26, item 12): the
        hosts' runs must neither spin (settle's hang guard) nor end with 70 (invariant 7), and nothing is
        written through a link (invariant 9)."""
        keys = cache_keys(self.cache)
        key = keys[pick % len(keys)] if keys else ""
        planted = plant_odd(self.cache, name, kind, key, pick, self.sentinel)
        if planted is None:
            return
        STATS[f"rule:plant_odd:{name}:{kind}"] += 1
        self.note("plant in cache", kind, "at", name, key[:12])

    @rule(action=st.sampled_from(["list", "prune"]))
    def cache_command(self, action: str) -> None:
        """`cache list` and `cache prune` over whatever the cache holds: an answer within the hang guard, 0
        or 64 (an unusable cache is bad input there) in one line, never 70 or a traceback."""
        STATS[f"rule:cache:{action}"] += 1
        self.note("cache", action)
        args = ["cache", action, "--cache", self.cache] + (["--max-size", "100G"] if action == "prune" else [])
        out = subprocess.run(_cmd(*args), env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=HANG_GUARD_S, check=False)
        STATS[f"cache:{action}:exit{out.returncode}"] += 1
        self.expect(out.returncode in (0, 64) and "Traceback" not in out.stderr, f"cache-{action}-{out.returncode}",
                    f"cache {action} exited {out.returncode}: {out.stdout[-1000:]}{out.stderr[-2000:]}")

    @rule(version=st.sampled_from(["A", "B"]))
    def switch_interpreter(self, version: str) -> None:
        """pyenv's global version file selects another interpreter for `python3` (a no-op without the shim)."""
        if self.shim is None:
            return
        STATS[f"rule:switch_interpreter:{'same' if version == self.selected else 'other'}"] += 1
        self.note("pyenv global", version)
        self.shim.select_global(version)
        self.selected = version

    @rule(root=st.sampled_from(["A", "B"]), then_switch=st.sampled_from([True, True, False]))
    def ensure_answers_for_the_shims_choice(self, root: str, then_switch: bool) -> None:
        """A blocking `ensure --json` (FLYDSL_LOCK_TIMEOUT=1, behind a live build): a success, warm or not,
        is for the interpreter `python3` lands on now, its version and ABI; with ``then_switch``, once it
        succeeded, pyenv's selection switches and `ensure` runs again: the call that was answered warm for
        the last call's interpreter (issue 26, item 3)."""
        if self.shim is None:
            return
        if self.shim_ensure(root) == 0 and then_switch:
            self.switch_interpreter("B" if self.selected == "A" else "A")
            self.shim_ensure(root)

    def shim_ensure(self, root: str) -> Optional[int]:
        assert self.shim is not None
        self.note("ensure --json (shim)", root, self.current[root], "selected", self.selected)
        self.touched.add(root)
        counter, req = self.new_counter(), self.current[root]
        out = os.path.join(self.dir, f"shim-{self.serial}.out")
        with open(out, "wb") as log, open(out + ".err", "wb") as err:
            popen = subprocess.Popen(_cmd("ensure", "--json", *request_args(self.roots[root], req, self.repo)),
                                     env=self.build_env(counter, False, None, lock_timeout=True), stdout=log,
                                     stderr=err, start_new_session=True)
        proc = Proc("ensure", self.roots[root], req, popen.pid, counter, False, lock_timeout=True, popen=popen,
                    started_index=self.index)
        self.model.procs.append(proc)
        self.wait_all([proc])
        with open(out) as handle:
            lines = handle.read().strip().splitlines()
        STATS[f"shim:exit{proc.code}"] += 1
        if proc.code != 0:
            return proc.code
        result = json.loads(lines[-1])
        STATS[f"shim:action:{result.get('action')}"] += 1
        expected = self.shim.python(self.selected)
        version, abi = _PYENV_FACTS[self.selected]
        self.expect((result.get("python"), result.get("python_version"), result.get("abi")) == (expected, version, abi),
                    f"shim-{result.get('action')}",
                    f"a {result.get('action')} answer for {result.get('python')} ({result.get('python_version')}, "
                    f"{result.get('abi')}) while python3 lands on {expected} ({version}, {abi})")
        return proc.code

    @rule(req=st.sampled_from(REQUESTS))
    def nobody_ensure(self, req: Request) -> None:
        """The second user's `ensure` (its own root) against the cache, which is read-only to it."""
        nobody = _NOBODY[0] if _NOBODY else None
        if nobody is None or self.nobody_base is None:
            return
        STATS["rule:nobody_ensure"] += 1
        self.note("nobody ensure", req)
        counter = nobody.own_folder(f"counters-{uuid.uuid4().hex[:8]}")
        env = self.env(counter, FLYDSL_CACHE=self.cache, FLYDSL_HOST_ID="nobody", FLYDSL_LEASE_TTL=LEASE_TTL)
        root = os.path.join(self.nobody_base, "FlyDSL")
        out = nobody.run(env, "ensure", *request_args(root, req, self.repo), timeout=HANG_GUARD_S)
        said = out.stdout + out.stderr
        STATS[f"nobody:exit{out.returncode}"] += 1
        self.expect(out.returncode == 0 and "Traceback" not in said, "inv10-exit",
                    f"invariant 10: the second user's run exited {out.returncode}: {said[-3000:]}")
        told = said.count(f"cache: {self.cache} is read-only for this user")
        # Once when it used the cache; a warm run (nothing changed) does not open it.
        self.expect(told == 1 or (told == 0 and "cache:" not in said), "inv10-said",
                    f"invariant 10: the second user's run did not say once that the cache is read-only: {said[-3000:]}")
        written = owned_by(self.cache, NOBODY_UID)
        self.expect(not written, "inv10-wrote", f"invariant 10: the second user wrote into the cache: {written[:3]}")
        if out.returncode == 0:
            how = read_json(os.path.join(root, "flydsl_env.json")) or {}
            STATS[f"nobody:how:{how.get('how')}"] += 1

    @rule()
    def settle(self) -> None:
        STATS["rule:settle"] += 1
        self.note("settle")
        self.wait_all(self.model.live())
        left = survivors(self.tag)
        self.expect(not left, "inv6", "processes outlived their runs (invariant 6):\n" + "\n".join(left))
        self.check_hosts()
        self.check_leases_after_settle()

    # -- invariants --------------------------------------------------------------------------------------------
    @invariant()
    def files_and_answers(self) -> None:
        self.index += 1
        STATS["steps"] += 1
        self.reap()
        self.check_planted()
        self.check_markers_of_other_root()
        for root in self.roots:
            self.check_env_file(root)
            self.check_marker_answered(root)
            for req in {self.current[root], self.previous[root]} - {None}:
                self.check_pair(root, req)  # type: ignore[arg-type]
        for host in HOSTS:
            now = (file_id(os.path.join(self.hosts[host], "flydsl_env.sh")),
                   file_id(os.path.join(self.hosts[host], "flydsl_env.json")))
            if self.host_env_checked.get(host) != now:  # (a host's env file is imported again only once changed)
                self.host_env_checked[host] = now
                self.check_env_path(self.hosts[host])
        self.check_hosts()
        self.touched = set()
        self.alive_roots_at_check = {p.root for p in self.model.live()}

    def check_hosts(self) -> None:
        """Invariant 7 for each host run that ended since the last check; invariant 9 (the links' targets)."""
        for proc in self.model.procs:
            if proc.kind != "host" or proc.outcome is None or proc.checked:
                continue
            proc.checked = True
            said = open(str(proc.out), errors="replace").read() if proc.out else ""
            for line, stat in (("took the build lease", "took_lease"), ("waiting for ", "waited"),
                               ("is dead", "took_over_dead"), ("unknown host", "unknown_holder"),
                               ("failed twice in the fleet", "fleet_failed"), ("is not a regular file", "refused_fifo"),
                               ("is a symbolic link", "refused_link"), ("is corrupt", "corrupt_entry"),
                               ("ahead of this host's clock", "failure_from_the_future")):
                STATS[f"host:{stat}"] += line in said
            how = said.rsplit("ready: flydsl ", 1)[-1].split(")", 1)[0].split("(")[-1] if "ready: " in said else "-"
            STATS[f"host:exit{proc.code}:{how if proc.code == 0 else ''}"] += 1
            explained = (proc.code == 0 or proc.killed is not None or (proc.fail and proc.code == 5)
                         or (proc.code == 5 and "failed twice in the fleet" in said))
            self.expect(explained and "Traceback" not in said, f"inv7-exit{proc.code}",
                        f"invariant 7: host run {proc.host} ({proc.req}) exited {proc.code}: {said[-3000:]}")
        self.expect(tree_listing(self.sentinel) == self.sentinel_listing, "inv9",
                    f"invariant 9: what a planted link points to changed: {tree_listing(self.sentinel)}")

    def check_leases_after_settle(self) -> None:
        """Invariant 8: nothing runs now, so no lease may be held but a SIGKILLed run's or a planted one."""
        killed = {p.host for p in self.model.procs if p.host and p.killed == signal.SIGKILL}
        for path, doc in lease_records(self.cache):
            if path in self.planted_leases or doc is None or doc.get("state") != "building":
                continue
            STATS["check:lease_after_settle"] += 1
            self.expect(doc.get("host") in killed, "inv8",
                        f"invariant 8: {path} is held by {doc.get('host')} (run {doc.get('run_id')}), which was not "
                        "killed with SIGKILL and has ended")

    def check_planted(self) -> None:
        for path, content in self.planted.items():
            try:
                with open(path, "rb") as handle:
                    now: Optional[bytes] = handle.read()
            except OSError:
                now = None
            self.expect(now == content, "inv3-" + os.path.basename(path).split("-")[0],
                        f"invariant 3: the planted file {path} is gone or changed")

    def check_env_file(self, root: str) -> None:
        self.check_env_path(self.roots[root])

    def check_env_path(self, path: str) -> None:
        env_file, twin_path = os.path.join(path, "flydsl_env.sh"), os.path.join(path, "flydsl_env.json")
        before, twin = file_id(env_file), read_json(twin_path)
        if before is None:
            return
        rc, data, err = import_check(env_file, self.env())
        if file_id(env_file) != before or read_json(twin_path) != twin:
            return  # replaced or withdrawn while we looked: judge it next time
        STATS["check:env_file_imports"] += 1
        if not self.expect(twin is not None, "inv2-twin", f"invariant 2: {env_file} without its JSON twin"):
            return
        assert twin is not None
        request = twin.get("request") or {}
        assert isinstance(request, dict)
        pin = str(request.get("pin"))
        label = next((k for k, v in self.repo.commits.items() if v == pin), None)
        if not self.expect(rc == 0, "inv2-import",
                           f"invariant 2: sourcing {env_file} and importing failed ({rc}): {err}"):
            return
        real = os.path.realpath(path) + os.sep
        flydsl_dir = os.path.dirname(os.path.realpath(str(data["flydsl"])))
        kernels_dir = os.path.dirname(os.path.realpath(str(data["kernels"])))
        self.expect(flydsl_dir == real + os.path.join("build-fly", "python_packages", "flydsl")
                    and kernels_dir == real + "kernels", "inv2-one-tree",
                    f"invariant 2: not one tree under {path}: {data}")
        self.expect(request.get("root") == path, "inv2-root",
                    f"invariant 2: {env_file}'s twin names root {request.get('root')}")
        self.expect(twin.get("commit") == pin == data["head"], "inv2-commit",
                    f"invariant 2: twin commit {twin.get('commit')}, pin {pin}, checkout at {data['head']}")
        self.expect(label in VERSIONS and data["version"] == VERSIONS[label], "inv2-version",
                    f"invariant 2: flydsl {data['version']} imported for pin {label}")

    def check_marker_answered(self, root: str) -> None:
        path = self.roots[root]
        twin_path = os.path.join(path, "flydsl_env.json")
        twin, marker = read_json(twin_path), read_json(self.marker)
        if not twin or not marker or not os.path.exists(os.path.join(path, "flydsl_env.sh")):
            return
        req = twin.get("request")
        if any(p.alive() for p in self.model.procs if p.root == path):
            return  # a run for it may be between publishing and clearing
        if read_json(twin_path) != twin or read_json(self.marker) != marker:
            return
        STATS["check:marker_vs_env"] += 1
        self.expect(marker.get("request") != req, "inv4",
                    f"invariant 4: the failure marker names {req} although {path}'s env file answers it: {marker}")

    def check_markers_of_other_root(self) -> None:
        now = file_id(self.marker)
        named = names_root(read_json(self.marker))
        seen = self.marker_seen
        if seen is not None and seen[1] in self.roots.values() and now is None:
            owner = str(seen[1])
            # the owner's own runs: touched this step, alive, or ended since the last check
            own_activity = owner in {self.roots[r] for r in self.touched} or owner in self.alive_roots_at_check \
                or any(p.root == owner for p in self.model.live()) \
                or any(p.root == owner and p.end_index == self.index for p in self.model.procs)
            # The other root's failure may have replaced the marker since (the path is shared: its failure
            # must be written there), and then its own next run removed it: a run of the other root that
            # failed since the marker was last seen, by its processes or by its run records.
            replaced = any(p.end_index == self.index and p.outcome != SUCCESS for p in self.model.procs) \
                or self.other_root_failed_since(owner, self.marker_seen_at)
            STATS["check:marker_removed"] += 1
            # The shared path makes "replaced by the other root's failure, then cleared by its success" look
            # like a removal when both fall between two checks; the deterministic sibling tests
            # (test_truth.py) hold this rule strictly, here it is counted unless asked to be strict.
            if os.environ.get("ENSURE_FLYDSL_SM_STRICT_MARKERS") or own_activity or replaced:
                self.expect(own_activity or replaced, "inv5",
                            f"invariant 5: the marker of {owner} was removed by the other root's runs/commands")
            else:
                STATS["check:marker_removed_unexplained"] += 1
        self.marker_seen = (now, named) if now is not None else None
        self.marker_seen_at = time.time()

    def other_root_failed_since(self, owner: str, since: float) -> bool:
        """Whether a run of a root other than ``owner`` ended failed after ``since`` (its run record)."""
        runs = os.path.join(os.path.dirname(owner), ".ensure_flydsl", "runs")
        for root_name in (os.listdir(runs) if os.path.isdir(runs) else []):
            if os.path.join(os.path.dirname(owner), root_name) == owner:
                continue
            folder = os.path.join(runs, root_name)
            for name in os.listdir(folder):
                record = read_json(os.path.join(folder, name)) if name.endswith(".json") else None
                # "updated" is when the failure was written (a death is written when noticed)
                written = (record or {}).get("updated") or (record or {}).get("finished")
                if record and record.get("state") == "failed" and isinstance(written, (int, float)) \
                        and written >= since - 1.0:
                    return True
        return False

    def check_pair(self, root: str, req: Request) -> None:
        """Invariant 1 for one (root, request): `status --json` and `wait --timeout 0` against the truth."""
        path = self.roots[root]
        env_file, twin_path = os.path.join(path, "flydsl_env.sh"), os.path.join(path, "flydsl_env.json")
        self.reap()
        live_before = self.model.live(path)
        mid = [p for p in live_before if p.req == req and p.mid_build()]
        files_before = (file_id(env_file), read_json(twin_path))
        args = request_args(path, req, self.repo)
        env = self.env()
        status_p = subprocess.Popen(_cmd("status", "--json", *args), env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        wait_p = subprocess.Popen(_cmd("wait", *WAIT_NOW, *args), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        s_out, s_err = status_p.communicate(timeout=HANG_GUARD_S)
        w_out, w_err = wait_p.communicate(timeout=HANG_GUARD_S)
        self.reap()
        mid = [p for p in mid if p.mid_build()]
        live_after = self.model.live(path)
        stable = files_before == (file_id(env_file), read_json(twin_path))
        rc = wait_p.returncode
        assert status_p.returncode == 0, f"status exited {status_p.returncode}: {s_err}"
        state = json.loads(s_out)["state"]
        said = f"{root} {req}: status {state}, wait --timeout 0 exit {rc} ({w_out.strip()[-300:]} {w_err[-300:]})"
        STATS["check:pairs"] += 1
        self.expect(not (rc == 64 and "--timeout" in w_err) and rc != 70, "inv1-wait0-refused",
                    "invariant 1: wait --timeout 0 must answer at once; " + said)
        if mid:
            STATS["check:mid_build"] += 1
            self.expect(state == "running" and rc == 75, f"inv1-midbuild-{state}-{rc}",
                        f"invariant 1: a run for it is mid-build (pid {mid[0].pid}); {said}")
        req_live = any(p.req == req for p in live_before + live_after)
        answers = names(files_before[1], path, req, self.repo) and files_before[0] is not None
        root_quiet = not live_before and not live_after  # no run of this root could change its files meanwhile
        if stable and not answers and root_quiet:
            self.expect(state != "succeeded" and rc != 0, f"inv1-unanswered-{state}-{rc}",
                        f"invariant 1: no env file answers it; {said}")
        if stable and answers and not req_live:
            STATS["check:succeeded"] += 1
            self.expect(state == "succeeded" and rc == 0, f"inv1-answered-{state}-{rc}",
                        f"invariant 1: the env file answers it; {said}")
        if not live_before and not live_after:
            STATS["check:quiet"] += 1
            self.expect(state != "running" and rc != 75, "inv1-idle-running",
                        f"invariant 1: nothing runs for {root}; {said}")
        reported = state == FAILURE or rc not in (0, 1, 75)
        if reported and not req_live:
            STATS["check:failure_reported"] += 1
            ends = [(p.kind, p.outcome, p.code, p.end_index) for p in self.model.of(path, req)]
            self.expect(self.model.failure_ok(path, req), f"inv1-failure-origin-{state}-{rc}",
                f"invariant 1: a failure reported without a failed run for it (runs: {ends}); {said}")

    def teardown(self) -> None:
        for proc in self.model.procs:
            if proc.alive():
                proc.signal(signal.SIGKILL)
        kill_tagged(self.tag)
        for proc in self.model.procs:
            if proc.popen is not None:
                try:
                    proc.popen.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        kill_tagged(self.tag)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.shared, ignore_errors=True)
        if self.nobody_base:
            shutil.rmtree(self.nobody_base, ignore_errors=True)


@pytest.fixture(scope="module")
def sm_nobody() -> Iterator[Optional[Nobody]]:
    """The second user, or None (the reason is printed) when the machine cannot switch to one."""
    why = unavailable()
    if why:
        print(f"state machine: no second user ({why}); its rule is a no-op")
        yield None
        return
    helper = Nobody()
    yield helper
    helper.cleanup()


@pytest.fixture(scope="module")
def sm_repo(tmp_path_factory: pytest.TempPathFactory, sm_nobody: Optional[Nobody]) -> FixtureRepo:
    if sm_nobody is None:
        return make_sm_repo(str(tmp_path_factory.mktemp("sm-upstream") / "FlyDSL.git"))
    # Where the second user can read it too (its runs share the cache's keys, which name the repository).
    repo = make_sm_repo(os.path.join(sm_nobody.dir, "sm-upstream", "FlyDSL.git"))
    sm_nobody.copy_repo(repo.path)  # only for its .gitconfig's safe.directory
    for folder, _dirs, files in os.walk(os.path.join(sm_nobody.dir, "sm-upstream")):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return repo


@pytest.fixture(scope="module")
def sm_pyenv(tmp_path_factory: pytest.TempPathFactory) -> PyenvRoot:
    """A pyenv root with the stand-in dispatcher (as fast as a script can be; test_warm_shims.py runs the real
    pyenv's too), and what each of its interpreters reports as its version and ABI."""
    made = PyenvRoot(str(tmp_path_factory.mktemp("sm-pyenv")), "fake")
    script = ("import sys, sysconfig; print('%d.%d.%d' % sys.version_info[:3]); print('%s/%s/%s' % ("
              "sys.implementation.cache_tag, sysconfig.get_config_var('SOABI') or 'none', sysconfig.get_platform()))")
    for version in ("A", "B"):
        lines = subprocess.run([made.python(version), "-c", script], stdout=subprocess.PIPE, text=True,
                               check=True).stdout.split()
        _PYENV_FACTS[version] = (lines[0], lines[1])
    return made


@pytest.mark.long  # minutes: collected first (tests/conftest.py)
def test_state_machine(sm_repo: FixtureRepo, tmp_path_factory: pytest.TempPathFactory,
                       sm_nobody: Optional[Nobody], sm_pyenv: PyenvRoot) -> None:
    _REPO[:] = [sm_repo]
    _PYENV[:] = [sm_pyenv]
    _NOBODY[:] = [sm_nobody]
    _WORK[:] = [str(tmp_path_factory.mktemp("sm-work"))]
    config = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=False,
                      print_blob=True, suppress_health_check=list(HealthCheck))
    try:
        run_state_machine_as_test(ToolMachine, settings=config)
    finally:
        target = os.environ.get("ENSURE_FLYDSL_SM_STATS")
        if target:
            with open(target, "w") as handle:
                json.dump(dict(sorted(STATS.items())), handle, indent=1)
        record("state_machine", examples=EXAMPLES, steps=STEPS, stats=dict(sorted(STATS.items())))
