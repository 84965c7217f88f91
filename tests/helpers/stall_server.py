"""A TCP server on 127.0.0.1 that accepts connections and then says nothing ("silent"), or answers an HTTP
request's headers and then stalls ("headers"): the remote that used to hold a run for 301 s.  It counts the
connections it accepted, so a test can show the tool really reached it."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator, List

HEADERS = (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n"
           b"001e# service=git-upload-pack\n")


class StallServer:
    def __init__(self, mode: str) -> None:
        assert mode in ("silent", "headers")
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._conns: List[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(conn)
            if self.mode == "headers":
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(HEADERS)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._conns:
            conn.close()
        self.sock.close()


@contextlib.contextmanager
def stall_server(mode: str) -> Iterator[StallServer]:
    server = StallServer(mode)
    try:
        yield server
    finally:
        server.close()
