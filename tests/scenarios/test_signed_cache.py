"""Signed cache entries end to end: real ed25519 keys from `cache keygen`, hosts (roots) sharing a real cache
folder or a real S3 server (moto), the fixture FlyDSL repository, and the build counters
(FIXTURE_COUNTER_DIR) that show what each host built.  A fleet that trusts keys installs only entries one
of them signed; everything else is reported in one line and built around, never installed or deleted."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Tuple

import pytest

from tests.helpers.fleet import cache_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.mlir_server import mlir_server, mlir_tarball
from tests.helpers.result_schema import validate_own
from tests.helpers.s3_server import S3Server
from tests.helpers.scenario import assert_one_tree, ensure_json
from tests.helpers.workspace import Workspace


@pytest.fixture
def keys(tmp_path: "os.PathLike[str]") -> Dict[str, Tuple[str, str]]:
    """name: (secret file, public file), each pair made by `ensure-flydsl cache keygen`."""
    folder = os.path.join(str(tmp_path), "keys")
    made = {}
    for name in ("k1", "k2"):
        out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "cache", "keygen", "--out", folder, name],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
        assert out.returncode == 0, out.stderr
        made[name] = (os.path.join(folder, f"{name}.secret"), os.path.join(folder, f"{name}.pub"))
    return made


@pytest.fixture
def cache(tmp_path: "os.PathLike[str]") -> str:
    return os.path.join(str(tmp_path), "shared-cache")


def manifests(cache: str, kind: str) -> List[str]:
    return glob.glob(os.path.join(cache, "entries", kind, "*.json"))


def signature_files(cache: str) -> List[str]:
    return sorted(glob.glob(os.path.join(cache, "entries", "*", "*.sig", "*", "*.sig")))


def test_an_honest_signers_entries_are_fetched_and_no_key_leaks(tmp_path: "os.PathLike[str]",
                                                                fixture_repo: FixtureRepo, cache: str,
                                                                keys: Dict[str, Tuple[str, str]]) -> None:
    ci = cache_host(str(tmp_path), fixture_repo, "ci", cache, FLYDSL_CACHE_SIGNING_KEY=keys["k1"][0])
    built = ensure_json(ci)
    assert built["how"] == "built"
    assert f"cache: published the tree {os.path.basename(manifests(cache, 'tree')[0])[:12]}" in str(built["_stderr"])
    assert str(built["_stderr"]).count(", signed by k1") == 2  # the tree and the MLIR install
    assert len(signature_files(cache)) == 2
    fleet = cache_host(str(tmp_path), fixture_repo, "fleet", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    fetched = ensure_json(fleet)
    assert fetched["how"] == "cached" and fleet.count("build") == 0 and fleet.count("llvm") == 0
    commit = fixture_repo.commits["dev"]
    assert (f"cache: the cache's tree entry for {commit[:8]} is signed by k1, which FLYDSL_CACHE_TRUSTED_KEYS "
            "trusts") in str(fetched["_stderr"])
    assert_one_tree(fleet)
    # The secret appears nowhere the tool writes: logs, markers, the JSON twin, the JSON results, the cache.
    secret_text = open(keys["k1"][0]).read()
    secret = secret_text.strip().partition(":")[2]
    written = [ci.log, ci.env_json, ci.env_file, fleet.log, fleet.env_json]
    written += glob.glob(os.path.join(cache, "**", "*"), recursive=True)
    for path in written:
        if os.path.isfile(path) and not path.endswith(".tar.gz"):
            text = open(path, errors="replace").read()
            assert secret not in text and secret[:24] not in text and secret_text not in text, path
    for data in (built, fetched):
        assert secret[:24] not in str(data["_raw"])


def _edit_the_tree_manifest(cache: str) -> None:
    """An attacker with write access changes the signed manifest (another host name: it still parses)."""
    path = manifests(cache, "tree")[0]
    data = open(path, "rb").read()
    edited = data.replace(b'"host":"', b'"host":"x', 1)
    assert edited != data
    with open(path, "wb") as handle:
        handle.write(edited)


@pytest.mark.parametrize("case", ["unsigned", "foreign", "edited"])
def test_entries_no_trusted_key_signed_are_refused_and_built_around(tmp_path: "os.PathLike[str]",
                                                                    fixture_repo: FixtureRepo, cache: str,
                                                                    keys: Dict[str, Tuple[str, str]],
                                                                    case: str) -> None:
    signer = {"unsigned": {}, "foreign": {"FLYDSL_CACHE_SIGNING_KEY": keys["k2"][0]},
              "edited": {"FLYDSL_CACHE_SIGNING_KEY": keys["k1"][0]}}[case]
    a = cache_host(str(tmp_path), fixture_repo, "a", cache, **signer)
    ensure_json(a)
    if case == "edited":
        _edit_the_tree_manifest(cache)
    blobs = sorted(glob.glob(os.path.join(cache, "blobs", "*")))
    signatures = {path: open(path, "rb").read() for path in signature_files(cache)}
    # Host b trusts k1 and signs its own builds with it.
    b = cache_host(str(tmp_path), fixture_repo, "b", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1],
             FLYDSL_CACHE_SIGNING_KEY=keys["k1"][0])
    data = ensure_json(b)
    stderr = str(data["_stderr"])
    commit = fixture_repo.commits["dev"][:8]
    why = {"unsigned": "is not signed",
           "foreign": "is signed by k2, which is not trusted (trusted: k1)",
           "edited": "was changed after k1 signed it: no signature covers its manifest's bytes"}[case]
    line = f"cache: the cache's tree entry for {commit} {why}; not installed, building instead"
    assert line in stderr.splitlines()
    assert data["how"] == "built" and b.count("build") == 1
    # The MLIR entry: refused as well, unless only the tree's manifest was edited.
    assert b.count("llvm") == (0 if case == "edited" else 1)
    assert ("cache: fetching the tree" in stderr) is False
    assert_one_tree(b)
    # Nothing of the refused entries was deleted: their blobs and signatures are all still there.
    assert set(blobs) <= set(glob.glob(os.path.join(cache, "blobs", "*")))
    assert all(open(path, "rb").read() == body for path, body in signatures.items())
    # b published its own build signed by k1, so a third host that trusts k1 fetches it.
    assert ", signed by k1" in stderr
    c = cache_host(str(tmp_path), fixture_repo, "c", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    assert ensure_json(c)["how"] == "cached" and c.count("build") == 0 and c.count("llvm") == 0


def test_trusted_keys_without_a_signing_key_publish_unsigned_and_say_so(tmp_path: "os.PathLike[str]",
                                                                         fixture_repo: FixtureRepo, cache: str,
                                                                         keys: Dict[str, Tuple[str, str]]) -> None:
    a = cache_host(str(tmp_path), fixture_repo, "a", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    stderr = str(ensure_json(a)["_stderr"])
    assert ("unsigned: FLYDSL_CACHE_TRUSTED_KEYS is set but FLYDSL_CACHE_SIGNING_KEY is not, so hosts that check "
            "signatures will not install it") in stderr
    assert signature_files(cache) == []
    b = cache_host(str(tmp_path), fixture_repo, "b", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    assert ensure_json(b)["how"] == "built" and b.count("build") == 1  # as announced
    plain = cache_host(str(tmp_path), fixture_repo, "plain", cache)  # without trusted keys: behaviour as before
    assert ensure_json(plain)["how"] == "cached" and plain.count("build") == 0


def test_rotation_old_key_then_resigned_by_the_new(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                  cache: str, keys: Dict[str, Tuple[str, str]]) -> None:
    old, new = keys["k1"], keys["k2"]
    ci = cache_host(str(tmp_path), fixture_repo, "ci", cache, FLYDSL_CACHE_SIGNING_KEY=old[0])
    ensure_json(ci)
    both = f"{old[1]} {new[1]}"
    during = cache_host(str(tmp_path), fixture_repo, "during", cache, FLYDSL_CACHE_TRUSTED_KEYS=both)
    assert ensure_json(during)["how"] == "cached" and during.count("build") == 0  # signed by the old key: fetched
    manifest_bytes = {path: open(path, "rb").read() for path in manifests(cache, "tree") + manifests(cache, "mlir")}
    signed = ci.run("cache", "sign", "--key", new[0], FLYDSL_CACHE_TRUSTED_KEYS=both)
    assert signed.returncode == 0, signed.stderr
    assert "2 signed with k2, 0 already signed by it, 0 skipped" in signed.stdout
    again = ci.run("cache", "sign", "--key", new[0], FLYDSL_CACHE_TRUSTED_KEYS=both)
    assert "0 signed with k2, 2 already signed by it" in again.stdout
    assert {path: open(path, "rb").read() for path in manifest_bytes} == manifest_bytes  # manifests untouched
    listed = ci.run("cache", "list", FLYDSL_CACHE_TRUSTED_KEYS=new[1])
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if line.startswith(("tree", "mlir"))]
    assert len(rows) == 2 and all(row.endswith("signed by k1 (not trusted), k2 (trusted)") for row in rows)
    as_json = validate_own(json.loads(ci.run("cache", "list", "--json").stdout), "cache_list")["entries"]
    trusted = validate_own(json.loads(ci.run("cache", "list", "--json", FLYDSL_CACHE_TRUSTED_KEYS=new[1]).stdout),
                           "cache_list")["entries"]
    assert all(e["signers"] == [{"name": "k1", "trusted": False, "verifies": None},
                                {"name": "k2", "trusted": True, "verifies": True}] for e in trusted), trusted
    assert all(e["signers"] == [{"name": "k1", "trusted": None, "verifies": None},
                                {"name": "k2", "trusted": None, "verifies": None}] for e in as_json)
    after = cache_host(str(tmp_path), fixture_repo, "after", cache, FLYDSL_CACHE_TRUSTED_KEYS=new[1])  # k1 retired
    data = ensure_json(after)
    assert data["how"] == "cached" and after.count("build") == 0 and after.count("llvm") == 0
    assert "is signed by k2, which FLYDSL_CACHE_TRUSTED_KEYS trusts" in str(data["_stderr"])


def test_cache_sign_with_trusted_keys_signs_only_what_they_vouch_for(tmp_path: "os.PathLike[str]",
                                                                      fixture_repo: FixtureRepo, cache: str,
                                                                      keys: Dict[str, Tuple[str, str]]) -> None:
    """A planted (unsigned) entry is not laundered by a re-signing pass; naming an entry by its key prefix."""
    a = cache_host(str(tmp_path), fixture_repo, "a", cache)
    ensure_json(a)
    key = os.path.basename(manifests(cache, "tree")[0])[:12]
    out = a.run("cache", "sign", "--key", keys["k2"][0], key, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    assert out.returncode == 0, out.stderr
    assert f"skipped tree {key}: it is not signed; only entries a trusted key signed are signed" in out.stdout
    assert signature_files(cache) == []
    out = a.run("cache", "sign", "--key", keys["k2"][0], key)
    assert "no trusted keys are set" in out.stdout and f"signed tree {key} with k2" in out.stdout
    assert len(signature_files(cache)) == 1
    os.chmod(keys["k2"][1], 0o644)
    public_key = a.run("cache", "sign", "--key", keys["k2"][1])
    assert public_key.returncode == 64 and public_key.stderr.count("\n") == 1
    assert "cache sign --key=" in public_key.stderr and "may be read by others" in public_key.stderr
    bad = a.run("cache", "sign", "--key", keys["k2"][0], "ffffffffffff")
    assert bad.returncode == 64 and "names no single entry" in bad.stderr and bad.stderr.count("\n") == 1


def test_keygen_refuses_to_overwrite_and_keys_are_checked(tmp_path: "os.PathLike[str]",
                                                          keys: Dict[str, Tuple[str, str]], ws: Workspace) -> None:
    secret, public = keys["k1"]
    assert os.stat(secret).st_mode & 0o777 == 0o600
    body = open(secret).read()
    out = ws.run("cache", "keygen", "--out", os.path.dirname(secret), "k1")
    assert out.returncode == 64 and "exists; it is never replaced" in out.stderr
    assert open(secret).read() == body
    bad = ws.run("cache", "keygen", "--out", str(tmp_path), "-bad")
    assert bad.returncode == 64 and bad.stderr.count("\n") == 1
    os.chmod(secret, 0o640)
    refused = ws.run("ensure", FLYDSL_CACHE_SIGNING_KEY=secret)
    assert refused.returncode == 64
    assert refused.stderr.startswith(f"ensure-flydsl: FLYDSL_CACHE_SIGNING_KEY={secret!r} is not allowed")
    assert "may be read by others (mode 640)" in refused.stderr and refused.stderr.count("\n") == 1
    assert ws.marker()["exit_code"] == 64
    assert body.strip().partition(":")[2][:24] not in json.dumps(ws.marker())
    flag = ws.run("ensure", "--cache-trusted-key", public, "--cache-trusted-key", "k9:AAAA")
    assert flag.returncode == 64 and flag.stderr.startswith("ensure-flydsl: --cache-trusted-key=")
    assert "(k9) holds 3 bytes; an ed25519 public key has 32" in flag.stderr


# -- S3 (moto's server) ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    server.make_bucket("signed-cache")
    try:
        yield server
    finally:
        server.stop()


def test_signed_entries_in_s3(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, s3: S3Server,
                              keys: Dict[str, Tuple[str, str]]) -> None:
    url = f"s3://signed-cache/{os.path.basename(str(tmp_path))}"
    ci = cache_host(str(tmp_path), fixture_repo, "ci", url, FLYDSL_CACHE_SIGNING_KEY=keys["k1"][0], **s3.env())
    assert str(ensure_json(ci)["_stderr"]).count(", signed by k1") == 2
    fleet = cache_host(str(tmp_path), fixture_repo, "fleet", url, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1], **s3.env())
    assert ensure_json(fleet)["how"] == "cached" and fleet.count("build") == 0 and fleet.count("llvm") == 0
    # An edited manifest in the bucket: refused by a host that trusts k1, which builds the tree (the MLIR
    # entry is intact) and publishes it signed by k1.
    client = s3.client()
    prefix = url.split("/", 3)[3]
    listed = client.list_objects_v2(Bucket="signed-cache", Prefix=f"{prefix}/entries/tree/")["Contents"]
    name = next(o["Key"] for o in listed if o["Key"].endswith(".json"))
    body = client.get_object(Bucket="signed-cache", Key=name)["Body"].read()
    client.put_object(Bucket="signed-cache", Key=name, Body=body.replace(b'"host":"', b'"host":"x', 1))
    commit = fixture_repo.commits["dev"][:8]
    late = cache_host(str(tmp_path), fixture_repo, "late", url, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1],
                FLYDSL_CACHE_SIGNING_KEY=keys["k1"][0], **s3.env())
    data = ensure_json(late)
    assert f"cache: the cache's tree entry for {commit} was changed after k1 signed it" in str(data["_stderr"])
    assert data["how"] == "built" and late.count("build") == 1 and late.count("llvm") == 0
    # The edited manifest stays where it is (a publish replaces none); late's own is k1's variant beside it.
    assert client.get_object(Bucket="signed-cache", Key=name)["Body"].read() != body
    listed_out = late.run("cache", "list", FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    rows = [line for line in listed_out.stdout.splitlines() if line.startswith(("tree", "mlir"))]
    assert len(rows) == 3, listed_out.stdout
    trees = sorted(row.rsplit("...", 1)[1] for row in rows if row.startswith("tree"))
    assert trees == ["  from k1  signed by k1 (trusted)", "  unsigned"], rows
    assert [row for row in rows if row.startswith("mlir")][0].endswith("...  signed by k1 (trusted)"), rows
    again = cache_host(str(tmp_path), fixture_repo, "again", url, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1], **s3.env())
    data = ensure_json(again)
    assert data["how"] == "cached" and again.count("build") == 0, data["_stderr"]
    assert (f"cache: the cache's tree entry for {commit} from k1 is signed by k1, which FLYDSL_CACHE_TRUSTED_KEYS "
            "trusts") in str(data["_stderr"])
    # A host that trusts only k2 refuses all three manifests, each in one line.
    other = cache_host(str(tmp_path), fixture_repo, "other", url, FLYDSL_CACHE_TRUSTED_KEYS=keys["k2"][1], **s3.env())
    data = ensure_json(other)
    said = str(data["_stderr"]).splitlines()
    assert (f"cache: the cache's tree entry for {commit} was changed after k1 signed it: no signature covers its "
            "manifest's bytes; not installed") in said
    assert (f"cache: the cache's tree entry for {commit} from k1 is signed by k1, which is not trusted (trusted: k2); "
            "not installed, building instead") in said
    assert data["how"] == "built" and other.count("build") == 1 and other.count("llvm") == 1


# -- the optional library ------------------------------------------------------------------------------------

@pytest.mark.index
def test_without_the_signing_extra_a_key_is_bad_input_naming_the_remedy(tmp_path: "os.PathLike[str]",
                                                                         keys: Dict[str, Tuple[str, str]],
                                                                         project_wheel: str) -> None:
    """A venv with the tool and its dependencies only (`pip install ensure-flydsl`): no cryptography."""
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    out = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                          project_wheel], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout[-3000:]
    lacks = subprocess.run([python, "-c", "import cryptography"], stderr=subprocess.PIPE, check=False)
    assert lacks.returncode == 1  # the tool's own install did not bring it
    tool = os.path.join(venv, "bin", "ensure-flydsl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_")}
    env["FLYDSL_ROOT"] = os.path.join(str(tmp_path), "base", "FlyDSL")
    for name, value in (("FLYDSL_CACHE_TRUSTED_KEYS", keys["k1"][1]), ("FLYDSL_CACHE_SIGNING_KEY", keys["k1"][0])):
        run = subprocess.run([tool, "env"], env={**env, name: value}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, check=False, cwd=str(tmp_path))
        assert run.returncode == 64, run.stderr
        assert run.stderr.startswith(f"ensure-flydsl: {name}=") and run.stderr.count("\n") == 1
        assert f"{python} -m pip install 'cryptography>=42'" in run.stderr  # the remedy for a pip install
    keygen = subprocess.run([tool, "cache", "keygen", "--out", str(tmp_path), "k3"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, check=False, cwd=str(tmp_path))
    assert keygen.returncode == 64 and f"{python} -m pip install 'cryptography>=42'" in keygen.stderr
    assert not os.path.exists(os.path.join(str(tmp_path), "k3.secret"))
    plain = subprocess.run([tool, "env"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           check=False, cwd=str(tmp_path))
    assert plain.returncode != 64 and "Traceback" not in plain.stderr  # no key: the library is not needed
    remedy = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                             "cryptography>=42"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    assert remedy.returncode == 0, remedy.stdout[-2000:]
    fixed = subprocess.run([tool, "env"], env={**env, "FLYDSL_CACHE_TRUSTED_KEYS": keys["k1"][1]}, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, cwd=str(tmp_path))
    assert fixed.returncode != 64, fixed.stderr  # the remedy it named is the remedy


def _imported(ws: Workspace, **env: str) -> List[str]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ensure_flydsl", "--json"], env={**ws.env, **env},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert out.returncode == 0 and json.loads(out.stdout)["action"] == "warm", out.stderr[-2000:]
    return [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")]


def test_the_warm_call_imports_no_signing_code(ws: Workspace, keys: Dict[str, Tuple[str, str]]) -> None:
    """A warm call is the front door's: with keys as without, it imports nothing of signing, the cache or
    cryptography.  The first call with keys checks them (exit 64 stays possible) and keeps its own entry."""
    assert ws.run().returncode == 0
    plain = _imported(ws)
    assert not [m for m in plain if "signing" in m or m in ("base64", "binascii")]
    keyed_env = {"FLYDSL_CACHE_TRUSTED_KEYS": keys["k1"][1], "FLYDSL_CACHE_SIGNING_KEY": keys["k1"][0]}
    assert ws.run(**keyed_env).returncode == 0
    keyed = _imported(ws, **keyed_env)
    assert not [m for m in keyed if m.startswith(("cryptography", "ensure_flydsl.binary_cache")) or "signing" in m]
    assert ws.run(**dict(keyed_env, FLYDSL_CACHE_TRUSTED_KEYS="k1:not-a-key")).returncode == 64


def test_the_doctor_warns_about_a_cache_without_trusted_keys(ws: Workspace, cache: str,
                                                             keys: Dict[str, Tuple[str, str]]) -> None:
    out = ws.run("doctor", "--json", FLYDSL_CACHE=cache)
    data = json.loads(out.stdout)
    trust = next(c for c in data["checks"] if c["name"] == "cache-trust")
    assert trust["status"] == "wrong" and trust["blocking"] is False  # a warning: the verdict does not change
    assert trust["detail"].startswith(f"FLYDSL_CACHE_TRUSTED_KEYS is not set: if other hosts or users can write to "
                                      f"{cache}, this host installs whatever they put there")
    text = ws.run("doctor", FLYDSL_CACHE=cache)
    assert re.search(r"\[wrong\] +cache-trust +FLYDSL_CACHE_TRUSTED_KEYS is not set", text.stdout)
    assert "remedy: sign on the host that builds" in text.stdout
    assert text.returncode == out.returncode
    trusted = json.loads(ws.run("doctor", "--json", FLYDSL_CACHE=cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1]).stdout)
    trust = next(c for c in trusted["checks"] if c["name"] == "cache-trust")
    assert trust["status"] == "ok" and "signed by k1; this host publishes unsigned" in trust["detail"]
    without = json.loads(ws.run("doctor", "--json").stdout)
    assert not [c for c in without["checks"] if c["name"] == "cache-trust"]  # no cache, no check


def _entry_files(cache: str) -> Dict[str, bytes]:
    """Every manifest and signature object in the cache, with its bytes."""
    found = glob.glob(os.path.join(cache, "entries", "**", "*"), recursive=True)
    return {os.path.relpath(p, cache): open(p, "rb").read() for p in found if os.path.isfile(p)}


def test_a_host_that_trusts_another_key_never_replaces_a_signed_entry(tmp_path: "os.PathLike[str]",
                                                                      fixture_repo: FixtureRepo, cache: str,
                                                                      keys: Dict[str, Tuple[str, str]]) -> None:
    """Issue 26 item 5: host b trusts k1 and signs nothing; the entries a signed with k2 are refused there
    (right), and b's own build must not take their place: hosts that trust k2 still find them."""
    a = cache_host(str(tmp_path), fixture_repo, "a", cache, FLYDSL_CACHE_SIGNING_KEY=keys["k2"][0])
    assert ensure_json(a)["how"] == "built"
    before = _entry_files(cache)
    assert len([p for p in before if p.endswith(".sig")]) == 2  # the tree and the MLIR install, signed by k2
    b = cache_host(str(tmp_path), fixture_repo, "b", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    data = ensure_json(b)
    stderr = str(data["_stderr"])
    assert data["how"] == "built" and b.count("build") == 1 and b.count("llvm") == 1
    assert _entry_files(cache) == before  # a's manifests and signatures, byte for byte; nothing beside them
    c = cache_host(str(tmp_path), fixture_repo, "c", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k2"][1])
    fetched = ensure_json(c)
    assert fetched["how"] == "cached" and c.count("build") == 0 and c.count("llvm") == 0, fetched["_stderr"]
    for what in ("MLIR entry for LLVM ", f"tree entry for {fixture_repo.commits['dev'][:8]}"):
        assert stderr.count(f"cache: the cache's {what}") == 1, stderr  # said once each (they were said twice)
    assert stderr.count("is signed by k2, which is not trusted (trusted: k1); not installed, building instead") == 2
    assert stderr.count("a publish never replaces one (other hosts may trust it); sign this host's builds "
                        "(FLYDSL_CACHE_SIGNING_KEY) to publish an entry of its own beside it") == 2, stderr
    assert "cache: published" not in stderr
    # A host that trusts and signs with k1 adds k1's variants beside a's entries, replacing nothing.
    d = cache_host(str(tmp_path), fixture_repo, "d", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1],
                   FLYDSL_CACHE_SIGNING_KEY=keys["k1"][0])
    stderr = str(ensure_json(d)["_stderr"])
    assert d.count("build") == 1 and stderr.count("beside the entry another host published for this key), signed "
                                                  "by k1") == 2, stderr
    after = _entry_files(cache)
    assert {p: after[p] for p in before} == before
    assert sorted(p.split(os.sep, 2)[2].split(".", 1)[1] for p in after if p.endswith(".json")) == \
        ["by/k1.json", "by/k1.json", "json", "json"]
    tree = f"cache: the cache's tree entry for {fixture_repo.commits['dev'][:8]}"
    for name, trusted, line in (("e", keys["k1"][1], f"{tree} from k1 is signed by k1, which"),
                                ("f", keys["k2"][1], f"{tree} is signed by k2, which"),
                                ("g", f"{keys['k1'][1]} {keys['k2'][1]}", f"{tree} is signed by k2, which")):
        host = cache_host(str(tmp_path), fixture_repo, name, cache, FLYDSL_CACHE_TRUSTED_KEYS=trusted)
        data = ensure_json(host)
        assert data["how"] == "cached" and host.count("build") == 0 and host.count("llvm") == 0, data["_stderr"]
        assert line + " FLYDSL_CACHE_TRUSTED_KEYS trusts" in str(data["_stderr"]).splitlines(), data["_stderr"]
    # Each signer's entries are their own: `cache list` shows four, `cache prune` keeps every signature.
    listed = d.run("cache", "list", FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    rows = [line for line in listed.stdout.splitlines() if line.startswith(("tree", "mlir"))]
    assert sorted(row.rsplit("...", 1)[1] for row in rows) == ["  from k1  signed by k1 (trusted)"] * 2 + \
        ["  signed by k2 (not trusted)"] * 2, listed.stdout
    old = time.time() - 7200
    for path in after:
        os.utime(os.path.join(cache, path), (old, old))
    pruned = d.run("cache", "prune", "--max-size", "1T")
    assert pruned.returncode == 0 and "0 removed" in pruned.stdout, pruned.stdout + pruned.stderr
    assert _entry_files(cache) == after


def test_the_host_store_takes_only_what_the_trust_settings_would_take_from_the_cache(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, cache: str,
        keys: Dict[str, Tuple[str, str]]) -> None:
    """Issue 42, item 8: a tree fetched from an entry k2 signed was copied from the host store into a new root of
    a host that now trusts only k1.  The store records who signed what it keeps, and copies only what the run's
    trust settings would have taken from the cache; a tree built under them replaces the one they refuse."""
    tmp = str(tmp_path)
    ensure_json(cache_host(tmp, fixture_repo, "ci", cache, FLYDSL_CACHE_SIGNING_KEY=keys["k2"][0]))
    store = os.path.join(tmp, "one-host-store")

    def root(name: str, trusted: str) -> Workspace:
        return cache_host(tmp, fixture_repo, name, cache, FLYDSL_CACHE_TRUSTED_KEYS=keys[trusted][1],
                          FLYDSL_STORE=store)

    first = root("first", "k2")
    assert ensure_json(first)["how"] == "cached"
    (tree,) = json.loads(first.run("store", "list", "--json").stdout)["trees"]
    assert tree["how"] == "cached" and tree["signed_by"] == ["k2"]
    again = ensure_json(root("again", "k2"))
    assert again["how"] == "cached" and again["link_mode"] == "copy", again["_stderr"]
    now = root("now", "k1")
    data = ensure_json(now)
    said = str(data["_stderr"])
    assert (f"store: the tree {tree['key'][:12]} in {store} is not used: it came from the fleet cache signed by k2, "
            "and FLYDSL_CACHE_TRUSTED_KEYS trusts none of that now") in said.splitlines(), said
    assert data["how"] == "built" and data["link_mode"] is None and now.count("build") == 1
    (tree,) = json.loads(now.run("store", "list", "--json").stdout)["trees"]
    assert tree["how"] == "built" and tree["signed_by"] == []  # what this host built replaced it
    assert ensure_json(root("later", "k1"))["link_mode"] == "copy"


def test_a_manifests_own_signed_by_field_is_not_taken_as_a_signature(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, cache: str,
        keys: Dict[str, Tuple[str, str]]) -> None:
    """A writer of the cache adds "signed_by": [k1's public line] to an unsigned tree's manifest.  A run with no
    trusted keys checks nothing, so the tree it fetches is kept in the host store as unsigned; before, the field
    was kept as who signed it, and a later run trusting k1 copied that unsigned tree from the store."""
    tmp = str(tmp_path)
    ensure_json(cache_host(tmp, fixture_repo, "ci", cache))
    (path,) = manifests(cache, "tree")
    data = json.load(open(path))
    data["signed_by"] = [open(keys["k1"][1]).read().strip()]
    with open(path, "w") as handle:
        json.dump(data, handle, separators=(",", ":"))
    store = os.path.join(tmp, "one-host-store")
    first = cache_host(tmp, fixture_repo, "first", cache, FLYDSL_STORE=store)
    assert ensure_json(first)["how"] == "cached"
    (tree,) = json.loads(first.run("store", "list", "--json").stdout)["trees"]
    assert tree["how"] == "cached" and tree["signed_by"] == [], tree
    now = cache_host(tmp, fixture_repo, "now", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1], FLYDSL_STORE=store)
    data = ensure_json(now)
    assert (f"store: the tree {tree['key'][:12]} in {store} is not used: it came from the fleet cache unsigned, "
            "and FLYDSL_CACHE_TRUSTED_KEYS trusts none of that now") in str(data["_stderr"]).splitlines(), data
    assert data["how"] == "built" and now.count("build") == 1


def test_an_mlir_fetched_before_is_used_again_only_while_a_trusted_key_signed_it(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, cache: str,
        keys: Dict[str, Tuple[str, str]]) -> None:
    """An MLIR install fetched under a trust in k2 was taken again from the tool's folder by a root beside it that
    trusts only k1 (before: "was fetched before", FlyDSL built against it); now it is refused, as the cache's
    entry is, and LLVM is built."""
    tmp = str(tmp_path)
    ensure_json(cache_host(tmp, fixture_repo, "ci", cache, FLYDSL_CACHE_SIGNING_KEY=keys["k2"][0]))
    shutil.rmtree(os.path.join(cache, "entries", "tree"))  # the next host builds its tree against the MLIR
    host = cache_host(tmp, fixture_repo, "h", cache, FLYDSL_CACHE_TRUSTED_KEYS=keys["k2"][1], FLYDSL_STORE="off")
    assert ensure_json(host)["how"] == "built" and host.count("llvm") == 0 and host.count("build") == 1
    again = ensure_json(host, FLYDSL_ROOT=os.path.join(host.base, "FlyDSL2"))  # a root beside it, same trust
    assert "cache: MLIR " in str(again["_stderr"]) and " was fetched before: " in str(again["_stderr"])
    assert host.count("llvm") == 0
    # The record of who signed it, garbage: read as unsigned, so the MLIR is fetched again (never exit 70).
    (record,) = glob.glob(os.path.join(host.base, ".ensure_flydsl", "mlir", "*.json"))
    with open(record, "wb") as handle:
        handle.write(b'{"signed_by": [1, "\xff\xfe"')
    refetched = ensure_json(host, FLYDSL_ROOT=os.path.join(host.base, "FlyDSL4"))
    said = str(refetched["_stderr"])
    assert "is not used: it came from the fleet cache unsigned" in said and "cache: fetching MLIR " in said, said
    assert refetched["how"] == "built" and host.count("llvm") == 0
    data = ensure_json(host, FLYDSL_ROOT=os.path.join(host.base, "FlyDSL3"), FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
    said = str(data["_stderr"])
    assert " is not used: it came from the fleet cache signed by k2, and FLYDSL_CACHE_TRUSTED_KEYS trusts none " \
           "of that now" in said, said
    assert data["how"] == "built" and host.count("llvm") == 1, said


def test_a_prebuilt_mlir_fetched_from_the_cache_before_is_used_again_only_while_a_trusted_key_signed_it(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, cache: str,
        keys: Dict[str, Tuple[str, str]]) -> None:
    """FLYDSL_MLIR_URL's install fetched from the cache under a trust in k2 was taken again by a root beside it
    that trusts only k1 (before: "was downloaded before", FlyDSL built against it); now it is refused, as any MLIR
    fetched before is, and the prebuilt is downloaded from its URL."""
    tmp = str(tmp_path)
    folder = os.path.join(tmp, "served")
    with mlir_server(folder) as server:
        mlir_tarball(os.path.join(folder, "llvm-11111111-ubuntu-x64.tar.gz"))
        url = server.url + "/llvm-{llvm8}-ubuntu-x64.tar.gz"
        ensure_json(cache_host(tmp, fixture_repo, "ci", cache, FLYDSL_MLIR_URL=url,
                               FLYDSL_CACHE_SIGNING_KEY=keys["k2"][0]))
        shutil.rmtree(os.path.join(cache, "entries", "tree"))  # the next host builds its tree against the MLIR
        host = cache_host(tmp, fixture_repo, "h", cache, FLYDSL_MLIR_URL=url,
                          FLYDSL_CACHE_TRUSTED_KEYS=keys["k2"][1], FLYDSL_STORE="off")
        assert "cache: fetching MLIR " in str(ensure_json(host)["_stderr"])
        assert list(server.hits.values()) == [1]
        data = ensure_json(host, FLYDSL_ROOT=os.path.join(host.base, "FlyDSL2"),
                           FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])
        said = str(data["_stderr"])
        assert " is not used: it came from the fleet cache signed by k2, and FLYDSL_CACHE_TRUSTED_KEYS trusts " \
               "none of that now" in said, said
        assert "prebuilt MLIR: taken" in said and list(server.hits.values()) == [2], said
        again = str(ensure_json(host, FLYDSL_ROOT=os.path.join(host.base, "FlyDSL3"),
                                FLYDSL_CACHE_TRUSTED_KEYS=keys["k1"][1])["_stderr"])
        assert " was downloaded before: " in again and list(server.hits.values()) == [2], again
    assert data["how"] == "built" and host.count("llvm") == 0


def test_a_tree_is_kept_as_signed_by_the_key_that_signed_it_not_every_trusted_key_of_its_name(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, cache: str,
        keys: Dict[str, Tuple[str, str]]) -> None:
    """Two trusted keys share the name k1 (a rotation); the old one signed the tree.  The host store keeps it as
    signed by that key alone, so once only the new k1 is trusted (the old one retired, say leaked) the stored tree
    is refused; before, both k1 lines were kept and the tree signed by the retired key was still copied."""
    tmp = str(tmp_path)
    out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "cache", "keygen", "--out",
                          os.path.join(tmp, "new-keys"), "k1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    new_k1 = os.path.join(tmp, "new-keys", "k1.pub")
    ensure_json(cache_host(tmp, fixture_repo, "ci", cache, FLYDSL_CACHE_SIGNING_KEY=keys["k1"][0]))
    store = os.path.join(tmp, "one-host-store")
    first = cache_host(tmp, fixture_repo, "first", cache, FLYDSL_CACHE_TRUSTED_KEYS=f"{keys['k1'][1]} {new_k1}",
                       FLYDSL_STORE=store)
    assert ensure_json(first)["how"] == "cached"
    (tree,) = json.loads(first.run("store", "list", "--json").stdout)["trees"]
    assert tree["signed_by"] == ["k1"], tree  # the one key that signed it: before, both k1 keys
    now = cache_host(tmp, fixture_repo, "now", cache, FLYDSL_CACHE_TRUSTED_KEYS=new_k1, FLYDSL_STORE=store)
    data = ensure_json(now)
    assert (f"store: the tree {tree['key'][:12]} in {store} is not used: it came from the fleet cache signed by k1, "
            "and FLYDSL_CACHE_TRUSTED_KEYS trusts none of that now") in str(data["_stderr"]).splitlines(), data
    assert data["how"] == "built" and now.count("build") == 1
