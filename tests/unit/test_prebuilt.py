"""FLYDSL_MLIR_URL's names: Triton's URL for this host's architecture and C library, the commit filled in."""

from __future__ import annotations

import pytest

from ensure_flydsl.ways.source import prebuilt

COMMIT = "7f77ca0dbda4" + "0" * 28


@pytest.mark.parametrize("machine,glibc,expected", [
    ("x86_64", (2, 35), "llvm-7f77ca0d-ubuntu-x64.tar.gz"),
    ("x86_64", (2, 39), "llvm-7f77ca0d-ubuntu-x64.tar.gz"),
    ("x86_64", (2, 34), "llvm-7f77ca0d-almalinux-x64.tar.gz"),  # older than Ubuntu 22.04's: the glibc 2.28 build
    ("x86_64", (2, 28), "llvm-7f77ca0d-almalinux-x64.tar.gz"),
    ("aarch64", (2, 35), "llvm-7f77ca0d-ubuntu-arm64.tar.gz"),
])
def test_triton_names_the_build_for_this_host(machine: str, glibc: tuple, expected: str) -> None:
    url = prebuilt.triton_url(machine, glibc).replace("{llvm8}", COMMIT[:8])
    assert url == "https://oaitriton.blob.core.windows.net/public/llvm-builds/" + expected


@pytest.mark.parametrize("machine,glibc,said", [
    ("riscv64", (2, 35), "no LLVM build for the riscv64 architecture"),
    ("x86_64", (2, 17), "need glibc 2.28 or newer; this host has glibc 2.17"),
])
def test_triton_has_no_build_for_other_hosts(machine: str, glibc: tuple, said: str) -> None:
    with pytest.raises(prebuilt.Unusable, match=said):
        prebuilt.triton_url(machine, glibc)


def test_a_url_gets_the_commit_filled_in() -> None:
    assert prebuilt.resolve("https://h/{llvm}/llvm-{llvm8}.tgz", COMMIT) == f"https://h/{COMMIT}/llvm-7f77ca0d.tgz"
    assert prebuilt.resolve("file:///srv/mlir.tar.gz", COMMIT) == "file:///srv/mlir.tar.gz"
    assert prebuilt.resolve("triton", COMMIT).endswith(".tar.gz") and "7f77ca0d" in prebuilt.resolve("triton", COMMIT)
    assert prebuilt.names_commit("triton") and prebuilt.names_commit("https://h/{llvm8}.tgz")
    assert not prebuilt.names_commit("https://h/mlir.tgz")


def test_this_hosts_glibc_is_read() -> None:
    found = prebuilt.host_glibc()
    assert found is not None and found >= (2, 17)
