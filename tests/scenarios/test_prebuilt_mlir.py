"""FLYDSL_MLIR_URL: a prebuilt LLVM/MLIR install served over HTTP on loopback is taken when its content names the
pin's LLVM commit (build.sh gets it as MLIR_PATH, build_llvm.sh never runs); anything else is said in one line and
LLVM is built as before; the fleet cache shares a prebuilt once downloaded."""

from __future__ import annotations

import glob
import json
import os
from typing import Dict

import pytest

from tests.helpers.fleet import cache_host
from tests.helpers.flydsl_fixture import LLVM_HASH_A, LLVM_HASH_B, FixtureRepo
from tests.helpers.mlir_server import mlir_server, mlir_tarball
from tests.helpers.scenario import assert_one_tree, ensure_json
from tests.helpers.stall_server import stall_server
from tests.helpers.workspace import Workspace

NAMED = "/llvm-{llvm8}-ubuntu-x64.tar.gz"  # the URL names the commit, as Triton's does
SERVED = "/llvm-11111111-ubuntu-x64.tar.gz"


def served_run(ws: Workspace, tmp_path: "os.PathLike[str]", **tarball: object) -> Dict[str, object]:
    """``ensure --json`` with FLYDSL_MLIR_URL at a tarball of the pin's shape changed by ``tarball``."""
    folder = os.path.join(str(tmp_path), "served")
    with mlir_server(folder) as server:
        mlir_tarball(os.path.join(folder, SERVED[1:]), **tarball)  # type: ignore[arg-type]
        return ensure_json(ws, FLYDSL_MLIR_URL=server.url + NAMED)


def prebuilt_dirs(ws: Workspace) -> list:
    return [p for p in glob.glob(os.path.join(ws.base, ".ensure_flydsl", "mlir", "*")) if os.path.isdir(p)]


