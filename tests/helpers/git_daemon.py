"""A git server on 127.0.0.1 (``git://``) for the repositories under a folder: a remote that is no local
path, so the tool reads nothing of it from disk and fetches what it needs over the network, as from GitHub.
Each connection is served by ``git daemon --inetd``.  Once the file ``gone`` exists, the number it holds
(none: 0) is how many more connections are served; every later one is closed unanswered (the remote went
away), so a build hook can take the remote away in the middle of a run.  It counts the connections served."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from types import TracebackType
from typing import List, Optional, Type


class GitDaemon:
    def __init__(self, base: str) -> None:
        self.base = base
        self.gone = os.path.join(os.path.dirname(base.rstrip("/")), "git-daemon.gone")
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.served = 0
        self._allowed: Optional[int] = None
        self._threads: List[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._refused():
                conn.close()
                continue
            self.served += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _refused(self) -> bool:
        if self._allowed is None and os.path.exists(self.gone):
            with open(self.gone) as handle:
                text = handle.read().strip()
            self._allowed = int(text) if text else 0
        if self._allowed is None:
            return False
        self._allowed -= 1
        return self._allowed < 0

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            subprocess.run(["git", "daemon", "--inetd", "--export-all", f"--base-path={self.base}"],
                           stdin=conn.fileno(), stdout=conn.fileno(), stderr=subprocess.DEVNULL, timeout=120,
                           check=False)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the serving thread
        self.sock.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def __enter__(self) -> "GitDaemon":
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()
