"""The bad-input table: every setting with every kind of bad value, as an environment variable (through
`ensure`) and as a flag (through `start`).

A refused row must exit 64 before anything is touched: exactly one line on stderr naming the setting as the
user spelled it, nothing created or changed anywhere (except the failure marker, written for pollers when its
folder already exists), and no command run: the canary that `$(touch ...)`, backticks, `--upload-pack=` and
`-c core.sshCommand=` would create never appears.  An empty variable means the default (as in the seed);
an empty flag is refused.  Paths that are legal however odd (quotes, `$(...)`, backticks, spaces, unicode,
relative, option-shaped) are handled end to end in three runs, every such setting at once.

docs/reliability_figures.py runs this file and prints the table, with each row's result, for
docs/RELIABILITY.md.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from ensure_flydsl.settings import EMPTY_REFUSED, SETTING_BY_NAME, SETTINGS, load_settings
from ensure_flydsl.trees.remote import open_cache
from tests.helpers.flydsl_fixture import FixtureRepo, write
from tests.helpers.reliability import device, listing, record, tmpfs
from tests.helpers.signing_keys import SECRET_LINE, keygen
from tests.helpers.workspace import Workspace

INJECT = ["$(touch {canary})", "`touch {canary}`", "--upload-pack=touch {canary}", "-c core.sshCommand=touch {canary}"]
BOOL_FLAGS = ("vllm_moe", "verify", "fix_rocm_in_place", "exact_pin")  # flags without a value


@dataclasses.dataclass(frozen=True)
class Row:
    setting: str  # a Setting.name, or an environment variable that is no setting of the table (PATH, FLYDSL_HOST_ID)
    kind: str
    value: str  # with {scratch} {canary} {file} {dir} {dev} {ro} filled in per run
    expect: str = "refused"  # refused | default | exit N (legal, fails later for another reason)


def _rows() -> List[Row]:
    rows: List[Row] = []

    def add(setting: str, kind: str, *values: str, expect: str = "refused") -> None:
        rows.extend(Row(setting, kind, v, expect) for v in values)

    for s in SETTINGS:  # an empty variable is the default, as in the seed; trusted keys set but empty are not
        add(s.name, "empty", "", expect="refused" if s.name in EMPTY_REFUSED else "default")
    add("cache_trusted_keys", "set but blank", " ", "\t\n")
    add("root", "newline", "{scratch}/a\nb/FlyDSL")
    add("root", "control character", "{scratch}/a\tb/FlyDSL")
    add("root", "':' (it goes on PYTHONPATH)", "{scratch}/a:b/FlyDSL")
    add("root", "/", "/")
    add("root", "under a regular file", "{file}/FlyDSL")
    add("root", "unwritable parent", "{ro}/FlyDSL")
    add("root", "a regular file", "{file}")
    add("root", "a device", "{dev}")
    add("root", "a folder of somebody's files", "{scratch}")
    add("min_version", "unparseable", "zero", "1.0 beta", "0.2.2\ntouch {canary}")
    add("min_version", "negative", "-1")
    add("min_version", "code", *INJECT)
    add("pin", "option-shaped / code", *INJECT)
    add("pin", "unparseable", "v1\nv2", "a..b", "HEAD@{1}", "x.lock", "v 1", ":/x")
    add("pin", "negative", "-1")
    add("repo", "option-shaped", "--upload-pack=touch {canary}", "-c core.sshCommand=touch {canary}", "-1")
    add("repo", "command-running helper", "ext::sh -c touch% {canary}", "fd::17")
    add("repo", "unknown scheme", "foo://host/repo")
    add("repo", "newline", "{scratch}/a\nb")
    add("repo", "a legal path that does not exist", "$(touch {canary})", "`touch {canary}`", expect="exit 2")
    for name in ("lock_file", "fail_marker"):
        add(name, "newline", "{scratch}/a\nb")
        add(name, "under a regular file", "{file}/x")
        add(name, "unwritable parent", "{ro}/x")
        add(name, "an existing folder", "{dir}")
        add(name, "a device", "{dev}")
        add(name, "/", "/")
    add("rocm_path", "newline", "{scratch}/a\nb")
    add("mlir_path", "newline", "{scratch}/a\nb")
    add("mlir_path", "not an MLIR install", "{dir}", "{file}/x", "/", "--upload-pack=touch {canary}")
    add("mlir_url", "not a URL", "llvm.tar.gz", "{scratch}/x.tar.gz", "TRITON", "--upload-pack=touch {canary}")
    add("mlir_url", "unknown placeholder", "https://h/llvm-{llvm_commit}.tar.gz", "https://h/{llvm")
    add("mlir_url", "code", "https://h/$(touch {canary})\n", "https://h/x\x01")
    add("python", "newline", "python3\n-c")
    add("python", "missing interpreter", "/nonexistent/python3", "python3.nonexistent")
    add("python", "not an interpreter", "/bin/false", "{dir}", "{file}")
    add("python", "cannot be run", "{loop}", "{junk}", "{file}/python")  # ELOOP, ENOEXEC, ENOTDIR
    add("python", "option-shaped / code", *INJECT)
    add("shim_dir", "newline", "{scratch}/a\nb")
    add("vllm_moe", "unparseable", "maybe", "$(touch {canary})")
    add("vllm_moe", "negative", "-1")
    add("require", "unparseable", "flydsl,kernels.moe gemm", "1abc", ",,", "os;touch {canary}")
    add("require", "code", "$(touch {canary})", "--upload-pack=touch {canary}")
    add("strategy", "unparseable", "fast", "AUTO", "$(touch {canary})")
    add("strategy", "negative", "-1")
    add("jobs", "unparseable", "four", "1.5", "0x10", "$(touch {canary})", "--upload-pack=touch {canary}")
    add("jobs", "out of range", "0", "4097")
    add("jobs", "negative", "-1")
    add("lock_timeout", "unparseable", "soon", "nan", "1e10", "$(touch {canary})")
    add("lock_timeout", "negative", "-1", "-inf")
    add("probe_timeout", "unparseable", "soon", "nan", "inf", "none", "$(touch {canary})")
    add("probe_timeout", "out of range", "0", "-1")
    add("lease_ttl", "unparseable", "soon", "nan", "inf", "none", "$(touch {canary})")
    add("lease_ttl", "out of range", "0", "-1", "1e-300", "1e7")
    add("cache", "newline", "{scratch}/a\nb")
    add("cache", "option-shaped", "-c core.sshCommand=touch {canary}", "--upload-pack=touch {canary}")
    add("cache", "under a regular file", "{file}/cache")
    add("cache", "unwritable parent", "{ro}/cache")
    add("store", "newline", "{scratch}/a\nb")
    add("store", "under a regular file", "{file}/store")
    add("store", "unwritable parent", "{ro}/store")
    add("store", "a regular file", "{file}")
    add("verify", "unparseable", "maybe", "$(touch {canary})")
    add("verify", "negative", "-1")
    add("fix_rocm_in_place", "unparseable", "maybe")
    add("exact_pin", "unparseable", "maybe", "$(touch {canary})", "2")
    add("git_mirrors", "not FROM=TO", "https://github.com/", "=/m/", "https://github.com/=", "a=/m/ b")
    add("git_mirrors", "option-shaped", "-c=/m/", "x=--upload-pack=touch {canary}", "--upload-pack=touch {canary}")
    add("git_mirrors", "remote helper", "x=ext::sh -c touch% {canary}", "ext::sh=/m/", "x=fd::3")
    add("git_mirrors", "control character", "x=/m/\x01")
    add("git_mirrors", "another scheme", "x=foo://mirror/")
    add("git_mirrors", "two TOs for one FROM", "x=/a/ x=/b/")
    add("cache_signing_key", "unreadable", "{scratch}/absent.secret", "{dir}", "{dev}", "{keys}/fifo.secret")
    add("cache_signing_key", "readable by others", "{keys}/open.secret")
    add("cache_signing_key", "malformed", "{keys}/bad.secret", "{keys}/pub-600.pub")
    add("cache_signing_key", "newline", "{keys}/k1\n.secret")
    add("cache_signing_key", "the key itself, not its file", SECRET_LINE)
    add("cache_trusted_keys", "malformed", "k1", "k1:!!!", "{keys}/bad.pub", "{keys}/k1.pub k2", SECRET_LINE + ";")
    add("cache_trusted_keys", "wrong length", "k1:AAAA", "{keys}/k1.secret", SECRET_LINE)
    add("cache_trusted_keys", "unreadable", "{scratch}/absent.pub", "{dir}", "{keys}/fifo.secret")
    add("cache_trusted_keys", "code", "$(touch {canary})", "--upload-pack=touch {canary}")
    add("cache_trusted_keys", "control character", "{keys}/k1.pub\x01")
    add("PATH", "no git on PATH", "{dir}")
    # It names this host in the build lease records other hosts read: what such a record carries, or they would
    # read its lease as an unknown host's.
    add("FLYDSL_HOST_ID", "longer than a lease record's 200 characters", "h" * 201)
    add("FLYDSL_HOST_ID", "control character", "host\x1b[31m", "a\tb")
    add("FLYDSL_HOST_ID", "newline", "a\nb")
    return rows


ROWS = _rows()


def key_files(folder: str) -> str:
    """A real key pair, and key files that are not allowed: readable by others, malformed, a FIFO."""
    secret, public = keygen(folder, "k1")
    files = {"open.secret": (SECRET_LINE, 0o644), "bad.secret": ("k1 is not a key\n", 0o600),
             "pub-600.pub": (open(public).read(), 0o600), "bad.pub": ("k1:" + "A" * 10 + "!\n", 0o644)}
    for name, (text, mode) in files.items():
        write(os.path.join(folder, name), text)
        os.chmod(os.path.join(folder, name), mode)
    os.mkfifo(os.path.join(folder, "fifo.secret"), 0o600)
    return folder


@pytest.fixture(scope="module")
def read_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A folder this user cannot write into: for root, a read-only tmpfs; for anyone else, mode 0555."""
    path = str(tmp_path_factory.mktemp("ro") / "mnt")
    if os.geteuid() != 0:
        os.makedirs(path, mode=0o555)
        yield path
        return
    with tmpfs(path, "64k", read_only=True) as mounted:
        yield mounted