def test_the_pins_prebuilt_is_taken_and_llvm_is_not_built(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    folder = os.path.join(str(tmp_path), "served")
    with mlir_server(folder) as server:
        mlir_tarball(os.path.join(folder, SERVED[1:]))
        data = ensure_json(ws, FLYDSL_MLIR_URL=server.url + NAMED)
        assert server.hits[SERVED] == 1
    said = str(data["_stderr"])
    assert data["how"] == "built" and ws.count("build") == 1
    assert ws.count("llvm") == 0, "build_llvm.sh ran"
    assert "prebuilt MLIR: taken (its include/llvm/Support/VCSRevision.h records LLVM 111111111111)" in said
    assert data["mlir"] == f"prebuilt {server.url}{SERVED}" and f"mlir: prebuilt {server.url}{SERVED}" in said
    [record] = [json.load(open(path)) for path in glob.glob(os.path.join(ws.host_dir, "runs", "*.json"))]
    assert record["fetched"]["prebuilt"] == os.path.getsize(os.path.join(folder, SERVED[1:]))  # what stats add up
    [install] = prebuilt_dirs(ws)
    assert f"MLIR_PATH: {install}\n" in open(ws.log).read()  # what build.sh was given
    assert os.readlink(os.path.join(install, "bin", "mlir-opt")) == "mlir-opt-23"
    assert_one_tree(ws)
    # Another root of this base: the download is not repeated.
    again = ensure_json(ws, "--root", os.path.join(ws.base, "Other"), FLYDSL_MLIR_URL=server.url + NAMED,
                        FLYDSL_STORE="off")
    assert "was downloaded before" in str(again["_stderr"]) and ws.count("llvm") == 0


def test_a_prebuilt_recording_no_revision_is_taken_when_its_url_names_the_commit(
        ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    data = served_run(ws, tmp_path, revision=None)
    assert "named by its URL, not confirmed by content" in str(data["_stderr"])
    assert ws.count("llvm") == 0 and ws.count("build") == 1


@pytest.mark.parametrize("shape,url,said", [
    ("other revision", SERVED, f"it is LLVM {LLVM_HASH_B[:12]} (its include/llvm/Support/VCSRevision.h), not the "
                               f"pin's {LLVM_HASH_A[:12]}"),
    ("no revision", "/fixed.tar.gz", "it records no LLVM revision (include/llvm/Support/VCSRevision.h) and its URL "
                                     "does not name one"),
    ("not mlir", SERVED, "it is not an MLIR install: it has no lib/cmake/mlir/MLIRConfig.cmake"),
    ("escaping", SERVED, "it is refused: member 'llvm-11111111-ubuntu-x64/../../escaped.txt' escapes"),
    ("missing", "/absent.tar.gz", "answered HTTP 404"),
    ("not a tarball", SERVED, "it is not a readable tar.gz"),
])
def test_a_prebuilt_that_cannot_be_taken_is_said_and_llvm_is_built(
        ws: Workspace, tmp_path: "os.PathLike[str]", shape: str, url: str, said: str) -> None:
    folder = os.path.join(str(tmp_path), "served")
    with mlir_server(folder) as server:
        target = os.path.join(folder, url.lstrip("/"))
        if shape == "not a tarball":
            with open(target, "w") as handle:
                handle.write("<html>not found</html>")
        elif shape != "missing":
            mlir_tarball(target, revision=LLVM_HASH_B if shape == "other revision" else
                         None if shape == "no revision" else LLVM_HASH_A,
                         config=shape != "not mlir", escape=shape == "escaping")
        data = ensure_json(ws, FLYDSL_MLIR_URL=server.url + (NAMED if url == SERVED else url))
    lines = [line for line in str(data["_stderr"]).splitlines() if line.startswith("prebuilt MLIR:")]
    assert lines and said in lines[-1] and lines[-1].endswith("; building LLVM/MLIR instead"), lines
    assert data["how"] == "built" and ws.count("llvm") == 1 and ws.count("build") == 1
    assert data["mlir"] == "built"
    assert prebuilt_dirs(ws) == []  # nothing of it kept
    assert not glob.glob(os.path.join(ws.base, ".ensure_flydsl", "mlir", ".*"))  # nor a half-unpacked folder
    assert not os.path.exists(os.path.join(str(tmp_path), "escaped.txt"))
    assert not glob.glob(os.path.join(ws.base, "**", "escaped.txt"), recursive=True)
    assert_one_tree(ws)


def test_a_server_that_stalls_ends_the_download_at_the_silence_limit(ws: Workspace) -> None:
    with stall_server("headers") as server:
        data = ensure_json(ws, FLYDSL_MLIR_URL=f"http://127.0.0.1:{server.port}/llvm-{{llvm8}}.tar.gz",
                           ENSURE_FLYDSL_NETWORK_SILENCE_S="2")
        assert server.accepted == 1
    assert "stopped: nothing received for 2 s" in str(data["_stderr"])
    assert ws.count("llvm") == 1 and data["how"] == "built"


def test_a_prebuilt_build_sh_fails_against_is_removed_and_llvm_is_built(
        ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    data = served_run(ws, tmp_path, built_from=LLVM_HASH_B)  # the pin's commit said, another's libraries in it
    said = str(data["_stderr"])
    assert said.count("prebuilt MLIR: the FlyDSL build failed against") == 1
    assert "FLYDSL_MLIR_URL=triton would download" not in said  # it was set: the LLVM line suggests nothing
    assert f"was built from LLVM {LLVM_HASH_B}" in open(ws.log).read()  # the fixture's build.sh refused it
    assert data["how"] == "built" and ws.count("llvm") == 1 and ws.count("build") == 1  # (a refusal is not counted)
    assert prebuilt_dirs(ws) == []
    assert_one_tree(ws)


def test_a_fleet_downloads_a_prebuilt_once(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    cache = os.path.join(str(tmp_path), "shared-cache")
    folder = os.path.join(str(tmp_path), "served")
    with mlir_server(folder) as server:
        mlir_tarball(os.path.join(folder, SERVED[1:]))
        a = cache_host(str(tmp_path), fixture_repo, "a", cache, FLYDSL_MLIR_URL=server.url + NAMED)
        first = ensure_json(a)
        assert "cache: published the mlir" in str(first["_stderr"])
        b = cache_host(str(tmp_path), fixture_repo, "b", cache, FLYDSL_MLIR_URL=server.url + NAMED)
        second = ensure_json(b, FLYDSL_PIN="v0.2.3")  # another FlyDSL commit of the same LLVM commit
        assert server.hits[SERVED] == 1, "host b downloaded it again"
    assert "cache: fetching MLIR" in str(second["_stderr"])
    assert a.count("llvm") == 0 and b.count("llvm") == 0
    assert first["mlir"] == second["mlir"] == f"prebuilt {server.url}{SERVED}"


@pytest.mark.parametrize("value", ["llvm.tar.gz", "https://h/llvm-{llvm_commit}.tar.gz", "https://h/{llvm",
                                   "TRITON", "https://h/x\x01.tar.gz"])
def test_a_bad_url_is_refused_before_anything_is_touched(ws: Workspace, value: str) -> None:
    out = ws.run(FLYDSL_MLIR_URL=value)
    assert out.returncode == 64
    [line] = [line for line in out.stderr.splitlines() if line.strip()]
    assert "FLYDSL_MLIR_URL" in line and "off, triton" in line
    assert not os.path.exists(ws.root)


def test_the_doctor_checks_the_url_and_names_the_option(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    from tests.scenarios.test_doctor import check_of, doctor_json

    folder = os.path.join(str(tmp_path), "served")
    with mlir_server(folder) as server:
        tarball = mlir_tarball(os.path.join(folder, SERVED[1:]))
        found = check_of(doctor_json(ws, FLYDSL_MLIR_URL=server.url + NAMED), "mlir")
        missing = check_of(doctor_json(ws, FLYDSL_MLIR_URL=server.url + "/absent-{llvm}.tar.gz"), "mlir")
        assert server.hits[SERVED] <= 1  # looked at, not downloaded: nothing unpacked
    assert found["status"] == "ok" and f"{server.url}{SERVED} (" in str(found["detail"])
    assert f"({os.path.getsize(tarball)} B)" in str(found["detail"]) or "KiB)" in str(found["detail"])
    assert "builds no LLVM, if its content names LLVM 111111111111" in str(found["detail"])
    assert missing["status"] == "wrong" and missing["blocking"] is False
    assert f"/absent-{LLVM_HASH_A}.tar.gz answered HTTP 404" in str(missing["detail"])
    assert "the run would build LLVM/MLIR instead" in str(missing["detail"])
    off = check_of(doctor_json(ws), "mlir")
    assert "FLYDSL_MLIR_URL=triton would download Triton's prebuilt LLVM/MLIR" in str(off["detail"])
    assert not os.path.exists(os.path.join(ws.base, ".ensure_flydsl", "mlir"))


def test_a_prebuilt_from_an_fsspec_url(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    from tests.helpers.s3_server import S3Server

    server = S3Server().start()
    try:
        server.make_bucket("llvm-builds")
        tarball = mlir_tarball(os.path.join(str(tmp_path), "llvm.tar.gz"))
        server.client().upload_file(tarball, "llvm-builds", "llvm-11111111-ubuntu-x64.tar.gz")
        ws.env.update(server.env())
        data = ensure_json(ws, FLYDSL_MLIR_URL="s3://llvm-builds/llvm-{llvm8}-ubuntu-x64.tar.gz")
    finally:
        server.stop()
    assert data["mlir"] == "prebuilt s3://llvm-builds/llvm-11111111-ubuntu-x64.tar.gz"
    assert ws.count("llvm") == 0 and ws.count("build") == 1
