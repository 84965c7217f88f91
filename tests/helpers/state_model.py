"""What is true on disk and in the process table, for the model-based test of the state machine
(tests/test_state_machine.py).  No ensure-flydsl code is used here: the truth comes from the files the
tool writes for pollers, the fixture build's own traces, and the processes the machine started.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from tests.helpers.flydsl_fixture import FixtureRepo, git, make_repo, write, write_tree

# FlyDSL's own .gitignore covers what agents write into the tree; the tool must keep such files.
GITIGNORE = "build-fly/\n__pycache__/\n*.diff\n*.log\nmy_ir_dumps*/\n.venv/\ntmp/\n"
TAG_VAR = "ENSURE_FLYDSL_SM_TAG"

# A request of the model: (pin label, vllm_moe).  The tool's request also holds settings that never vary
# here (repo, python, strategy, ...).
Request = Tuple[str, bool]

SUCCESS, REAL_FAIL, NOT_FAIL, AMBIGUOUS = "success", "real_fail", "not_fail", "ambiguous"


def make_sm_repo(path: str) -> FixtureRepo:
    """The session fixture's history plus two non-tag commits P1 and P2 with FlyDSL's real .gitignore."""
    repo = make_repo(path)
    for label, version in (("P1", "0.2.4"), ("P2", "0.2.5")):
        write_tree(repo.path, version, "1111111111111111111111111111111111111111")
        write(os.path.join(repo.path, ".gitignore"), GITIGNORE)
        git(repo.path, "add", "-A")
        git(repo.path, "commit", "-q", "-m", f"{label}: version {version}")
        repo.commits[label] = git(repo.path, "rev-parse", "HEAD")
    return repo


VERSIONS = {"P1": "0.2.4", "P2": "0.2.5"}


def request_args(root: str, req: Request, repo: FixtureRepo) -> List[str]:
    return ["--root", root, "--pin", repo.commits[req[0]]] + ([] if req[1] else ["--no-vllm-moe"])


def names(data: Optional[Dict[str, object]], root: str, req: Request, repo: FixtureRepo) -> bool:
    """Does a marker or twin's "request" name this root and request?"""
    request = (data or {}).get("request")
    if not isinstance(request, dict):
        return False
    return (request.get("root") == root and request.get("pin") == repo.commits[req[0]]
            and bool(request.get("vllm_moe")) == req[1])


def names_root(data: Optional[Dict[str, object]]) -> Optional[str]:
    request = (data or {}).get("request")
    return request.get("root") if isinstance(request, dict) else None  # type: ignore[return-value]


def read_json(path: str) -> Optional[Dict[str, object]]:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def file_id(path: str) -> Optional[Tuple[int, int, int, str]]:
    """Identity of a file (inode, mtime, size, content hash): equal before and after a check means it
    stayed in place throughout."""
    try:
        st = os.stat(path)
        with open(path, "rb") as handle:
            digest = hashlib.sha1(handle.read()).hexdigest()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, digest)


