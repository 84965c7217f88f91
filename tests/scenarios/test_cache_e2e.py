"""The binary cache inside `ensure`: hosts sharing one cache pay for one build; the MLIR cache spares a
second pin with the same LLVM commit its LLVM build; a corrupt entry is reported and built around."""

from __future__ import annotations

import glob
import os
from typing import Callable, Iterator

import pytest

from tests.helpers.fleet import cache_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.s3_server import S3Server
from tests.helpers.scenario import assert_one_tree, ensure_json
from tests.helpers.workspace import Workspace


@pytest.fixture
def cache(tmp_path: "os.PathLike[str]") -> str:
    return os.path.join(str(tmp_path), "shared-cache")


def test_a_second_host_fetches_the_tree_instead_of_building(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                            cache: str) -> None:
    a = cache_host(str(tmp_path), fixture_repo, "a", cache)
    first = ensure_json(a)
    assert first["how"] == "built" and "cache: published the tree" in str(first["_stderr"])
    assert "cache: published the mlir" in str(first["_stderr"])
    b = cache_host(str(tmp_path), fixture_repo, "b", cache)
    second = ensure_json(b)
    assert second["how"] == "cached" and second["commit"] == fixture_repo.commits["dev"]
    assert b.count("build") == 0 and b.count("llvm") == 0  # nothing built on host b
    assert "cache: fetching the tree" in str(second["_stderr"])
    assert "durations" in second and "cache" in second["durations"]  # type: ignore[operator]
    assert_one_tree(b)
    assert b.env_twin()["how"] == "cached"
    assert ensure_json(b)["action"] == "warm"  # and fingerprinted like any other tree


def test_a_second_pin_with_the_same_llvm_commit_fetches_mlir(tmp_path: "os.PathLike[str]",
                                                              fixture_repo: FixtureRepo, cache: str) -> None:
    a = cache_host(str(tmp_path), fixture_repo, "a", cache)
    ensure_json(a)  # pin dev: LLVM commit A
    b = cache_host(str(tmp_path), fixture_repo, "b", cache)
    other = ensure_json(b, FLYDSL_PIN="v0.2.3")  # another FlyDSL commit, the same LLVM commit
    assert other["how"] == "built" and b.count("build") == 1
    assert b.count("llvm") == 0, "the MLIR install came from the cache"
    assert "cache: fetching MLIR" in str(other["_stderr"])
    assert_one_tree(b)
    log = open(b.log).read()
    assert "MLIR_PATH: " + os.path.join(b.base, ".ensure_flydsl", "mlir") in log
    cleaned = b.run("clean")
    assert cleaned.returncode == 0
    assert not os.path.exists(os.path.join(b.base, ".ensure_flydsl"))  # the fetched MLIR went with it
    assert list(_blobs(cache))  # the shared cache is not the root's to clean


def test_another_llvm_commit_builds_llvm(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, cache: str) -> None:
    a = cache_host(str(tmp_path), fixture_repo, "a", cache)
    ensure_json(a)
    b = cache_host(str(tmp_path), fixture_repo, "b", cache)
    ensure_json(b, FLYDSL_PIN=fixture_repo.commits["llvm-b"])
    assert b.count("llvm") == 1


def test_another_interpreter_does_not_take_the_tree(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                    cache: str) -> None:
    from tests.helpers.workspace import other_python

    a = cache_host(str(tmp_path), fixture_repo, "a", cache)
    ensure_json(a)
    other = other_python(f"cpython-{os.sys.version_info[0]}{os.sys.version_info[1]}")  # type: ignore[attr-defined]
    assert other
    b = cache_host(str(tmp_path), fixture_repo, "b", cache)
    data = ensure_json(b, FLYDSL_PYTHON=other)
    assert data["how"] == "built" and b.count("build") == 1 and b.count("llvm") == 1


def _blobs(cache: str) -> Iterator[str]:
    yield from glob.glob(os.path.join(cache, "blobs", "*.tar.gz"))


def _flip_a_byte(blob: str) -> None:
    with open(blob, "r+b") as handle:
        handle.seek(os.path.getsize(blob) // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))


def _truncate(blob: str) -> None:
    with open(blob, "r+b") as handle:
        handle.truncate(os.path.getsize(blob) // 3)


@pytest.mark.parametrize("damage, why", [(_flip_a_byte, "sha256"), (_truncate, "")])
def test_a_damaged_entry_is_reported_and_built_around(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                     cache: str, damage: Callable[[str], None], why: str) -> None:
    a = cache_host(str(tmp_path), fixture_repo, "a", cache)
    ensure_json(a)
    for blob in _blobs(cache):
        damage(blob)
    b = cache_host(str(tmp_path), fixture_repo, "b", cache)
    data = ensure_json(b)
    assert data["how"] == "built"
    stderr = str(data["_stderr"])
    assert "is corrupt and was not installed" in stderr and why in stderr
    assert b.count("build") == 1 and b.count("llvm") == 1
    assert_one_tree(b)


def test_an_unusable_cache_location_is_bad_input(ws: Workspace) -> None:
    blocker = os.path.join(ws.base, "file")
    with open(blocker, "w") as handle:
        handle.write("x")
    out = ws.run(FLYDSL_CACHE=os.path.join(blocker, "cache"))
    assert out.returncode == 64 and out.stderr.startswith("ensure-flydsl: FLYDSL_CACHE=")
    assert out.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    server.make_bucket("flydsl-cache")
    try:
        yield server
    finally:
        server.stop()


def test_hosts_share_a_cache_in_s3(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, s3: S3Server) -> None:
    url = "s3://flydsl-cache/fleet"
    a = cache_host(str(tmp_path), fixture_repo, "a", url)
    a.env.update(s3.env())
    assert ensure_json(a)["how"] == "built"
    b = cache_host(str(tmp_path), fixture_repo, "b", url)
    b.env.update(s3.env())
    assert ensure_json(b)["how"] == "cached" and b.count("build") == 0
    assert_one_tree(b)
    listed = b.run("cache", "list")
    assert listed.returncode == 0 and "tree" in listed.stdout and "mlir" in listed.stdout