class Scratch:
    """A fresh folder per row: base/ (the root's parent), a regular file, a folder, a device, the canary, a
    symbolic link to itself, an executable file that is no program."""

    def __init__(self, top: str, repo: FixtureRepo, ro: str) -> None:
        self.top = top
        self.scratch = os.path.join(top, "s")
        self.cwd = os.path.join(self.scratch, "cwd")
        os.makedirs(self.cwd)
        self.ws = Workspace(os.path.join(self.scratch, "base"), repo)
        write(os.path.join(self.scratch, "afile"), "x")
        os.makedirs(os.path.join(self.scratch, "adir"))
        os.symlink("aloop", os.path.join(self.scratch, "aloop"))
        write(os.path.join(self.scratch, "ajunk"), "not a program\n")
        os.chmod(os.path.join(self.scratch, "ajunk"), 0o755)
        self.names = {"loop": os.path.join(self.scratch, "aloop"), "junk": os.path.join(self.scratch, "ajunk"),
                      "scratch": self.scratch, "canary": os.path.join(self.scratch, "CANARY"),
                      "file": os.path.join(self.scratch, "afile"), "dir": os.path.join(self.scratch, "adir"),
                      "dev": device(os.path.join(self.scratch, "null")), "ro": ro,
                      "keys": key_files(os.path.join(self.scratch, "keys"))}

    def fill(self, value: str) -> str:
        for key, path in self.names.items():
            value = value.replace("{" + key + "}", path)
        return value

    def canaries(self) -> List[str]:
        """Anything a value's code would have created: the canary, or a file named like its last word."""
        found = [p for p in (self.names["canary"], os.path.join(self.cwd, "CANARY"), os.path.join("/", "CANARY"))
                 if os.path.lexists(p)]
        return found


