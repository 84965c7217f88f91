"""Several "hosts" on one machine sharing one binary cache (a folder or moto's S3 server), for the build
lease's tests and benchmark: each host is a Workspace of its own (its own base folder, root and lock) with
FLYDSL_HOST_ID naming it; every host counts its builds into one shared FIXTURE_COUNTER_DIR."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from tests.helpers.flydsl_fixture import FixtureRepo, counts
from tests.helpers.s3_server import S3Server
from tests.helpers.workspace import Workspace


class SharedCache:
    """FLYDSL_CACHE for every host, and a look at its lease objects from outside the tool."""

    def __init__(self, kind: str, tmp: str, server: Optional[S3Server] = None) -> None:
        self.kind = kind
        self.server = server
        self.env: Dict[str, str] = {}
        if kind == "s3":
            assert server is not None
            self.bucket = "flydsl-" + uuid.uuid4().hex[:12]
            server.make_bucket(self.bucket)
            self.url = f"s3://{self.bucket}/builds"
            self.env = dict(server.env(), AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
        else:
            self.url = os.path.join(tmp, "shared-cache")

    def files(self, under: str) -> List[str]:
        """Paths relative to the cache of every object under ``under`` (e.g. "leases")."""
        if self.kind == "s3":
            assert self.server is not None
            listing = self.server.client().list_objects_v2(Bucket=self.bucket, Prefix=f"builds/{under}/")
            return sorted(o["Key"][len("builds/"):] for o in listing.get("Contents", []))
        top = os.path.join(self.url, under)
        found = []
        for folder, _dirs, names in os.walk(top):
            found += [os.path.relpath(os.path.join(folder, n), self.url) for n in names]
        return sorted(found)

    def read(self, rel: str) -> Optional[Dict[str, Any]]:
        try:
            if self.kind == "s3":
                assert self.server is not None
                body = self.server.client().get_object(Bucket=self.bucket, Key=f"builds/{rel}")["Body"].read()
            else:
                with open(os.path.join(self.url, rel), "rb") as handle:
                    body = handle.read()
        except Exception:
            return None  # removed since the listing
        data = json.loads(body)
        assert isinstance(data, dict)
        return data

    def put(self, rel: str, data: bytes) -> None:
        """Write an object into the cache from outside the tool (what another party may plant there)."""
        if self.kind == "s3":
            assert self.server is not None
            self.server.client().put_object(Bucket=self.bucket, Key=f"builds/{rel}", Body=data)
            return
        path = os.path.join(self.url, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)

    def leases(self, kind: str) -> List[Dict[str, Any]]:
        """The lease records of ``kind`` ("tree" or "mlir") there are now (probe objects left out)."""
        found = [self.read(p) for p in self.files("leases") if p.startswith(f"leases/{kind}/")
                 and not os.path.basename(p).startswith(".")]  # a dot-file is a write in progress (.create.*.tmp)
        return [r for r in found if r is not None]

    def wait_lease(self, kind: str, timeout: float = 60.0, **match: object) -> Dict[str, Any]:
        """A lease record of ``kind`` whose fields match: each equal to its value, or, for a callable, one the
        callable accepts (a heartbeat's count moves on between two looks: ``beat=at_least(1)``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.leases(kind):
                if all(v(record.get(k)) if callable(v) else record.get(k) == v for k, v in match.items()):
                    return record
            time.sleep(0.05)
        raise AssertionError(f"no {kind} lease {match} within {timeout} s: {self.files('leases')}")


def at_least(floor: int) -> Callable[[object], bool]:
    """A match for ``wait_lease``: a whole number >= ``floor``."""
    return lambda value: isinstance(value, int) and value >= floor


def cache_host(tmp: str, repo: FixtureRepo, name: str, cache: str, **env: str) -> Workspace:
    """Another container: its own base folder and build counters, the same cache (a folder or URL)."""
    ws = Workspace(os.path.join(tmp, name, "base"), repo)
    ws.env["FLYDSL_CACHE"] = cache
    ws.env["FLYDSL_STORE"] = os.path.join(tmp, name, "host-store")  # another host: a host store of its own
    ws.env.update(env)
    return ws


def fleet_host(tmp: str, repo: FixtureRepo, name: str, cache: SharedCache, **env: str) -> Workspace:
    ws = Workspace(os.path.join(tmp, name, "base"), repo)
    ws.counter = os.path.join(tmp, "fleet-counters")
    os.makedirs(ws.counter, exist_ok=True)
    ws.env.update(cache.env)
    ws.env.update({"FLYDSL_CACHE": cache.url, "FLYDSL_HOST_ID": name, "FIXTURE_COUNTER_DIR": ws.counter,
                   "FLYDSL_STORE": os.path.join(tmp, name, "host-store")})  # another host: its own host store
    ws.env.update(env)
    return ws


def builds(counter: str, name: str) -> int:
    return len(counts(counter, name))


def finish(procs: Dict[str, "subprocess.Popen[str]"], timeout: float = 300) -> Dict[str, Any]:
    """Each host's (exit code, what it said: stdout and stderr), once all have ended."""
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        out[name] = (proc.returncode, stdout + stderr)
    return out


def lease_record(key: str, **fields: object) -> Dict[str, object]:
    """A lease record as the tool writes it (here: a holder on another host that stopped beating)."""
    now = time.time()
    record: Dict[str, object] = {
        "kind": "tree", "key": key, "generation": 1, "host": "h9", "run_id": "20261201-000000-1", "pid": 4242,
        "started": now, "what": "the FlyDSL tree for 0badf00d", "failures_before": 0, "ttl": 1.0,
        "state": "building", "beat": 3, "heartbeat": now, "elapsed_s": 2.5, "step": "build", "percent": 33.3,
        "eta_s": 5.0, "failure": None, "ended": None}
    record.update(fields)
    return record


# Lease records with one value no holder writes (tests/unit/test_lease_rules.py reads each, and
# tests/scenarios/test_cache_trust.py runs the tool over some). "soon" is dated 20 s ahead: news to every
# reader (within the clock skew a newcomer believes), however slow the machine.
FAILED = {"state": "failed", "ended": "soon", "failure": {"stage": "build", "exit_code": 5, "reason": "boom"}}
BAD_RECORDS = {
    "percent a string": {"percent": "50"},
    "elapsed_s a string": {"elapsed_s": "7"},
    "eta_s a list": {"eta_s": [1]},
    "ended a string": dict(FAILED, ended="yesterday"),
    "failures_before a string": dict(FAILED, failures_before="1"),
    "failures_before true": dict(FAILED, failures_before=True),
    "failure a string": dict(FAILED, failures_before=1, failure="boom"),
    "ttl Infinity": {"ttl": float("inf")},
    "ttl 1e-300": {"ttl": 1e-300},  # its holder would beat in a tight loop: FLYDSL_LEASE_TTL is at least 1 s
    "percent NaN": {"percent": float("nan")},
}


def bad_record(key: str, case: str) -> Dict[str, object]:
    """The lease record of BAD_RECORDS' ``case``, its "soon" dated 20 s from now."""
    fields = {k: (time.time() + 20 if v == "soon" else v) for k, v in BAD_RECORDS[case].items()}
    return lease_record(key, **fields)


# Failure records (stage, exit code) and the code a waiter ends with (None: not believed, an unknown holder's
# lease): tests/unit/test_lease_rules.py reads each, tests/scenarios/test_lease_planted.py runs a waiter over
# one of each outcome.
FAILURE_RECORDS = [("llvm", 0, None), ("llvm", 75, None), ("llvm", 1, None), ("llvm", 130, None), ("llvm", 9, None),
                   ("lease", 7, None), ("build", 4, None), ("llvm", 4, 4)]