def proc_start_time(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass
class Proc:
    """A process the machine started: a blocking `ensure` (our child) or the worker a `start` launched."""

    kind: str  # "ensure", "worker" or "host" (an `ensure` of another host sharing the cache)
    root: str
    req: Request
    pid: int
    counter: str  # this process's own FIXTURE_COUNTER_DIR: its build's traces
    fail: bool
    lock_timeout: bool = False
    popen: Optional["subprocess.Popen[bytes]"] = None
    started: Optional[str] = None  # /proc start time, against pid reuse
    run_id: Optional[str] = None
    killed: Optional[int] = None
    others_live_at_kill: bool = False
    outcome: Optional[str] = None
    code: Optional[int] = None
    end_index: int = -1
    started_index: int = 0
    host: Optional[str] = None  # FLYDSL_HOST_ID of a run that uses the shared cache
    out: Optional[str] = None  # the file its stdout and stderr went to
    checked: bool = False  # its end was held against the invariants

    def alive(self) -> bool:
        if self.outcome is not None:
            return False
        if self.popen is not None:
            return self.popen.poll() is None
        return self.started is not None and proc_start_time(self.pid) == self.started

    def built(self) -> bool:
        """Its build scripts ran: it held the build lock."""
        return any(os.path.exists(os.path.join(self.counter, n)) for n in ("llvm.started", "build.started"))

    def mid_build(self) -> bool:
        """Alive with its FlyDSL build begun and not finished (the build writes _mlir last)."""
        if self.fail or not self.alive():
            return False
        try:
            began = os.stat(os.path.join(self.counter, "build.started")).st_mtime_ns
        except OSError:
            return False
        done = os.path.join(self.root, "build-fly", "python_packages", "flydsl", "_mlir", "_mlir_libs", "_mlir.py")
        try:
            return os.stat(done).st_mtime_ns < began
        except OSError:
            return True

    def signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class Outcomes:
    """What each run for a (root, request) ended with, in the order the machine noticed."""

    procs: List[Proc] = field(default_factory=list)
    reset_index: Dict[str, int] = field(default_factory=dict)  # root -> check index of its last clean

    def of(self, root: str, req: Request) -> List[Proc]:
        return [p for p in self.procs if p.root == root and p.req == req]

    def live(self, root: Optional[str] = None, req: Optional[Request] = None) -> List[Proc]:
        return [p for p in self.procs if p.alive() and (root is None or p.root == root)
                and (req is None or p.req == req)]

    def failure_ok(self, root: str, req: Request) -> bool:
        """A failure reported for (root, req) comes from a run for it that failed (or may have), not
        answered since by a success of a run for it."""
        reset = self.reset_index.get(root, -1)
        ended = [p for p in self.of(root, req) if p.outcome is not None and p.end_index > reset]
        for failed in (p for p in ended if p.outcome in (REAL_FAIL, AMBIGUOUS)):
            if not any(p.outcome == SUCCESS and p.end_index > failed.end_index for p in ended):
                return True
        return False


def classify(proc: Proc, base: str, index: int) -> None:
    """Record how an ended process's run ended, from its exit status or its own run record."""
    proc.end_index = index
    if proc.popen is not None:
        proc.code = proc.popen.returncode
    else:
        record = read_json(os.path.join(base, ".ensure_flydsl", "runs", os.path.basename(proc.root),
                                        f"{proc.run_id}.json"))
        state = (record or {}).get("state")
        failure = (record or {}).get("failure")
        if state == "succeeded":
            proc.code = 0
        elif state == "failed" and isinstance(failure, dict):
            proc.code = int(failure.get("exit_code") or 70)  # type: ignore[call-overload]
    if proc.code == 0:
        proc.outcome = SUCCESS
    elif proc.killed is not None:
        # Killed while it held the lock (its build scripts ran) is a real failure; killed while another
        # run for the request lived is not (that run answers); otherwise nobody can tell from outside.
        proc.outcome = REAL_FAIL if proc.built() else (NOT_FAIL if proc.others_live_at_kill else AMBIGUOUS)
    elif proc.code is None:
        proc.outcome = AMBIGUOUS  # a worker whose record was taken away (clean): nobody can tell
    elif proc.code == 7:
        # Gave up on the lock: no build failed, but when no other run for its request was going (a sibling
        # root's or another request's build held the lock), "lock not acquired" is that request's outcome.
        proc.outcome = AMBIGUOUS
    else:
        proc.outcome = REAL_FAIL


def tagged_pids(tag: str) -> List[int]:
    """Processes whose environment carries the machine's tag (the tool's, its watchdogs', its builds')."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0") and proc_start_time(int(name)) is not None:
                    found.append(int(name))
        except OSError:
            continue
    return found


def survivors(tag: str, grace_s: float = 5.0) -> List[str]:
    """Tagged processes still there after a grace period (watchdogs notice a death within moments)."""
    deadline = time.monotonic() + grace_s
    while True:
        pids = tagged_pids(tag)
        if not pids or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                out.append(f"{pid}: " + handle.read().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            continue
    return out


def kill_tagged(tag: str) -> None:
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def import_check(env_file: str, env: Dict[str, str]) -> Tuple[int, Dict[str, object], str]:
    """Source the env file in bash, import from it, and read the root's checked-out commit: one process."""
    script = (
        '. "$1" || exit 90\n'
        f'"{sys.executable}" -c "import json, flydsl, kernels.moe_gemm_2stage as k; '
        'print(json.dumps({\'flydsl\': flydsl.__file__, \'kernels\': k.__file__, '
        '\'version\': flydsl.__version__}))" || exit 91\n'
        'git -C "$FLYDSL_ROOT" rev-parse HEAD || exit 92\n'
    )
    clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    out = subprocess.run(["bash", "-c", script, "bash", env_file], env=clean, cwd="/", text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=False)
    lines = out.stdout.strip().splitlines()
    data: Dict[str, object] = {}
    if out.returncode == 0 and len(lines) >= 2:
        data = json.loads(lines[-2])
        data["head"] = lines[-1].strip()
    return out.returncode, data, out.stderr[-2000:]


# -- the shared cache (issue 19): what is in it, read without the tool's code and without following links --
def cache_keys(cache: str, kind: str = "tree") -> List[str]:
    """Keys of ``kind`` the cache has an entry or a lease folder for (an lstat'd walk: no planted link)."""
    keys = set()
    for sub in ("entries", "leases"):
        folder = os.path.join(cache, sub, kind)
        if os.path.islink(os.path.join(cache, sub)) or os.path.islink(folder) or not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            key = name[:-5] if name.endswith(".json") else name
            if len(key) == 64 and all(c in "0123456789abcdef" for c in key):
                keys.add(key)
    return sorted(keys)


def lease_records(cache: str) -> List[Tuple[str, Optional[Dict[str, object]]]]:
    """(path, its JSON object or None) of every lease generation file in the cache; a planted link is not
    followed, nor a folder the test moved aside."""
    top = os.path.join(cache, "leases")
    found: List[Tuple[str, Optional[Dict[str, object]]]] = []
    if os.path.islink(top):
        return found
    for folder, dirs, files in os.walk(top):
        # A folder the test moved aside (plant "link-leases") is out of the tool's sight: its records,
        # planted ones included, are at paths the tool never reads or releases.
        dirs[:] = [d for d in dirs if ".moved-" not in d]
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".json") and not name.startswith("probe-") and os.path.isfile(path) \
                    and not os.path.islink(path):
                found.append((path, read_json(path)))
    return found