def run_row(row: Row, via: str, top: str, repo: FixtureRepo, ro: str) -> Dict[str, object]:
    scratch = Scratch(top, repo, ro)
    ws = scratch.ws
    value = scratch.fill(row.value)
    setting = SETTING_BY_NAME.get(row.setting)
    env = dict(ws.env)
    args: List[str] = []
    if via == "env":
        # `env` (read-only) for the default rows: an empty FLYDSL_ROOT means /opt/flydsl/FlyDSL, which a
        # test must not build in; it parses and checks every setting exactly as `ensure` does.
        command = "env" if row.expect == "default" else "ensure"
        env[setting.env if setting else row.setting] = value
        label = setting.env if setting else row.setting
    else:
        command = "start"
        assert setting is not None
        env.pop(setting.env, None)
        # A value starting with '-' is written --flag=VALUE by anyone who means it; argparse reads the
        # separate form as a missing value (exit 64 too, one line naming the flag).
        args = [f"{setting.flag}={value}"] if value == "" or value.startswith("-") else [setting.flag, value]
        label = setting.flag
    before = listing(top)
    argv = ws.cmd(*([] if command == "ensure" else [command]), *args)
    out = subprocess.run(argv, env=env, cwd=scratch.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=120)
    if command == "start" and out.returncode == 0 and row.expect != "refused":
        # A legal value: the detached run's own outcome is what `wait` reports.
        command = "start + wait"
        out = subprocess.run(ws.cmd("wait", "--timeout", "60", *args), env=env, cwd=scratch.cwd,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    after = listing(top)
    markers = [p for p in set(after) - set(before) if os.path.basename(p) == ".flydsl_build.failed"]
    changed = sorted(p for p in set(before) | set(after)
                     if before.get(p) != after.get(p) and p not in markers)
    return {"setting": label, "name": row.setting, "kind": row.kind, "value": row.value, "via": via,
            "command": command, "expect": row.expect, "returncode": out.returncode, "stdout": out.stdout,
            "stderr": out.stderr, "changed": changed, "markers": [os.path.join(top, m) for m in markers],
            "canaries": scratch.canaries()}


def check_refused(result: Dict[str, object]) -> Optional[str]:
    """Why a refused row's result is wrong, or None."""
    err = str(result["stderr"])
    lines = err.splitlines()
    if result["returncode"] != 64:
        return f"exit {result['returncode']}, not 64: {err[-500:]}"
    if len(lines) != 1 or err.count("\n") != 1:
        return f"{len(lines)} lines on stderr, not one: {err[-500:]}"
    if str(result["setting"]) not in lines[0]:
        return f"the line does not name {result['setting']}: {lines[0]}"
    if result["changed"]:
        return f"something was touched: {result['changed']}"
    if result["canaries"]:
        return f"code ran: {result['canaries']}"
    secret = SECRET_LINE.partition(":")[2]
    if secret[:16] in err:
        return "the line copies a secret key"
    for marker in result["markers"]:  # type: ignore[union-attr]
        with open(str(marker)) as handle:
            data = json.load(handle)
        if data["exit_code"] != 64 or data["stage"] != "settings":
            return f"the failure marker says {data}"
        if secret[:16] in json.dumps(data):
            return "the failure marker copies a secret key"
    return None


def describe(result: Dict[str, object]) -> str:
    if result["returncode"] == 64:
        return "refused (64)"
    return f"exit {result['returncode']}"


def _cases() -> List[Tuple[Row, str]]:
    cases = []
    for row in ROWS:
        cases.append((row, "env"))
        if row.setting in SETTING_BY_NAME and row.setting not in BOOL_FLAGS:
            cases.append((row, "flag"))
    return cases


CASES = _cases()


def test_every_setting_has_rows_of_each_applicable_kind() -> None:
    names = {row.setting for row in ROWS}
    assert {s.name for s in SETTINGS} <= names
    for s in SETTINGS:
        assert any(r.setting == s.name and r.expect == "refused" for r in ROWS), s.name


def test_the_bad_input_table(fixture_repo: FixtureRepo, read_only: str, tmp_path: "os.PathLike[str]") -> None:
    """Every row, through the real command line, a few at a time."""
    def one(n: int) -> Tuple[Row, str, Dict[str, object]]:
        row, via = CASES[n]
        return row, via, run_row(row, via, os.path.join(str(tmp_path), f"row{n}"), fixture_repo, read_only)

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(one, range(len(CASES))))
    problems = []
    for row, via, result in results:
        if row.expect == "refused":
            problem = check_refused(result)
            shown = describe(result) if problem is None else f"WRONG: {problem}"
        elif row.expect == "default":
            problem = None if via == "env" else check_refused(result)
            if via == "env":
                # An empty variable is the default: not refused, and the same settings as no variable at all.
                name = SETTING_BY_NAME[row.setting]
                same = load_settings({}, {name.env: ""}) == load_settings({}, {})
                ok = result["returncode"] != 64 and same and not result["canaries"]
                problem = None if ok else f"exit {result['returncode']}: {str(result['stderr'])[-300:]}"
                shown = f"default (exit {result['returncode']})" if ok else f"WRONG: {problem}"
            else:
                shown = describe(result) if problem is None else f"WRONG: {problem}"
        else:
            code = int(row.expect.split()[1])
            ok = result["returncode"] == code and not result["canaries"]
            problem = None if ok else f"exit {result['returncode']}, canaries {result['canaries']}"
            shown = f"exit {code} (legal path, no such repository; nothing ran)" if ok else f"WRONG: {problem}"
        record("bad_input", setting=result["setting"], kind=row.kind, value=row.value, via=via,
               command=result["command"], expect=row.expect, result=shown, ok=problem is None)
        if problem:
            problems.append((result["setting"], row.value, via, problem))
    assert not problems, "\n".join(map(str, problems))


