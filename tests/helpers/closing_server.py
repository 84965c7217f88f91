"""Endpoints that cannot serve a cache: one that reads each request and closes the connection without a
response (a broken proxy), counting the connections (what an unusable endpoint costs is their number), and
a closed port."""

from __future__ import annotations

import socket
import threading


class ClosingServer:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            threading.Thread(target=self._close_after_request, args=(conn,), daemon=True).start()

    @staticmethod
    def _close_after_request(conn: socket.socket) -> None:
        # The whole request head first, then the close: the client always sees "closed before a response"
        # (closed before it wrote, it sees another error, which botocore and s3fs retry a different number
        # of times).
        conn.settimeout(10)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        conn.close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