def owned_by(top: str, uid: int) -> List[str]:
    found = []
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(folder, name)
            try:
                if os.lstat(path).st_uid == uid:
                    found.append(path)
            except OSError:
                continue
    return found


def tree_listing(top: str) -> Dict[str, Tuple[str, int]]:
    """Every path under ``top`` (type and size, not following links): what must never change."""
    out: Dict[str, Tuple[str, int]] = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            out[os.path.relpath(path, top)] = ("link" if os.path.islink(path) else "dir" if name in dirs else "file",
                                               st.st_size if name in files else 0)
    return out


CACHE_PLANTS = ("lease-invalid", "lease-failed-ahead", "lease-dead", "fifo-blob", "fifo-manifest",
                "garbage-manifest", "truncated-blob", "link-blobs", "link-leases")
BAD_LEASE_FIELDS: List[Dict[str, object]] = [
    {"percent": "50"}, {"elapsed_s": "7"}, {"eta_s": [1]}, {"ttl": float("inf")}, {"failures_before": True},
    {"state": "failed", "ended": "x", "failure": {"stage": "build", "exit_code": 5, "reason": "x"}},
    {"state": "failed", "ended": 1.0, "failures_before": 1, "failure": "boom"}, {"pid": float("nan")},
]


def lease_doc(key: str, **fields: object) -> Dict[str, object]:
    now = time.time()
    doc: Dict[str, object] = {
        "kind": "tree", "key": key, "generation": 1, "host": "planted", "run_id": "planted-run", "pid": 1,
        "started": now, "what": "the FlyDSL tree for planted", "failures_before": 0, "ttl": 3.0,
        "state": "building", "beat": 0, "heartbeat": now, "elapsed_s": 1.0, "step": "build", "percent": 50.0,
        "eta_s": 1.0, "failure": None, "ended": None}
    doc.update(fields)
    return doc


def plant_in_cache(cache: str, kind: str, key: str, pick: int, sentinel: str) -> Optional[str]:
    """Plant one thing of ``kind`` for the tree ``key``; the path planted (None: nothing to plant on)."""
    entries = os.path.join(cache, "entries", "tree")
    leases = os.path.join(cache, "leases", "tree", key)
    manifest = os.path.join(entries, key + ".json")
    if kind.startswith("lease-"):
        if os.path.islink(os.path.join(cache, "leases")) or os.path.islink(os.path.join(cache, "leases", "tree")):
            return None
        os.makedirs(leases, exist_ok=True)
        gens = [int(n[:-5]) for n in os.listdir(leases) if n.endswith(".json") and n[:-5].isdigit()]
        path = os.path.join(leases, f"{max(gens, default=0) + 1:010d}.json")
        if kind == "lease-invalid":
            doc = lease_doc(key, **BAD_LEASE_FIELDS[pick % len(BAD_LEASE_FIELDS)])
        elif kind == "lease-failed-ahead":
            doc = lease_doc(key, state="failed", ended=time.time() + 3600, failures_before=1,
                            failure={"stage": "build", "exit_code": 5, "reason": "planted"})
        else:
            doc = lease_doc(key)  # a holder that never beats: dead after its TTL
        with open(path, "w") as handle:
            json.dump(doc, handle)
        return path
    if kind == "link-blobs" or kind == "link-leases":
        target = os.path.join(cache, "blobs" if kind == "link-blobs" else os.path.join("leases", "tree"))
        if any(os.path.islink(p) or (os.path.lexists(p) and not os.path.isdir(p))
               for p in (target, os.path.dirname(target))):
            return None  # a link, a FIFO or a file planted there already: never removed by the test
        if os.path.isdir(target):
            os.rename(target, target + f".moved-{pick}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(sentinel, target)
        return target
    if os.path.islink(os.path.join(cache, "entries")) or not os.path.isfile(manifest) or os.path.islink(manifest):
        return None
    if kind in ("fifo-blob", "truncated-blob"):
        data = read_json(manifest)
        blob = os.path.join(cache, "blobs", f"{(data or {}).get('blob')}.tar.gz")
        if os.path.islink(os.path.join(cache, "blobs")) or not os.path.isfile(blob) or os.path.islink(blob):
            return None
        if kind == "fifo-blob":
            os.unlink(blob)
            os.mkfifo(blob)
        else:
            os.truncate(blob, os.path.getsize(blob) // 2)
        return blob
    os.unlink(manifest)
    if kind == "fifo-manifest":
        os.mkfifo(manifest)
    else:
        with open(manifest, "wb") as handle:
            handle.write(b'{"format": 1, "kind": "tree", "key": ' + b"\xff" * (pick % 5) + b"}")
    return manifest