def test_usage_errors_are_bad_input_too(fixture_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> None:
    """argparse's own errors (a flag without its value, an unknown flag, a bad --timeout) are exit 64 with
    one line, not argparse's exit 2 (which means "clone/fetch failed" here)."""
    ws = Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)
    for args in (["--pin", "--upload-pack=touch"], ["--repo", "-cx"], ["--rooot", "x"], ["wait", "--timeout", "x"],
                 ["start", "--jobs"], ["bogus-command"]):
        before = listing(str(tmp_path))
        out = ws.run(*args)
        assert out.returncode == 64, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and out.stdout == "", (args, out.stderr)
        assert listing(str(tmp_path)) == before
        record("bad_input", setting=args[0], kind="usage error", value=" ".join(args), via="flag",
               command="ensure" if args[0].startswith("-") else args[0], expect="refused",
               result="refused (64)", ok=True)


# -- legal odd values, end to end -----------------------------------------------------------------------
ODD = "sp ace 'sq' \"dq\" $(touch {canary}) `touch {canary}` ünï ; & | * ? \\ #"


def _odd_paths(top: str) -> Dict[str, str]:
    odd = os.path.join(top, ODD)
    return {"root": os.path.join(odd, "FlyDSL"), "lock_file": os.path.join(odd, "locks", "the lock"),
            "fail_marker": os.path.join(odd, "the marker"), "rocm_path": os.path.join(odd, "rocm"),
            "mlir_path": os.path.join(odd, "mlir"), "python": os.path.join(odd, "bin", "python"),
            "shim_dir": os.path.join(odd, "shim"), "cache": os.path.join(odd, "cache"),
            "repo": os.path.join(odd, "FlyDSL.git")}


