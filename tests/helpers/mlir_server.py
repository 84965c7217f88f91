"""Prebuilt LLVM/MLIR installs as tar.gz files (the shape of Triton's: one top folder, VCSRevision.h, MLIR's CMake
package), served over HTTP on loopback by a server that counts the requests for each path."""

from __future__ import annotations

import collections
import contextlib
import functools
import http.server
import io
import os
import tarfile
import threading
from typing import Dict, Iterator, Optional

from tests.helpers.flydsl_fixture import LLVM_HASH_A


def mlir_tarball(path: str, *, revision: Optional[str] = LLVM_HASH_A, config: bool = True,
                 built_from: str = LLVM_HASH_A, top: str = "llvm-11111111-ubuntu-x64", escape: bool = False) -> str:
    """A tar.gz of an install: ``revision`` in VCSRevision.h (None: undefined, as a build without VCS info has it),
    the fixture's ``llvm-commit.txt`` (the commit build.sh checks), MLIRConfig.cmake unless ``config`` is false,
    a link inside it, and with ``escape`` a member that climbs out of its folder."""
    files: Dict[str, bytes] = {
        "include/llvm/Support/VCSRevision.h": (f'#define LLVM_REVISION "{revision}"\n' if revision else
                                               "#undef LLVM_REVISION\n").encode()
        + b'#define LLVM_REPOSITORY "https://github.com/llvm/llvm-project.git"\n',
        "llvm-commit.txt": built_from.encode() + b"\n",
        "bin/mlir-opt-23": b"#!/bin/sh\necho mlir-opt\n",
    }
    if config:
        files["lib/cmake/mlir/MLIRConfig.cmake"] = b"set(MLIR_FOUND TRUE)\n"
    with tarfile.open(path, "w:gz") as tar:
        folders = {""}
        for name in sorted(files):
            parts = name.split("/")
            for depth in range(1, len(parts)):
                folders.add("/".join(parts[:depth]))
        for folder in sorted(folders):
            info = tarfile.TarInfo(f"{top}/{folder}".rstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755 if name.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{top}/bin/mlir-opt")
        link.type, link.linkname = tarfile.SYMTYPE, "mlir-opt-23"
        tar.addfile(link)
        if escape:
            info = tarfile.TarInfo(f"{top}/../../escaped.txt")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"bad"))
    return path


class MlirServer:
    """Serves ``folder`` on 127.0.0.1; ``hits[path]`` counts the GETs of each path."""

    def __init__(self, folder: str) -> None:
        hits: Dict[str, int] = collections.Counter()

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                hits[self.path] += 1
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.hits = hits
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=folder))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def mlir_server(folder: str) -> Iterator[MlirServer]:
    os.makedirs(folder, exist_ok=True)
    server = MlirServer(folder)
    try:
        yield server
    finally:
        server.close()
