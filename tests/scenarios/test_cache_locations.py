"""Where the binary cache lives: a URL without fsspec, the `cache` command line, and S3 (moto's server, a
real HTTP endpoint)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from typing import Dict, Iterator, Optional

import pytest

from ensure_flydsl.trees.manifest import cache_key
from ensure_flydsl.trees.remote import open_cache
from tests.helpers.cache_entries import FIELDS, KEY
from tests.helpers.cache_trees import assert_rejected, make_tree, snapshot
from tests.helpers.result_schema import SCHEMAS, validate, validate_own
from tests.helpers.s3_server import S3Server


# -- locations and the command line --------------------------------------------------------------------
def test_a_url_without_fsspec_says_which_extra_to_install(tmp_path: "os.PathLike[str]") -> None:
    code = ("import sys; sys.modules['fsspec'] = None\n"  # as on a bare image without the extra
            "from ensure_flydsl.trees.backends import CacheError\nfrom ensure_flydsl.trees.remote import open_cache\n"
            "try:\n    open_cache('s3://bucket/prefix')\nexcept CacheError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    assert "needs fsspec" in out.stdout
    assert f"{sys.executable} -m pip install 'aiobotocore>=2.19.0' 's3fs>=2025.5.0'" in out.stdout  # this route's
    folder = subprocess.run([sys.executable, "-c", "import sys; sys.modules['fsspec'] = None\n"
                             "from ensure_flydsl.trees.remote import open_cache\n"
                             f"print(open_cache({str(tmp_path)!r}).entries())"],
                            stdout=subprocess.PIPE, text=True, check=True)
    assert folder.stdout.strip() == "[]"  # a folder cache needs no extra


def cli(*args: str, env: Optional[Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    full = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ensure_flydsl", "cache", *args], env=full, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)


def test_cache_list_and_prune_through_the_cli(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    empty = cli("list", "--cache", cache_dir)
    assert empty.returncode == 0 and "no entries in" in empty.stdout
    # --json: one object for an empty cache too (it printed nothing: a reader could not tell it from a crash)
    none = cli("list", "--json", "--cache", cache_dir)
    assert none.returncode == 0, none.stderr
    assert validate_own(json.loads(none.stdout), "cache_list")["entries"] == []
    assert len(none.stdout.splitlines()) == 1
    cache = open_cache(cache_dir)
    keys = []
    for n in range(2):
        fields = dict(FIELDS, commit=str(n) * 40)
        keys.append(cache_key("tree", fields))
        cache.put("tree", keys[-1], fields, make_tree(os.path.join(str(tmp_path), f"s{n}"), seed=str(n)))
        time.sleep(0.01)
    listed = cli("list", "--cache", cache_dir)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("tree  " + keys[1][:12])  # newest first
    assert re.search(r"^tree  [0-9a-f]{12} +\d+ B  \d{4}-\d\d-\d\d \d\d:\d\d  commit=111111111111 "
                     r"abi=cpython-311-x86_64-linux-gnu platform=linux-x86_64 repo=https://", lines[0]), lines[0]
    as_json = cli("list", "--json", env={"FLYDSL_CACHE": cache_dir})
    listing = validate_own(json.loads(as_json.stdout), "cache_list")  # one object (was JSON Lines)
    assert len(as_json.stdout.splitlines()) == 1 and listing["location"] == cache_dir and listing["warnings"] == []
    objects = listing["entries"]
    assert [o["key"] for o in objects] == keys[::-1] and objects[0]["fields"]["commit"] == "1" * 40
    assert {"kind", "key", "blob", "size", "created", "files", "fields"} <= set(objects[0])
    missing = cli("prune", "--cache", cache_dir)
    assert missing.returncode == 64 and "--max-size" in missing.stderr and len(missing.stderr.splitlines()) == 1
    junk = cli("prune", "--cache", cache_dir, "--max-size", "lots")
    assert junk.returncode == 64 and "--max-size='lots' is not allowed" in junk.stderr
    pruned = cli("prune", "--cache", cache_dir, "--max-size", "1")
    assert pruned.returncode == 0, pruned.stderr
    assert "removed tree  " + keys[0][:12] in pruned.stdout and "removed tree  " + keys[1][:12] in pruned.stdout
    assert "now holds 0 entries" in pruned.stdout
    unset = cli("list")
    assert unset.returncode == 64 and "FLYDSL_CACHE (--cache) is not set" in unset.stderr
    assert unset.stdout == ""
    # Under --json, as cache_list.schema.json says: the one result object of a failure, not a listing.
    unset = cli("list", "--json")
    failed = validate(json.loads(unset.stdout), "result")
    assert unset.returncode == 64 and failed["exit_code"] == 64 and failed["ok"] is False
    assert "result object of a failure" in str(SCHEMAS["cache_list"]["description"])
    not_a_folder = cli("list", "--cache", os.path.join(str(tmp_path), "s0", "flydsl", "tool.sh"))
    assert not_a_folder.returncode == 64 and "is not a folder" in not_a_folder.stderr


# -- S3 (moto's server, a real HTTP endpoint) ----------------------------------------------------------
@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")  # never the developer's own AWS setup
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket = "flydsl-" + uuid.uuid4().hex[:12]
    s3_server.make_bucket(bucket)
    return f"s3://{bucket}/builds"


def test_s3_round_trip_miss_entries_and_prune(s3_url: str, s3_server: S3Server, work: str,
                                              tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(s3_url)
    assert cache.lookup("tree", KEY) is None and cache.entries() == []
    source = make_tree(os.path.join(str(tmp_path), "src"))
    entry = cache.put("tree", KEY, FIELDS, source).entry
    found = open_cache(s3_url).lookup("tree", KEY)
    assert found is not None and found == entry
    dest = os.path.join(work, "dest")
    cache.get(found, dest)
    want = snapshot(source)
    want["flydsl/shared.txt"] = ("file", 0o644, want["flydsl/shared.txt"][2])
    assert snapshot(dest) == want
    mlir_fields = {"llvm_commit": "d" * 40, "abi": "cpython-311", "platform": "linux-x86_64", "script": "e" * 64}
    mlir = cache.put("mlir", cache_key("mlir", mlir_fields), mlir_fields, source).entry
    assert mlir.blob == entry.blob  # same bytes, one blob
    assert sorted(e.kind for e in cache.entries()) == ["mlir", "tree"]
    removed = cache.prune(0)
    assert sorted(e.kind for e in removed) == ["mlir", "tree"] and cache.entries() == []
    bucket = s3_url[len("s3://"):].split("/", 1)[0]
    assert s3_server.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # blobs went with their entries


def test_s3_corrupted_blob_is_rejected(s3_url: str, s3_server: S3Server, work: str,
                                       tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(s3_url)
    entry = cache.put("tree", KEY, FIELDS, make_tree(os.path.join(str(tmp_path), "src"))).entry
    bucket, prefix = s3_url[len("s3://"):].split("/", 1)
    blob_key = f"{prefix}/blobs/{entry.blob}.tar.gz"
    client = s3_server.client()
    data = bytearray(client.get_object(Bucket=bucket, Key=blob_key)["Body"].read())
    data[len(data) // 2] ^= 0x01
    client.put_object(Bucket=bucket, Key=blob_key, Body=bytes(data))
    assert_rejected(open_cache(s3_url), entry, work, "blob sha256 mismatch")
    client.delete_object(Bucket=bucket, Key=blob_key)
    assert_rejected(open_cache(s3_url), entry, work, "missing from the cache")


def test_s3_cli_list_and_unreachable_endpoint(s3_url: str, s3_server: S3Server,
                                              tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(s3_url)
    cache.put("tree", KEY, FIELDS, make_tree(os.path.join(str(tmp_path), "src")))
    listed = cli("list", "--cache", s3_url, env=s3_server.env())
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("tree  " + KEY[:12])
    dead = dict(s3_server.env(), AWS_ENDPOINT_URL_S3="http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")
    unreachable = cli("list", "--cache", s3_url, env=dead)
    assert unreachable.returncode == 64 and "cannot list entries in the cache" in unreachable.stderr