@pytest.mark.parametrize("scenario", ["odd characters", "relative", "option-shaped relative"])
def test_legal_odd_paths_are_handled_end_to_end(fixture_repo: FixtureRepo, tmp_path: "os.PathLike[str]",
                                                scenario: str) -> None:
    top = str(tmp_path)
    canary = os.path.join(top, "CANARY")
    cwd = os.path.join(top, "cwd")
    os.makedirs(cwd)
    if scenario == "odd characters":
        given = {k: v.replace("{canary}", canary) for k, v in _odd_paths(top).items()}
    else:
        stem = "rel dir" if scenario == "relative" else "--upload-pack=touch CANARY"
        given = {"root": f"{stem}/FlyDSL", "lock_file": f"{stem}/locks/lock", "fail_marker": f"{stem}/marker",
                 "rocm_path": f"{stem}/rocm", "mlir_path": f"{stem}/mlir", "python": f"{stem}/bin/python",
                 "shim_dir": f"-c core.sshCommand=touch CANARY/{stem}/shim" if stem.startswith("-")
                 else f"{stem}/shim", "repo": f"{stem}/FlyDSL.git"}
        if scenario == "relative":  # a repository or cache starting with '-' is refused (rows above)
            given["cache"] = f"{stem}/cache"
        else:
            del given["repo"]
    absolute = {k: os.path.normpath(os.path.join(cwd, v)) for k, v in given.items()}
    os.makedirs(os.path.join(absolute["mlir_path"], "lib", "cmake", "mlir"))
    os.makedirs(os.path.dirname(absolute["python"]))
    os.symlink(sys.executable, absolute["python"])
    if "repo" in absolute:
        os.symlink(fixture_repo.path, absolute["repo"])
    ws = Workspace(os.path.join(top, "unused-base"), fixture_repo)
    env = {k: v for k, v in ws.env.items() if not k.startswith("FLYDSL_")}
    env.update({SETTING_BY_NAME[k].env: v for k, v in given.items()})
    env.update(FLYDSL_PIN=fixture_repo.commits["dev"], FLYDSL_STRATEGY="source")
    if "repo" not in given:
        env["FLYDSL_REPO"] = fixture_repo.url
    out = subprocess.run(ws.cmd("--json"), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    root = absolute["root"]
    evidence: Dict[str, str] = {}
    assert result["root"] == root and result["commit"] == fixture_repo.commits["dev"]
    env_file = os.path.join(root, "flydsl_env.sh")
    for shell in ("bash", "sh"):
        got = subprocess.run([shell, "-c", '. "$1" && printf "%s\\0%s\\0" "$FLYDSL_ROOT" "$FLYDSL_SHIM_DIR"', shell,
                              env_file], cwd=cwd, stdout=subprocess.PIPE, env={"PATH": os.environ["PATH"]})
        assert got.returncode == 0 and got.stdout.decode().split("\0")[:2] == [root, absolute["shim_dir"]]
    imported = subprocess.run(["bash", "-c", '. "$1" && "$2" -c "import flydsl, kernels.moe_gemm_2stage as k; '
                               'print(k.__file__)"', "bash", env_file, absolute["python"]], cwd="/",
                              stdout=subprocess.PIPE, text=True, env={"PATH": os.environ["PATH"]})
    assert imported.stdout.strip() == os.path.join(root, "kernels", "moe_gemm_2stage.py")
    evidence["root"] = "built there; the env file exports it literally (bash, sh); imports from it"
    evidence["shim_dir"] = "exported literally (bash, sh)"
    assert os.path.isfile(absolute["lock_file"])
    evidence["lock_file"] = "the lock was taken there"
    assert not os.path.exists(absolute["rocm_path"])
    evidence["rocm_path"] = "used, never written"
    counters = os.path.join(top, "counters")
    assert not os.path.exists(os.path.join(counters, "llvm.count"))
    evidence["mlir_path"] = "the LLVM build was skipped for it"
    assert result["python"] == absolute["python"]
    evidence["python"] = "the probe and the build ran it"
    if "repo" in given:
        origin = subprocess.run(["git", "-C", root, "config", "--get", "remote.origin.url"], stdout=subprocess.PIPE,
                                text=True).stdout.strip()
        assert origin == absolute["repo"]
        evidence["repo"] = "fetched from it"
    if "cache" in given:
        assert {e.kind for e in open_cache(absolute["cache"]).entries()} == {"tree"}
        evidence["cache"] = "the built tree was published there"
    bad_pin = dict(env, FLYDSL_PIN="v9.9.9", FLYDSL_EXACT_PIN="1")  # the built tree would pass the gate
    failing = subprocess.run(ws.cmd(), env=bad_pin, cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert failing.returncode == 3, failing.stderr
    with open(absolute["fail_marker"]) as handle:
        assert json.load(handle)["exit_code"] == 3
    evidence["fail_marker"] = "a failure wrote it there"
    assert not os.path.exists(canary) and not os.path.exists(os.path.join(cwd, "CANARY"))
    assert not os.path.exists("/CANARY")
    for name, value in given.items():
        record("bad_input", setting=SETTING_BY_NAME[name].env, kind=scenario, value=value, via="env",
               command="ensure", expect="accepted", result="handled: " + evidence[name], ok=True)


def test_a_bad_value_when_the_markers_folder_is_read_only(fixture_repo: FixtureRepo, read_only: str,
                                                          tmp_path: "os.PathLike[str]") -> None:
    """The failure marker for pollers cannot be written there: still exit 64 and the one line (not a crash)."""
    ws = Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)
    for env in ({"FLYDSL_JOBS": "0", "FLYDSL_BUILD_FAILED": os.path.join(read_only, "marker")},
                {"FLYDSL_JOBS": "0", "FLYDSL_ROOT": os.path.join(read_only, "FlyDSL")}):
        out = ws.run(**env)
        assert out.returncode == 64 and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith("ensure-flydsl: FLYDSL_JOBS='0' is not allowed")
